"""Where a service's database is: ``--database-url``, ``--db`` or ``LABELDP_DATABASE_URL``.

Both services and the ledger commands resolve it the same way, so the environment variable
alone is enough, and ``--db`` takes a SQLite path or a database URL (``postgresql://...``).
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from urllib.parse import unquote, urlsplit

from shared.errors import InvalidParameterError

DATABASE_URL_ENV = "LABELDP_DATABASE_URL"
Handler = Callable[[argparse.Namespace], int]
SQLITE_PREFIX = "sqlite:///"


def sqlite_url(path: str | Path) -> str:
    """The SQLAlchemy URL of a SQLite file, its path escaped: a '?', '%' or non-ASCII
    character in a file name is part of the name, not URL syntax (``a?b.db`` opened ``a``, and
    ``é.db`` was opened as itself but pre-created as ``%C3%A9.db``, so SQLite created the real
    one with the umask's mode: found by an audit)."""
    from sqlalchemy.engine import URL

    return URL.create("sqlite", database=str(Path(path).resolve())).render_as_string()


def normalise(url: str) -> str:
    """``postgresql://`` and ``postgres://`` select the psycopg (3) driver; others unchanged."""
    for scheme in ("postgresql://", "postgres://"):
        if url.startswith(scheme):
            return "postgresql+psycopg://" + url.removeprefix(scheme)
    return url


def add_arguments(parser: argparse.ArgumentParser, *, what: str = "database") -> None:
    """``--db PATH_OR_URL`` and ``--database-url URL`` (either; else the environment)."""
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--db", help=f"SQLite file of the {what} (or a database URL); default ${DATABASE_URL_ENV}"
    )
    where.add_argument(
        "--database-url",
        help=f"SQLAlchemy URL, e.g. postgresql://user@host/db (default ${DATABASE_URL_ENV})",
    )


def resolve(
    *,
    db: str | Path | None,
    database_url: str | None,
    environ: Mapping[str, str] | None = None,
) -> str:
    """The database URL the command uses; refuses (naming the three ways) when none is given."""
    env = os.environ if environ is None else environ
    if database_url:
        return normalise(database_url)
    if db is not None and str(db) != "":
        text = str(db)
        return normalise(text) if "://" in text else sqlite_url(text)
    if env.get(DATABASE_URL_ENV):
        return normalise(env[DATABASE_URL_ENV])
    raise InvalidParameterError(
        f"no database: pass --db PATH or --database-url URL, or set {DATABASE_URL_ENV}"
    )


def sqlite_path(url: str) -> Path | None:
    """The file of a ``sqlite:///`` URL, ``None`` for any other database.

    A URI filename (``sqlite:///file:PATH?mode=ro&uri=true``, SQLite's own URI syntax, which
    SQLAlchemy hands to sqlite3; rendered by SQLAlchemy with its colon quoted) names its file
    by PATH; ``None`` where it names none (an in-memory ``file::memory:``)."""
    if not url.startswith(SQLITE_PREFIX):
        return None
    uri = _sqlite_uri(url)
    if uri is None:
        return Path(_sqlite_database(url))
    path = unquote(urlsplit(uri[0]).path)
    return Path(path) if path and ":memory:" not in path else None


def _sqlite_database(url: str) -> str:
    """The database of a ``sqlite:///`` URL as SQLAlchemy opens it (percent-escapes decoded, a
    query cut off), the text after the prefix if SQLAlchemy cannot parse it."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url).database or ""
    except ArgumentError:
        return url.removeprefix(SQLITE_PREFIX)


def _sqlite_uri(url: str) -> tuple[str, dict[str, str]] | None:
    """(the ``file:`` filename, the query) of a SQLite URI filename URL, else None."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except ArgumentError:
        return None
    query = {key: str(value) for key, value in parsed.query.items()}
    database = parsed.database or ""
    if query.get("uri") in ("true", "1") and database.startswith("file:"):
        return database, query
    return None


def sqlite_write_problem(url: str) -> str | None:
    """Why a SQLite database cannot be written (``None`` if it can, or for another database).

    A health check that only reads says "ok" while every write fails (a read-only or immutable
    file, a folder where the journal cannot be created): the file, its -wal and -shm files if
    present, and their folder must all be writable by this process.
    """
    path = sqlite_path(url)
    if path is None:
        return None
    checks = [path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")]
    for target in [p for p in checks if p.exists()] + [path.parent]:
        if not os.access(target, os.W_OK):
            return f"{target.name} is not writable"
    return None


def create_private_sqlite(url: str) -> None:
    """Create a SQLite database file readable by its owner only, before SQLite opens it.

    The labels party's file holds raw labels and the ledger; SQLite creates a missing file with
    the process umask (0644 by default: readable by every local user) and gives its -wal and
    -shm files the database file's mode. A missing file in an existing folder is therefore
    created here, empty, with mode 0600; an existing file keeps the mode its owner gave it, and
    a missing folder is left missing (SQLite then refuses the path, as for a typo). No-op for
    any other database.
    """
    path = sqlite_path(url)
    if path is None or path.exists() or not path.parent.is_dir():
        return
    uri = _sqlite_uri(url)
    if uri is not None and uri[1].get("mode") in ("ro", "memory"):  # SQLite would not create it
        return
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:  # created meanwhile by another process: theirs to keep
        pass


def describe(url: str) -> str:
    """The URL without its password, for messages."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - an unparseable URL is reported by its scheme only
        return url.split("://", 1)[0] + "://..."


def open_failure(exc: BaseException, url: str) -> str:
    """One line saying why the database at ``url`` could not be opened (no traceback)."""
    where = describe(url)
    if isinstance(exc, ModuleNotFoundError):
        return f"cannot open {where}: the driver is missing (pip install 'labeldp[postgres]')"
    orig = getattr(exc, "orig", None) or exc
    reason = " ".join(str(orig).split()) or type(orig).__name__
    return f"cannot open the database {where}: {reason}"


def command(name: str) -> Callable[[Handler], Handler]:
    """A database command's handler whose refusals and failures are one line on standard
    error and exit status 2 (``labeldp tokens``, ``labeldp keys``), never a traceback: no
    database named, one that cannot be opened or written (:func:`open_failure`), a URL that
    does not parse, a file that cannot be read (found by an audit: each was a traceback)."""

    def decorate(handler: Handler) -> Handler:
        @functools.wraps(handler)
        def run(args: argparse.Namespace) -> int:
            from sqlalchemy.exc import SQLAlchemyError

            try:
                return handler(args)
            except (FileNotFoundError, InvalidParameterError) as exc:
                message = str(exc)
            except (SQLAlchemyError, ModuleNotFoundError) as exc:
                message = open_failure(exc, resolve(db=args.db, database_url=args.database_url))
            except OSError as exc:
                message = f"{exc.filename}: {exc.strerror}" if exc.filename else str(exc)
            print(f"labeldp {name}: {message}", file=sys.stderr)
            return 2

        return run

    return decorate
