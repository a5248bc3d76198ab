"""Validation and sampling helpers shared by the baseline mechanisms."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from shared.domain import LabelDomain, check_epsilon, check_labels
from shared.errors import InvalidParameterError
from shared.rng import Rng

__all__ = [
    "AdditiveNoise",
    "ClippedOutput",
    "PublicParams",
    "additive_density",
    "boundary_atoms",
    "check_bool",
    "check_eps",
    "check_domain",
    "check_choice",
    "clipped_labels",
    "exponential_draws",
    "finite_float",
    "label_array",
    "signs",
    "uniforms",
]


def check_bool(value: object, *, name: str) -> bool:
    """A real ``bool`` (not 0/1 or a string, which would silently mean something else)."""
    if not isinstance(value, bool | np.bool_):
        raise InvalidParameterError(f"{name} ({value!r}) must be True or False")
    return bool(value)


def check_eps(epsilon: object) -> float:
    """A finite epsilon > 0 (baselines have no epsilon = inf mode; bools are refused)."""
    if isinstance(epsilon, bool) or not isinstance(epsilon, int | float | np.integer | np.floating):
        raise InvalidParameterError(f"epsilon ({epsilon!r}) must be a number")
    return check_epsilon(epsilon)


def check_choice(value: object, *, name: str, choices: tuple[str, ...]) -> str:
    """One of a fixed set of strings."""
    if not isinstance(value, str) or value not in choices:
        raise InvalidParameterError(f"{name} ({value!r}) must be one of {', '.join(choices)}")
    return value


def check_domain(lo: float, hi: float) -> LabelDomain:
    """Public label bounds, finite with lo < hi (numbers only: no bools, no strings)."""
    for name, value in (("lo", lo), ("hi", hi)):
        if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
            raise InvalidParameterError(f"{name} ({value!r}) must be a number")
    return LabelDomain(lo=float(lo), hi=float(hi))


def label_array(labels: np.ndarray | list[float]) -> np.ndarray:
    """Labels as a finite, non-empty 1-D float64 array; anything else is refused by name."""
    try:
        array = np.asarray(labels, dtype=np.float64)
    except (TypeError, ValueError):
        raise InvalidParameterError("labels must be numbers") from None
    return check_labels(array)


def clipped_labels(labels: np.ndarray | list[float], domain: LabelDomain) -> np.ndarray:
    """Validated labels clipped into the public bounds (a fixed public map: no privacy cost)."""
    return np.clip(label_array(labels), domain.lo, domain.hi)


def uniforms(rng: Rng, n: int) -> np.ndarray:
    """``n`` uniform doubles in [0, 1) from either kind of rng."""
    return np.asarray(rng.random(n), dtype=np.float64).reshape(n)


def exponential_draws(rng: Rng, n: int) -> np.ndarray:
    """``n`` standard exponential draws by inversion, ``-log(1 - U)``; finite since U < 1."""
    return -np.log1p(-uniforms(rng, n))


def signs(rng: Rng, n: int) -> np.ndarray:
    """``n`` fair random signs in {-1.0, +1.0}."""
    return np.where(uniforms(rng, n) < 0.5, -1.0, 1.0)


def finite_float(value: object, *, name: str) -> float:
    """A finite float."""
    if isinstance(value, bool):
        raise InvalidParameterError(f"{name} ({value!r}) must be a number")
    try:
        result = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise InvalidParameterError(f"{name} ({value!r}) must be a number") from None
    if not math.isfinite(result):
        raise InvalidParameterError(f"{name} ({value!r}) must be finite")
    return result


def additive_density(
    noise_density: Callable[[np.ndarray], np.ndarray],
    y_tilde: np.ndarray | float,
    y: np.ndarray | float,
    *,
    lo: float,
    hi: float,
    clip_output: bool,
) -> np.ndarray:
    """Continuous density of y~ = clip(y) + noise (0 outside [lo, hi] if the output is clipped)."""
    yt = np.asarray(y_tilde, dtype=np.float64)
    yc = np.clip(np.asarray(y, dtype=np.float64), lo, hi)
    dens = noise_density(yt - yc)
    if clip_output:
        dens = np.where((yt >= lo) & (yt <= hi), dens, 0.0)
    return dens


def boundary_atoms(
    noise_tail: Callable[[np.ndarray], np.ndarray],
    y: np.ndarray | float,
    *,
    lo: float,
    hi: float,
    clip_output: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """(atom values, P(y~ = atom | y) with shape (n, atoms)): [lo, hi] if clipped, else none.

    For symmetric noise with ``noise_tail(s) = P(X >= s)``, clipping clip(y) + X to [lo, hi]
    puts P(X <= lo - y) = tail(y - lo) on lo and P(X >= hi - y) = tail(hi - y) on hi.
    """
    yc = np.clip(np.atleast_1d(np.asarray(y, dtype=np.float64)), lo, hi)
    if not clip_output:
        return np.empty(0), np.empty((yc.size, 0))
    at_lo = noise_tail(yc - lo)
    at_hi = noise_tail(hi - yc)
    return np.array([lo, hi]), np.stack([at_lo, at_hi], axis=1)


def _json_safe(value: Any) -> Any:
    """Arrays as lists, priors as their dicts, the rest as is."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    to_dict = getattr(value, "to_dict", None)
    return to_dict() if to_dict is not None else value


class PublicParams:
    """``public_params()``: the ``MECHANISM`` name and the ``PUBLIC`` attributes, JSON-safe."""

    MECHANISM: ClassVar[str]
    PUBLIC: ClassVar[tuple[str, ...]]

    def public_params(self) -> dict[str, Any]:
        params = {name: _json_safe(getattr(self, name)) for name in self.PUBLIC}
        return {"mechanism": self.MECHANISM, **params}


class ClippedOutput(PublicParams):
    """A label plus symmetric noise, its output clipped to [lo, hi] when ``clip_output``.

    Unclipped, E[y~ | y] = y for labels inside the bounds and the range is the real line;
    clipped, the range is [lo, hi] and the mean is pulled towards the middle (not affine).
    """

    lo: float
    hi: float
    clip_output: bool

    @property
    def output_range(self) -> tuple[float, float]:
        return (float(self.lo), float(self.hi)) if self.clip_output else (-math.inf, math.inf)

    def affine_expectation(self) -> tuple[float, float] | None:
        """(1, 0) without output clipping (for labels inside the bounds); None when clipped."""
        return None if self.clip_output else (1.0, 0.0)


class AdditiveNoise(ClippedOutput):
    """y~ = clip(y) + continuous symmetric noise with ``noise_density`` and ``noise_tail``
    (P(X >= s)): the exact output law for the DP tests."""

    def noise_density(self, x: np.ndarray | float) -> np.ndarray:
        raise NotImplementedError

    def noise_tail(self, s: np.ndarray | float) -> np.ndarray:
        raise NotImplementedError

    def density(self, y_tilde: np.ndarray | float, y: np.ndarray | float) -> np.ndarray:
        """Density of the continuous part of the output law (0 outside [lo, hi] if clipped)."""
        return additive_density(
            self.noise_density, y_tilde, y, lo=self.lo, hi=self.hi, clip_output=self.clip_output
        )

    def atoms(self, y: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:
        """(atom values, P(y~ = atom | y) with shape (n, atoms)): [lo, hi] if clipped, else none."""
        return boundary_atoms(
            self.noise_tail, y, lo=self.lo, hi=self.hi, clip_output=self.clip_output
        )
