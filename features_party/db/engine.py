"""SQLite engine (WAL, durable commits) and the session factory of the features party."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

from shared import migrations

# Alembic revisions (shared.migrations): the database is upgraded to head when it is opened.
MIGRATIONS = Path(__file__).resolve().parent / "migrations"


def make_engine(url: str) -> Engine:
    """An engine whose SQLite connections use WAL, synchronous=FULL and foreign keys."""
    engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

    if url.startswith("sqlite"):

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_connection: Any, _record: Any) -> None:
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            # FULL: an acknowledged upload survives a power cut, not just a process crash.
            cursor.execute("PRAGMA synchronous=FULL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.close()

    migrations.upgrade_url(url, MIGRATIONS, legacy_table="feature_datasets")
    return engine


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(bind=engine, expire_on_commit=False)
