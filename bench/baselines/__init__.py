"""Benchmark baselines: the label-DP randomizers the papers compare RPWithPrior and RR-on-Bins to.

One module per family: Laplace and Gaussian (:mod:`.laplace`, :mod:`.gaussian`), continuous and
discrete staircase (:mod:`.staircase`), the exponential mechanism (:mod:`.exponential`),
RRWithPrior (:mod:`.rr_with_prior`) and the optimal "Unbiased" randomizer (:mod:`.unbiased`).
Each is a frozen keyword-only dataclass with

- ``randomize(labels, rng) -> np.ndarray`` (vectorised; labels are clipped to the public bounds
  or mapped to the public grid first, a fixed public function);
- the exact output law for the DP tests: ``density(y_tilde, y)`` plus ``atoms(y)`` for the
  continuous mechanisms (atoms at lo and hi when the output is clipped), ``pmf(y_tilde, y)`` for
  the discrete ones (and ``output_values`` / ``output_probabilities(y)`` for the finite ones);
- ``output_range``, ``public_params()`` (JSON-safe), ``pure_dp``, and ``affine_expectation()``
  returning (a, b) with E[y~ | y] = a y + b for labels inside the bounds where that holds, else
  None.

These are BENCHMARK baselines only: the labels-party service serves RPWithPrior and RR-on-Bins
alone. The continuous-noise samplers here (Laplace, Gaussian, staircase, exponential, and the
randomized rounding of Unbiased) draw floating-point noise by inverting a CDF, which carries the
known floating-point caveat (Mironov, "On Significance of the Least Significant Bits for
Differential Privacy", CCS 2012): the set of doubles an output can take depends on the label, so
the pure epsilon-DP guarantee holds for the ideal real-valued mechanism, not bit for bit. That is
acceptable for measuring accuracy, and is why none of them is served. The Gaussian mechanism is
(epsilon, delta)-DP, never pure epsilon-DP (``pure_dp`` is False).

A finding worth knowing when reading the papers' tables: the exponential mechanism as the
RR-on-Bins paper calibrates it (Laplace scale 2 (hi - lo) / epsilon, Appendix F) is in fact
(epsilon / 2)-DP (proof in :mod:`.exponential`); ``calibration="tight"`` gives the epsilon-DP one.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from bench.baselines.exponential import ExponentialMechanism
from bench.baselines.gaussian import (
    Gaussian,
    analytic_gaussian_sigma,
    gaussian_delta,
)
from bench.baselines.laplace import Laplace
from bench.baselines.rr_with_prior import RRWithPrior, top_k_choice
from bench.baselines.staircase import (
    DiscreteStaircase,
    Staircase,
    discrete_staircase_r,
    staircase_gamma,
)
from bench.baselines.unbiased import (
    Unbiased,
    default_output_grid,
    optimal_unbiased,
    rounding_weights,
)
from shared.errors import InvalidParameterError
from shared.mechanisms.histogram import Prior
from shared.rng import Rng

__all__ = [
    "BASELINES",
    "BaselineMechanism",
    "DiscreteStaircase",
    "ExponentialMechanism",
    "Gaussian",
    "Laplace",
    "RRWithPrior",
    "Staircase",
    "Unbiased",
    "analytic_gaussian_sigma",
    "build_baseline",
    "default_output_grid",
    "discrete_staircase_r",
    "gaussian_delta",
    "optimal_unbiased",
    "rounding_weights",
    "staircase_gamma",
    "top_k_choice",
]


class BaselineMechanism(Protocol):
    """What every baseline offers (the output-law methods differ: see the module docstring)."""

    epsilon: float

    def randomize(self, labels: np.ndarray, rng: Rng) -> np.ndarray: ...

    @property
    def output_range(self) -> tuple[float, float]: ...

    def public_params(self) -> dict[str, Any]: ...

    def affine_expectation(self) -> tuple[float, float] | None: ...


BASELINES: tuple[str, ...] = (
    "laplace",
    "laplace_unclipped",
    "gaussian",
    "gaussian_unclipped",
    "staircase",
    "staircase_unclipped",
    "discrete_staircase",
    "exponential",
    "rr_with_prior",
    "unbiased",
)
_NEEDS_PRIOR = ("rr_with_prior", "unbiased")


def build_baseline(
    name: str,
    *,
    epsilon: float,
    lo: float,
    hi: float,
    prior: Prior | None = None,
    **params: Any,
) -> BaselineMechanism:
    """A baseline by name (for the benchmark harness); ``params`` go to its constructor.

    The prior-based ones (``rr_with_prior``, ``unbiased``) need ``prior`` (the epsilon1-DP
    histogram on [lo, hi]); ``gaussian`` needs ``delta``.
    """
    if name not in BASELINES:
        raise InvalidParameterError(f"baseline ({name!r}) must be one of {', '.join(BASELINES)}")
    try:
        return _build(name, epsilon=epsilon, lo=lo, hi=hi, prior=prior, **params)
    except TypeError as error:  # a missing or unknown keyword: name it as a parameter error
        raise InvalidParameterError(f"baseline {name!r}: {error}") from None


def _build(
    name: str, *, epsilon: float, lo: float, hi: float, prior: Prior | None, **params: Any
) -> BaselineMechanism:
    if name in _NEEDS_PRIOR:
        if not isinstance(prior, Prior):
            raise InvalidParameterError(f"baseline {name!r} needs prior= (a Prior)")
        if not (np.isclose(prior.lo, lo) and np.isclose(prior.hi, hi)):
            raise InvalidParameterError(
                f"the prior spans [{prior.lo}, {prior.hi}], not the bounds [{lo}, {hi}]"
            )
        if name == "rr_with_prior":
            return RRWithPrior(prior=prior, epsilon=epsilon, **params)
        return Unbiased.from_prior(prior, epsilon=epsilon, **params)
    if prior is not None:
        raise InvalidParameterError(f"baseline {name!r} takes no prior")
    family, _, variant = name.partition("_")
    if name == "discrete_staircase":
        return DiscreteStaircase(epsilon=epsilon, lo=lo, hi=hi, **params)  # type: ignore[arg-type]
    if name == "exponential":
        return ExponentialMechanism(epsilon=epsilon, lo=lo, hi=hi, **params)
    clip = {"clip_output": variant != "unclipped"}
    if family == "laplace":
        return Laplace(epsilon=epsilon, lo=lo, hi=hi, **clip, **params)
    if family == "gaussian":
        return Gaussian(epsilon=epsilon, lo=lo, hi=hi, **clip, **params)
    return Staircase(epsilon=epsilon, lo=lo, hi=hi, **clip, **params)
