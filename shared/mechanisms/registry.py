"""The served label mechanisms: one protocol, each family registered once, looked up by name.

Every epsilon2 randomizer the protocol can send (RPWithPrior, RR-on-Bins, and any mechanism added
later) implements :class:`LabelMechanism`; its :class:`MechanismFamily` says how to build it from
the noisy prior and how to rebuild it from the message's public parameters. The plan, the
training criterion (``shared.selection``), debiasing (``shared.debias``), the message schema and
both services go through :func:`get` and :func:`names`, never through a name string or a type
check. Adding a mechanism is one module that defines its class and calls :func:`register`.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

import numpy as np

from shared.errors import InvalidParameterError
from shared.named_registry import Registry

if TYPE_CHECKING:
    from shared.mechanisms.histogram import Prior
    from shared.rng import Rng


@runtime_checkable
class LabelMechanism(Protocol):
    """An epsilon-label-DP randomizer with public parameters (what a message describes)."""

    epsilon: float

    def randomize(self, labels: np.ndarray, rng: Rng) -> np.ndarray:
        """One independent noisy label per (clipped) label, from ``rng``."""
        ...

    def output_probability(self, outputs: np.ndarray, y: np.ndarray) -> np.ndarray:
        """P(output = v | label y) for output values v, exactly (0 off its public support)."""
        ...

    def conditional_moments(self, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """E[noisy | y] and Var(noisy | y), elementwise."""
        ...

    def breakpoints(self) -> np.ndarray:
        """Labels where the conditional moments stop being one quadratic (for exact quadrature)."""
        ...

    def affine_expectation(self) -> tuple[float, float]:
        """(a, b) with E[noisy | y] = a g(y) + b for the mechanism's own g (debiasing)."""
        ...

    def expected_squared_error(self, prior: Prior) -> float:
        """E[(noisy - y)^2] with y drawn from the piecewise-uniform ``prior``."""
        ...

    def public_params(self) -> dict[str, Any]:
        """The parameters the message carries (enough to rebuild it with the family)."""
        ...


@dataclass(frozen=True, kw_only=True)
class OptionSpec:
    """One option a family reads, as a request may give it: its JSON type (``kind``: "number",
    "integer" or "string"), its allowed values or bounds, what it means. The API schema is built
    from these (``labels_party.schemas.ReleaseOptions``); the family's ``build`` checks them
    again, and ``check_options`` whatever depends on the label range."""

    kind: str
    description: str
    choices: tuple[str, ...] = ()
    gt: float | None = None
    ge: float | None = None
    le: float | None = None


@dataclass(frozen=True, kw_only=True)
class MechanismFamily:
    """How to build, choose among and rebuild one kind of label mechanism.

    ``build(prior, *, epsilon, **options)``: the mechanism an explicit request for this family
    releases; a family with ``reads_n`` also gets ``n`` and ``model_dim`` (``n`` None: without the
    training criterion). ``candidates(prior, *,
    epsilon, **options)``: what ``mechanism="auto"`` compares (``shared.selection``).
    ``from_params(params)``: rebuild from a message. ``light_prior``: the family needs little of
    the prior, so the plan gives its histogram a smaller split and buys no DP label mean
    (``shared.plan``). ``check_options(options, width)``: the family's rules on the options it
    was given that depend on the public label range ``width`` = hi - lo (InvalidParameterError
    naming the option); the plan runs it, so every path (service, Spark) does. Everything here
    reads the noisy prior and public numbers only.
    """

    name: str
    mechanism_type: type
    options: frozenset[str]
    build: Callable[..., LabelMechanism]
    candidates: Callable[..., list[LabelMechanism]]
    from_params: Callable[[Mapping[str, Any]], LabelMechanism]
    light_prior: bool = False
    in_auto: bool = True
    reads_n: bool = False
    check_options: Callable[[Mapping[str, Any], float], None] = lambda options, width: None
    # Each option's spec (the keys are ``options``): what the API schema says of it.
    option_specs: Mapping[str, OptionSpec] = field(default_factory=dict)


M = TypeVar("M")


def realisable(attempts: Iterable[Callable[[], M]], *, key: Callable[[M], Hashable]) -> list[M]:
    """What ``attempts`` build, the first of each ``key``: a family's ``candidates``. An attempt
    not realisable exactly at its epsilon (:class:`InvalidParameterError`) is skipped; that
    depends on the (noisy) prior and public numbers only."""
    out: list[M] = []
    seen: set[Hashable] = set()
    for attempt in attempts:
        try:
            mechanism = attempt()
        except InvalidParameterError:
            continue
        if key(mechanism) not in seen:
            seen.add(key(mechanism))
            out.append(mechanism)
    return out


RESERVED = ("auto", "none")


def _identifier(family: MechanismFamily) -> None:
    if not family.name.isidentifier():
        raise InvalidParameterError(f"mechanism name ({family.name!r}) must be an identifier")
    if family.option_specs and set(family.option_specs) != set(family.options):
        raise InvalidParameterError(f"mechanism {family.name!r}: one spec per option")


_REGISTRY: Registry[MechanismFamily] = Registry("mechanism", reserved=RESERVED, check=_identifier)
# The registry's verbs: a family registers itself once (``auto`` compares them in this order).
register = _REGISTRY.register
unregister = _REGISTRY.unregister
names = _REGISTRY.names
families = _REGISTRY.families
get = _REGISTRY.get


def name_of(mechanism: Any) -> str:
    """The registered name of a mechanism object."""
    for family in families():
        if isinstance(mechanism, family.mechanism_type):
            return family.name
    raise InvalidParameterError(f"{type(mechanism).__name__} is not a registered mechanism")
