"""labeldp.cli: every command's help renders as a user reads it."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator

from labeldp.cli import build_parser


def _parsers(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _parsers(child, (*path, name))


def test_every_commands_help_renders_without_format_leftovers() -> None:
    """argparse %-formats argument help but not a description: a '%%' there is printed as is
    (the demo's help said "20%% held out")."""
    found = list(_parsers(build_parser()))
    assert len(found) > 5 and ("demo",) in {path for path, _ in found}
    for path, parser in found:
        text = parser.format_help()
        assert "%%" not in text and not re.search(r"%\(\w+\)", text), (path, text)
    demo = dict(found)[("demo",)].format_help()
    assert "20% held out" in " ".join(demo.split())
