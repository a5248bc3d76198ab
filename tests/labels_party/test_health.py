"""``/healthz`` says "not ok" (503, naming why) for a PostgreSQL database that cannot be written.

Issue 24, item 7: a health check that only reads says ok while every write fails. SQLite is
checked by permissions (tests/http/test_kit.py); these run against a REAL
PostgreSQL server (tests/postgres.py): a database set read-only, then writable again, and a role
whose INSERT on the ledger is revoked, then granted again.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from labels_party.config import Settings
from labels_party.main import create_app
from tests.labels_party.conftest import OPS, TOKENS, TestClient, create_dataset

pytestmark = pytest.mark.integration


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
        refused = client.post(
            "/v1/datasets",
            json={"name": "d", "label_min": 0, "label_max": 1, "default_label": 0,
                  "epsilon_budget": "1"},
            headers=OPS,
        )  # fmt: skip
        assert refused.status_code == 503, refused.text  # what /healthz now says beforehand
        assert refused.json()["errors"] == [{"field": "database", "message": "read-only"}]
        _admin(postgres, f'ALTER DATABASE "{database}" RESET default_transaction_read_only')
        assert client.get("/healthz").json() == {"status": "ok"}
        create_dataset(client, "written")


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
