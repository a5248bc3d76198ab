"""Input checks shared by the estimators: each names the bad value (OpenDP style)."""

from __future__ import annotations

import math

import numpy as np

from shared.domain import check_epsilon
from shared.errors import InvalidParameterError


def positive(value: object, *, name: str) -> float:
    """A finite float > 0 (bools refused)."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise InvalidParameterError(f"{name} ({value!r}) must be a number")
    result = float(value)
    if not (math.isfinite(result) and result > 0.0):
        raise InvalidParameterError(f"{name} ({value!r}) must be finite and > 0")
    return result


def positives(**values: object) -> tuple[float, ...]:
    """Each named value as :func:`positive`, in the order given (the first bad one is named)."""
    return tuple(positive(value, name=name) for name, value in values.items())


def epsilon_delta(epsilon: object, delta: object) -> tuple[float, float]:
    """The (epsilon, delta) of an approximate-DP release: epsilon finite > 0, delta in (0, 1)."""
    return check_epsilon(epsilon), delta_in_unit_interval(delta)  # type: ignore[arg-type]


def delta_in_unit_interval(delta: object) -> float:
    """A delta strictly inside (0, 1)."""
    if isinstance(delta, bool) or not isinstance(delta, int | float | np.integer | np.floating):
        raise InvalidParameterError(f"delta ({delta!r}) must be a number")
    value = float(delta)
    if not (0.0 < value < 1.0):
        raise InvalidParameterError(f"delta ({delta!r}) must be in (0, 1)")
    return value


def features(x: object, *, name: str = "X") -> np.ndarray:
    """A 2-D finite float64 matrix with at least one row and one column."""
    try:
        array = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        raise InvalidParameterError(f"{name} must be a numeric matrix") from None
    if array.ndim != 2 or array.shape[0] < 1 or array.shape[1] < 1:
        raise InvalidParameterError(f"{name} must be a non-empty 2-D matrix, got {array.shape}")
    if not np.all(np.isfinite(array)):
        bad = int(np.count_nonzero(~np.isfinite(array)))
        raise InvalidParameterError(f"{name} must be finite: {bad} value(s) are NaN or inf")
    return array


def full_column_rank(x: np.ndarray, *, name: str = "X") -> None:
    """Refuse fewer rows than columns and a singular (or numerically singular) X^T X."""
    n, p = x.shape
    if n < p:
        raise InvalidParameterError(f"{name} has fewer rows ({n}) than columns ({p})")
    singular = np.linalg.svd(x, compute_uv=False)
    if singular[-1] <= singular[0] * max(n, p) * np.finfo(np.float64).eps:
        raise InvalidParameterError(
            f"{name}^T {name} is singular: {name} has rank < {p} (smallest singular value "
            f"{singular[-1]:.3g}, largest {singular[0]:.3g})"
        )


def labels_for(y: object, n: int, *, name: str = "y") -> np.ndarray:
    """A 1-D finite float64 vector with one value per feature row."""
    try:
        array = np.asarray(y, dtype=np.float64)
    except (TypeError, ValueError):
        raise InvalidParameterError(f"{name} must be numbers") from None
    if array.ndim != 1 or array.size != n:
        raise InvalidParameterError(f"{name} must be 1-D with {n} values, got shape {array.shape}")
    if not np.all(np.isfinite(array)):
        bad = int(np.count_nonzero(~np.isfinite(array)))
        raise InvalidParameterError(f"{name} must be finite: {bad} value(s) are NaN or inf")
    return array


def queries_for(queries: object, dim: int, *, name: str = "queries") -> np.ndarray:
    """Query points as an (m, dim) finite matrix matching the features' dimension."""
    array = features(queries, name=name)
    if array.shape[1] != dim:
        raise InvalidParameterError(
            f"{name} has dimension {array.shape[1]}, the features have {dim}"
        )
    return array


def row_norms(x: np.ndarray) -> np.ndarray:
    """The Euclidean norm of each row, computed on the row divided by its largest entry so
    that finite rows up to the largest double do not overflow midway (a norm beyond the
    largest double is inf)."""
    scale = np.max(np.abs(x), axis=1) if x.shape[1] else np.zeros(x.shape[0])
    safe = np.where(scale > 0.0, scale, 1.0)
    with np.errstate(over="ignore"):
        return safe * np.linalg.norm(x / safe[:, None], axis=1)


def project_rows(x: np.ndarray, radius: float) -> np.ndarray:
    """Pi_R(x) = R x / max(||x||, R) row by row (Shen, Tong & Wang, Section 1.4); a row whose
    norm overflows a double is sent to 0 (still inside the ball)."""
    norms = row_norms(x)[:, None]
    return x * (radius / np.maximum(norms, radius))


def project_vector(v: np.ndarray, radius: float) -> np.ndarray:
    """Pi_R(v) for one vector (its norm computed without overflow, as :func:`row_norms`)."""
    norm = float(row_norms(np.reshape(v, (1, -1)))[0])
    return v if norm <= radius else v * (radius / norm)
