"""The estimator registry: every model a model release can publish, defined once.

The twin of ``shared.mechanisms.registry`` for model releases (``labels_party.model_releases``).
A family declares its name, the privacy kinds it is released under ("label": pure epsilon
label-DP; "eptr": (epsilon, delta)-DP by Propose-Test-Release) with the parameters each needs,
its optional parameters, and four functions: ``design`` (every check on the PUBLIC features and
parameters, before any label is read), ``fit`` (the only step that reads labels), ``check_body``
(the shape of a released body against its header, on both sides) and ``predict``. The service's
request checks and fit, the model message's validation, the features party's predictions and
the estimators benchmark all go through :func:`get`; a new estimator is one :func:`register`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shared.errors import InvalidParameterError

PRIVACY_KINDS = ("label", "eptr")


class DesignError(InvalidParameterError):
    """A public check refused the request: ``field`` names what to fix."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True, kw_only=True)
class Design:
    """The public design a fit runs on: the feature matrix as fitted (an intercept column last
    when ``intercept``), the public query points of a pointwise estimator."""

    x: np.ndarray
    queries: np.ndarray | None = None
    intercept: bool = False


@dataclass(frozen=True, kw_only=True)
class Fitted:
    """What an estimator released (the message body's fields) and the noise it added."""

    body: dict[str, Any]
    released: bool
    noise: str  # "discrete_laplace" | "gaussian"
    noise_scale: float
    sensitivity: float | None = None


@dataclass(frozen=True, kw_only=True)
class FitArgs:
    """A fit's inputs besides the design and the labels: the privacy kind, the exact charges'
    floats (never above them), the public bounds and parameters, the randomness."""

    privacy: str
    epsilon: float
    delta: float | None
    lo: float
    hi: float
    params: Mapping[str, Any]
    rng: Any


@dataclass(frozen=True, kw_only=True)
class EstimatorFamily:
    """One estimator family (module docstring)."""

    name: str
    privacies: Mapping[str, tuple[str, ...]]  # privacy kind -> its required parameters
    design: Callable[[str, Mapping[str, Any], np.ndarray, list[str]], Design]
    fit: Callable[[Design, np.ndarray, FitArgs], Fitted]
    check_body: Callable[[Any, Any], None]  # (ModelHeader, ModelBody): raise IntegrityError
    predict: Callable[[Any, Any, np.ndarray], np.ndarray]  # (header, body, x) -> predictions
    optional: tuple[str, ...] = ()
    description: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)

    def allowed(self, privacy: str) -> set[str]:
        """Every parameter a release under ``privacy`` may give."""
        return set(self.privacies[privacy]) | set(self.optional)


_FAMILIES: dict[str, EstimatorFamily] = {}


def register(family: EstimatorFamily) -> EstimatorFamily:
    """Add ``family`` (a name registered twice is refused)."""
    if family.name in _FAMILIES:
        raise ValueError(f"estimator {family.name!r} is registered already")
    unknown = set(family.privacies) - set(PRIVACY_KINDS)
    if unknown or not family.privacies:
        raise ValueError(f"estimator {family.name!r}: privacy kinds must be among {PRIVACY_KINDS}")
    _FAMILIES[family.name] = family
    return family


def unregister(name: str) -> None:
    """Remove a family (tests that register a toy one)."""
    _FAMILIES.pop(name, None)


def names() -> tuple[str, ...]:
    """The registered estimator names, in registration order."""
    return tuple(_FAMILIES)


def get(name: str) -> EstimatorFamily:
    """The family ``name`` (InvalidParameterError naming the registered ones otherwise)."""
    if name not in _FAMILIES:
        raise InvalidParameterError(f"estimator ({name!r}) must be one of {', '.join(_FAMILIES)}")
    return _FAMILIES[name]
