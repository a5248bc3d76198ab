"""Command-line plumbing shared by the ``labeldp`` subcommands of both parties."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any, TypeVar

T = TypeVar("T")


def from_args(cls: type[T], args: argparse.Namespace, **values: Any) -> T:
    """An instance of the dataclass ``cls`` from the parsed options of the same names; ``values``
    adds or overrides fields (options named differently, or not options at all)."""
    given = vars(args)
    names = [f.name for f in dataclasses.fields(cls) if f.init]  # type: ignore[arg-type]
    return cls(**{**{name: given[name] for name in names if name in given}, **values})
