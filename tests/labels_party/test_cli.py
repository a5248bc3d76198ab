"""The ``labeldp`` dispatcher exposes this party's commands (serve labels, ledger verify/export)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from labeldp.cli import build_parser
from tests.labels_party.conftest import create_dataset


def test_dispatcher_parses_the_labels_commands(tmp_path):
    parser = build_parser()
    args = parser.parse_args(["serve", "labels", "--db", str(tmp_path / "x.db")])
    assert args.port == 8001 and args.host == "127.0.0.1" and args.tokens_file is None
    args = parser.parse_args(["ledger", "verify", "--db", "x.db"])
    assert args.func.__name__ == "verify_command"
    args = parser.parse_args(["ledger", "export", "--db", "x.db", "--out", "l.csv"])
    assert args.func.__name__ == "export_command" and str(args.out) == "l.csv"


def test_labeldp_ledger_verify_through_the_dispatcher(client, db_path):
    create_dataset(client)
    result = subprocess.run(
        [sys.executable, "-m", "labeldp", "ledger", "verify", "--db", str(db_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "ledger OK: 1 entries" in result.stdout


@pytest.mark.parametrize(
    ("option", "value"),
    [("--params", "[1]"), ("--params", "{"), ("--epsilon", "0"), ("--mechanism", "laplace"),
     # found by the CLI audit: an httpx traceback at the first request
     ("--labels-url", "ftp://127.0.0.1:1"), ("--labels-url", "127.0.0.1:1"), ("--labels-url", "")],
)  # fmt: skip
def test_labeldp_release_refuses_bad_options_before_running(option: str, value: str) -> None:
    from labeldp.cli import main

    argv = ["release", "--engine", "spark", "--dataset", "d", "--labels-url", "http://127.0.0.1:1",
            "--examples", "e", "--labels", "l", "--epsilon", "1", "--out", "o"]  # fmt: skip
    with pytest.raises(SystemExit) as stopped:  # the last of a repeated option is the one parsed
        main([*argv, option, value])
    assert stopped.value.code == 2
