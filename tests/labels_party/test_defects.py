"""Regression tests for the defects a new user hit (issue 13), through the real app or CLI."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.labels_party.conftest import (
    PUB,
    TOKENS,
    TOKENS_ENV,
    cli,
    create_dataset,
    free_port,
)


def test_crlf_example_ids_across_chunk_boundaries(client):
    """Defect 1: the ``\\r`` of a chunk's last CRLF line was kept, so that id was refused."""
    create_dataset(client)
    body = b"".join(f"ex{i}\r\n".encode() for i in range(200_000))

    def chunks():  # odd-sized pieces: every boundary cuts a different place of a line
        for start in range(0, len(body), 65_531):
            yield body[start : start + 65_531]

    for content in (body, chunks()):
        response = client.post(
            "/v1/datasets/ds/examples",
            content=content,
            headers={**PUB, "content-type": "text/plain"},
        )
        assert response.status_code == 200, response.text[:500]
        assert response.json()["n_examples"] == 200_000


def _serve(service: str, tmp_path: Path, env: dict[str, str], *extra: str) -> None:
    """Start ``labeldp serve SERVICE`` with ``env`` only, check /healthz, stop it."""
    port = free_port()
    log_path = tmp_path / f"{service}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "shared.cli", "serve", service, "--port", str(port), *extra],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "LABELDP_WARMUP": "0", **env},
        )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, log_path.read_text()
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.1)
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_database_url_environment_alone_serves_both_services(tmp_path):
    """Defect 2: ``LABELDP_DATABASE_URL`` without --db / --database-url works for both."""
    labels_url = f"sqlite:///{tmp_path / 'labels.db'}"
    _serve("labels", tmp_path, {"LABELDP_TOKENS": TOKENS_ENV, "LABELDP_DATABASE_URL": labels_url})
    assert (tmp_path / "labels.db").is_file()
    features_url = f"sqlite:///{tmp_path / 'features.db'}"
    _serve(
        "features",
        tmp_path,
        {"LABELDP_PUBLISHER_TOKEN": TOKENS.publisher, "LABELDP_DATABASE_URL": features_url},
        "--labels-url",
        "http://127.0.0.1:9",
    )
    assert (tmp_path / "features.db").is_file()


def test_ledger_commands_take_the_environment_or_a_url_in_db(client, db_path):
    """Defect 2: ``ledger verify|export`` with only the environment, or a URL given to --db."""
    create_dataset(client)
    url = f"sqlite:///{db_path}"
    by_env = cli("ledger", "verify", env={"LABELDP_DATABASE_URL": url})
    assert by_env.returncode == 0, by_env.stderr
    assert "ledger OK: 1 entries" in by_env.stdout
    by_db = cli("ledger", "export", "--db", url)
    assert by_db.returncode == 0, by_db.stderr
    assert by_db.stdout.startswith("seq,")
    env = {k: v for k, v in os.environ.items() if k != "LABELDP_DATABASE_URL"}
    none = subprocess.run(
        [sys.executable, "-m", "labels_party", "ledger", "verify"],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert none.returncode == 2
    assert none.stderr.strip().splitlines() == [
        "labeldp ledger verify: no database: pass --db PATH or --database-url URL, "
        "or set LABELDP_DATABASE_URL"
    ]


def test_ledger_export_into_a_closed_pipe_is_quiet(client, db_path):
    """Defect 7: ``ledger export | head`` printed a BrokenPipeError traceback."""
    for i in range(400):  # ~100 KB of CSV: more than a pipe buffer holds
        create_dataset(client, name=f"d{i}")
    result = subprocess.run(
        f"{sys.executable} -m labels_party ledger export --db {db_path} | head -n 2",
        shell=True, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.stdout.count("\n") == 2
    assert result.stderr == ""


def test_bad_db_path_for_serve_is_one_line(tmp_path):
    """Defect 7: a bad --db path printed a SQLAlchemy traceback; now one line and exit 2."""
    bad = tmp_path / "no" / "such" / "dir" / "labels.db"
    for service, extra, env in (
        ("labels", (), {"LABELDP_TOKENS": TOKENS_ENV}),
        ("features", ("--labels-url", "http://127.0.0.1:9"),
         {"LABELDP_PUBLISHER_TOKEN": TOKENS.publisher}),
    ):  # fmt: skip
        result = subprocess.run(
            [sys.executable, "-m", "shared.cli", "serve", service, "--db", str(bad), *extra],
            capture_output=True, text=True, env={**os.environ, **env}, timeout=120, check=False,
        )  # fmt: skip
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2, result.stderr
        assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
        assert lines[0].startswith(f"labeldp serve {service}: cannot open the database sqlite:///")
