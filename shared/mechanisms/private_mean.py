"""The label mean, epsilon-label-DP: the anchor for the features party's predictions.

The epsilon1-DP histogram's own mean is biased on sparse or skewed labels (its projection onto
the simplex keeps the positive noise of near-empty cells and clamps the negative: +7.5 on the
ad-conversion labels at epsilon 0.05, 3.9% of their variance; bench/results/prior_mean_bias.md),
and at small epsilon the features party's best model is that mean. A direct DP mean costs a
slice of epsilon1 and is unbiased, with a variance the receiver knows exactly
(:func:`private_mean_variance`), so it can weigh it against the mean of its own targets.

Mechanism: the Laplace mechanism on a bounded sum (Dwork et al. 2006), made exact. Each clipped
label is rounded to one of ``MEAN_LEVELS + 1`` levels of [lo, hi]; changing one label moves the
integer sum by at most ``MEAN_LEVELS``, so adding discrete Laplace noise of scale
``MEAN_LEVELS / epsilon`` (Canonne, Kamath & Steinke 2020, Algorithm 2) is epsilon-label-DP.
Dividing by n (public under label DP) and clipping to [lo, hi] is post-processing.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from shared.domain import LabelDomain, check_epsilon, check_labels
from shared.errors import InvalidParameterError
from shared.mechanisms.discrete_laplace import sample_discrete_laplace
from shared.rng import Rng

# 2^16 levels: the rounding moves the mean by at most (hi - lo) / 2^17, far below the noise
# at any epsilon a release uses, and the sum of a billion labels still fits exactly in Python
# integers (numpy int64 holds it too: 2^16 * 10^9 < 2^63).
MEAN_LEVELS = 2**16
_SATURATE = 2**1000
# The features party uses the mean only if its noise sd is at most this share of the largest
# label spread the bounds allow with that mean, sqrt((hi - m)(m - lo)) (Bhatia-Davis;
# ``features_party.mean_anchor``); the labels party does not buy a mean that could never pass.
ANCHOR_MAX_RELATIVE_SD = 0.1


def private_mean(labels: np.ndarray, *, lo: float, hi: float, epsilon: float, rng: Rng) -> float:
    """An epsilon-label-DP mean of ``labels`` clipped to the public bounds [lo, hi].

    Laplace mechanism on the rounded integer sum with exact discrete Laplace noise of scale
    MEAN_LEVELS / epsilon (module docstring); ``epsilon = inf`` returns the exact clipped mean.
    """
    domain = LabelDomain(lo=lo, hi=hi)
    values = domain.clip(check_labels(labels))
    eps = check_epsilon(epsilon, allow_inf=True)
    if math.isinf(eps):
        return float(values.mean())
    return noisy_mean(
        level_sum(values, lo=domain.lo, hi=domain.hi),
        n=values.size,
        lo=lo,
        hi=hi,
        epsilon=eps,
        rng=rng,
    )


def mean_levels(values: np.ndarray, *, lo: float, hi: float) -> np.ndarray:
    """Each label clipped to [lo, hi], rounded to one of MEAN_LEVELS + 1 levels (int64)."""
    clipped = np.clip(values, lo, hi)
    return np.rint((clipped - lo) / (hi - lo) * MEAN_LEVELS).astype(np.int64)


def level_sum(values: np.ndarray, *, lo: float, hi: float) -> int:
    """The exact integer sum of :func:`mean_levels` (what each Spark partition adds up)."""
    return int(mean_levels(values, lo=lo, hi=hi).sum())


def noisy_mean(total: int, *, n: int, lo: float, hi: float, epsilon: float, rng: Rng) -> float:
    """The noise step of :func:`private_mean` on a given exact level sum of n labels.

    ``total`` is :func:`level_sum` of the n labels (summed over any partition of them). Draws
    one discrete Laplace sample of scale MEAN_LEVELS / epsilon, exactly as :func:`private_mean`
    does (it calls this). Privacy as :func:`private_mean`: the sum has sensitivity MEAN_LEVELS.
    """
    domain = LabelDomain(lo=lo, hi=hi)
    eps = check_epsilon(epsilon)
    if isinstance(total, bool) or not isinstance(total, int | np.integer):
        raise InvalidParameterError(f"level sum ({total!r}) must be an integer")
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
        raise InvalidParameterError(f"n ({n!r}) must be an integer >= 1")
    if not 0 <= total <= MEAN_LEVELS * n:
        raise InvalidParameterError(f"level sum ({total}) must lie in [0, {MEAN_LEVELS} n]")
    width = domain.hi - domain.lo
    noise = sample_discrete_laplace(rng, Fraction(MEAN_LEVELS) / Fraction(eps))
    # Exact integer sum, then a fixed saturation (at tiny epsilon the noise outgrows float64):
    # a function of sum + noise alone, so still post-processing.
    noisy_total = min(max(int(total) + int(noise), -_SATURATE), _SATURATE)
    share = min(max(noisy_total / (MEAN_LEVELS * int(n)), 0.0), 1.0)
    return float(min(max(domain.lo + width * share, domain.lo), domain.hi))


def private_mean_variance(*, lo: float, hi: float, epsilon: float, n: int) -> float:
    """The variance of :func:`private_mean`'s noise for n labels, from public quantities only.

    Discrete Laplace of scale t has variance 2 e^(-1/t) / (1 - e^(-1/t))^2 (about 2 t^2);
    in label units the sum's noise is divided by MEAN_LEVELS n / (hi - lo). Rounding and the
    final clip are ignored (both only shrink the error).
    """
    if n < 1:
        raise InvalidParameterError(f"n ({n}) must be >= 1")
    eps = check_epsilon(epsilon, allow_inf=True)
    if math.isinf(eps):
        return 0.0
    inverse_scale = eps / MEAN_LEVELS  # 1 / t
    gap = -math.expm1(-inverse_scale)  # 1 - e^(-1/t), accurate for huge t
    if gap == 0.0:
        return math.inf
    try:  # 2 q / gap^2 in sum units, times the squared label units per sum unit
        return 2.0 * math.exp(-inverse_scale) * ((hi - lo) / (MEAN_LEVELS * n * gap)) ** 2
    except OverflowError:
        return math.inf


def anchor_can_use(*, lo: float, hi: float, epsilon: float, n: int) -> bool:
    """Whether a mean of this noise could ever pass the features party's gate.

    The largest spread sqrt((hi - m)(m - lo)) is (hi - lo) / 2, at m = (lo + hi) / 2; a mean
    noisier than ANCHOR_MAX_RELATIVE_SD of that is refused whatever its value, so buying it
    would only take epsilon from the histogram. Public: bounds, epsilon and n.
    """
    limit = ANCHOR_MAX_RELATIVE_SD * (hi - lo) / 2.0
    return math.sqrt(private_mean_variance(lo=lo, hi=hi, epsilon=epsilon, n=n)) <= limit
