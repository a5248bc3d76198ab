"""The exponential mechanism on [lo, hi] with score -|y~ - y| (a truncated Laplace).

Implements McSherry & Talwar 2007 as used in Ghazi et al. 2022 (RR-on-Bins paper), Appendix D,
Definition 26, and Appendix F: the output density on [lo, hi] is

    f(y~ | y) = exp(-c |y~ - y|) / Z(y),   Z(y) = (2 - exp(-c (y - lo)) - exp(-c (hi - y))) / c,

with c = epsilon / (2 (hi - lo)) (``calibration="paper"``: Laplace scale 2 (hi - lo) / epsilon,
the generic exponential-mechanism bound) or c = epsilon / (hi - lo) (``"tight"``, see below).
It is sampled, as in the paper, by rejection: Laplace noise of scale 1 / c around the clipped
label, redrawn until it lands in [lo, hi] (``sampler="inverse_cdf"`` draws the same law by
inverting its CDF in one pass: faster at small epsilon, where acceptance is about c (hi - lo) / 2).

Privacy: the log density ratio of labels y < y' (clipped, so in [lo, hi]) at output t is
c (|t - y'| - |t - y|) + log Z(y') - log Z(y). The first term is at most c (y' - y), reached at
every t <= y. log Z is c-Lipschitz (|Z'| <= c Z), which gives the generic bound 2 c (hi - lo),
hence the paper's factor 2. But the sum is tighter: with t <= y, its derivative in y' is
c + Z'(y') / Z(y') >= 0 and in y is -c - Z'(y) / Z(y) <= 0, so it is largest at y = lo,
y' = hi, where Z(lo) = Z(hi) and it equals c (hi - lo) exactly (y > y' is the mirror image).
So the density ratio never exceeds exp(c (hi - lo)): the paper's calibration is in fact
(epsilon / 2)-DP (twice the noise it needs), and ``"tight"`` is epsilon-DP with the ratio
e^epsilon attained. The DP tests check both values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np

from bench.baselines._common import (
    PublicParams,
    check_choice,
    check_domain,
    check_eps,
    clipped_labels,
    exponential_draws,
    signs,
    uniforms,
)
from shared.errors import InvalidParameterError
from shared.rng import Rng

SAMPLERS: tuple[str, ...] = ("rejection", "inverse_cdf")
CALIBRATIONS: tuple[str, ...] = ("paper", "tight")
# Below this worst-case acceptance rate the rejection sampler would take too many rounds.
MIN_ACCEPTANCE = 1e-4


@dataclass(frozen=True, kw_only=True)
class ExponentialMechanism(PublicParams):
    """Output density proportional to exp(-c |y~ - y|) on [lo, hi] (c: see the module docstring).

    ``calibration="paper"`` (default, as benchmarked in the RR-on-Bins paper) uses
    c = epsilon / (2 (hi - lo)) and is really (epsilon / 2)-DP; ``"tight"`` uses
    c = epsilon / (hi - lo) and is exactly epsilon-DP.
    """

    epsilon: float
    lo: float
    hi: float
    sampler: Literal["rejection", "inverse_cdf"] = "rejection"
    calibration: Literal["paper", "tight"] = "paper"

    pure_dp: ClassVar[bool] = True
    MECHANISM = "exponential"
    PUBLIC = ("epsilon", "lo", "hi", "sampler", "calibration", "effective_epsilon")

    def __post_init__(self) -> None:
        domain = check_domain(self.lo, self.hi)
        eps = check_eps(self.epsilon)
        check_choice(self.sampler, name="sampler", choices=SAMPLERS)
        check_choice(self.calibration, name="calibration", choices=CALIBRATIONS)
        object.__setattr__(self, "epsilon", eps)
        object.__setattr__(self, "lo", domain.lo)
        object.__setattr__(self, "hi", domain.hi)
        if self.sampler == "rejection" and self.min_acceptance < MIN_ACCEPTANCE:
            raise InvalidParameterError(
                f"epsilon ({self.epsilon!r}) is too small for rejection sampling "
                f"(acceptance {self.min_acceptance:.2g}); use sampler='inverse_cdf'"
            )

    @property
    def rate(self) -> float:
        """c: epsilon / (2 (hi - lo)) ("paper") or epsilon / (hi - lo) ("tight"); scale 1 / c."""
        factor = 2.0 if self.calibration == "paper" else 1.0
        return self.epsilon / (factor * (self.hi - self.lo))

    @property
    def effective_epsilon(self) -> float:
        """The exact privacy of this density: c (hi - lo), the largest log density ratio."""
        return self.rate * (self.hi - self.lo)

    @property
    def min_acceptance(self) -> float:
        """Worst-case (label at a bound) acceptance rate of the rejection sampler."""
        return -0.5 * math.expm1(-self.effective_epsilon)

    @property
    def output_range(self) -> tuple[float, float]:
        return (self.lo, self.hi)

    def normaliser(self, y: np.ndarray | float) -> np.ndarray:
        """Z(y) = integral over [lo, hi] of exp(-c |t - y|) dt, for the clipped label."""
        yc = np.clip(np.asarray(y, dtype=np.float64), self.lo, self.hi)
        c = self.rate
        return (-np.expm1(-c * (yc - self.lo)) - np.expm1(-c * (self.hi - yc))) / c

    def density(self, y_tilde: np.ndarray | float, y: np.ndarray | float) -> np.ndarray:
        """f(y~ | y), including the label-dependent normaliser; 0 outside [lo, hi]."""
        yt = np.asarray(y_tilde, dtype=np.float64)
        yc = np.clip(np.asarray(y, dtype=np.float64), self.lo, self.hi)
        dens = np.exp(-self.rate * np.abs(yt - yc)) / self.normaliser(yc)
        return np.where((yt >= self.lo) & (yt <= self.hi), dens, 0.0)

    def atoms(self, y: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:
        """No point masses: (empty values, shape (n, 0))."""
        n = np.atleast_1d(np.asarray(y)).size
        return np.empty(0), np.empty((n, 0))

    def randomize(self, labels: np.ndarray | list[float], rng: Rng) -> np.ndarray:
        """One output per label, by rejection (default) or inverse-CDF sampling."""
        y = clipped_labels(labels, check_domain(self.lo, self.hi))
        if self.sampler == "inverse_cdf":
            return self._inverse_cdf(y, uniforms(rng, y.size))
        out = np.empty(y.size)
        pending = np.arange(y.size)
        scale = 1.0 / self.rate
        while pending.size:
            m = pending.size
            draw = y[pending] + scale * exponential_draws(rng, m) * signs(rng, m)
            accepted = (draw >= self.lo) & (draw <= self.hi)
            out[pending[accepted]] = draw[accepted]
            pending = pending[~accepted]
        return out

    def _inverse_cdf(self, y: np.ndarray, u: np.ndarray) -> np.ndarray:
        c = self.rate
        left = -np.expm1(-c * (y - self.lo)) / c  # mass of [lo, y] before normalising
        right = -np.expm1(-c * (self.hi - y)) / c
        w = u * (left + right)
        # On [lo, y]: F(t) = (e^{-c (y - t)} - e^{-c (y - lo)}) / c; on [y, hi]: left + (1 -
        # e^{-c (t - y)}) / c. Solve F(t) = w on the side w falls in.
        below = y + np.log(np.maximum(c * w + np.exp(-c * (y - self.lo)), 1e-300)) / c
        above = y - np.log1p(-np.minimum(c * (w - left), 1.0 - 1e-16)) / c
        return np.clip(np.where(w < left, below, above), self.lo, self.hi)

    def affine_expectation(self) -> tuple[float, float] | None:
        """None: E[y~ | y] is not affine in y (truncation pulls it towards the middle)."""
        return None
