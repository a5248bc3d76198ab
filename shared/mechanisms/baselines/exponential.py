"""The exponential mechanism on [lo, hi] with score -|y~ - y| (a truncated Laplace).

Implements McSherry & Talwar 2007 as used in Ghazi et al. 2022 (RR-on-Bins paper), Appendix D,
Definition 26, and Appendix F: the output density on [lo, hi] is

    f(y~ | y) = exp(-c |y~ - y|) / Z(y),   c = epsilon / (2 (hi - lo)),
    Z(y) = (2 - exp(-c (y - lo)) - exp(-c (hi - y))) / c,

sampled, as in the paper, by rejection: draw Laplace noise of scale 2 (hi - lo) / epsilon around
the clipped label and redraw until it lands in [lo, hi] (``sampler="inverse_cdf"`` draws the same
law by inverting its CDF, in one pass: faster at small epsilon, where acceptance is ~epsilon/4).

Privacy: for clipped labels |y - y'| <= hi - lo, so the numerators differ by a factor at most
exp(c (hi - lo)) = e^(epsilon/2), and so do the normalisers Z(y), Z(y') (integrals of the same
bound): the density ratio is at most e^epsilon. The factor 2 in the scale pays for Z(y).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np

from shared.errors import InvalidParameterError
from shared.mechanisms.baselines._common import (
    check_choice,
    check_domain,
    check_eps,
    clipped_labels,
    exponential_draws,
    signs,
    uniforms,
)
from shared.rng import Rng

SAMPLERS: tuple[str, ...] = ("rejection", "inverse_cdf")
# Below this worst-case acceptance rate the rejection sampler would take too many rounds.
MIN_ACCEPTANCE = 1e-4


@dataclass(frozen=True, kw_only=True)
class ExponentialMechanism:
    """Output density proportional to exp(-epsilon |y~ - y| / (2 (hi - lo))) on [lo, hi]."""

    epsilon: float
    lo: float
    hi: float
    sampler: Literal["rejection", "inverse_cdf"] = "rejection"

    pure_dp: ClassVar[bool] = True

    def __post_init__(self) -> None:
        domain = check_domain(self.lo, self.hi)
        eps = check_eps(self.epsilon)
        check_choice(self.sampler, name="sampler", choices=SAMPLERS)
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
        """c = epsilon / (2 (hi - lo)): the Laplace scale is 1 / c = 2 (hi - lo) / epsilon."""
        return self.epsilon / (2.0 * (self.hi - self.lo))

    @property
    def min_acceptance(self) -> float:
        """Worst-case (label at a bound) acceptance rate of the rejection sampler."""
        return -0.5 * math.expm1(-self.epsilon / 2.0)

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

    def public_params(self) -> dict[str, Any]:
        return {
            "mechanism": "exponential",
            "epsilon": self.epsilon,
            "lo": self.lo,
            "hi": self.hi,
            "sampler": self.sampler,
        }
