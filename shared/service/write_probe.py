"""The health checks' write probe: a real write, rolled back, on a service's own connection.

A health check that only reads (or looks at file permissions) says "ok" while every write fails:
a SQLite database opened read-only (``sqlite:///file:PATH?mode=ro&uri=true``), ``PRAGMA
query_only``, a read-only mount, a read-only PostgreSQL session or a missing privilege, as root
too. :func:`write_probe` does what a write does, with a short wait, and rolls it back: it takes
the database's write lock (SQLite ``BEGIN IMMEDIATE``; on PostgreSQL the service's own lock
statement, if it has one), runs the service's probe statement (an ``UPDATE`` that matches no
row, so nothing changes even before the rollback) and rolls back. Nothing is ever committed.

A lock held by another writer (a long write, another replica, an admin command) is *busy*, not
unwritable: the probe answers ``None`` after at most :data:`PROBE_LOCK_SECONDS`, so a long write
never makes the health check fail, flap or hang. Both services use it: the labels party
(``labels_party.db.engine.Database.write_probe``, behind its in-process writer lock) and the
features party (:func:`database_write_problem` from its ``/healthz``).
"""

from __future__ import annotations

import sqlite3
from typing import Any

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError

from shared.service.database_url import sqlite_path, sqlite_url, sqlite_write_problem

# How long the probe waits for the write lock: a writer holding it longer means the database is
# being written ("busy", which is healthy).
PROBE_LOCK_SECONDS = 0.25
# SQLite primary result codes (extended code & 0xFF): the lock is held by another writer...
_SQLITE_BUSY_CODES = frozenset({5, 6})  # SQLITE_BUSY, SQLITE_LOCKED
# ... or the write cannot be done: SQLITE_PERM, SQLITE_READONLY (any of its extended codes: a
# read-only open, a file that could only be opened read-only, PRAGMA query_only), SQLITE_IOERR,
# SQLITE_FULL, SQLITE_CANTOPEN.
_SQLITE_CANNOT_WRITE_CODES = frozenset({3, 8, 10, 13, 14})
_SQLITE_READONLY = 8
# PostgreSQL: read_only_sql_transaction (a write in a read-only session), lock_not_available (the
# probe's lock_timeout ran out: busy), and the refusals of a write: read-only transaction,
# insufficient privilege, disk full.
READ_ONLY_SQLSTATE = "25006"
_LOCK_NOT_AVAILABLE = "55P03"
_CANNOT_WRITE_SQLSTATES = frozenset({READ_ONLY_SQLSTATE, "42501", "53100"})


def sqlite_file_url(url: str) -> str | None:
    """The plain ``sqlite:///PATH`` URL of a SQLite URL's file (``None`` for another database):
    a URI filename (``sqlite:///file:PATH?mode=ro&uri=true``) names its file by its path
    (:func:`shared.service.database_url.sqlite_path`)."""
    path = sqlite_path(url)
    return None if path is None else sqlite_url(path)


def first_line(error: BaseException) -> str:
    """The driver's message of ``error`` on one line (no SQL, no parameters)."""
    orig = error.orig if isinstance(error, DBAPIError) else error
    return " ".join(str(orig).split()) or type(orig).__name__


def write_refusal(error: BaseException) -> str | None:
    """What a failed statement's driver error says about writing, or None for any other error:
    "read-only" (a read-only SQLite open or ``PRAGMA query_only``, a read-only PostgreSQL
    session or standby) or "not writable" (a missing privilege, I/O, a full disk). What both the
    probe and the services' error answers read (``shared.service.http.errors.database_error``)."""
    orig = error.orig if isinstance(error, DBAPIError) else error
    code = getattr(orig, "sqlite_errorcode", None)
    if code is not None:
        primary = code & 0xFF
        if primary not in _SQLITE_CANNOT_WRITE_CODES:
            return None
        return "read-only" if primary == _SQLITE_READONLY else "not writable"
    sqlstate = getattr(orig, "sqlstate", None)
    if sqlstate not in _CANNOT_WRITE_SQLSTATES:
        return None
    return "read-only" if sqlstate == READ_ONLY_SQLSTATE else "not writable"


def write_probe(conn: Connection, statement: str, *, lock: str | None = None) -> str | None:
    """Try a write on ``conn`` and roll it back: ``None`` if it could be written (or is being
    written: busy), else why not. Nothing is ever committed.

    ``conn``: a connection just checked out of the service's engine, no transaction begun.
    ``statement``: the write, an ``UPDATE`` of one of the service's tables that matches no row
    (it needs only a privilege the service's writes need). ``lock``: on PostgreSQL, the lock
    statement every write of the service takes first (the labels party's ledger lock), run
    before ``statement``; the wait for either is at most :data:`PROBE_LOCK_SECONDS`.

    SQLite: ``BEGIN IMMEDIATE`` (the write lock), ``statement`` and ``ROLLBACK`` on the driver
    connection, with its busy timeout at :data:`PROBE_LOCK_SECONDS` meanwhile and back to its
    usual value after (the two services drive pysqlite's transactions differently; on the driver
    connection the probe is the same for both). A connection that cannot write is invalidated
    (a connection opened read-only stays so: not back to the pool). Errors that say the write
    cannot be done (read-only, privilege, I/O, disk full) are the answer; any other error is
    raised as SQLAlchemy's :class:`~sqlalchemy.exc.DBAPIError` (the health check answers a
    database that does not answer as 503 ``unreachable``).
    Other databases: ``None`` (not probed).
    """
    dialect = conn.dialect.name
    if dialect == "sqlite":
        return _sqlite_probe(conn, statement)
    if dialect == "postgresql":
        return _postgres_probe(conn, statement, lock)
    return None


def _sqlite_probe(conn: Connection, statement: str) -> str | None:
    raw: Any = conn.connection.driver_connection
    usual = int(raw.execute("PRAGMA busy_timeout").fetchone()[0])
    raw.execute(f"PRAGMA busy_timeout = {round(PROBE_LOCK_SECONDS * 1000)}")
    try:
        try:
            raw.execute("BEGIN IMMEDIATE")  # the write lock every write takes
            raw.execute(statement)
        finally:
            if raw.in_transaction:
                raw.rollback()
    except sqlite3.Error as exc:
        code = getattr(exc, "sqlite_errorcode", None)
        primary = None if code is None else code & 0xFF
        if primary in _SQLITE_BUSY_CODES:
            return None
        if primary not in _SQLITE_CANNOT_WRITE_CODES:  # as SQLAlchemy would raise it
            raise DBAPIError.instance(statement, None, exc, sqlite3.Error) from exc
        conn.invalidate()  # a connection opened read-only stays so: not back to the pool
        if primary == _SQLITE_READONLY:
            return f"the SQLite database is read-only ({first_line(exc)})"
        return f"a write to the SQLite database failed ({first_line(exc)})"
    finally:
        if not conn.invalidated:  # back to the wait every other use of it has
            raw.execute(f"PRAGMA busy_timeout = {usual}")
    return None


def _postgres_probe(conn: Connection, statement: str, lock: str | None) -> str | None:
    try:
        with conn.begin() as transaction:
            wait = round(PROBE_LOCK_SECONDS * 1000)
            conn.exec_driver_sql(f"SET LOCAL lock_timeout = '{wait}ms'")
            if lock is not None:
                conn.exec_driver_sql(lock)
            conn.exec_driver_sql(statement)
            transaction.rollback()
    except DBAPIError as exc:
        sqlstate = getattr(exc.orig, "sqlstate", None)
        if sqlstate == _LOCK_NOT_AVAILABLE:
            return None
        if sqlstate not in _CANNOT_WRITE_SQLSTATES:
            raise
        conn.invalidate()
        if sqlstate == READ_ONLY_SQLSTATE:
            return f"the PostgreSQL session is read-only ({first_line(exc)})"
        return f"a write to the PostgreSQL database failed ({first_line(exc)})"
    return None


def database_write_problem(engine: Engine, statement: str) -> str | None:
    """Why ``engine``'s database cannot be written (``None`` if it can): what a health check
    says, for a service without checks of its own (the features party).

    SQLite: first the permissions of its file, -wal, -shm and folder
    (:func:`shared.service.database_url.sqlite_write_problem`: an immutable file, which a
    rolled-back write never reaches), then :func:`write_probe`; PostgreSQL: :func:`write_probe`
    (a read-only server or session, a missing privilege on the probed table). A read-only
    finding empties the pool: a session keeps the read-only state it started with, so the next
    check (and write) opens new ones and sees the database as it is by then."""
    problem = None
    if engine.dialect.name == "sqlite":
        file_url = sqlite_file_url(str(engine.url))
        problem = None if file_url is None else sqlite_write_problem(file_url)
    if problem is None:
        with engine.connect() as conn:
            problem = write_probe(conn, statement)
    if problem is not None and "read-only" in problem:
        engine.dispose()
    return problem
