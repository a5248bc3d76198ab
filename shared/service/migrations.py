"""Schema migrations of both services' databases with Alembic: upgrade to head on start.

Each service keeps its revisions next to its tables (``labels_party/db/migrations``,
``features_party/db/migrations``); revision 0001 of each is the schema of the last release
written before Alembic (commit e1a89f1), so a database that release wrote (it has the tables
but no ``alembic_version``) is stamped at 0001 and then upgraded like any other. The upgrade runs
in ONE transaction on the caller's connection (SQLite DDL is transactional when the connection
issues BEGIN itself, as the labels party's engine and :func:`upgrade_url` do; pysqlite's default
would commit each DDL statement alone): a failed migration leaves the database as it was.

:func:`schema_drift` compares a database with the tables the code declares (Alembic's
autogenerate comparison): the tests run it on a database built by the migrations alone, so a
table or column declared without its revision fails them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, MetaData, create_engine, event, inspect
from sqlalchemy.engine import make_url

BASELINE = "0001"


def config(script_location: Path, connection: Connection | None = None) -> Config:
    """An Alembic config for ``script_location`` (no ini file), bound to ``connection``."""
    cfg = Config()
    cfg.set_main_option("script_location", str(script_location))
    cfg.attributes["connection"] = connection
    return cfg


def head(script_location: Path) -> str:
    """The head revision of a migrations directory."""
    revision = ScriptDirectory.from_config(config(script_location)).get_current_head()
    assert revision is not None
    return revision


def current(connection: Connection) -> str | None:
    """The revision a database is at (None: never migrated)."""
    return MigrationContext.configure(connection).get_current_revision()


# The advisory lock key migrations take on PostgreSQL (any fixed 64-bit number: "labeldp").
_MIGRATION_LOCK = int.from_bytes(b"labeldp", "big")


def upgrade(connection: Connection, script_location: Path, *, legacy_table: str) -> str | None:
    """Upgrade the database of ``connection`` (inside its transaction) to head.

    A database without ``alembic_version`` that has ``legacy_table`` was written before
    Alembic: it is stamped at the baseline first. Returns the revision it started from.
    On PostgreSQL a transaction-scoped advisory lock comes first, so that processes starting at
    once take turns (SQLite's BEGIN IMMEDIATE does the same): two replicas' first start on a
    new database both created ``alembic_version`` and one crashed (UniqueViolation).
    """
    if connection.dialect.name == "postgresql":
        connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_MIGRATION_LOCK})")
    start = current(connection)
    cfg = config(script_location, connection)
    if start is None and inspect(connection).has_table(legacy_table):
        command.stamp(cfg, BASELINE)
        start = BASELINE
    command.upgrade(cfg, "head")
    return start


def upgrade_url(url: str, script_location: Path, *, legacy_table: str) -> str | None:
    """:func:`upgrade` on a connection of its own, in one BEGIN IMMEDIATE transaction on SQLite.

    For a service whose engine leaves transactions to pysqlite (the features party): a short-
    lived engine with SQLAlchemy's documented pysqlite recipe (we emit BEGIN ourselves).
    """
    engine = create_engine(url)
    if make_url(url).get_backend_name() == "sqlite":

        @event.listens_for(engine, "connect")
        def _no_implicit(dbapi_connection: Any, _record: Any) -> None:
            dbapi_connection.isolation_level = None

        @event.listens_for(engine, "begin")
        def _begin(conn: Connection) -> None:
            conn.exec_driver_sql("BEGIN IMMEDIATE")

    try:
        with engine.begin() as conn:
            return upgrade(conn, script_location, legacy_table=legacy_table)
    finally:
        engine.dispose()


def run_env(target_metadata: MetaData) -> None:
    """The body of each ``env.py``: run the migrations on the connection handed over."""
    from alembic import context

    connection = context.config.attributes.get("connection")
    if connection is None:
        raise RuntimeError(
            "migrations run through shared.service.migrations.upgrade (a connection)"
        )
    context.configure(connection=connection, target_metadata=target_metadata)
    with context.begin_transaction():
        context.run_migrations()


def schema_drift(connection: Connection, metadata: MetaData) -> list[Any]:
    """Differences between the database and ``metadata`` (empty when they agree)."""
    context = MigrationContext.configure(connection, opts={"compare_type": True})
    return list(compare_metadata(context, metadata))


def undeclared(connection: Connection, metadata: MetaData) -> list[str]:
    """Tables and columns ``metadata`` declares that the database lacks (after an upgrade).

    A clear start-up error instead of a missing-column error on the first request when code
    declares a table or column without its revision.
    """
    out = []
    for diff in schema_drift(connection, metadata):
        if diff[0] == "add_table":
            out.append(f"table {diff[1].name}")
        elif diff[0] == "add_column":
            out.append(f"column {diff[2]}.{diff[3].name}")
    return out
