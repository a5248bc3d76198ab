"""``labeldp serve labels`` and ``labeldp ledger verify|export`` (registered into labeldp.cli).

Also runnable alone: ``python -m labels_party serve labels --db PATH`` (same arguments). The
database is ``--database-url URL``, ``--db PATH`` (or a URL) or ``LABELDP_DATABASE_URL``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from shared import epsilon as amounts
from shared.errors import InvalidParameterError
from shared.service import database_url
from shared.service.cli_args import add_server_arguments
from shared.service.files import replacing
from shared.service.http.serve import serve as serve_app


def _add_db_arguments(parser: argparse.ArgumentParser) -> None:
    database_url.add_arguments(parser, what="labels party")


def register_serve(services: Any) -> None:
    """Add ``labels`` to ``labeldp serve``."""
    parser = services.add_parser("labels", help="run the labels-party (advertiser) service")
    _add_db_arguments(parser)
    add_server_arguments(parser, port=8001)
    parser.add_argument(
        "--tokens-file", type=Path, help='JSON {"advertiser": .., "publisher": .., "operator": ..}'
    )
    parser.add_argument(
        "--signing-key",
        type=Path,
        help="receipt signing key file (default: LABELDP_SIGNING_KEY, else next to the SQLite "
        "database; required with PostgreSQL)",
    )
    parser.set_defaults(func=serve)


def register_commands(commands: Any) -> None:
    """Add ``labeldp ledger verify`` and ``labeldp ledger export``."""
    parser = commands.add_parser("ledger", help="audit the labels party's privacy ledger")
    sub = parser.add_subparsers(dest="ledger_command", required=True, metavar="ACTION")
    verify = sub.add_parser("verify", help="recompute the hash chain and the budget totals")
    _add_db_arguments(verify)
    verify.add_argument(
        "--skip-messages", action="store_true", help="do not re-hash the stored messages"
    )
    verify.set_defaults(func=verify_command)
    export = sub.add_parser("export", help="write the ledger as CSV")
    _add_db_arguments(export)
    export.add_argument("--out", type=Path, help="output file (default: standard output)")
    export.set_defaults(func=export_command)
    from labels_party.access import tokens_cli
    from labels_party.releasing import keys_cli

    keys_cli.register_commands(commands)
    tokens_cli.register_commands(commands)


def _url(args: argparse.Namespace) -> str:
    return database_url.resolve(db=args.db, database_url=args.database_url)


def serve(args: argparse.Namespace) -> int:
    """Start the service (refuses to start without the three role tokens)."""
    import logging

    from labels_party.config import Settings
    from labels_party.main import create_app

    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    from sqlalchemy.exc import SQLAlchemyError

    try:
        url = _url(args)
        files = {
            key: getattr(args, attr)
            for key, attr in (
                ("tls_cert", "tls_cert"),
                ("tls_key", "tls_key"),
                ("signing_key_path", "signing_key"),
            )
            if getattr(args, attr)
        }
        settings = Settings.from_env(database_url=url, tokens_file=args.tokens_file, **files)
    except InvalidParameterError as exc:
        print(f"labeldp serve labels: {exc}", file=sys.stderr)
        return 2
    try:
        app = create_app(settings)
    except InvalidParameterError as exc:  # a refusal that names its file (the signing key)
        print(f"labeldp serve labels: {exc}", file=sys.stderr)
        return 2
    except (SQLAlchemyError, OSError, ValueError, ModuleNotFoundError) as exc:
        print(f"labeldp serve labels: {database_url.open_failure(exc, url)}", file=sys.stderr)
        return 2
    # proxy_headers off: uvicorn would take X-Forwarded-For from 127.0.0.1 (its default);
    # only LABELDP_TRUSTED_PROXIES decides whose forwarded header is believed (create_app).
    serve_app(
        app,
        settings,
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        proxy_headers=False,
    )
    return 0


class OutdatedSchemaError(FileNotFoundError):
    """The database exists but its schema is older than this code (not upgraded yet)."""


def _open_existing(args: argparse.Namespace) -> Any:
    """The existing database (never created or migrated by an audit); FileNotFoundError if
    unusable, OutdatedSchemaError if the service has not upgraded it yet."""
    from sqlalchemy import text
    from sqlalchemy.exc import SQLAlchemyError

    from labels_party.db.engine import (
        Database,
        make_engine,
        refuse_missing_or_foreign,
        schema_behind,
    )

    try:
        url = _url(args)
    except InvalidParameterError as exc:
        raise FileNotFoundError(str(exc)) from None
    refuse_missing_or_foreign(url)
    try:
        engine = make_engine(url)
        behind = schema_behind(engine)
        if behind is not None:  # read-only tools never migrate: the service does, on start
            engine.dispose()
            raise OutdatedSchemaError(behind)
        db = Database(engine)
        with db.read() as conn:
            conn.execute(text("SELECT 1 FROM ledger LIMIT 1"))
    except (SQLAlchemyError, ValueError, ModuleNotFoundError) as exc:
        raise FileNotFoundError(database_url.open_failure(exc, url)) from None
    return db


@contextmanager
def _ledger_reader(args: argparse.Namespace, command: str) -> Iterator[Any]:
    """A read connection to the existing database; prints why and exits 2 if it is unusable."""
    try:
        db = _open_existing(args)
    except FileNotFoundError as exc:
        print(f"labeldp ledger {command}: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    try:
        with db.read() as conn:
            yield conn
    finally:
        db.dispose()


def verify_command(args: argparse.Namespace) -> int:
    """Exit 0 if the chain, totals and messages check out; 1 (and the problems) otherwise."""
    from labels_party.budget import ledger

    with _ledger_reader(args, "verify") as conn:
        report = ledger.verify(conn, check_messages=not args.skip_messages)
    for problem in report.problems:
        print(f"PROBLEM: {problem}", file=sys.stderr)
    for name, spent in sorted(report.spent.items()):
        print(f"dataset {name}: epsilon spent {amounts.text(spent)}")
        if report.delta_spent.get(name):
            print(f"dataset {name}: delta spent {amounts.text(report.delta_spent[name])}")
    status = "OK" if report.ok else f"FAILED ({len(report.problems)} problem(s))"
    print(f"ledger {status}: {report.entries} entries, head {report.head_hash}")
    return 0 if report.ok else 1


def export_command(args: argparse.Namespace) -> int:
    """Write the ledger as CSV to ``--out`` or standard output."""
    from labels_party.budget import ledger

    try:
        database = database_url.sqlite_path(_url(args))
    except InvalidParameterError:  # no database named: the reader below says so
        database = None
    if args.out is not None and database is not None:
        # Found by an audit: --out naming the database itself truncated it, then failed.
        kept = [database.with_name(database.name + end) for end in ("", "-wal", "-shm", "-journal")]
        if any(args.out.resolve() == path.resolve() for path in kept):
            print(
                f"labeldp ledger export: --out {args.out} is the database itself", file=sys.stderr
            )
            return 2
    with _ledger_reader(args, "export") as conn:
        if args.out is not None:
            try:
                # Owner-only, like the database it comes from, and whole or not at all: a kill
                # left a cut-off export, a shorter ledger by the look of it (a crash audit).
                with replacing(args.out, text=True) as out:
                    count = ledger.export_csv(conn, out)
            except OSError as exc:  # a missing folder, a folder, a full disk: one line
                print(f"labeldp ledger export: --out {args.out}: {exc.strerror}", file=sys.stderr)
                return 2
            print(f"wrote {count} ledger entries to {args.out}", file=sys.stderr)
            return 0
        try:
            ledger.export_csv(conn, sys.stdout)
            sys.stdout.flush()
        except OSError as exc:
            # The reader left (``| head``: stop quietly) or a full disk (said). Python's
            # documented recipe: point stdout at devnull so the final flush cannot fail.
            if not isinstance(exc, BrokenPipeError):
                print(f"labeldp ledger export: standard output: {exc.strerror}", file=sys.stderr)
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            return 1
    return 0


def build_parser() -> argparse.ArgumentParser:
    """This party's commands alone (``python -m labels_party``)."""
    parser = argparse.ArgumentParser(prog="python -m labels_party")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve_parser = commands.add_parser("serve", help="run the service")
    services = serve_parser.add_subparsers(dest="service", required=True, metavar="SERVICE")
    register_serve(services)
    register_commands(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
