"""The features party's engine (SQLite: WAL, durable commits; or PostgreSQL) and sessions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

from shared.service import migrations
from shared.service.database_url import create_private_sqlite, normalise

# Alembic revisions (shared.service.migrations): the database is upgraded to head when it is opened.
MIGRATIONS = Path(__file__).resolve().parent / "migrations"


def make_engine(url: str) -> Engine:
    """An engine for ``url``; SQLite connections use WAL, synchronous=FULL and foreign keys.

    A PostgreSQL URL (``postgresql+psycopg://``) gets a pre-pinged pool, so a restarted server
    is reconnected to without a restart of the service.
    """
    url = normalise(url)
    if not url.startswith("sqlite"):
        engine = create_engine(url, pool_pre_ping=True, pool_size=8, max_overflow=24)
    else:
        create_private_sqlite(url)
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

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
