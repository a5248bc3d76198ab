"""The input rules both services share: what a number in text is, and no repeated JSON keys.

* A number written as text (a CSV cell, a line of a stream, an amount) is a plain ASCII decimal
  (:mod:`shared.number_text`, where the rule is defined for the engine too).
* A JSON object must not repeat a key: ``json.loads`` (and pydantic) keep the last one silently,
  so ``{"value": 1, "value": 2}`` would be read as 2 with no word said. Both services refuse it
  with a 422 naming the place (``labels[3].value``).
"""

from __future__ import annotations

import json
from typing import Any

from shared.number_text import NUMBER_RULE, parse_decimal, plain_ascii_numbers

__all__ = ["NUMBER_RULE", "parse_decimal", "plain_ascii_numbers"]  # the rule lives in the engine
DUPLICATE_KEY_MESSAGE = "key given more than once in one JSON object"


class DuplicateKeyError(ValueError):
    """A JSON object repeats a key; ``field`` is its place (``labels[3].value``)."""

    def __init__(self, field: str) -> None:
        super().__init__(f"{field}: {DUPLICATE_KEY_MESSAGE}")
        self.field = field


class _Repeated(dict):  # type: ignore[type-arg]
    """An object that repeated ``key`` (kept only until the place is found)."""

    key: str


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) == len(pairs):
        return obj
    seen: set[str] = set()
    repeated = _Repeated(obj)
    repeated.key = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
    return repeated


def _where(value: Any, path: str) -> str | None:
    """The place of the first repeated key in ``value`` (depth first), or None."""
    if isinstance(value, _Repeated):
        return f"{path}.{value.key}" if path else value.key
    if isinstance(value, dict):
        items = value.items()
        for key, item in items:
            found = _where(item, f"{path}.{key}" if path else str(key))
            if found:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = _where(item, f"{path}[{index}]")
            if found:
                return found
    return None


def loads(data: bytes | str, *, prefix: str = "") -> Any:
    """``json.loads`` that raises DuplicateKeyError for a repeated key (json's own errors pass).

    ``prefix`` is prepended to the place (``line[3]`` for a line of an NDJSON stream).
    """
    flag: list[bool] = []

    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        obj = _pairs(pairs)
        if isinstance(obj, _Repeated):
            flag.append(True)
        return obj

    value = json.loads(data, object_pairs_hook=hook)
    if flag:
        raise DuplicateKeyError(_where(value, prefix) or prefix or "body")
    return value


def find_duplicate_key(data: bytes | str) -> str | None:
    """The place of a repeated key in a JSON document, None if none (or not valid JSON)."""
    try:
        loads(data)
    except DuplicateKeyError as exc:
        return exc.field
    except (ValueError, RecursionError):
        return None
    return None
