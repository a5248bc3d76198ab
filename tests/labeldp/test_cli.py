"""labeldp.cli: every command's help renders as a user reads it."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections.abc import Iterator

import pytest

from labeldp.cli import COMMANDS, build_parser, main


def _parsers(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _parsers(child, (*path, name))


def test_every_commands_help_renders_without_format_leftovers() -> None:
    """argparse %-formats argument help but not a description: a '%%' there is printed as is
    (the demo's help said "20%% held out")."""
    found = list(_parsers(build_parser()))
    assert len(found) > 5 and ("demo",) in {path for path, _ in found}
    for path, parser in found:
        text = parser.format_help()
        assert "%%" not in text and not re.search(r"%\(\w+\)", text), (path, text)
    demo = dict(found)[("demo",)].format_help()
    assert "20% held out" in " ".join(demo.split())


def _top(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(commands.choices)


def test_each_command_alone_is_the_full_parsers_command() -> None:
    """A command builds only its own part of the parser (COMMANDS); that part is the same tree
    as in the full parser, and the full parser has no command the table misses."""
    full = _top(build_parser())
    assert set(full) == set(COMMANDS)
    for name in COMMANDS:
        alone = _top(build_parser(name))
        assert name in alone
        assert [p for p, _ in _parsers(alone[name])] == [p for p, _ in _parsers(full[name])]
        assert alone[name].format_help() == full[name].format_help()


def test_receipt_verify_starts_without_the_services_or_the_database() -> None:
    """The publisher's everyday check imports neither party's service, SQLAlchemy nor Spark."""
    code = (
        "import sys; from labeldp.cli import build_parser; build_parser('receipt'); "
        "print(' '.join(m for m in ('sqlalchemy', 'fastapi', 'uvicorn', 'httpx', 'sklearn', "
        "'pyspark', 'labels_party', 'features_party', 'demo') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_main_runs_a_command_given_after_no_option() -> None:
    with pytest.raises(SystemExit) as stop:
        main(["receipt", "--help"])
    assert stop.value.code == 0
    with pytest.raises(SystemExit) as stop:
        main(["no-such-command"])
    assert stop.value.code == 2
