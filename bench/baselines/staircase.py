"""The staircase mechanisms (continuous and discrete) on clipped labels.

Implements Geng & Viswanath, "The Optimal Noise-Adding Mechanism in Differential Privacy"
(IEEE Trans. Inf. Theory 2016), as defined in Ghazi et al. 2022 (RR-on-Bins paper), Appendix D,
Definitions 24 (discrete, pmf (15)) and 25 (continuous, density (16)), with sensitivity
D = hi - lo and b = e^-epsilon. The continuous step parameter defaults to the optimal gamma for
the l1 cost, gamma* = 1 / (1 + e^(epsilon/2)) (Geng & Viswanath, Theorem 4); ``cost="l2"`` takes
the variance-minimising gamma instead. The discrete r (1 <= r <= D) minimises the chosen cost
exactly over all D candidates (closed-form moments, vectorised). With ``clip_output=True`` the
output is clipped to [lo, hi] (Appendix F), which is post-processing.

Privacy: the noise law is symmetric and non-increasing in |x|, and h(x + D) = b h(x) for
x >= 0 (one period further out is exactly a factor e^-epsilon lower), so for any shift
|y - y'| <= D the density (or pmf) ratio is at most e^epsilon; clipped labels are at most D
apart, and clipping the output is post-processing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, get_args

import numpy as np
from scipy.optimize import minimize_scalar

from bench.baselines._common import (
    AdditiveNoise,
    ClippedOutput,
    check_bool,
    check_choice,
    check_domain,
    check_eps,
    clipped_labels,
    exponential_draws,
    finite_float,
    signs,
    uniforms,
)
from shared.errors import InvalidParameterError
from shared.rng import Rng

Cost = Literal["l1", "l2"]
COSTS: tuple[str, ...] = get_args(Cost)


def _geometric_sums(b: float) -> tuple[float, float, float]:
    """sum_k b^k, sum_k k b^k, sum_k k^2 b^k over k >= 0."""
    one_minus_b = 1.0 - b
    return (
        1.0 / one_minus_b,
        b / one_minus_b**2,
        b * (1.0 + b) / one_minus_b**3,
    )


def _periodic_moment(
    *,
    height: np.ndarray | float,
    b: float,
    period: float,
    inner: tuple[Any, Any, Any],
    outer: tuple[Any, Any, Any],
    power: int,
) -> np.ndarray:
    """E|X|^power for a symmetric law with h(kD + t) = height b^k (1 on inner t, b on outer t).

    ``inner`` / ``outer`` are (size, sum of t, sum of t^2) of the two parts of one period (counts
    and sums for the discrete law, lengths and integrals for the continuous one).
    """
    s0, s1, s2 = _geometric_sums(b)
    n = inner[0] + b * outer[0]
    m1 = inner[1] + b * outer[1]
    m2 = inner[2] + b * outer[2]
    if power == 1:
        one_side = n * period * s1 + m1 * s0
    else:
        one_side = n * period**2 * s2 + 2.0 * period * m1 * s1 + m2 * s0
    return 2.0 * np.asarray(height) * one_side


def staircase_moment(
    *, epsilon: float, gamma: np.ndarray | float, sensitivity: float, power: int
) -> np.ndarray:
    """E|X|^power (power 1 or 2) of the continuous staircase noise (closed form)."""
    b = math.exp(-epsilon)
    g = np.asarray(gamma, dtype=np.float64)
    d = sensitivity
    height = (1.0 - b) / (2.0 * d * (g + b * (1.0 - g)))
    cut = g * d
    inner = (cut, cut**2 / 2.0, cut**3 / 3.0)
    outer = (d - cut, (d**2 - cut**2) / 2.0, (d**3 - cut**3) / 3.0)
    return _periodic_moment(height=height, b=b, period=d, inner=inner, outer=outer, power=power)


def discrete_staircase_moment(
    *, epsilon: float, r: np.ndarray | int, sensitivity: int, power: int
) -> np.ndarray:
    """E|X|^power (power 1 or 2) of the discrete staircase noise (closed form)."""
    b = math.exp(-epsilon)
    rr = np.asarray(r, dtype=np.float64)
    d = float(sensitivity)
    height = (1.0 - b) / (2.0 * rr + 2.0 * b * (d - rr) - (1.0 - b))
    inner = (rr, rr * (rr - 1.0) / 2.0, (rr - 1.0) * rr * (2.0 * rr - 1.0) / 6.0)
    all_sum, all_sq = d * (d - 1.0) / 2.0, (d - 1.0) * d * (2.0 * d - 1.0) / 6.0
    outer = (d - rr, all_sum - inner[1], all_sq - inner[2])
    return _periodic_moment(height=height, b=b, period=d, inner=inner, outer=outer, power=power)


def staircase_gamma(epsilon: float, *, cost: Cost = "l1") -> float:
    """Geng & Viswanath's optimal gamma: 1 / (1 + e^(eps/2)) for l1; the numeric optimum for l2."""
    eps = check_eps(epsilon)
    check_choice(cost, name="cost", choices=COSTS)
    if cost == "l1":
        return 1.0 / (1.0 + math.exp(eps / 2.0)) if eps < 1400 else 0.0
    result = minimize_scalar(
        lambda g: float(staircase_moment(epsilon=eps, gamma=g, sensitivity=1.0, power=2)),
        bounds=(0.0, 1.0),
        method="bounded",
        options={"xatol": 1e-12},
    )
    return float(result.x)


def discrete_staircase_r(epsilon: float, *, sensitivity: int, cost: Cost = "l1") -> int:
    """The r in 1..sensitivity minimising E|X| (l1) or E X^2 (l2) of the discrete staircase."""
    eps = check_eps(epsilon)
    check_choice(cost, name="cost", choices=COSTS)
    candidates = np.arange(1, int(sensitivity) + 1)
    moments = discrete_staircase_moment(
        epsilon=eps, r=candidates, sensitivity=int(sensitivity), power=1 if cost == "l1" else 2
    )
    return int(candidates[int(np.argmin(moments))])


def _too_large(epsilon: object) -> InvalidParameterError:
    return InvalidParameterError(f"epsilon ({epsilon!r}) is too large for staircase")


@dataclass(frozen=True, kw_only=True)
class _Staircases(ClippedOutput):
    """What both staircase mechanisms take besides the step width (``STEP``: its field)."""

    epsilon: float
    lo: float
    hi: float
    cost: Cost = "l1"  # the loss the step width is optimised for
    clip_output: bool = True

    pure_dp: ClassVar[bool] = True
    STEP: ClassVar[str]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.PUBLIC = ("epsilon", "lo", "hi", cls.STEP, "cost", "clip_output")

    def _check_shared(self, *, lo: float, hi: float) -> float:
        """Check epsilon, cost and clip_output; store them with the checked bounds; epsilon."""
        eps = check_eps(self.epsilon)
        if math.exp(-eps) == 0.0:
            raise _too_large(self.epsilon)
        check_choice(self.cost, name="cost", choices=COSTS)
        object.__setattr__(self, "epsilon", eps)
        object.__setattr__(self, "lo", lo)
        object.__setattr__(self, "hi", hi)
        object.__setattr__(self, "clip_output", check_bool(self.clip_output, name="clip_output"))
        return eps

    @property
    def sensitivity(self) -> float:
        return self.hi - self.lo


@dataclass(frozen=True, kw_only=True)
class Staircase(_Staircases, AdditiveNoise):
    """y~ = clip(y) + continuous staircase noise (sensitivity hi - lo), optionally clipped."""

    gamma: float | None = None

    MECHANISM = "staircase"
    STEP = "gamma"

    def __post_init__(self) -> None:
        domain = check_domain(self.lo, self.hi)
        eps = self._check_shared(lo=domain.lo, hi=domain.hi)
        if self.gamma is None:
            gamma = staircase_gamma(eps, cost=self.cost)
        else:
            gamma = finite_float(self.gamma, name="gamma")
            if not 0.0 < gamma < 1.0:
                raise InvalidParameterError(f"gamma ({self.gamma!r}) must be in (0, 1)")
        if not 0.0 < gamma < 1.0:
            raise _too_large(self.epsilon)
        object.__setattr__(self, "gamma", gamma)

    @property
    def _height(self) -> float:
        """a(gamma), the density on the central step."""
        b, g = math.exp(-self.epsilon), float(self.gamma)  # type: ignore[arg-type]
        return (1.0 - b) / (2.0 * self.sensitivity * (g + b * (1.0 - g)))

    def noise_density(self, x: np.ndarray | float) -> np.ndarray:
        """Density (16) of the noise at x."""
        d, g, b = self.sensitivity, float(self.gamma), math.exp(-self.epsilon)  # type: ignore[arg-type]
        ax = np.abs(np.asarray(x, dtype=np.float64))
        k = np.floor(ax / d)
        t = ax - k * d
        outer = t >= g * d
        return self._height * np.exp(-self.epsilon * k) * np.where(outer, b, 1.0)

    def noise_tail(self, s: np.ndarray | float) -> np.ndarray:
        """P(X >= s) for s >= 0."""
        d, g, b = self.sensitivity, float(self.gamma), math.exp(-self.epsilon)  # type: ignore[arg-type]
        sv = np.maximum(np.asarray(s, dtype=np.float64), 0.0)
        k = np.floor(sv / d)
        t = np.clip(sv - k * d, 0.0, d)
        bk = np.exp(-self.epsilon * k)
        inside = np.minimum(t, g * d) + b * np.maximum(t - g * d, 0.0)
        return np.maximum(bk / 2.0 - bk * self._height * inside, 0.0)

    def randomize(self, labels: np.ndarray | list[float], rng: Rng) -> np.ndarray:
        """One noisy label per label (Geng & Viswanath's sampling: period, step, offset, sign)."""
        y = clipped_labels(labels, check_domain(self.lo, self.hi))
        n = y.size
        d, g, b = self.sensitivity, float(self.gamma), math.exp(-self.epsilon)  # type: ignore[arg-type]
        period = np.floor(exponential_draws(rng, n) / self.epsilon)  # P(G >= k) = b^k
        inner = uniforms(rng, n) < g / (g + (1.0 - g) * b)
        u = uniforms(rng, n)
        offset = np.where(inner, g * u, g + (1.0 - g) * u)
        out = y + signs(rng, n) * d * (period + offset)
        return np.clip(out, self.lo, self.hi) if self.clip_output else out


def _check_integer(value: object, *, name: str) -> int:
    number = finite_float(value, name=name)
    if number != math.floor(number) or abs(number) > 2**52:
        raise InvalidParameterError(f"{name} ({value!r}) must be an integer")
    return int(number)


@dataclass(frozen=True, kw_only=True)
class DiscreteStaircase(_Staircases):
    """y~ = round(clip(y)) + discrete staircase noise (sensitivity hi - lo), optionally clipped.

    For integer labels with integer bounds; other labels are clipped and rounded to the nearest
    integer first (a fixed public map).
    """

    r: int | None = None

    MECHANISM = "discrete_staircase"
    STEP = "r"

    def __post_init__(self) -> None:
        lo = _check_integer(self.lo, name="lo")
        hi = _check_integer(self.hi, name="hi")
        check_domain(lo, hi)
        eps = self._check_shared(lo=lo, hi=hi)
        d = hi - lo
        if self.r is None:
            r = discrete_staircase_r(eps, sensitivity=d, cost=self.cost)
        else:
            if isinstance(self.r, bool) or not isinstance(self.r, int | np.integer):
                raise InvalidParameterError(f"r ({self.r!r}) must be an integer")
            r = int(self.r)
            if not 1 <= r <= d:
                raise InvalidParameterError(f"r ({self.r!r}) must be in [1, {d}]")
        object.__setattr__(self, "r", r)

    @property
    def _height(self) -> float:
        """a(r), the probability of each value on the central step."""
        b, d, r = math.exp(-self.epsilon), self.sensitivity, int(self.r)  # type: ignore[arg-type]
        return (1.0 - b) / (2.0 * r + 2.0 * b * (d - r) - (1.0 - b))

    def _integer_labels(self, labels: np.ndarray | list[float]) -> np.ndarray:
        return np.rint(clipped_labels(labels, check_domain(self.lo, self.hi)))

    def noise_pmf(self, x: np.ndarray | float) -> np.ndarray:
        """pmf (15) of the noise at x (0 off the integers)."""
        d, r, b = self.sensitivity, int(self.r), math.exp(-self.epsilon)  # type: ignore[arg-type]
        xv = np.asarray(x, dtype=np.float64)
        ax = np.abs(xv)
        k = np.floor(ax / d)
        t = ax - k * d
        value = self._height * np.exp(-self.epsilon * k) * np.where(t >= r, b, 1.0)
        return np.where(xv == np.rint(xv), value, 0.0)

    def noise_tail(self, s: np.ndarray | float) -> np.ndarray:
        """P(X >= s) for integer s >= 0."""
        d, r, b = self.sensitivity, int(self.r), math.exp(-self.epsilon)  # type: ignore[arg-type]
        sv = np.maximum(np.asarray(s, dtype=np.float64), 0.0)
        k = np.floor(sv / d)
        t = sv - k * d
        bk = np.exp(-self.epsilon * k)
        a = self._height
        inside = np.minimum(t, r) + b * np.maximum(t - r, 0.0)
        return np.maximum(bk * (1.0 + a) / 2.0 - bk * a * inside, 0.0)

    def randomize(self, labels: np.ndarray | list[float], rng: Rng) -> np.ndarray:
        """One noisy integer label per label (as float64)."""
        y = self._integer_labels(labels)
        n = y.size
        d, r, b = self.sensitivity, int(self.r), math.exp(-self.epsilon)  # type: ignore[arg-type]
        magnitude = np.empty(n)
        sign = np.empty(n)
        pending = np.arange(n)
        while pending.size:
            m = pending.size
            period = np.floor(exponential_draws(rng, m) / self.epsilon)
            inner = uniforms(rng, m) < r / (r + b * (d - r))
            u = uniforms(rng, m)
            offset = np.where(inner, np.floor(u * r), r + np.floor(u * (d - r)))
            offset = np.where(inner, np.minimum(offset, r - 1), np.minimum(offset, d - 1))
            magnitude[pending] = period * d + offset
            sign[pending] = signs(rng, m)
            # 0 would be drawn with both signs (twice its weight): reject "-0" and redraw.
            pending = pending[(magnitude[pending] == 0.0) & (sign[pending] < 0.0)]
        out = y + sign * magnitude
        return np.clip(out, self.lo, self.hi) if self.clip_output else out

    def pmf(self, y_tilde: np.ndarray | float, y: np.ndarray | float) -> np.ndarray:
        """P(y~ = y_tilde | y), including the clipping atoms at lo and hi."""
        yt = np.asarray(y_tilde, dtype=np.float64)
        yc = np.rint(np.clip(np.asarray(y, dtype=np.float64), self.lo, self.hi))
        prob = self.noise_pmf(yt - yc)
        if self.clip_output:
            prob = np.where((yt > self.lo) & (yt < self.hi), prob, 0.0)
            prob = np.where(yt == self.lo, self.noise_tail(yc - self.lo), prob)
            prob = np.where(yt == self.hi, self.noise_tail(self.hi - yc), prob)
        return prob
