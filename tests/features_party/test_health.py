"""The features party's ``/healthz`` says "not ok" (503, naming why) for a database that cannot
be written, as the labels party's does (tests/labels_party/test_health.py).

Issue 24, item 7: the features party's check looked at the SQLite file's permissions only, so a
database opened read-only (a ``mode=ro`` URI, ``PRAGMA query_only``; the tests run as root,
where permissions say nothing) or a read-only PostgreSQL session answered ok while every upload
failed. Now it tries a real write, rolled back (``shared.service.write_probe``): those are 503, a
writer holding the write lock is "busy", which is healthy at once, and nothing is ever committed.
The PostgreSQL cases run against a REAL server (tests/postgres.py). No labels party is needed.
"""

from __future__ import annotations

import secrets
import sqlite3
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.engine import make_url
from starlette.exceptions import StarletteDeprecationWarning

from features_party.config import Settings
from features_party.main import create_app
from shared.service.write_probe import PROBE_LOCK_SECONDS

with warnings.catch_warnings():
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from fastapi.testclient import TestClient

TOKEN = "features-token-xxxxxxxx"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
CSV = {"Content-Type": "text/csv"}
OK = {"status": "ok", "service": "features"}


def _client(url: str) -> TestClient:
    settings = Settings(
        database_url=url,
        labels_url="http://127.0.0.1:9",  # never called: health and uploads only
        labels_token="publisher-token-xxxxxxxx",
        features_token=TOKEN,
    )
    return TestClient(create_app(settings), raise_server_exceptions=False)


def _sqlite(tmp_path: Path, url: str | None = None) -> TestClient:
    """A service on ``url`` (default: the plain URL of ``tmp_path / features.db``)."""
    return _client(url or f"sqlite:///{tmp_path / 'features.db'}")


def _unavailable(client: TestClient) -> str:
    answer = client.get("/healthz")
    assert answer.status_code == 503, answer.text
    body = answer.json()
    assert body["status"] == "unavailable" and body["service"] == "features", body
    assert body["errors"][0]["field"] == "database", body
    assert body["errors"][0]["message"] in body["detail"]
    return str(body["errors"][0]["message"])


def _upload(client: TestClient, dataset: str) -> Any:
    """Upload two feature rows; the answer."""
    csv = "example_id,x\na,1\nb,2\n"
    return client.post(f"/v1/datasets/{dataset}/features", content=csv, headers=CSV | AUTH)


def _refused_as_read_only(answer: Any) -> None:
    """A write refused by a read-only database: 503 naming the database (it was a 500)."""
    assert answer.status_code == 503, answer.text
    body = answer.json()
    assert body["errors"] == [{"field": "database", "message": "read-only; retry later"}], body


def _data_version(path: Path) -> int:
    """SQLite's ``data_version`` seen from a connection of its own: it changes when any other
    connection commits (a rolled-back write leaves it)."""
    with sqlite3.connect(path) as observer:
        return int(observer.execute("PRAGMA data_version").fetchone()[0])


# ---- SQLite ----------------------------------------------------------------------------------


def test_a_sqlite_database_opened_read_only_is_not_healthy(tmp_path: Path) -> None:
    """A ``mode=ro`` URI: the file and its folder are writable, so permissions cannot tell (the
    check read the URI as a path and said 'not writable' of a file that does not exist)."""
    with _sqlite(tmp_path) as client:  # builds the schema
        assert client.get("/healthz").json() == OK
    read_only = f"sqlite:///file:{tmp_path / 'features.db'}?mode=ro&uri=true"
    with _sqlite(tmp_path, read_only) as client:
        assert "read-only" in _unavailable(client)
        _refused_as_read_only(_upload(client, "written"))  # what /healthz said beforehand
    with _sqlite(tmp_path) as client:  # the same file, opened read-write
        assert client.get("/healthz").json() == OK
        assert _upload(client, "written").status_code == 200


def test_a_sqlite_session_made_query_only_is_not_healthy_until_writable_again(
    tmp_path: Path,
) -> None:
    """Every session read-only (``PRAGMA query_only``) while the file stays writable: 503 naming
    it; then writable again: the finding emptied the pool, so healthz and uploads see the new
    sessions."""
    with _sqlite(tmp_path) as client:
        assert client.get("/healthz").json() == OK
        engine = client.app.state.engine  # type: ignore[attr-defined]

        def query_only(dbapi_connection: Any, _record: Any) -> None:
            dbapi_connection.execute("PRAGMA query_only = 1")

        event.listen(engine, "connect", query_only)
        engine.dispose()
        try:
            assert _upload(client, "written").status_code >= 500  # its session is pooled
            assert "read-only" in _unavailable(client)  # and dropped with the pool
        finally:
            event.remove(engine, "connect", query_only)
        assert client.get("/healthz").json() == OK
        assert _upload(client, "written").status_code == 200


def test_a_long_sqlite_writer_is_busy_not_unhealthy_and_nothing_is_committed(
    tmp_path: Path,
) -> None:
    """Another connection holding SQLite's write lock: healthz is ok at once (it neither waits
    the service's 30 s busy timeout nor reports the lock as a failure); every connection the
    probe used goes back to the pool with that timeout; the probes commit nothing."""
    path = tmp_path / "features.db"
    with _sqlite(tmp_path) as client:
        assert _upload(client, "kept").status_code == 200
        engine = client.app.state.engine  # type: ignore[attr-defined]
        waits: list[int] = []

        def returned(dbapi_connection: Any, _record: Any) -> None:
            waits.append(dbapi_connection.execute("PRAGMA busy_timeout").fetchone()[0])

        before = _data_version(path)
        for _ in range(3):
            assert client.get("/healthz").json() == OK
        assert _data_version(path) == before  # the probe's write was rolled back
        event.listen(engine, "checkin", returned)
        writer = sqlite3.connect(path, isolation_level=None)
        try:
            writer.execute("BEGIN IMMEDIATE")  # a long write elsewhere: holds the lock
            for _ in range(3):
                started = time.monotonic()
                assert client.get("/healthz").json() == OK
                assert time.monotonic() - started < PROBE_LOCK_SECONDS + 2
        finally:
            writer.execute("ROLLBACK")
            writer.close()
            event.remove(engine, "checkin", returned)
        assert waits and set(waits) == {30_000}, waits
        assert _upload(client, "after").status_code == 200
        assert client.get("/v1/datasets/kept", headers=AUTH).status_code == 200


# ---- PostgreSQL ------------------------------------------------------------------------------


def _admin(postgres: Any, sql: str, database: str = "postgres") -> None:
    """Run ``sql`` as the server's superuser, outside any transaction."""
    import psycopg

    with psycopg.connect(
        host=str(postgres.root), user=postgres.superuser, dbname=database, autocommit=True
    ) as conn:
        conn.execute(sql)  # type: ignore[arg-type]


@pytest.fixture
def database(postgres: Any, postgres_url: str) -> Iterator[str]:
    name = str(make_url(postgres_url).database)
    yield name
    _admin(postgres, f'ALTER DATABASE "{name}" RESET ALL')


@pytest.mark.integration
def test_a_read_only_postgres_database_is_not_healthy_until_writable_again(
    postgres: Any, postgres_url: str, database: str
) -> None:
    with _client(postgres_url) as client:
        assert client.get("/healthz").json() == OK
        _admin(postgres, f'ALTER DATABASE "{database}" SET default_transaction_read_only = on')
        # New sessions are read-only from now on; end the service's (a failover does too).
        _admin(
            postgres,
            f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{database}'",
        )
        assert _unavailable(client).startswith("the PostgreSQL session is read-only")
        _refused_as_read_only(_upload(client, "written"))  # what /healthz said beforehand
        # The upload's read-only session went back to the pool; the next check drops them all.
        assert _unavailable(client).startswith("the PostgreSQL session is read-only")
        _admin(postgres, f'ALTER DATABASE "{database}" RESET default_transaction_read_only')
        assert client.get("/healthz").json() == OK
        assert _upload(client, "written").status_code == 200


@pytest.mark.integration
def test_a_long_postgres_writer_is_busy_not_unhealthy(
    postgres: Any, postgres_url: str, database: str
) -> None:
    """A session holding a lock on the probed table that its UPDATE waits for: ok at once."""
    import psycopg

    with _client(postgres_url) as client:
        with psycopg.connect(
            host=str(postgres.root), user=postgres.superuser, dbname=database
        ) as other:
            other.execute("LOCK TABLE feature_datasets IN SHARE MODE")  # in a transaction
            for _ in range(3):
                started = time.monotonic()
                assert client.get("/healthz").json() == OK
                assert time.monotonic() - started < PROBE_LOCK_SECONDS + 2
            other.rollback()
        assert _upload(client, "written").status_code == 200


@pytest.mark.integration
def test_a_postgres_role_that_cannot_write_the_table_is_not_healthy(
    postgres: Any, postgres_url: str, database: str
) -> None:
    role = "limited_" + secrets.token_hex(4)
    with _client(postgres_url):  # the owner creates the schema
        pass
    _admin(postgres, f"CREATE ROLE {role} LOGIN")
    _admin(postgres, f"GRANT ALL ON ALL TABLES IN SCHEMA public TO {role}", database)
    url = make_url(postgres_url).set(username=role).render_as_string(hide_password=False)
    try:
        with _client(url) as client:
            assert client.get("/healthz").json() == OK
            _admin(postgres, f"REVOKE UPDATE ON feature_datasets FROM {role}", database)
            problem = _unavailable(client)
            assert problem.startswith("a write to the PostgreSQL database failed"), problem
            assert "permission denied" in problem and "feature_datasets" in problem
            _admin(postgres, f"GRANT UPDATE ON feature_datasets TO {role}", database)
            assert client.get("/healthz").json() == OK
    finally:
        _admin(postgres, f"REASSIGN OWNED BY {role} TO CURRENT_USER", database)
        _admin(postgres, f"DROP OWNED BY {role}", database)
        _admin(postgres, f"DROP ROLE {role}")
