"""Engine creation and the two kinds of transaction the service uses.

SQLite runs in WAL mode with ``synchronous=FULL`` (a COMMIT is on disk before it returns) and
foreign keys on. pysqlite's own transaction handling is switched off so that we emit BEGIN
ourselves (SQLAlchemy's documented recipe): read transactions use a deferred ``BEGIN`` (a
consistent snapshot that never blocks writers) and write transactions ``BEGIN IMMEDIATE``, which
takes SQLite's single write lock up front, so a check-then-write (budget, idempotency) inside
it is atomic. On PostgreSQL a write transaction takes a table lock on ``ledger`` instead, and the
dataset row is read ``FOR UPDATE``.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from labels_party.db.models import metadata
from labels_party.errors import FieldError, ServiceUnavailableError
from shared.service import migrations
from shared.service.database_url import (
    create_private_sqlite,
    normalise,
    sqlite_path,
    sqlite_write_problem,
)
from shared.service.write_probe import PROBE_LOCK_SECONDS as PROBE_LOCK_SECONDS  # its wait
from shared.service.write_probe import sqlite_file_url, write_probe

_WRITE = "labeldp_write"
# PostgreSQL's read_only_sql_transaction: a write (or the ledger lock) in a read-only session.
_READ_ONLY_SQLSTATE = "25006"

# The health check's write probe (Database.write_problem, shared.service.write_probe): an UPDATE
# through the write path that matches no row (so the probe changes nothing even before its
# rollback, and needs only a privilege the service's writes need), after the ledger lock every
# PostgreSQL write takes.
_PROBE_WRITE = "UPDATE datasets SET epsilon_budget = epsilon_budget WHERE 1 = 0"
_PROBE_LOCK = "LOCK TABLE ledger IN SHARE ROW EXCLUSIVE MODE"


def make_engine(database_url: str, *, lock_timeout: float = 120.0) -> Engine:
    """An engine for ``database_url`` with the pragmas and BEGIN modes described above."""
    url = make_url(normalise(database_url))
    if url.get_backend_name() != "sqlite":
        return create_engine(url, pool_pre_ping=True, pool_size=8, max_overflow=56)
    if url.database in (None, "", ":memory:"):
        raise ValueError("use a SQLite file: an in-memory database is not durable nor shared")
    create_private_sqlite(str(url))
    engine = create_engine(
        url,
        connect_args={"check_same_thread": False, "timeout": lock_timeout},
        pool_size=8,
        max_overflow=56,
        pool_timeout=lock_timeout,
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # we emit BEGIN ourselves (see below)
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=FULL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA cache_size=-65536")  # 64 MiB: bulk inserts stay in memory
        cursor.execute("PRAGMA temp_store=MEMORY")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        immediate = conn.get_execution_options().get(_WRITE, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


MIGRATIONS = Path(__file__).resolve().parent / "migrations"


def create_schema(engine: Engine) -> None:
    """Upgrade the database to the Alembic head (``labels_party/db/migrations``), atomically.

    A new database is built by the migrations; one written by the last release before Alembic
    is stamped at its baseline and upgraded (``shared.service.migrations``). Runs in one write
    transaction (BEGIN IMMEDIATE on SQLite), so two processes starting at once take turns.
    """
    with engine.connect() as conn:
        conn.execution_options(**{_WRITE: True})
        with conn.begin():
            migrations.upgrade(conn, MIGRATIONS, legacy_table="ledger")
            missing = migrations.undeclared(conn, metadata)
    if missing:
        raise RuntimeError(
            "labels_party/db/models.py declares what no Alembic revision creates: "
            f"{', '.join(missing)}; add a revision under labels_party/db/migrations/versions"
        )


def open_for_admin(url: str) -> Database:
    """An existing database for an admin command (``labeldp keys``, ``labeldp tokens``),
    upgraded to the head as the service's start would: FileNotFoundError for a SQLite path
    that does not exist (an admin command never creates one)."""
    refuse_missing_or_foreign(url)
    engine = make_engine(url)
    create_schema(engine)
    return Database(engine)


def refuse_missing_or_foreign(url: str) -> None:
    """FileNotFoundError if ``url`` names a SQLite file that does not exist or is not a
    database with a ledger, read through a read-only connection that changes nothing (a
    PostgreSQL URL passes). The commands that open an existing database (``labeldp ledger``,
    ``tokens``, ``keys``) ask it first: they never create one, the engine sets WAL mode on
    connect, and an audit of another application's database (or of an empty file) rewrote it
    before refusing it, an admin command migrated it (found by the CLI audit)."""
    path = sqlite_path(url)
    if path is None:
        return
    if not path.is_file():
        raise FileNotFoundError(f"no database at {path}")
    try:
        with closing(sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True)) as conn:
            tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    except sqlite3.Error as exc:
        raise FileNotFoundError(f"cannot open the database {path}: {exc}") from None
    if "ledger" not in tables:
        raise FileNotFoundError(f"{path} is not a labels-party database (it has no ledger)")


def schema_behind(engine: Engine) -> str | None:
    """Why the database is not at the migrations' head (None when it is): for read-only tools."""
    with engine.connect() as conn:
        revision = migrations.current(conn)
    head = migrations.head(MIGRATIONS)
    if revision == head:
        return None
    return (
        f"the database schema is at revision {revision or 'none (written before Alembic)'}, "
        f"not {head}: start the service on it once (it upgrades the schema), then retry"
    )


# What the service's writes need on PostgreSQL: INSERT into every table it keeps, UPDATE of
# the rows it changes (a budget, a label, a release's state), and the ledger lock every write
# transaction takes (LOCK ... SHARE ROW EXCLUSIVE needs UPDATE, DELETE or TRUNCATE).
_POSTGRES_PRIVILEGES: tuple[tuple[str, str], ...] = (
    *((table, "INSERT") for table in metadata.tables),
    ("datasets", "UPDATE"),
    ("entries", "UPDATE"),
    ("releases", "UPDATE"),
    ("ledger", "UPDATE, DELETE, TRUNCATE"),
)


def postgres_write_problem(conn: Connection) -> str | None:
    """Why this PostgreSQL session cannot write (``None`` if it can), without writing: a
    server in recovery (a read-only standby), a read-only session (``transaction_read_only``:
    ``default_transaction_read_only`` set on the database, the role or the server), or a
    privilege of :data:`_POSTGRES_PRIVILEGES` the role lacks. One catalogue query."""
    checks = ", ".join(
        f"has_table_privilege(:t{i}, :p{i})" for i in range(len(_POSTGRES_PRIVILEGES))
    )
    params: dict[str, str] = {}
    for i, (table, privilege) in enumerate(_POSTGRES_PRIVILEGES):
        params[f"t{i}"], params[f"p{i}"] = table, privilege
    row = conn.execute(
        text(
            "SELECT pg_is_in_recovery(), current_setting('transaction_read_only'), "
            f"current_user, {checks}"
        ),
        params,
    ).one()
    standby, read_only, user, *granted = row
    if standby:
        return "the PostgreSQL server is a read-only standby (in recovery)"
    if read_only == "on":
        return "the PostgreSQL session is read-only (transaction_read_only is on)"
    missing = [
        f"{privilege.replace(', ', ' or ')} on {table}"
        for (table, privilege), ok in zip(_POSTGRES_PRIVILEGES, granted, strict=True)
        if not ok
    ]
    if missing:
        return f"the PostgreSQL role {user} lacks {', '.join(missing)}"
    return None


class Database:
    """The engine plus an in-process writer lock (fair queueing before SQLite's own lock)."""

    def __init__(self, engine: Engine, *, lock_timeout: float = 120.0) -> None:
        self.engine = engine
        self.lock_timeout = lock_timeout
        self._writer = threading.Lock()
        self._queued = 0  # writers waiting for _writer (the health probe never goes before them)
        self._queue_lock = threading.Lock()
        dialect = engine.dialect
        self.is_sqlite = dialect.name == "sqlite"
        self._paramstyle = dialect.paramstyle

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A read-only snapshot transaction: every statement sees the same committed state.

        SQLite's deferred BEGIN reads one snapshot (WAL). PostgreSQL's default, READ COMMITTED,
        takes a new snapshot per statement, so a write committed between two reads showed half
        of it (found by an audit: ``ledger verify`` reporting a ledger total that disagreed with
        ``epsilon_spent`` during traffic; a release's snapshot finding entries that disagreed
        with ``n_examples``, a 500); REPEATABLE READ keeps the first statement's snapshot for
        the whole transaction, and a read-only one never fails to serialize."""
        with self.engine.connect() as conn:
            if not self.is_sqlite:
                conn.execution_options(isolation_level="REPEATABLE READ")
            with conn.begin():
                yield conn

    @contextmanager
    def write(self) -> Iterator[Connection]:
        """The single write transaction (BEGIN IMMEDIATE); commits on success."""
        with self._queue_lock:
            self._queued += 1
        try:
            acquired = self._writer.acquire(timeout=self.lock_timeout)
        finally:
            with self._queue_lock:
                self._queued -= 1
        if not acquired:
            raise ServiceUnavailableError("the database is busy; retry later")
        try:
            with self.engine.connect() as conn:
                conn.execution_options(**{_WRITE: True})
                try:
                    with conn.begin():
                        if self.engine.dialect.name == "postgresql":
                            # The equivalent of BEGIN IMMEDIATE: one writer at a time, so the
                            # ledger head and the budget are read and extended atomically.
                            conn.exec_driver_sql("LOCK TABLE ledger IN SHARE ROW EXCLUSIVE MODE")
                        yield conn
                except DBAPIError as exc:
                    if getattr(exc.orig, "sqlstate", None) != _READ_ONLY_SQLSTATE:
                        raise
                    # A read-only session (it keeps the default it started with): dropped,
                    # so a write after the database is writable again opens a new one.
                    conn.invalidate()
                    raise ServiceUnavailableError(
                        "the database is read-only; retry later",
                        [FieldError(field="database", message="read-only")],
                    ) from exc
        finally:
            self._writer.release()

    def write_problem(self) -> str | None:
        """Why the database cannot be written (``None`` if it can): what the health check says.

        First what can be seen without writing: for SQLite the file's, its -wal's and -shm's and
        its folder's permissions (``shared.service.database_url.sqlite_write_problem``: a file
        made immutable under a connection opened before fails only when a write reaches it,
        which the probe's rolled-back write never does), for PostgreSQL
        :func:`postgres_write_problem` (a standby, a read-only session, a privilege the writes
        need on any table). Then :meth:`write_probe`, a real write transaction rolled back,
        which sees what permissions do not (a read-only open, ``PRAGMA query_only``, a
        read-only mount or role, as root too). A read-only finding empties the pool: a session
        keeps the read-only state it started with, so the next check (and write) opens new ones
        and sees the database as it is by then."""
        if self.is_sqlite:
            file_url = sqlite_file_url(str(self.engine.url))
            problem = None if file_url is None else sqlite_write_problem(file_url)
        elif self.engine.dialect.name == "postgresql":
            with self.read() as conn:
                problem = postgres_write_problem(conn)
        else:
            return None
        if problem is None:
            problem = self.write_probe()
        if problem is not None and "read-only" in problem:
            self.engine.dispose()
        return problem

    def write_probe(self) -> str | None:
        """Try a write and roll it back: ``None`` if it could be written (or is being written:
        busy), else why not. Nothing is ever committed.

        The probe is what every write does, with a short wait: the in-process writer lock
        without waiting (and never ahead of a write queued for it, so a flood of health checks
        cannot starve the writes; at most one probe runs at a time), then the database's write
        lock (SQLite ``BEGIN IMMEDIATE``, PostgreSQL the ledger lock) waiting at most
        :data:`PROBE_LOCK_SECONDS`, then ``_PROBE_WRITE``, then a rollback
        (``shared.service.write_probe.write_probe``, the features party's too). A lock held by a
        writer (a long release, another replica) is busy, not unwritable: the probe answers
        ``None`` at once rather than waiting for it or saying "unavailable", so a long write
        never makes the health check fail or hang. Errors that say the write cannot be done
        (read-only, privilege, I/O, disk full) are the answer; any other error is raised
        (``/healthz`` answers a database that does not answer as 503 ``unreachable``)."""
        if self._queued or not self._writer.acquire(blocking=False):
            return None  # this process is writing or about to: busy
        try:
            with self.engine.connect() as conn:
                return write_probe(conn, _PROBE_WRITE, lock=_PROBE_LOCK)
        finally:
            self._writer.release()

    def sql(self, statement: str) -> str:
        """Adapt a ``?``-placeholder statement to the driver's paramstyle (raw DBAPI use)."""
        if self._paramstyle in ("format", "pyformat"):
            return statement.replace("?", "%s")
        return statement

    def executemany(self, conn: Connection, statement: str, rows: Any) -> int:
        """Raw DBAPI executemany inside ``conn``'s transaction; returns rows changed."""
        cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
        try:
            cursor.executemany(self.sql(statement), rows)
            return int(cursor.rowcount)
        finally:
            cursor.close()

    def fetch(self, conn: Connection, statement: str, params: Sequence[Any] = ()) -> list[Any]:
        """Raw DBAPI query returning all rows as tuples."""
        cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
        try:
            cursor.execute(self.sql(statement), tuple(params))
            return cursor.fetchall()
        finally:
            cursor.close()

    def dispose(self) -> None:
        self.engine.dispose()
