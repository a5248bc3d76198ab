"""Public label bounds and the validation every mechanism applies to its inputs."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from shared.errors import InvalidParameterError


def check_epsilon(epsilon: float, *, name: str = "epsilon", allow_inf: bool = False) -> float:
    """Return ``epsilon`` as a float if it is a usable privacy parameter, else raise."""
    if isinstance(epsilon, bool) or not isinstance(epsilon, int | float | np.integer | np.floating):
        raise InvalidParameterError(f"{name} ({epsilon!r}) must be a number")
    value = float(epsilon)
    if math.isnan(value) or value <= 0.0:
        raise InvalidParameterError(f"{name} ({epsilon!r}) must be > 0")
    if math.isinf(value) and not allow_inf:
        raise InvalidParameterError(f"{name} ({epsilon!r}) must be finite")
    return value


def check_labels(labels: np.ndarray | list[float], *, allow_empty: bool = False) -> np.ndarray:
    """Labels as a 1-D float64 array; NaN, inf and empty input are refused."""
    try:
        array = np.asarray(labels, dtype=np.float64)
    except (TypeError, ValueError):
        raise InvalidParameterError("labels must be numbers") from None
    if array.ndim != 1:
        raise InvalidParameterError(f"labels must be one-dimensional, got shape {array.shape}")
    if array.size == 0 and not allow_empty:
        raise InvalidParameterError("labels must not be empty")
    if not np.all(np.isfinite(array)):
        bad = int(np.count_nonzero(~np.isfinite(array)))
        raise InvalidParameterError(f"labels must be finite: {bad} value(s) are NaN or inf")
    return array


# Public label bounds stay where float64 arithmetic on labels (squares, sums over millions of
# examples, the mechanisms' expected errors) cannot overflow, and below 2^53 where every
# integer amount is exact.
MAX_LABEL_MAGNITUDE = 1e15


@dataclass(frozen=True, kw_only=True, slots=True)
class LabelDomain:
    """Public bounds ``[lo, hi]`` fixed by an operator, never computed from the labels, each
    within +-:data:`MAX_LABEL_MAGNITUDE` (every door: the service's schema, the engine, the
    estimators and the Spark job build one)."""

    lo: float
    hi: float

    def __post_init__(self) -> None:
        lo, hi = float(self.lo), float(self.hi)
        if not (math.isfinite(lo) and math.isfinite(hi)):
            raise InvalidParameterError(f"label bounds must be finite, got [{self.lo}, {self.hi}]")
        if lo >= hi:
            raise InvalidParameterError(f"lo ({self.lo}) must be < hi ({self.hi})")
        if not math.isfinite(hi - lo):
            raise InvalidParameterError(
                f"label bounds [{self.lo}, {self.hi}] are too far apart: hi - lo overflows"
            )
        if max(abs(lo), abs(hi)) > MAX_LABEL_MAGNITUDE:
            raise InvalidParameterError(
                f"label bounds [{self.lo}, {self.hi}] must lie within +-{MAX_LABEL_MAGNITUDE:g}"
            )
        object.__setattr__(self, "lo", lo)
        object.__setattr__(self, "hi", hi)

    @property
    def width(self) -> float:
        return self.hi - self.lo

    @property
    def middle(self) -> float:
        """The middle of the bounds: lo + (hi - lo) / 2, which (lo + hi) / 2 is not always."""
        return self.lo + 0.5 * (self.hi - self.lo)

    def clip(self, labels: np.ndarray) -> np.ndarray:
        """Labels clipped into the bounds (a fixed public map, so it costs no privacy)."""
        return np.clip(check_labels(labels, allow_empty=True), self.lo, self.hi)


def check_probabilities(probs: np.ndarray, *, name: str = "probs") -> np.ndarray:
    """``probs`` (float64, finite, >= 0, summing to 1 within 1e-9) renormalised to sum to 1."""
    if not np.all(np.isfinite(probs)) or np.any(probs < 0):
        raise InvalidParameterError(f"{name} must be finite and >= 0")
    total = float(probs.sum())
    if not math.isclose(total, 1.0, rel_tol=0.0, abs_tol=1e-9):
        raise InvalidParameterError(f"{name} must sum to 1, got {total!r}")
    return probs / total
