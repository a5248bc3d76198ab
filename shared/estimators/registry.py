"""The estimator registry: every model a model release can publish, defined once.

The twin of ``shared.mechanisms.registry`` for model releases
(``labels_party.releasing.model_releases``). A family declares its name, the privacy kinds it is
released under ("label": pure epsilon label-DP; "eptr": (epsilon, delta)-DP by
Propose-Test-Release) with the parameters each needs, its optional parameters, the parameters the
product chooses when a request omits them (``chosen``, with ``split``: how the charge is then
shared between choosing them and the estimator), and four functions: ``design`` (every check on the
PUBLIC features and parameters, before any label is read), ``fit`` (the only step that reads
labels), ``check_body`` (the shape of a released body against its header, on both sides) and
``predict``. The service's request checks and fit, the model message's validation, the features
party's predictions and the estimators benchmark all go through :func:`get`; a new estimator is one
:func:`register`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import numpy as np

from shared.errors import InvalidParameterError
from shared.named_registry import Registry

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
    """What an estimator released (the message body's fields) and the noise it added; ``params``:
    the public parameters the fit chose itself (DP outputs, e.g. ePTR-OLS's constants), which
    join the request's in the model header and the ledger entry."""

    body: dict[str, Any]
    released: bool
    noise: str  # "discrete_laplace" | "gaussian"
    noise_scale: float
    sensitivity: float | None = None
    params: Mapping[str, Any] = field(default_factory=dict)


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
    split: Any = None  # the family's ``split`` of the exact charge, when it has one


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
    # privacy kind -> the parameters the product chooses when the request omits them
    chosen: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # (privacy, params, epsilon, delta) -> how the exact charge is split when the product
    # chooses some parameters (an object with ``public()``), or None: all to the estimator.
    # Public: reads the request only. Raises InvalidParameterError naming what to fix.
    split: Callable[[str, Mapping[str, Any], Decimal, Decimal | None], Any] | None = None
    # (privacy, params, design, lo, hi, split) -> ePTR's alpha when every constant it depends
    # on is given or chosen by a public rule (then it is public), None otherwise (the product
    # estimates some: alpha is a function of DP outputs). Lets the service refuse, before any
    # label is read, an alpha no finite noise covers, whose release would be a charged, certain
    # "no reply". Raises DesignError for a public rule that cannot run on the request.
    public_alpha: (
        Callable[[str, Mapping[str, Any], Design, float, float, Any], float | None] | None
    ) = None
    # (split, params, design) -> the split with the public constants the design fixes (e.g.
    # ePTR-NW's c0 per query from a public reference), computed once for ``public_alpha`` and
    # the fit; the split unchanged where there are none. Raises DesignError naming the field.
    bind: Callable[[Any, Mapping[str, Any], Design], Any] | None = None

    def allowed(self, privacy: str) -> set[str]:
        """Every parameter a release under ``privacy`` may give."""
        return set(self.privacies[privacy]) | set(self.optional) | set(self.chosen.get(privacy, ()))

    def split_of(
        self, privacy: str, params: Mapping[str, Any], epsilon: Decimal, delta: Decimal | None
    ) -> Any:
        """The family's split of (epsilon, delta) for this request, None if it has none."""
        return None if self.split is None else self.split(privacy, params, epsilon, delta)

    def split_for(
        self,
        privacy: str,
        params: Mapping[str, Any],
        epsilon: Decimal,
        delta: Decimal | None,
        design: Design,
    ) -> Any:
        """:meth:`split_of` bound to ``design`` (``bind``): what the alpha check and the fit of
        one release share."""
        split = self.split_of(privacy, params, epsilon, delta)
        return split if self.bind is None else self.bind(split, params, design)


def _privacy_kinds(family: EstimatorFamily) -> None:
    if not family.privacies or set(family.privacies) - set(PRIVACY_KINDS):
        raise InvalidParameterError(
            f"estimator {family.name!r}: privacy kinds must be among {PRIVACY_KINDS}"
        )


_REGISTRY: Registry[EstimatorFamily] = Registry("estimator", check=_privacy_kinds)
# The registry's verbs (``shared.estimators.families`` registers the product's three).
register = _REGISTRY.register
unregister = _REGISTRY.unregister
names = _REGISTRY.names
families = _REGISTRY.families
get = _REGISTRY.get
