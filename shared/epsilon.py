"""Exact privacy amounts: epsilons (and deltas) as decimals, the one budget arithmetic.

A budget is a promise about real numbers, so amounts are kept as exact decimals and added with
no rounding: a JSON number ``0.1`` is the decimal 0.1 (its shortest text, never the float's
binary expansion), ten spends of 0.1 fill a budget of 1 exactly and nothing more fits after
them. A Python ``float`` handed to :func:`exact` is taken at its exact binary value (every float
is a finite decimal), which is what the engine's floats really are.

The engine runs on floats. The privacy rule linking the two worlds: a step charged the decimal
``d`` runs at :func:`float_at_most` ``(d)``, the largest float not above ``d``, so an
epsilon-DP step is never run at more epsilon than it is charged for.
"""

from __future__ import annotations

import math
from decimal import (
    Clamped,
    Context,
    Decimal,
    DivisionByZero,
    Inexact,
    InvalidOperation,
    Overflow,
    Rounded,
    Subnormal,
    Underflow,
)
from fractions import Fraction

import numpy as np

from shared.errors import InvalidParameterError
from shared.number_text import NUMBER_RULE, exact_decimal

Amount = Decimal
AmountLike = Decimal | str | int | float

# Enough digits for any sum of float-valued amounts (a float's exact expansion spans at most
# about 1,100 digits), with every rounding trapped: a sum that could not be exact raises.
_EXACT = Context(
    prec=10_000,
    Emax=100_000,
    Emin=-100_000,
    traps=[Inexact, Rounded, InvalidOperation, DivisionByZero, Overflow, Underflow, Clamped],
)
_EXACT.traps[Subnormal] = False
ZERO = Decimal(0)
INFINITY = Decimal("Infinity")
# Text longer than this is refused before it is parsed (an amount is a number, not a document):
# here and in every service's amount fields. Such an amount in [MIN_AMOUNT, MAX_AMOUNT] has its
# digits between 10^300 and 10^-1600, and so has a sum of them: ~1,900 digits, which
# :func:`stored` reads back (up to _MAX_STORED_TEXT) instead of taking it for NaN.
MAX_TEXT = 1200
_MAX_STORED_TEXT = 8000


def exact(value: AmountLike, *, name: str = "epsilon", allow_inf: bool = False) -> Decimal:
    """``value`` as an exact decimal amount > 0 (or >= 0 with ``name`` ending in ``_spent``).

    Decimals and integers are taken as they are; strings are parsed as plain ASCII decimals
    (``shared.number_text``: ``1_0`` or full-width digits are refused, as everywhere);
    floats at their exact binary value. NaN, a negative or zero amount, and infinity (unless
    ``allow_inf``) are refused with an :class:`InvalidParameterError` naming ``name``.
    """
    if isinstance(value, bool):
        raise InvalidParameterError(f"{name} ({value!r}) must be a number")
    if isinstance(value, Decimal):
        amount = value
    elif isinstance(value, int | np.integer):
        amount = Decimal(int(value))
    elif isinstance(value, float | np.floating):
        amount = Decimal(float(value))
    elif isinstance(value, str):
        text = value.strip()
        if not text or len(text) > MAX_TEXT:
            raise InvalidParameterError(f"{name} ({value!r}) must be a decimal number")
        try:
            amount = exact_decimal(text)  # the one rule: no "1_0", no non-ASCII digits
        except (ValueError, InvalidOperation):
            raise InvalidParameterError(f"{name} ({value!r}) {NUMBER_RULE}") from None
    else:
        raise InvalidParameterError(f"{name} ({value!r}) must be a number")
    if amount.is_nan() or amount <= 0:
        raise InvalidParameterError(f"{name} ({value!r}) must be > 0")
    if amount.is_infinite() and not allow_inf:
        raise InvalidParameterError(f"{name} ({value!r}) must be finite")
    return amount


# The amounts a service accepts: every epsilon, delta and budget is 0 or lies in
# [MIN_AMOUNT, MAX_AMOUNT]. Within it every amount is a finite float (or underflows to 0 below
# the smallest one, where the plan refuses it by name) and every sum or difference of a few of
# them is exact in this module's context; outside it "1e10001" overflowed to a stored infinity.
MIN_AMOUNT = Decimal("1e-400")
MAX_AMOUNT = Decimal("1e300")


def check_range(amount: Decimal, *, name: str = "epsilon") -> Decimal:
    """``amount`` if it is 0 or within [MIN_AMOUNT, MAX_AMOUNT]; else a refusal naming ``name``."""
    if amount.is_finite() and (amount == 0 or MIN_AMOUNT <= abs(amount) <= MAX_AMOUNT):
        return amount
    raise InvalidParameterError(
        f"{name} must lie between {MIN_AMOUNT} and {MAX_AMOUNT} (got {amount})"
    )


def budget_as_read(amount: Decimal) -> Decimal:
    """A stored budget read conservatively into the range: above ``MAX_AMOUNT`` (or +infinity)
    as ``MAX_AMOUNT``; NaN (an unparseable text reads as NaN), a negative amount or one below
    ``MIN_AMOUNT`` as 0: nothing spendable. Only databases written before :func:`check_range`
    existed, or edited by hand, can hold such amounts; migration 0012 of the labels party
    repairs them to exactly this value (the ledger, hash-chained, keeps what it recorded)."""
    if amount.is_nan() or amount <= 0:
        return ZERO
    if amount > MAX_AMOUNT:
        return MAX_AMOUNT
    return amount if amount >= MIN_AMOUNT else ZERO


def spent_as_read(amount: Decimal) -> Decimal:
    """A stored spend read conservatively into the range: above ``MAX_AMOUNT``, not finite
    (NaN included) or negative as ``MAX_AMOUNT`` (nothing left), a positive amount below
    ``MIN_AMOUNT`` as ``MIN_AMOUNT``."""
    if not amount.is_finite() or amount > MAX_AMOUNT or amount < 0:
        return MAX_AMOUNT
    return MIN_AMOUNT if ZERO < amount < MIN_AMOUNT else amount


def stored(text: str | None, legacy: float | None) -> Decimal:
    """An amount as a database stores it, never raising: its exact text, else its float taken
    exactly (NULL and NULL: 0); a text that is not a decimal reads as NaN (for
    :func:`budget_as_read` / :func:`spent_as_read` to place)."""
    try:
        if text is not None:
            return Decimal(text.strip()) if len(text) <= _MAX_STORED_TEXT else Decimal("NaN")
        return ZERO if legacy is None else Decimal(float(legacy))
    except (ArithmeticError, ValueError, TypeError):
        return Decimal("NaN")


def add(*amounts: Decimal) -> Decimal:
    """The exact sum (raises if it could not be exact: never, for float-sized amounts)."""
    total = ZERO
    for amount in amounts:
        total = _EXACT.add(total, amount)
    return total


def subtract(a: Decimal, b: Decimal) -> Decimal:
    """The exact difference ``a - b``."""
    return _EXACT.subtract(a, b)


def float_at_most(amount: Decimal) -> float:
    """The largest float <= ``amount`` (inf for an infinite amount): what a step may run at."""
    if amount.is_infinite():
        return math.inf if amount > 0 else -math.inf
    nearest = float(amount)
    if Decimal(nearest) > amount:
        nearest = math.nextafter(nearest, -math.inf)
    return nearest


# A charge the plan chooses (not one the user gave) has at most this many significant digits.
SHORT_DIGITS = 6


def short_part(value: float, *, whole: Decimal, digits: int = SHORT_DIGITS) -> Decimal:
    """A readable part of ``whole`` near ``value``: a multiple of whole's ``digits``-th digit.

    The quantum is q = 10^(e - digits + 1), e the exponent of ``whole``'s leading digit; the
    part is value rounded to a multiple of q, kept within [q, whole - q]. So a part has at most
    ``digits`` significant digits, and when ``whole`` itself has at most ``digits`` (a user's
    "1" or "0.1"), so has ``whole - part``: 1 splits into 0.146059 + 0.853941, never into
    binary expansions. ``whole`` must be a finite amount > 0.
    """
    if whole.is_infinite() or whole <= 0:
        raise InvalidParameterError(f"whole ({whole}) must be a finite amount > 0")
    quantum = Decimal((0, (1,), whole.adjusted() - digits + 1))
    steps = max(round(Fraction(value) / Fraction(quantum)), 1)
    top = max(int(_EXACT.divide_int(_EXACT.subtract(whole, quantum), quantum)), 1)
    return _EXACT.multiply(Decimal(min(steps, top)), quantum).normalize(_EXACT)


def text(amount: Decimal) -> str:
    """The canonical text of an amount: plain notation, no trailing zeros ("0.1", "4", "1E+300").

    Exponents beyond +-30 keep scientific notation so huge or tiny amounts stay short; the text
    always parses back to the same decimal.
    """
    if amount.is_infinite():
        return "Infinity"
    normal = amount.normalize(_EXACT)
    exponent = normal.as_tuple().exponent
    assert isinstance(exponent, int)
    if -30 <= exponent <= 30 and normal.adjusted() <= 30:
        return format(normal, "f")
    return str(normal)


def left(*, budget: Decimal, spent: Decimal) -> Decimal:
    """What is left of ``budget`` after ``spent`` (never below 0)."""
    return max(subtract(budget, spent), ZERO)


def fits(*, budget: Decimal, spent: Decimal, requested: Decimal) -> bool:
    """Whether spending ``requested`` more keeps the total within ``budget``: exact, no slack."""
    return add(spent, requested) <= budget
