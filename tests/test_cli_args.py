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


@pytest.mark.parametrize("service", ["labels", "features"])
@pytest.mark.parametrize(
    ("option", "value", "words"),
    [
        ("--port", "99999", "99999 is not a port: 0..65535"),
        ("--port", "-1", "-1 is not a port"),
        ("--port", "http", "'http' is not an integer"),
        ("--log-level", "bogus", "invalid choice: 'bogus'"),
    ],
)
def test_both_services_refuse_a_port_or_log_level_they_cannot_use(
    service: str, option: str, value: str, words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by the CLI audit: serve labels --port 99999 listened on 34463 (modulo 65536) and
    serve features --log-level bogus was a traceback; the two services now share these options
    (``add_server_arguments``), refused by argparse naming them, exit 2."""
    from labeldp.cli import build_parser

    with pytest.raises(SystemExit) as exit_:
        build_parser("serve").parse_args(["serve", service, option, value])
    assert exit_.value.code == 2
    assert f"argument {option}: {words}" in capsys.readouterr().err


def test_a_port_is_read_as_given() -> None:
    from shared.service.cli_args import port_number

    assert [port_number(text) for text in ("0", "8001", "65535")] == [0, 8001, 65535]
