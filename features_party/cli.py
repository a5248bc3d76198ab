"""``labeldp serve features``: run the features party's HTTP service."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from features_party.config import (
    FEATURES_TOKEN_ENV,
    LABELS_PUBLIC_KEY_ENV,
    NO_DATE_CHECK_ENV,
    PUBLISHER_TOKEN_ENV,
    Settings,
)
from shared.errors import InvalidParameterError
from shared.service import database_url
from shared.service.cli_args import add_server_arguments, matching_options
from shared.service.http.serve import serve as serve_app


def register_serve(services: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``features`` under ``labeldp serve``."""
    parser = services.add_parser(
        "features",
        help="run the features party (publisher) service",
        description=(
            "Features party: feature uploads, example sync and training on the one label-DP "
            f"message. Auth: set ${FEATURES_TOKEN_ENV} to require a bearer token; without it "
            "the service only binds a loopback address."
        ),
    )
    database_url.add_arguments(parser, what="features party")
    add_server_arguments(parser, port=8002)
    parser.add_argument("--labels-url", required=True, help="base URL of the labels party")
    parser.add_argument(
        "--token",
        default=None,
        help=f"the labels party's PUBLISHER token (default: ${PUBLISHER_TOKEN_ENV})",
    )
    parser.add_argument(
        "--max-body-mb", type=int, default=256, help="largest accepted request body (MiB)"
    )
    parser.add_argument(
        "--labels-public-key",
        type=Path,
        default=None,
        help="pin the labels party's receipt key(s), dated: the output of `labeldp keys public "
        f"--all` or the JSON of its GET /v1/keys (default: ${LABELS_PUBLIC_KEY_ENV}); train only "
        "on messages whose signed receipt verifies inside its key's validity",
    )
    parser.add_argument(
        "--no-date-check",
        action="store_true",
        help="accept a pinned key the pin gives no dates (a bare PEM block, base64 lines), its "
        "receipts' dates unchecked (a warning at start says so); without it such a pin stops the "
        f"service at start; dates the pin states are still checked (${NO_DATE_CHECK_ENV}=1)",
    )
    parser.add_argument(
        "--labels-ca-file",
        type=Path,
        default=None,
        help="CA certificate to trust for an https labels party ($LABELDP_LABELS_CA_FILE)",
    )
    parser.set_defaults(func=serve)


def serve(args: argparse.Namespace) -> int:
    """Validate the settings, then run uvicorn until interrupted."""
    from features_party.main import create_app

    try:
        url = database_url.resolve(db=args.db, database_url=args.database_url)
        given = matching_options(Settings, args)  # labels_url, host, port and the four paths
        given |= {"database_url": url, "max_body_bytes": args.max_body_mb * 1024 * 1024}
        settings = Settings.from_env(labels_token=args.token, **given)
    except InvalidParameterError as exc:
        print(f"labeldp serve features: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    from sqlalchemy.exc import SQLAlchemyError

    from features_party.db.engine import make_engine

    try:  # open (and create) the database now: a bad --db is one line, not a traceback
        make_engine(url).dispose()
    except (SQLAlchemyError, OSError, ValueError, ModuleNotFoundError) as exc:
        print(f"labeldp serve features: {database_url.open_failure(exc, url)}", file=sys.stderr)
        return 2
    serve_app(
        create_app(settings),
        settings,
        host=settings.host,
        port=settings.port,
        log_level=args.log_level,
        access_log=False,
    )
    return 0
