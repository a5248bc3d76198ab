"""The ``auto`` criterion C = bias^2 + k Var / n, as the benchmark uses it (``auto-C``).

The closed forms, the candidates and the choice now live in the engine
(``shared.selection``, used by ``shared.randomizer.build_mechanism(mechanism="auto", n=...)``);
this module only adapts them to the benchmark's names: ``k`` is the number of features (the
benchmark's ``auto-C`` variant passes k = d, the labels party's ``auto`` uses
``shared.selection.DEFAULT_MODEL_DIM`` unless given ``model_dim``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from shared import selection
from shared.mechanisms import rp_with_prior, rr_on_bins
from shared.mechanisms.histogram import Prior

RR_CAPS = rr_on_bins.RR_CAPS


@dataclass(frozen=True, kw_only=True)
class Choice:
    name: str
    randomizer: Any
    transform: str
    bias2: float
    variance: float
    criterion: float


def rp_moments(m: rp_with_prior.RPWithPrior, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """E[noisy | y] and Var(noisy | y) of RPWithPrior (``shared.selection``)."""
    return selection.conditional_moments(m, y)


def rr_moments(m: rr_on_bins.RROnBins, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """E[noisy | y] and Var(noisy | y) of RR-on-Bins (``shared.selection``)."""
    return selection.conditional_moments(m, y)


def _dim(k: float) -> int:
    return max(1, round(k))


def _choice(c: selection.Candidate) -> Choice:
    return Choice(
        name=c.name,
        randomizer=c.mechanism,
        transform=c.transform,
        bias2=c.score.bias2,
        variance=c.score.variance,
        criterion=c.criterion,
    )


def candidates(prior: Prior, *, epsilon: float, n: int, k: float) -> list[Choice]:
    """Every RPWithPrior / RR-on-Bins candidate x transform with its criterion C."""
    found = selection.candidates(prior, epsilon=epsilon, n=n, model_dim=_dim(k))
    return [_choice(c) for c in found]


def choose(prior: Prior, *, epsilon: float, n: int, k: float) -> Choice:
    """The candidate (mechanism, parameters, transform) with the lowest C."""
    return _choice(selection.choose(prior, epsilon=epsilon, n=n, model_dim=_dim(k)))
