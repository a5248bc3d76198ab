"""Command-line plumbing shared by the ``labeldp`` subcommands of both parties."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def matching_options(cls: type[Any], args: argparse.Namespace) -> dict[str, Any]:
    """The parsed options named like an init field of the dataclass ``cls``."""
    given = vars(args)
    return {f.name: given[f.name] for f in dataclasses.fields(cls) if f.init and f.name in given}


def from_args(cls: type[T], args: argparse.Namespace, **values: Any) -> T:
    """An instance of the dataclass ``cls`` from the parsed options of the same names; ``values``
    adds or overrides fields (options named differently, or not options at all)."""
    return cls(**{**matching_options(cls, args), **values})


LOG_LEVELS = ("debug", "info", "warning")


def port_number(text: str) -> int:
    """An argparse type: a TCP port, 0 (any free one) to 65535 (``--port 99999`` listened on
    34463, the number modulo 65536: found by an audit)."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port: 0..65535")
    return port


def add_server_arguments(parser: argparse.ArgumentParser, *, port: int) -> None:
    """What both services' ``labeldp serve`` take alike: where to listen, https, the log level."""
    parser.add_argument("--port", type=port_number, default=port)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--tls-cert", type=Path, help="serve https: certificate chain (PEM)")
    parser.add_argument("--tls-key", type=Path, help="serve https: private key (PEM)")
    parser.add_argument("--log-level", default="info", choices=LOG_LEVELS)
