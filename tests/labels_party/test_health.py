"""``/healthz`` says "not ok" (503, naming why) for a database that cannot be written.

Issue 24, item 7: a health check that only reads says ok while every write fails. Besides what
permissions and the catalogue show (an immutable SQLite file: tests/http/test_kit.py), the check
tries a real write, rolled back (``Database.write_probe``): a SQLite database opened read-only
(a ``mode=ro`` URI, ``PRAGMA query_only``: permissions say nothing there, and the tests run as
root) is not healthy, and a writer holding the write lock is "busy", which is healthy at once
(no 503, no wait for it). The PostgreSQL cases run against a REAL server (tests/postgres.py): a
database set read-only, then writable again, a role whose INSERT on the ledger is revoked, then
granted again, the probe in a read-only session, and a session holding the ledger lock.
"""

from __future__ import annotations

import secrets
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.engine import make_url

from labels_party.config import Settings
from labels_party.db.engine import PROBE_LOCK_SECONDS
from labels_party.main import create_app
from tests.labels_party.conftest import OPS, TOKENS, TestClient, create_dataset


def _admin(postgres: Any, sql: str) -> None:
    """Run ``sql`` as the server's superuser, outside any transaction."""
    import psycopg

    with psycopg.connect(
        host=str(postgres.root), user=postgres.superuser, dbname="postgres", autocommit=True
    ) as conn:
        conn.execute(sql)  # type: ignore[arg-type]


def _client(url: str, tmp_path: Path) -> TestClient:
    settings = Settings(database_url=url, tokens=TOKENS, signing_key_path=tmp_path / "key.pem")
    return TestClient(create_app(settings), raise_server_exceptions=False)


@pytest.fixture
def database(postgres: Any, postgres_url: str) -> Iterator[str]:
    yield str(make_url(postgres_url).database)
    _admin(postgres, f'ALTER DATABASE "{make_url(postgres_url).database}" RESET ALL')


def _unavailable(client: TestClient) -> str:
    answer = client.get("/healthz")
    assert answer.status_code == 503, answer.text
    body = answer.json()
    assert body["status"] == "unavailable" and body["errors"][0]["field"] == "database"
    assert body["errors"][0]["message"] in body["detail"]
    return str(body["errors"][0]["message"])


# ---- SQLite: the write probe ----------------------------------------------------------------


def _sqlite_client(tmp_path: Path, url: str | None = None) -> TestClient:
    """A service on ``url`` (default: the plain URL of ``tmp_path / labels.db``)."""
    return _client(url or f"sqlite:///{tmp_path / 'labels.db'}", tmp_path)


def test_a_sqlite_database_opened_read_only_is_not_healthy(tmp_path: Path) -> None:
    """A ``mode=ro`` URI: the file and its folder are writable (and the tests run as root),
    so permissions said ok while every write failed."""
    with _sqlite_client(tmp_path) as client:  # builds the schema
        assert client.get("/healthz").json() == {"status": "ok"}
    read_only = f"sqlite:///file:{tmp_path / 'labels.db'}?mode=ro&uri=true"
    with _sqlite_client(tmp_path, read_only) as client:
        assert "read-only" in _unavailable(client)
        refused = client.post("/v1/datasets", json=_DATASET, headers=OPS)
        assert refused.status_code >= 500, refused.text  # what /healthz said beforehand
    with _sqlite_client(tmp_path) as client:  # the same file, opened read-write
        assert client.get("/healthz").json() == {"status": "ok"}
        create_dataset(client, "written")


def test_a_sqlite_session_made_query_only_is_not_healthy_until_writable_again(
    tmp_path: Path,
) -> None:
    """Every session of the service read-only (``PRAGMA query_only``) while its file stays
    writable; then writable again: the probe's finding emptied the pool, so healthz and the
    writes see the new sessions."""
    with _sqlite_client(tmp_path) as client:
        assert client.get("/healthz").json() == {"status": "ok"}
        engine = client.app.state.services.db.engine  # type: ignore[attr-defined]

        def query_only(dbapi_connection: Any, _record: Any) -> None:
            dbapi_connection.execute("PRAGMA query_only = 1")

        event.listen(engine, "connect", query_only)
        engine.dispose()
        try:
            assert "read-only" in _unavailable(client)
        finally:
            event.remove(engine, "connect", query_only)
        assert client.get("/healthz").json() == {"status": "ok"}
        create_dataset(client, "written")


def test_a_long_sqlite_writer_is_busy_not_unhealthy(tmp_path: Path) -> None:
    """Another process's writer holding SQLite's write lock, then a write of the service's own:
    healthz answers ok at once each time (it neither waits the service's lock timeout nor
    reports the lock as a failure), and the writes go on afterwards."""
    with _sqlite_client(tmp_path) as client:
        db = client.app.state.services.db  # type: ignore[attr-defined]
        waits: list[int] = []

        def returned(dbapi_connection: Any, _record: Any) -> None:
            waits.append(dbapi_connection.execute("PRAGMA busy_timeout").fetchone()[0])

        event.listen(db.engine, "checkin", returned)
        writer = sqlite3.connect(tmp_path / "labels.db", isolation_level=None)
        try:
            writer.execute("BEGIN IMMEDIATE")  # a long write elsewhere: holds the lock
            for _ in range(3):
                started = time.monotonic()
                assert client.get("/healthz").json() == {"status": "ok"}
                assert time.monotonic() - started < PROBE_LOCK_SECONDS + 2
                assert db.write_probe() is None  # busy, said as such: not a problem
        finally:
            writer.execute("ROLLBACK")
            writer.close()
            event.remove(db.engine, "checkin", returned)
        # Every connection the probe used went back to the pool with the service's lock wait.
        assert waits and set(waits) == {120_000}, waits
        with db.write():  # a write of this process under way: the probe does not queue
            answer: dict[str, Any] = {}
            ask = threading.Thread(target=lambda: answer.update(client.get("/healthz").json()))
            ask.start()
            ask.join(timeout=10)
            assert answer == {"status": "ok"}
        create_dataset(client, "written")


_DATASET = {
    "name": "d", "label_min": 0, "label_max": 1, "default_label": 0, "epsilon_budget": "1"
}  # fmt: skip


# ---- PostgreSQL ------------------------------------------------------------------------------


@pytest.mark.integration
def test_a_read_only_postgres_database_is_not_healthy_until_writable_again(
    postgres: Any, postgres_url: str, database: str, tmp_path: Path
) -> None:
    with _client(postgres_url, tmp_path) as client:
        assert client.get("/healthz").json() == {"status": "ok"}
        _admin(postgres, f'ALTER DATABASE "{database}" SET default_transaction_read_only = on')
        # New sessions are read-only from now on; end the service's (a failover does too).
        _admin(
            postgres,
            f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{database}'",
        )
        assert "read-only" in _unavailable(client)
        refused = client.post("/v1/datasets", json=_DATASET, headers=OPS)
        assert refused.status_code == 503, refused.text  # what /healthz now says beforehand
        assert refused.json()["errors"] == [{"field": "database", "message": "read-only"}]
        _admin(postgres, f'ALTER DATABASE "{database}" RESET default_transaction_read_only')
        assert client.get("/healthz").json() == {"status": "ok"}
        create_dataset(client, "written")


@pytest.mark.integration
def test_the_write_probe_in_a_read_only_postgres_session(
    postgres: Any, postgres_url: str, database: str, tmp_path: Path
) -> None:
    """The probe itself (what the catalogue query does not see would reach it): a write in a
    read-only session is refused, named, and the session is not kept."""
    with _client(postgres_url, tmp_path) as client:
        db = client.app.state.services.db  # type: ignore[attr-defined]
        assert db.write_probe() is None
        _admin(postgres, f'ALTER DATABASE "{database}" SET default_transaction_read_only = on')
        _admin(
            postgres,
            f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{database}'",
        )
        db.engine.dispose()
        problem = db.write_probe()
        assert problem is not None and problem.startswith("the PostgreSQL session is read-only")
        _admin(postgres, f'ALTER DATABASE "{database}" RESET default_transaction_read_only')
        db.engine.dispose()
        assert db.write_probe() is None


@pytest.mark.integration
def test_a_long_postgres_writer_is_busy_not_unhealthy(
    postgres: Any, postgres_url: str, database: str, tmp_path: Path
) -> None:
    """Another replica's write holding the ledger lock: healthz answers ok at once (the probe
    waits at most PROBE_LOCK_SECONDS for the lock, and a lock it cannot get is busy)."""
    import psycopg

    with _client(postgres_url, tmp_path) as client:
        with psycopg.connect(
            host=str(postgres.root), user=postgres.superuser, dbname=database
        ) as other:
            other.execute("LOCK TABLE ledger IN SHARE ROW EXCLUSIVE MODE")  # in a transaction
            for _ in range(3):
                started = time.monotonic()
                assert client.get("/healthz").json() == {"status": "ok"}
                assert time.monotonic() - started < PROBE_LOCK_SECONDS + 2
            other.rollback()
        assert client.get("/healthz").json() == {"status": "ok"}
        create_dataset(client, "written")


@pytest.mark.integration
def test_a_role_without_the_privileges_to_write_is_not_healthy(
    postgres: Any, postgres_url: str, database: str, tmp_path: Path
) -> None:
    role = "limited_" + secrets.token_hex(4)
    with _client(postgres_url, tmp_path):  # the owner creates the schema and the signing key
        pass
    import psycopg

    with psycopg.connect(
        host=str(postgres.root), user=postgres.superuser, dbname=database, autocommit=True
    ) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")  # type: ignore[arg-type]
        conn.execute(f"GRANT ALL ON ALL TABLES IN SCHEMA public TO {role}")  # type: ignore[arg-type]
        conn.execute(f"GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO {role}")  # type: ignore[arg-type]
    url = make_url(postgres_url).set(username=role).render_as_string(hide_password=False)
    try:
        with _client(url, tmp_path) as client:
            assert client.get("/healthz").json() == {"status": "ok"}
            _admin_in(postgres, database, f"REVOKE INSERT ON ledger FROM {role}")
            assert _unavailable(client) == f"the PostgreSQL role {role} lacks INSERT on ledger"
            _admin_in(postgres, database, f"GRANT INSERT ON ledger TO {role}")
            assert client.get("/healthz").json() == {"status": "ok"}
            create_dataset(client, "written")
    finally:
        _admin_in(postgres, database, f"REASSIGN OWNED BY {role} TO CURRENT_USER")
        _admin_in(postgres, database, f"DROP OWNED BY {role}")
        _admin(postgres, f"DROP ROLE {role}")


def _admin_in(postgres: Any, database: str, sql: str) -> None:
    import psycopg

    with psycopg.connect(
        host=str(postgres.root), user=postgres.superuser, dbname=database, autocommit=True
    ) as conn:
        conn.execute(sql)  # type: ignore[arg-type]
