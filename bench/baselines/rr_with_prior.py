"""RRWithPrior: randomized response restricted to the k most likely labels under a prior.

Implements Ghazi, Golowich, Kumar, Manurangsi & Zhang, "Deep Learning with Label Differential
Privacy" (NeurIPS 2021), Algorithm 2 (RRWithPrior), for regression labels as in Ghazi et al.
2022, Appendix G: each cell of the (noisy, public) histogram prior is a category, represented
by its midpoint; a label maps to its cell. With the cells sorted by prior mass, k is chosen to
maximise P(output = true category) = (top-k mass) * e^eps / (e^eps + k - 1) (ties: smallest k).
A label whose cell is in the top-k set Y_k gets RR_eps over Y_k (its own midpoint with
probability e^eps / (e^eps + k - 1), each other one with 1 / (e^eps + k - 1)); any other label
gets a uniform draw from Y_k.

Privacy: every output in Y_k has probability between 1 / (e^eps + k - 1) and
e^eps / (e^eps + k - 1) for every label (the uniform 1/k lies in between), and outputs outside
Y_k have probability 0 for every label, so the ratio is at most e^eps. k and Y_k are functions
of the public prior only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from bench.baselines._common import (
    PublicParams,
    check_eps,
    label_array,
    uniforms,
)
from shared.errors import InvalidParameterError
from shared.mechanisms.histogram import Prior
from shared.rng import Rng


def top_k_choice(probs: np.ndarray, *, epsilon: float) -> tuple[int, np.ndarray]:
    """(k, cell indices of Y_k sorted ascending) maximising top-k mass * e^eps / (e^eps + k - 1)."""
    order = np.argsort(-np.asarray(probs, dtype=np.float64), kind="stable")
    mass = np.cumsum(np.asarray(probs, dtype=np.float64)[order])
    ks = np.arange(1, order.size + 1)
    # e^eps / (e^eps + k - 1) = 1 / (1 + (k - 1) e^-eps), stable for any epsilon.
    keep = mass / (1.0 + (ks - 1) * math.exp(-epsilon))
    k = int(np.argmax(keep)) + 1
    return k, np.sort(order[:k])


@dataclass(frozen=True, kw_only=True, eq=False)  # arrays inside: identity equality
class RRWithPrior(PublicParams):
    """Randomized response over the top-k cells of ``prior``, outputs at cell midpoints."""

    prior: Prior
    epsilon: float
    k: int = field(init=False)
    top_cells: np.ndarray = field(init=False, repr=False)

    pure_dp: ClassVar[bool] = True
    MECHANISM = "rr_with_prior"
    PUBLIC = ("epsilon", "prior", "k", "top_cells", "output_values")

    def __post_init__(self) -> None:
        if not isinstance(self.prior, Prior):
            raise InvalidParameterError(f"prior must be a Prior, got {type(self.prior).__name__}")
        eps = check_eps(self.epsilon)
        k, top = top_k_choice(self.prior.probs, epsilon=eps)
        top.setflags(write=False)
        object.__setattr__(self, "epsilon", eps)
        object.__setattr__(self, "k", k)
        object.__setattr__(self, "top_cells", top)

    @property
    def output_values(self) -> np.ndarray:
        """The k possible outputs (midpoints of the top-k cells), sorted."""
        return self.prior.midpoints[self.top_cells]

    @property
    def output_range(self) -> tuple[float, float]:
        values = self.output_values
        return float(values[0]), float(values[-1])

    @property
    def keep_probability(self) -> float:
        """e^eps / (e^eps + k - 1): probability a top-k label is output unchanged."""
        return 1.0 / (1.0 + (self.k - 1) * math.exp(-self.epsilon))

    def _positions(self, labels: np.ndarray) -> np.ndarray:
        """Position of each label's cell within ``top_cells``, or -1 when not in the top k."""
        edges = self.prior.edges
        cell = np.clip(np.searchsorted(edges, labels, side="right") - 1, 0, self.prior.k - 1)
        lookup = np.full(self.prior.k, -1, dtype=np.int64)
        lookup[self.top_cells] = np.arange(self.k)
        return lookup[cell]

    def output_probabilities(self, labels: np.ndarray | list[float]) -> np.ndarray:
        """P(y~ = output_values[j] | y), shape (n, k)."""
        pos = self._positions(label_array(labels))
        keep = self.keep_probability
        other = (1.0 - keep) / (self.k - 1) if self.k > 1 else 0.0
        probs = np.where(pos[:, None] >= 0, other, 1.0 / self.k) * np.ones((1, self.k))
        inside = np.flatnonzero(pos >= 0)
        probs[inside, pos[inside]] = keep
        return probs

    def pmf(self, y_tilde: np.ndarray | float, y: np.ndarray | float) -> np.ndarray:
        """P(y~ = y_tilde | y), broadcasting; 0 off the output values."""
        yt, yy = np.broadcast_arrays(np.asarray(y_tilde, float), np.asarray(y, float))
        probs = self.output_probabilities(yy.ravel())
        values = self.output_values
        j = np.clip(np.searchsorted(values, yt.ravel()), 0, self.k - 1)
        hit = values[j] == yt.ravel()
        return np.where(hit, probs[np.arange(j.size), j], 0.0).reshape(yt.shape)

    def randomize(self, labels: np.ndarray | list[float], rng: Rng) -> np.ndarray:
        """One output per label (vectorised RR over the top-k midpoints)."""
        pos = self._positions(label_array(labels))
        n, k = pos.size, self.k
        keep_draw = uniforms(rng, n)
        pick = uniforms(rng, n)
        uniform_pick = np.minimum(np.floor(pick * k), k - 1).astype(np.int64)
        if k > 1:
            # One of the k - 1 other outputs, uniformly: skip over the label's own position.
            other = np.minimum(np.floor(pick * (k - 1)), k - 2).astype(np.int64)
            other = other + (other >= pos)
        else:
            other = np.zeros(n, dtype=np.int64)
        inside = np.where(keep_draw < self.keep_probability, pos, other)
        index = np.where(pos < 0, uniform_pick, inside)
        return self.output_values[index]

    def affine_expectation(self) -> tuple[float, float] | None:
        """None: the mean is not affine in the label (labels outside Y_k get a uniform draw)."""
        return None
