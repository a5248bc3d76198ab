"""Exact epsilon-label-DP release of a public linear map of the labels: W y + Laplace noise.

Both label-DP estimators are linear in the labels once the features are public: OLS is
theta = (X^T X)^-1 X^T y and Nadaraya-Watson at query points is f = W y with W[q, i] =
K(x_q, x_i) / d(x_q). Changing label i from y_i to y_i' moves W y by W[:, i] (y_i - y_i'), so
over labels clipped to [lo, hi] the exact L1 sensitivity is max_i ||W[:, i]||_1 (hi - lo): the
bound is reached by moving the label of the maximising column from lo to hi.

Made exact (no floating-point leak, Mironov 2012), in the way :mod:`shared.mechanisms.
private_mean` is: each clipped label is rounded to one of LABEL_LEVELS + 1 public levels k_i
(y ~ lo + k_i (hi - lo) / LABEL_LEVELS); the public map W is rounded once to integers
Q = rint(W 2^s) (|Q| < 2^31); the data-dependent part T = Q k is computed in exact integer
arithmetic; integer noise Z_j ~ discrete Laplace of scale S / epsilon with
S = LABEL_LEVELS max_i ||Q[:, i]||_1 is drawn exactly (Canonne, Kamath & Steinke 2020,
Algorithm 2). One changed level moves T by Q[:, i] (k_i - k_i'), at most S in L1, so the
integer vector T + Z is exactly epsilon-label-DP; converting it to floats is post-processing.
What remains floating-point: only public computations (W itself from the public features, its
rounding to Q, and the final scaling of the released integers), none of which sees a label.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from shared.domain import LabelDomain, check_epsilon
from shared.mechanisms.discrete_laplace import sample_discrete_laplace
from shared.rng import Rng

# Labels on 2^16 + 1 public levels: rounding moves a label by at most (hi - lo) / 2^17.
LABEL_LEVELS = 2**16
# |Q| < 2^31 and levels <= 2^16: a product is < 2^47, so 2^15 of them sum below 2^62 (int64).
WEIGHT_BITS = 31
_CHUNK = 2**15
_SATURATE = 2**900


@dataclass(frozen=True, kw_only=True, slots=True)
class QuantisedMap:
    """The public integer map Q = rint(W 2^shift) standing for W (shape (m, n))."""

    weights: np.ndarray
    shift: int

    @classmethod
    def from_weights(cls, w: np.ndarray) -> QuantisedMap:
        largest = float(np.max(np.abs(w))) if w.size else 0.0
        if largest == 0.0:
            return cls(weights=np.zeros(w.shape, dtype=np.int64), shift=0)
        _, exponent = math.frexp(largest)  # largest < 2^exponent
        shift = WEIGHT_BITS - exponent
        return cls(weights=np.rint(np.ldexp(w, shift)).astype(np.int64), shift=shift)

    def column_l1(self) -> np.ndarray:
        """||Q[:, i]||_1 for every column i (exact int64: m 2^31 < 2^63 for m < 2^32)."""
        return np.abs(self.weights).sum(axis=0)

    def apply(self, levels: np.ndarray) -> list[int]:
        """T = Q k in exact integer arithmetic (int64 chunks summed as Python ints)."""
        totals = [0] * self.weights.shape[0]
        for start in range(0, levels.size, _CHUNK):
            part = self.weights[:, start : start + _CHUNK] @ levels[start : start + _CHUNK]
            totals = [t + int(v) for t, v in zip(totals, part, strict=True)]
        return totals

    def scale(self, value: float) -> float:
        return math.ldexp(value, -self.shift)


def label_levels(labels: np.ndarray, domain: LabelDomain) -> np.ndarray:
    """Clip to [lo, hi] and round to the integer level k in 0..LABEL_LEVELS (public map)."""
    clipped = np.clip(labels, domain.lo, domain.hi)
    return np.rint((clipped - domain.lo) / domain.width * LABEL_LEVELS).astype(np.int64)


@dataclass(frozen=True, kw_only=True, slots=True)
class LinearLabelRelease:
    """W y + noise, with the exact L1 sensitivity (label units) and the Laplace scale used."""

    value: np.ndarray
    sensitivity: float
    noise_scale: float


def linear_label_release(
    weights: np.ndarray,
    labels: np.ndarray,
    *,
    lo: float,
    hi: float,
    epsilon: float,
    rng: Rng,
) -> LinearLabelRelease:
    """Release W clip(y) with exact discrete Laplace noise: pure epsilon-label-DP (module doc).

    ``weights`` (m, n) must be a public function of public data; ``labels`` has n values.
    Returns values in label units: lo W 1 + (hi - lo) / LABEL_LEVELS 2^-s (T + Z).
    """
    domain = LabelDomain(lo=lo, hi=hi)
    eps = check_epsilon(epsilon)
    q = QuantisedMap.from_weights(weights)
    levels = label_levels(labels, domain)
    column_l1 = q.column_l1()
    sens_int = int(column_l1.max()) * LABEL_LEVELS
    exact = q.apply(levels)
    if sens_int > 0:
        scale = Fraction(sens_int) / Fraction(eps)
        # A fixed saturation (at tiny epsilon the noise outgrows float64): post-processing.
        exact = [
            min(max(t + sample_discrete_laplace(rng, scale), -_SATURATE), _SATURATE) for t in exact
        ]
    step = domain.width / LABEL_LEVELS
    offset = domain.lo * np.array(
        [q.scale(float(v)) for v in q.weights.sum(axis=1, dtype=np.int64)]
    )
    value = offset + step * np.array([q.scale(float(t)) for t in exact])
    sensitivity = q.scale(float(column_l1.max())) * domain.width
    return LinearLabelRelease(value=value, sensitivity=sensitivity, noise_scale=sensitivity / eps)
