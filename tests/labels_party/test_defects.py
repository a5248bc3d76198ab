"""Regression tests for the defects a new user hit (issue 13), through the real app or CLI."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.labels_party.conftest import (
    OPS,
    PUB,
    TOKENS,
    TOKENS_ENV,
    TestClient,
    cli,
    create_dataset,
    free_port,
    register,
    release,
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
            [sys.executable, "-m", "labeldp", "serve", service, "--port", str(port), *extra],
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
            [sys.executable, "-m", "labeldp", "serve", service, "--db", str(bad), *extra],
            capture_output=True, text=True, env={**os.environ, **env}, timeout=120, check=False,
        )  # fmt: skip
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2, result.stderr
        assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
        assert lines[0].startswith(f"labeldp serve {service}: cannot open the database sqlite:///")


def test_database_down_is_503_saying_so_and_recovers_by_itself(tmp_path):
    """Defect 3: with the database down every call (and /healthz) answered 500."""
    from features_party.config import Settings as FeaturesSettings
    from features_party.main import create_app as create_features_app
    from labels_party.config import Settings
    from labels_party.main import create_app
    from tests.postgres import SKIP_REASON, find_bindir, postgres_server

    if find_bindir() is None:
        pytest.skip(SKIP_REASON)
    pytest.importorskip("psycopg", reason="psycopg missing: pip install -e '.[postgres]'")
    with postgres_server() as server, contextlib.ExitStack() as stack:
        labels = stack.enter_context(
            TestClient(
                create_app(
                    Settings(
                        database_url=server.create_database(),
                        tokens=TOKENS,
                        signing_key_path=tmp_path / "signing-key.pem",
                    )
                )
            )
        )
        features_settings = FeaturesSettings(
            database_url=server.create_database(),
            labels_url="http://127.0.0.1:9",
            labels_token=TOKENS.publisher,
        )
        features = stack.enter_context(TestClient(create_features_app(features_settings)))
        create_dataset(labels)
        calls = [
            (labels, "GET", "/healthz", {}),
            (labels, "GET", "/v1/datasets/ds", {"headers": OPS}),
            (labels, "POST", "/v1/datasets/ds/examples",
             {"json": {"example_ids": ["a"]}, "headers": PUB}),
            (features, "GET", "/healthz", {}),
            (features, "GET", "/v1/models", {}),
        ]  # fmt: skip
        server.stop("immediate")
        for http, method, url, kwargs in calls:
            response = http.request(method, url, **kwargs)
            assert response.status_code == 503, (url, response.text)
            body = response.json()
            assert "database is unreachable" in body["detail"]
            assert body["errors"] == [{"field": "database", "message": "unreachable"}]
            if url == "/healthz":
                assert body["status"] == "unavailable"
        server.start()  # no restart of either service: the pools reconnect
        for http, method, url, kwargs in calls:
            response = http.request(method, url, **kwargs)
            assert response.status_code == 200, (url, response.text)
        assert labels.get("/v1/datasets/ds", headers=OPS).json()["n_examples"] == 1


def test_release_response_has_bins_and_malformed_ids_are_404(client):
    """Defect 8: no ``bins`` key (API.md shows one); a malformed release id answered 422."""
    create_dataset(client)
    register(client, "ds", [f"e{i}" for i in range(50)])
    created = release(client, "ds", params={"bins": 8})
    assert created.status_code == 201, created.text
    assert created.json()["bins"] == 8
    fetched = client.get(f"/v1/releases/{created.json()['id']}", headers=PUB)
    assert fetched.json() == created.json()
    for bad in ("x", "rel_123", "rel_" + "g" * 24, "REL_" + "0" * 24):
        for suffix in ("", "/message"):
            answer = client.get(f"/v1/releases/{bad}{suffix}", headers=PUB)
            assert answer.status_code == 404, (bad, suffix, answer.text)
            assert answer.json()["errors"] == [
                {"field": "release_id", "message": "unknown release"}
            ]
    unknown = client.get("/v1/releases/rel_" + "0" * 24, headers=PUB)
    assert unknown.status_code == 404
    assert unknown.json()["errors"] == [{"field": "release_id", "message": "unknown release"}]
