"""What a number written as text is: one rule for CSV cells, stream lines and privacy amounts.

A plain ASCII decimal ``[+-]digits[.digits][e[+-]digits]`` with optional surrounding ASCII spaces
(or nan / inf words, for the caller to refuse). Python's ``float()`` and ``Decimal()`` also read
``1_000`` and full-width or other Unicode digits (``１２``), which a JSON number never is: an
amount ``"1_0"`` was read as 10. Both services (``shared.service.strict_input``) and the budget
arithmetic (``shared.epsilon``) read numbers by this rule.
"""

from __future__ import annotations

import re
from decimal import Decimal

_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_NON_FINITE = {"nan", "inf", "infinity"}
NUMBER_RULE = "must be a plain decimal number (ASCII digits; no '_' separators)"


def _plain(text: str) -> str:
    """``text`` without surrounding ASCII spaces if it follows the rule; ValueError otherwise."""
    stripped = text.strip(" \t")
    if _DECIMAL.fullmatch(stripped) or stripped.lower().lstrip("+-") in _NON_FINITE:
        return stripped
    raise ValueError(NUMBER_RULE)


def parse_decimal(text: str) -> float:
    """``float(text)`` for a plain ASCII decimal (or nan / inf, for the caller to refuse).

    Raises ValueError for anything else, including what ``float`` alone would accept:
    ``1_000``, ``１２`` (full-width), Arabic-Indic digits.
    """
    return float(_plain(text))


def exact_decimal(text: str) -> Decimal:
    """``Decimal(text)`` for a plain ASCII decimal (an amount: no rounding); ValueError for
    anything else, including what ``Decimal`` alone would accept (``1_0``, ``１``)."""
    return Decimal(_plain(text))


def plain_ascii_numbers(text: str) -> bool:
    """Cheap pre-check of a block of text: no character ``float`` reads beyond the rule."""
    return text.isascii() and "_" not in text
