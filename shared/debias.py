"""Unbiased post-processing of noisy labels, from the message's public parameters alone.

Both randomizers have an affine conditional expectation (derived by the mechanism modules from
their public parameters, ``affine_expectation() -> (a, b)``):

* RPWithPrior (Liu & Huang, Lemma 3.3, density (3.4)): E[noisy | y] = a*y + b for y inside the
  optimal interval [A1, A2] (labels outside it are first projected onto it, Remark 3.4 (3.12), so
  there E[noisy | y] = a*P(y) + b);
* RR-on-Bins (Ghazi et al. 2022, Algorithm 1): E[noisy | y] = a*v(phi(y)) + b, v the bin value.

So (noisy - b) / a is an unbiased estimate of y (RPWithPrior, y inside the interval) or of the
bin value of y (RR-on-Bins). Debiasing reads only the header (public, already DP) and maps each
label independently: it is post-processing and costs no privacy.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np

from shared.errors import InvalidParameterError
from shared.mechanisms import registry
from shared.mechanisms.histogram import Prior
from shared.message import NO_MECHANISM, MessageHeader


def mechanism_from_params(mechanism: str, params: Mapping[str, Any]) -> Any:
    """Rebuild the epsilon2 randomizer named ``mechanism`` from its public parameters."""
    return registry.get(mechanism).from_params(dict(params))


def mechanism_from_header(header: MessageHeader) -> Any:
    """Rebuild the epsilon2 randomizer from the public parameters carried in the header."""
    return mechanism_from_params(header.mechanism, header.params)


def affine_coefficients(header: MessageHeader) -> tuple[float, float]:
    """(a, b) with E[noisy | y] = a*y + b (a = 1, b = 0 for an un-randomized message)."""
    return affine_of(header.mechanism, header.params)


def affine_of(mechanism: str, params: Mapping[str, Any]) -> tuple[float, float]:
    """(a, b) of the randomizer ``mechanism`` with public ``params`` (one part of a segmented
    message, or a whole message); (1, 0) for "none" (un-randomized)."""
    if mechanism == NO_MECHANISM:
        return 1.0, 0.0
    a, b = mechanism_from_params(mechanism, params).affine_expectation()
    a, b = float(a), float(b)
    if not (math.isfinite(a) and math.isfinite(b)) or a <= 0.0:
        raise InvalidParameterError(
            f"mechanism {mechanism!r} has affine expectation a={a!r}, b={b!r}: "
            "its output carries no information to debias (a must be finite and > 0)"
        )
    return a, b


def affine_debias(header: MessageHeader, noisy: np.ndarray) -> np.ndarray:
    """Map noisy labels to unbiased targets: (noisy - b) / a with (a, b) from the header.

    E[result | y] = y for RPWithPrior with y inside its interval, and the bin value of y for
    RR-on-Bins. The variance grows like 1/a^2, so at small epsilon these targets are very noisy
    (but still unbiased; model selection on them is sound, see features_party/training.py).
    """
    return debias_by(affine_coefficients(header), noisy)


def debias_by(affine: tuple[float, float], noisy: np.ndarray) -> np.ndarray:
    """(noisy - b) / a for the randomizer's affine expectation ``affine`` = (a, b): the one
    definition of the debiasing map, used by whole messages, segments and the benchmarks."""
    a, b = affine
    return (np.asarray(noisy, dtype=np.float64) - b) / a


class PublicRandomizer(Protocol):
    """What a receiver knows of a release's randomizer: a message header (or the accuracy
    benchmark's copy of its fields)."""

    @property
    def mechanism(self) -> str: ...
    @property
    def params(self) -> Mapping[str, Any]: ...
    @property
    def prior(self) -> Prior: ...  # the epsilon1-DP histogram the randomizer was built from
    @property
    def n(self) -> int: ...


def recommended_transform(message: PublicRandomizer, *, model_dim: int) -> str:
    """ "raw" or "debiased": the target with the lower training criterion for this message.

    Uses only public values (mechanism parameters, the noisy histogram and n): the criterion
    C = bias^2 + (model_dim / n) Var of ``shared.selection`` under the noisy prior. A model fitted
    on n targets averages their variance away but keeps their bias, so debiased targets win for
    large n and raw ones when n is small or epsilon tiny (bench/results/accuracy_*.md).
    """
    from shared.selection import recommended_transform as choose

    if message.mechanism == NO_MECHANISM:
        return "raw"
    mechanism = mechanism_from_params(message.mechanism, message.params)
    return choose(mechanism, message.prior, n=max(message.n, 1), model_dim=max(model_dim, 1))
