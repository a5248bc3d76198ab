"""The sparse vector technique on monotone counts, with exact discrete Laplace noise.

AboveThreshold (Dwork & Roth 2014, Algorithm 1; Lyu, Su & Li 2017, Algorithm 7 with c = 1) for
counting queries that one changed record moves all in the same direction (monotone): the output
is the first index whose noisy count falls to the noisy threshold. Every comparison is decided
exactly (integer noise, exact Bernoulli draws), so the output law is the ideal one for every
input, with no floating-point tail or rounding (``constants.dp_norm_quantile`` uses it).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from shared.domain import check_epsilon
from shared.errors import InvalidParameterError
from shared.mechanisms import _sparse_vector_kernels as kernels
from shared.mechanisms.discrete_laplace import (
    bernoulli_exp,
    bernoulli_sigmoid,
    discrete_laplace_samples,
)
from shared.rng import Rng, below_sampler, random_words

# epsilon is rounded down to this many significant bits (a dyadic rational): small exact
# denominators for the Bernoulli draws, and a noise scale 2 / epsilon' >= 2 / epsilon.
EPSILON_BITS = 20
# The kernel's integers stay below 2^62 (beyond: exact Python integers, one comparison a time).
_KERNEL_LIMIT = 2**62


def dyadic_floor(value: float, bits: int = EPSILON_BITS) -> Fraction:
    """The largest m 2^-k <= ``value`` (> 0) with an integer m of ``bits`` bits, exactly."""
    mantissa, exponent = math.frexp(value)  # value = mantissa 2^exponent, mantissa in [1/2, 1)
    return Fraction(math.floor(mantissa * 2**bits)) * Fraction(2) ** (exponent - bits)


def first_at_or_below(
    counts: np.ndarray, *, threshold: float, epsilon: float, rng: Rng
) -> int | None:
    """The first j with counts[j] - nu_j <= threshold - rho (None if none), nu_j and rho
    independent discrete Laplace of scale 2 / epsilon' (P(z) proportional to e^(-|z| eps' / 2),
    epsilon' = :func:`dyadic_floor` (epsilon) <= epsilon): epsilon-DP if the counts have
    sensitivity 1 and are MONOTONE (a neighbour moves every count by 0 or by 1 of one sign).

    Privacy (proof): with T = floor(threshold), the integer comparison is nu_j >= m_j =
    c_j - T + rho. P(J = j) = sum_z f(z) prod_{i<j} (1 - h(c_i - T + z)) h(c_j - T + z), f the
    pmf of rho and h(m) = P(nu >= m). Both f and h move by at most e^(eps'/2) under a unit
    shift (f(z) / f(z +- 1) <= e^(eps'/2); h(m) = sum_{k>=m} p(k) and p(k + 1) >= e^(-eps'/2)
    p(k), so h(m + 1) >= e^(-eps'/2) h(m)), and h decreases. If the neighbour's counts are
    c' >= c: every "not yet" factor only grows and the last moves by <= e^(eps'/2); the other
    way, substituting z = w - 1 costs e^(eps'/2) in f and turns every factor of c' into one of
    c, the last again e^(eps'/2): a ratio <= e^(eps') both ways, the case c' <= c symmetric,
    and "none" is the same without the last factor (Lyu et al., Theorem 5, summed instead of
    integrated). So the output is epsilon'-DP, hence epsilon-DP.

    Exactness: rho is CKS Algorithm 2; comparison j is one exact Bernoulli of probability
    h(m_j) = r^m / (1 + r) for m >= 1 and 1 - r^(1-m) / (1 + r) for m <= 0 (r = e^(-eps'/2)),
    drawn as Bernoulli(e^(-g eps'/2)) AND Bernoulli(sigmoid(eps'/2)), g = m or 1 - m (negated
    for m <= 0), in order up to the first that fires: integer comparisons of uniform integers
    only (``_sparse_vector_kernels.first_firing``).
    """
    eps = dyadic_floor(check_epsilon(epsilon))
    if not math.isfinite(threshold):
        raise InvalidParameterError(f"threshold ({threshold}) must be finite")
    c = np.asarray(counts)
    if c.ndim != 1 or c.size == 0 or c.dtype.kind not in "iu":
        raise InvalidParameterError("counts must be a non-empty 1-D array of integers")
    half = eps / 2  # r = e^(-half): the noise scale is 1 / half = 2 / eps'
    rho = discrete_laplace_samples(rng, 1 / half, 1)[0]
    shift = rho - math.floor(threshold)
    num, den = half.numerator, half.denominator
    largest = max(abs(int(c.min())), abs(int(c.max())))  # Python integers: no int64 wrap
    if den <= _KERNEL_LIMIT and (largest + abs(shift) + 1) * num <= _KERNEL_LIMIT:
        return _first_firing(c.astype(np.int64) + shift, num, den, rng)
    below = below_sampler(rng)  # epsilon below ~1e-12: the same draws in Python integers
    for j, count in enumerate(c.tolist()):
        m = count + shift
        both = bernoulli_exp(below, max(m, 1 - m) * half) and bernoulli_sigmoid(below, half)
        if both == (m >= 1):
            return j
    return None


def _first_firing(thresholds: np.ndarray, num: int, den: int, rng: Rng) -> int | None:
    """The kernel's answer for the thresholds m_j, its words extended until it decides (the
    first supply: ~4 words a comparison up to the first m_j <= 0, where one fires with
    probability >= 1/2; the answer does not depend on the supply)."""
    likely = int(np.argmax(thresholds <= 0)) if thresholds.min() <= 0 else thresholds.size
    words = random_words(rng, 4 * likely + 256)
    while (fired := kernels.first_firing(thresholds, num, den, words)) == kernels.OUT_OF_WORDS:
        words = np.concatenate([words, random_words(rng, words.size)])
    return None if fired == kernels.NONE_FIRED else int(fired)
