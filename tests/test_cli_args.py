"""shared.service.cli_args: dataclasses built from parsed options."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

import pytest

from shared.service.cli_args import from_args


@dataclass(frozen=True, kw_only=True)
class Options:
    epsilon: float
    mechanism: str = "auto"
    keep: bool = True
    extra: list[int] = field(default_factory=list)


def test_fields_come_from_options_of_the_same_name() -> None:
    args = argparse.Namespace(epsilon=0.5, mechanism="rr_on_bins", command="demo", func=print)
    assert from_args(Options, args) == Options(epsilon=0.5, mechanism="rr_on_bins")


def test_values_add_and_override_fields() -> None:
    args = argparse.Namespace(epsilon=0.5, mechanism="x", clean=True)
    options = from_args(Options, args, keep=not args.clean, mechanism="auto")
    assert options == Options(epsilon=0.5, mechanism="auto", keep=False)


def test_a_missing_required_field_fails_loudly() -> None:
    with pytest.raises(TypeError):
        from_args(Options, argparse.Namespace(mechanism="auto"))


def test_matching_options_are_the_options_named_like_a_field() -> None:
    from shared.service.cli_args import matching_options

    args = argparse.Namespace(epsilon=0.5, keep=False, command="serve", log_level="info")
    assert matching_options(Options, args) == {"epsilon": 0.5, "keep": False}
