"""The Gaussian mechanism sampled exactly: value + N(0, s^2) as an exact real, then rounded.

Implements Karney, "Sampling exactly from the normal distribution" (ACM TOMS 42(1), 2016),
Algorithm N with Algorithm B: a standard normal drawn as sign * (k + x), k an integer and x a
uniform in [0, 1) whose base-2^32 digits are drawn only as far as a decision needs them (a
"u-rand": every undrawn digit is still uniform and independent of every decision made). The
real value + s * N is then located on the public grid of step g = 2^(floor(log2 s) - 40) by
drawing x's digits until the cell is decided, and the cell's midpoint is returned as the
nearest double.

Privacy: every decision compares exactly uniform integers with exact rationals (no floating
point), so the returned double is a deterministic function of the exact real value + s * N:
post-processing of the ideal Gaussian mechanism, with its exact (epsilon, delta) guarantee.
The set of possible outputs (midpoints of the grid of s, as doubles) depends on s only, never
on the value: the floating-point attack on ``value + s * ndtri(u)`` (Mironov 2012), where
that set gives the value away, has nothing to read.
"""

from __future__ import annotations

import math
import sys
from fractions import Fraction

import numpy as np

from shared.errors import InvalidParameterError
from shared.mechanisms.discrete_laplace import bernoulli_exp
from shared.rng import Below, Rng, below_sampler

# Digits of a u-rand are base 2^32; the output grid is 2^-40 of the noise scale: within 2^12
# noise scales of zero the doubles are finer than the grid (outputs are exact midpoints), beyond
# that the doubles are the coarser.
_DIGIT = 2**32
GRID_BITS = 40
_HALF = Fraction(1, 2)


class _URand:
    """A uniform in [0, 1) whose base-2^32 digits are drawn on demand (Karney's u-rand)."""

    __slots__ = ("_below", "digits")

    def __init__(self, below: Below) -> None:
        self._below = below
        self.digits: list[int] = []

    def digit(self, i: int) -> int:
        """The i-th digit (0-based), drawing the missing ones."""
        while len(self.digits) <= i:
            self.digits.append(self._below(_DIGIT))
        return self.digits[i]

    def less_than(self, other: _URand) -> bool:
        """Whether self < other, drawing digits of both until they differ (ties have
        probability 0: equal digits only ask for the next ones)."""
        i = 0
        while True:
            a, b = self.digit(i), other.digit(i)
            if a != b:
                return a < b
            i += 1


def _accept_b(below: Below, k: int, x: _URand) -> bool:
    """True with probability exp(-x (2k + x) / (2k + 2)) exactly (Karney, Algorithm B).

    Rounds continue while a fresh uniform z falls below the previous one (x first) AND an
    independent event of probability (2k + x) / (2k + 2) holds (C(2k + 2) = 1, or C = 0 and a
    fresh uniform r < x); the round count n reaches j with probability (x (2k + x) /
    (2k + 2))^j / j!, so P(n even) = sum_j (-1)^j P(n >= j) = exp(-x (2k + x) / (2k + 2)).
    """
    y, n, m = x, 0, 2 * k + 2
    while True:
        z = _URand(below)
        if not z.less_than(y):
            break
        c = below(m)  # C(m): -1 w.p. 1/m (c = 0), 0 w.p. 1/m (c = 1), +1 otherwise
        if c == 0:
            break
        if c == 1 and not _URand(below).less_than(x):
            break
        y, n = z, n + 1
    return n % 2 == 0


def _half_normal(below: Below) -> tuple[int, _URand]:
    """(k, x) with k + x distributed with density proportional to exp(-(k + x)^2 / 2) on
    [0, inf) exactly (Karney, Algorithm N, steps 1-3).

    k >= 0 with probability proportional to exp(-k / 2) (failures before the first failure of
    Bernoulli(exp(-1/2))), kept with probability exp(-k (k - 1) / 2): k is then proportional to
    exp(-k^2 / 2); x uniform, kept with probability exp(-x (2k + x) / 2), Algorithm B run k + 1
    times: the joint density is proportional to exp(-(k + x)^2 / 2).
    """
    while True:
        k = 0
        while bernoulli_exp(below, _HALF):
            k += 1
        if k > 1 and not bernoulli_exp(below, Fraction(k * (k - 1), 2)):
            continue
        x = _URand(below)
        if all(_accept_b(below, k, x) for _ in range(k + 1)):
            return k, x


def grid_step(scale: float) -> Fraction:
    """The public output grid's step for the noise ``scale``: 2^(floor(log2 scale) - 40)."""
    return Fraction(2) ** (math.frexp(scale)[1] - 1 - GRID_BITS)


def _dyadic(q: Fraction) -> tuple[int, int]:
    """(m, p) with q = m / 2^p, p >= 0, for a rational whose denominator is a power of 2."""
    return q.numerator, q.denominator.bit_length() - 1


def _noisy_cell(below: Below, value: tuple[int, int], width: tuple[int, int]) -> int:
    """The grid cell c (value + scale * N in [c, c + 1) grid steps) of one exact draw, for
    ``value`` = a / 2^ap and ``width`` = scale / step = w / 2^wp in grid steps.

    With x's first j digits D (x in [D, D + 1) / 2^(32 j)), the real lies between
    value + sign width (k + D / 2^(32 j)) and the same at D + 1; in units of 2^-P (P large
    enough for both) these are integers, and the cell is decided when no multiple of 2^P lies
    strictly between them. Digits are drawn until it is (a boundary has probability 0).
    """
    (a, ap), (w, wp) = value, width
    k, x = _half_normal(below)
    sign = -1 if below(2) else 1
    digits = 0
    for j in range(len(x.digits) + 64):
        shift = 32 * j + wp
        p = max(ap, shift)
        base = (a << (p - ap)) + sign * ((w * ((k << (32 * j)) + digits)) << (p - shift))
        other = base + sign * (w << (p - shift))
        lo, hi = min(base, other), max(base, other)
        cell = lo >> p
        if hi <= (cell + 1) << p:  # no grid point strictly inside: the real's cell is decided
            return cell
        digits = (digits << 32) | x.digit(j)
    raise AssertionError("an exact Gaussian draw did not settle its cell")  # pragma: no cover


def _nearest_double(q: Fraction) -> float:
    """The double nearest to q; beyond the largest double, the largest double of q's sign."""
    try:
        return float(q)
    except OverflowError:
        return sys.float_info.max if q > 0 else -sys.float_info.max


def gaussian_mechanism(values: np.ndarray | float, *, scale: float, rng: Rng | Below) -> np.ndarray:
    """``values`` + independent N(0, scale^2) per coordinate, exactly, on the public grid.

    Each output is the double nearest to (beyond the doubles' range, the largest of its
    sign) the midpoint of the grid cell (step
    :func:`grid_step`) holding the exact real value + scale * N. The values are taken exactly
    (every double is a rational). Privacy: post-processing of the ideal Gaussian mechanism
    (module docstring); the output set depends on ``scale`` alone.
    """
    s = float(scale)
    if not (math.isfinite(s) and s > 0.0):
        raise InvalidParameterError(f"scale ({scale!r}) must be a finite number > 0")
    data = np.asarray(values, dtype=np.float64)
    if not np.all(np.isfinite(data)):
        raise InvalidParameterError("values must be finite")
    below = below_sampler(rng)
    step = grid_step(s)
    width = _dyadic(Fraction(s) / step)
    out = [
        _nearest_double((_noisy_cell(below, _dyadic(Fraction(v) / step), width) + _HALF) * step)
        for v in data.reshape(-1).tolist()
    ]
    return np.asarray(out, dtype=np.float64).reshape(data.shape)
