"""``labeldp release --engine spark ...``: a release run as a Spark job (``spark_release.job``)."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from shared.errors import InvalidParameterError
from shared.plan import AUTO, mechanisms
from shared.service.cli_args import from_args
from shared.service.client import http_base_url
from spark_release import DRIVER_MEMORY

TOKEN_ENV = "LABELDP_ADVERTISER_TOKEN"


def _amount(text: str) -> Decimal:
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise argparse.ArgumentTypeError(f"{text!r} is not a decimal number") from None
    if not value.is_finite() or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number > 0")
    return value


def _memory(text: str) -> str:
    """A JVM memory size as Spark reads it (``2g``, ``512m``, ``4096``: MiB without a unit)."""
    if not re.fullmatch(r"[0-9]+(b|kb?|mb?|gb?|tb?|pb?)?", text.lower()):
        raise argparse.ArgumentTypeError(f"{text!r} is not a memory size such as 2g or 512m")
    return text


def _labels_url(text: str) -> str:
    try:
        return http_base_url(text, name="the URL")
    except InvalidParameterError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _params(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not JSON") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"{text!r} must be a JSON object")
    return value


def register_commands(commands: Any) -> None:
    """Add ``labeldp release``."""
    parser = commands.add_parser(
        "release",
        help="run a release where the labels live (Spark) and record it in the labels party",
        description=f"The advertiser token is read from ${TOKEN_ENV}.",
    )
    parser.add_argument("--engine", choices=["spark"], required=True)
    parser.add_argument("--dataset", required=True, help="the dataset in the labels party")
    parser.add_argument(
        "--labels-url", type=_labels_url, required=True, help="the labels party's base URL"
    )
    parser.add_argument("--examples", required=True, help="Parquet path or table: example_id")
    parser.add_argument("--labels", required=True, help="Parquet path or table: example_id, value")
    parser.add_argument("--id-column", default="example_id")
    parser.add_argument("--value-column", default="value")
    parser.add_argument("--epsilon", type=_amount, required=True)
    parser.add_argument("--mechanism", choices=mechanisms(), default=AUTO)
    parser.add_argument("--epsilon-histogram", type=_amount, default=None)
    parser.add_argument(
        "--params", type=_params, default={}, help='JSON, e.g. {"bins": 64, "model_dim": 5}'
    )
    parser.add_argument("--out", type=Path, required=True, help="where the message is published")
    parser.add_argument("--master", default="local[*]")
    parser.add_argument(
        "--driver-memory", type=_memory, default=DRIVER_MEMORY,
        help="the driver JVM's heap (default %(default)s; in local mode every task runs in it)",
    )  # fmt: skip
    parser.add_argument(
        "--resume",
        action="store_true",
        help="after a crash: publish a staged message, mark an unstaged release failed, or "
        "finish an interrupted commit (open --out)",
    )
    parser.set_defaults(func=release_command)


def release_command(args: argparse.Namespace) -> int:
    """Run the job; 0 on a committed release, 2 on a refusal (nothing spent unless said)."""
    from spark_release.job import JobConfig, SparkJobError, run

    token = os.environ.get(TOKEN_ENV)
    if not token:
        print(f"labeldp release: set {TOKEN_ENV} to the advertiser token", file=sys.stderr)
        return 2
    config = from_args(JobConfig, args, token=token)
    try:
        result = run(config)
    except SparkJobError as exc:
        print(f"labeldp release: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({"release": result.release, "out": str(result.out)}, indent=2))
    return 0
