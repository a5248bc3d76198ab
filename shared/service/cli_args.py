"""Command-line plumbing shared by the ``labeldp`` subcommands of both parties."""

from __future__ import annotations

import argparse
import dataclasses
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
