"""Efficient Propose-Test-Release: release an estimate whose local sensitivity is certified.

Implements Shen, Tong & Wang, "Efficient Propose-Test-Release for Optimal Differentially Private
Estimation", Algorithm 2 (ePTR) with Theorem 2.2. The estimators that feed it (OLS, Nadaraya-
Watson, Bayes) live in :mod:`.ols`, :mod:`.kernel` and :mod:`.bayes`; each supplies its alpha
(a local-sensitivity level) and its alpha-SaLBo gamma (Definition 2.1: 1-Lipschitz in the
Hamming distance between data sets, and gamma > 0 only where the local sensitivity is <= alpha).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import expit, ndtri

from shared.errors import InvalidParameterError
from shared.estimators._checks import epsilon_delta, positive
from shared.rng import Rng, uniforms


@dataclass(frozen=True, kw_only=True, slots=True)
class EPTRRelease:
    """The output of Algorithm 2 plus the data owner's diagnostics.

    Only ``value`` (and ``released``, which ``value`` reveals anyway when ``no_reply`` is a
    fixed point) is the (epsilon, delta)-DP output. ``release_probability`` and ``gamma`` are
    functions of the private data: show them to the data's owner only, never publish them.
    ``threshold`` (M) and ``noise_scale`` are public.
    """

    value: np.ndarray
    released: bool
    release_probability: float
    noise_scale: float
    threshold: float
    gamma: float


@dataclass(frozen=True, kw_only=True, slots=True)
class EPTROutcome:
    """What every ePTR estimator's result reports besides its values: whether Algorithm 2
    released, its probability of doing so, the noise scale, gamma and alpha. ``gamma`` and
    ``release_probability`` depend on the private data (owner's diagnostics only)."""

    released: bool
    release_probability: float
    noise_scale: float
    gamma: float
    alpha: float

    @staticmethod
    def of(out: EPTRRelease, *, alpha: float) -> dict[str, float | bool]:
        """The outcome fields of Algorithm 2's output ``out`` run at ``alpha``."""
        return {
            "released": out.released,
            "release_probability": out.release_probability,
            "noise_scale": out.noise_scale,
            "gamma": out.gamma,
            "alpha": alpha,
        }


def eptr_threshold(*, epsilon: float, delta: float) -> float:
    """M = 1 + (2 / epsilon) log(max(1/delta, 1/epsilon)) (Algorithm 2, step 3)."""
    return 1.0 + (2.0 / epsilon) * math.log(max(1.0 / delta, 1.0 / epsilon))


def eptr_release_probability(*, gamma: float, epsilon: float, delta: float) -> float:
    """p(X) = sigmoid(epsilon / 2 (gamma - M)) (Algorithm 2, step 4), computed without overflow."""
    return float(expit(0.5 * epsilon * (gamma - eptr_threshold(epsilon=epsilon, delta=delta))))


def eptr_noise_scale(*, alpha: float, epsilon: float, delta: float) -> float:
    """Gaussian standard deviation (2 alpha / epsilon) sqrt(2 log(1.25 / delta)) (step 7)."""
    return 2.0 * alpha / epsilon * math.sqrt(2.0 * math.log(1.25 / delta))


def eptr_release(
    estimate: np.ndarray | float,
    *,
    gamma: float,
    alpha: float,
    epsilon: float,
    delta: float,
    no_reply: np.ndarray | float,
    rng: Rng,
) -> EPTRRelease:
    """Release ``estimate`` + Gaussian noise with probability p(X), else ``no_reply``.

    Implements Shen, Tong & Wang, Algorithm 2: M = 1 + (2/eps) log(max(1/delta, 1/eps));
    I ~ Bernoulli(sigmoid(eps/2 (gamma - M))); if I = 1 the estimate plus N(0, s^2) per
    coordinate with s = (2 alpha / eps) sqrt(2 log(1.25/delta)), else the data-independent
    "no reply" (Remark 1). The test adds no separate noise to gamma: the Bernoulli draw IS the
    randomized test (equivalently, gamma plus standard logistic noise of scale 2/eps compared
    with M), exactly as step 5 of Algorithm 2 writes it.

    Privacy (Theorem 2.2): gamma is 1-Lipschitz, so the test's log-odds move by at most eps/2
    between neighbours (the test is (eps/2)-DP); where gamma > 0 the local sensitivity is at most
    alpha and the noise is the classic Gaussian mechanism for sensitivity alpha at eps/2 (Dwork &
    Roth, Theorem A.1, proven there for eps/2 < 1; above that the paper's Theorem 2.2 is what
    this relies on); where gamma = 0 the release probability is at most
    sigmoid(-eps M / 2) <= exp(-eps/2) min(delta, eps). The guarantee rests on ``gamma`` being
    an alpha-SaLBo: the caller's duty (the estimators of this package prove theirs).
    Floating point: the Bernoulli compares a 2^-53-grid uniform with a double p, and the noise
    is an inverse-CDF normal on doubles (Mironov 2012): the guarantee is for the ideal
    real-valued mechanism.
    """
    values = np.asarray(estimate, dtype=np.float64)
    if values.size == 0 or not np.all(np.isfinite(values)):
        raise InvalidParameterError("estimate must be a non-empty array of finite numbers")
    if isinstance(gamma, bool) or not isinstance(gamma, int | float | np.integer | np.floating):
        raise InvalidParameterError(f"gamma ({gamma!r}) must be a number")
    g = float(gamma)
    if not (math.isfinite(g) and g >= 0.0):
        raise InvalidParameterError(f"gamma ({gamma!r}) must be finite and >= 0 (a SaLBo)")
    a = positive(alpha, name="alpha")
    eps, dlt = epsilon_delta(epsilon, delta)
    fallback = np.asarray(no_reply, dtype=np.float64)
    try:
        fallback = np.broadcast_to(fallback, values.shape).copy()
    except ValueError:
        raise InvalidParameterError(
            f"no_reply has shape {fallback.shape}, the estimate {values.shape}"
        ) from None
    if not np.all(np.isfinite(fallback)):
        raise InvalidParameterError("no_reply must be finite")

    threshold = eptr_threshold(epsilon=eps, delta=dlt)
    probability = eptr_release_probability(gamma=g, epsilon=eps, delta=dlt)
    scale = eptr_noise_scale(alpha=a, epsilon=eps, delta=dlt)
    released = bool(uniforms(rng, 1)[0] < probability)
    if released:
        # U = 0 (probability 2^-53) would give -inf: nudge it to half the smallest grid value.
        u = np.maximum(uniforms(rng, values.size), 2.0**-54)
        value = values + scale * ndtri(u).reshape(values.shape)
    else:
        value = fallback
    return EPTRRelease(
        value=value,
        released=released,
        release_probability=probability,
        noise_scale=scale,
        threshold=threshold,
        gamma=g,
    )
