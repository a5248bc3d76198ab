"""A toy label mechanism in ONE module: plain randomized response on a public grid.

It exists to show (and test) that adding a mechanism touches one module plus its registration:
``register()`` makes it releasable, pullable and debiasable through both services.

Mechanism: the label is rounded to the nearest of ``points`` evenly spaced public values in
[lo, hi]; the output is that value with probability K / D and each other value with O / D
(``rr_on_bins.response_weights``: exact integer odds, K / O <= e^epsilon), drawn with one
uniform integer. Privacy: any two labels give any output probabilities in {K, O} / D, whose
ratio is at most e^epsilon, for ANY labels: epsilon-label-DP.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from shared.domain import check_epsilon, check_labels
from shared.errors import InvalidParameterError
from shared.mechanisms import registry
from shared.mechanisms.histogram import Prior
from shared.mechanisms.rr_on_bins import response_weights
from shared.rng import Rng
from shared.selection import quadrature

NAME = "grid_rr"
DEFAULT_POINTS = 5


@dataclass(frozen=True, kw_only=True)
class GridRR:
    """Randomized response over ``points`` public values of [lo, hi]."""

    lo: float
    hi: float
    points: int
    epsilon: float

    def __post_init__(self) -> None:
        check_epsilon(self.epsilon)
        if not (self.lo < self.hi and 2 <= self.points <= 1000):
            raise InvalidParameterError("grid_rr needs lo < hi and 2 <= points <= 1000")

    @property
    def values(self) -> np.ndarray:
        return np.linspace(self.lo, self.hi, self.points)

    def _weights(self) -> tuple[int, int, int]:
        return response_weights(self.points, self.epsilon)

    def _index(self, y: np.ndarray) -> np.ndarray:
        step = (self.hi - self.lo) / (self.points - 1)
        raw = np.rint((np.clip(y, self.lo, self.hi) - self.lo) / step)
        return raw.astype(np.int64)

    def randomize(self, labels: np.ndarray, rng: Rng) -> np.ndarray:
        y = check_labels(labels)
        index = self._index(y)
        keep, other, total = self._weights()
        draw = np.asarray(rng.integers(0, total, size=y.size), dtype=np.int64)
        shift = 1 + np.maximum(draw - keep, 0) // other  # 1..points-1 steps to another value
        out = np.where(draw < keep, index, (index + shift) % self.points)
        return self.values[out]

    def output_probability(self, outputs: np.ndarray, y: np.ndarray) -> np.ndarray:
        keep, other, total = self._weights()
        values = np.asarray(outputs, dtype=np.float64)
        slot = np.clip(np.searchsorted(self.values, values), 0, self.points - 1)
        valid = self.values[slot] == values
        kept = slot == self._index(np.asarray(y, dtype=np.float64))
        return np.where(valid, np.where(kept, keep, other) / total, 0.0)

    def conditional_moments(self, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        keep, other, total = self._weights()
        v = self.values
        chosen = v[self._index(np.asarray(y, dtype=np.float64))]
        p_keep, p_other = keep / total, other / total
        mean = p_other * v.sum() + (p_keep - p_other) * chosen
        second = p_other * float(np.dot(v, v)) + (p_keep - p_other) * chosen**2
        return mean, np.maximum(second - mean**2, 0.0)

    def breakpoints(self) -> np.ndarray:
        v = self.values
        return (v[:-1] + v[1:]) / 2.0

    def affine_expectation(self) -> tuple[float, float]:
        keep, other, total = self._weights()
        return (keep - other) / total, other / total * float(self.values.sum())

    def expected_squared_error(self, prior: Prior) -> float:
        y, w = quadrature(prior, self.breakpoints())
        mean, var = self.conditional_moments(y)
        return float(np.dot(w, var + (mean - y) ** 2))

    def public_params(self) -> dict[str, Any]:
        return {"lo": self.lo, "hi": self.hi, "points": self.points, "epsilon": self.epsilon}

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> GridRR:
        return cls(**{key: params[key] for key in ("lo", "hi", "points", "epsilon")})


def build(prior: Prior, *, epsilon: float) -> GridRR:
    """The grid spans the prior's public domain."""
    return GridRR(lo=prior.lo, hi=prior.hi, points=DEFAULT_POINTS, epsilon=epsilon)


def register() -> None:
    """Make ``grid_rr`` a served mechanism (not one ``auto`` compares)."""
    registry.register(
        registry.MechanismFamily(
            name=NAME,
            mechanism_type=GridRR,
            options=frozenset(),
            build=build,
            candidates=lambda prior, *, epsilon: [build(prior, epsilon=epsilon)],
            from_params=GridRR.from_params,
            in_auto=False,
        )
    )
