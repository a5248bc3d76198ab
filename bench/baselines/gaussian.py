"""The Gaussian mechanism on clipped labels: (epsilon, delta)-DP, NOT pure epsilon-DP.

Implements the analytic Gaussian mechanism of Balle & Wang, "Improving the Gaussian Mechanism for
Differential Privacy: Analytical Calibration and Optimal Denoising" (ICML 2018), Theorem 8: for
sensitivity D = hi - lo, y + N(0, sigma^2) is (epsilon, delta)-DP iff

    Phi(D / (2 sigma) - epsilon sigma / D) - e^epsilon Phi(-D / (2 sigma) - epsilon sigma / D)
        <= delta,

and we take the smallest such sigma (bisection, then rounded up until the condition holds in
floating point). ``calibration="classic"`` uses sigma = D sqrt(2 ln(1.25 / delta)) / epsilon
(Dwork & Roth 2014, Theorem A.1; valid only for epsilon < 1, and looser). The output may be
clipped to [lo, hi] afterwards (RR-on-Bins paper, Appendix F), which is post-processing.

Privacy: the left-hand side above is the exact hockey-stick divergence between the output laws
of two labels at distance D; nearer labels give a smaller divergence, and clipped labels are at
most D apart. There is no pure epsilon guarantee at any sigma: the density ratio is unbounded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar, Literal

import numpy as np
from scipy.optimize import brentq
from scipy.special import log_ndtr, ndtr, ndtri

from bench.baselines._common import (
    AdditiveNoise,
    check_bool,
    check_choice,
    check_domain,
    check_eps,
    clipped_labels,
    finite_float,
    uniforms,
)
from shared.errors import InvalidParameterError
from shared.rng import Rng

CALIBRATIONS: tuple[str, ...] = ("analytic", "classic")


def gaussian_delta(*, sigma: float, epsilon: float, sensitivity: float) -> float:
    """The smallest delta for which N(0, sigma^2) noise is (epsilon, delta)-DP (Balle & Wang).

    0 <= result <= 1. ``sensitivity = 0`` gives 0 (identical laws).
    """
    if sensitivity <= 0.0:
        return 0.0
    a = sensitivity / (2.0 * sigma)
    c = epsilon * sigma / sensitivity
    # e^eps Phi(x) = exp(eps + log Phi(x)) avoids overflowing e^eps at large epsilon.
    value = float(ndtr(a - c) - math.exp(epsilon + float(log_ndtr(-a - c))))
    return max(value, 0.0)


def analytic_gaussian_sigma(*, epsilon: float, delta: float, sensitivity: float) -> float:
    """Smallest sigma with gaussian_delta(sigma) <= delta (Balle & Wang 2018, Algorithm 1)."""

    def excess(log_sigma: float) -> float:
        sigma = math.exp(log_sigma)
        return gaussian_delta(sigma=sigma, epsilon=epsilon, sensitivity=sensitivity) - delta

    lo_log = hi_log = math.log(sensitivity)
    while excess(lo_log) <= 0.0:  # the divergence decreases in sigma: bracket the root
        lo_log -= 1.0
    while excess(hi_log) > 0.0:
        hi_log += 1.0
    sigma = math.exp(brentq(excess, lo_log, hi_log, xtol=1e-15, rtol=4 * np.finfo(float).eps))
    while gaussian_delta(sigma=sigma, epsilon=epsilon, sensitivity=sensitivity) > delta:
        sigma *= 1.0 + 1e-12  # round up: the guarantee must hold in floating point too
    return sigma


@dataclass(frozen=True, kw_only=True)
class Gaussian(AdditiveNoise):
    """y~ = clip(y) + N(0, sigma^2), optionally clipped to [lo, hi]: (epsilon, delta)-DP.

    NOT pure epsilon-DP (``pure_dp`` is False): only for the benchmarks' comparisons.
    """

    epsilon: float
    delta: float
    lo: float
    hi: float
    clip_output: bool = True
    calibration: Literal["analytic", "classic"] = "analytic"
    sigma: float = field(init=False)

    pure_dp: ClassVar[bool] = False
    MECHANISM = "gaussian"
    PUBLIC = ("epsilon", "delta", "pure_dp", "lo", "hi", "clip_output", "calibration", "sigma")

    def __post_init__(self) -> None:
        domain = check_domain(self.lo, self.hi)
        eps = check_eps(self.epsilon)
        delta = finite_float(self.delta, name="delta")
        if not 0.0 < delta < 1.0:
            raise InvalidParameterError(f"delta ({self.delta!r}) must be in (0, 1)")
        calibration = check_choice(self.calibration, name="calibration", choices=CALIBRATIONS)
        sensitivity = domain.width
        if calibration == "classic":
            if eps >= 1.0:
                raise InvalidParameterError(
                    f"epsilon ({self.epsilon!r}) must be < 1 for the classic Gaussian calibration"
                )
            sigma = sensitivity * math.sqrt(2.0 * math.log(1.25 / delta)) / eps
        else:
            sigma = analytic_gaussian_sigma(epsilon=eps, delta=delta, sensitivity=sensitivity)
        object.__setattr__(self, "epsilon", eps)
        object.__setattr__(self, "delta", delta)
        object.__setattr__(self, "lo", domain.lo)
        object.__setattr__(self, "hi", domain.hi)
        object.__setattr__(self, "clip_output", check_bool(self.clip_output, name="clip_output"))
        object.__setattr__(self, "sigma", sigma)

    def noise_density(self, x: np.ndarray | float) -> np.ndarray:
        z = np.asarray(x, dtype=np.float64) / self.sigma
        return np.exp(-0.5 * z**2) / (self.sigma * math.sqrt(2.0 * math.pi))

    def noise_tail(self, t: np.ndarray | float) -> np.ndarray:
        return ndtr(-np.asarray(t, dtype=np.float64) / self.sigma)

    def randomize(self, labels: np.ndarray | list[float], rng: Rng) -> np.ndarray:
        """One noisy label per label (inverse-CDF normal noise from rng.random)."""
        y = clipped_labels(labels, check_domain(self.lo, self.hi))
        # U = 0 (probability 2^-53) would give -inf: nudge it to the smallest grid value / 2.
        u = np.maximum(uniforms(rng, y.size), 2.0**-54)
        out = y + self.sigma * ndtri(u)
        return np.clip(out, self.lo, self.hi) if self.clip_output else out
