"""shared.service.write_probe alone: what it answers and what it raises (the services' health
checks: tests/labels_party/test_health.py, tests/features_party/test_health.py)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import create_engine
from sqlalchemy.exc import OperationalError

from shared.service.write_probe import database_write_problem, sqlite_file_url, write_probe

PROBE = "UPDATE t SET x = x WHERE 1 = 0"


def _database(tmp_path: Path) -> Path:
    path = tmp_path / "p.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE t (x INTEGER)")
        conn.execute("INSERT INTO t VALUES (1)")
    return path


def test_a_writable_database_is_none_and_nothing_changes(tmp_path: Path) -> None:
    path = _database(tmp_path)
    engine = create_engine(f"sqlite:///{path}")
    try:
        with sqlite3.connect(path) as observer:
            version = observer.execute("PRAGMA data_version").fetchone()[0]
            assert database_write_problem(engine, PROBE) is None
            with engine.connect() as conn:  # pysqlite's own transaction handling: the same
                assert write_probe(conn, PROBE) is None
                assert not conn.connection.driver_connection.in_transaction  # type: ignore[union-attr]
            assert observer.execute("PRAGMA data_version").fetchone()[0] == version
    finally:
        engine.dispose()


def test_a_read_only_open_is_named(tmp_path: Path) -> None:
    path = _database(tmp_path)
    engine = create_engine(f"sqlite:///file:{path}?mode=ro&uri=true")
    try:
        problem = database_write_problem(engine, PROBE)
        assert problem is not None and problem.startswith("the SQLite database is read-only")
    finally:
        engine.dispose()


def test_an_error_that_is_not_about_writing_is_raised_as_sqlalchemy_would(tmp_path: Path) -> None:
    """A statement SQLite refuses for another reason (here: no such table) is not a finding: it
    is raised, wrapped as SQLAlchemy wraps the driver's errors (the health check maps those)."""
    engine = create_engine(f"sqlite:///{_database(tmp_path)}")
    try:
        with pytest.raises(OperationalError, match="no such table"):
            database_write_problem(engine, "UPDATE missing SET x = x WHERE 1 = 0")
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("sqlite:////srv/f.db", "sqlite:////srv/f.db"),
        ("sqlite:///file:/srv/f.db?mode=ro&uri=true", "sqlite:////srv/f.db"),
        ("sqlite://", None),
        ("postgresql+psycopg://u@h/db", None),
    ],
)
def test_sqlite_file_url(url: str, expected: str | None) -> None:
    assert sqlite_file_url(url) == expected
