"""The epsilon1 step: a private histogram of the labels on a fixed public grid -> ``Prior``.

Implements Ghazi et al., "Regression with Label Differential Privacy", Algorithm 4 (Laplace
histogram, scale 2/epsilon), with exact discrete Laplace noise on the integer counts instead of
floating-point Laplace. Privacy: changing one label moves one unit of count between two bins,
so the count vector has L1 sensitivity 2 and adding i.i.d. DLap(2/epsilon) noise is epsilon-DP;
making the noisy counts consistent, normalising and everything computed from the ``Prior``
afterwards is post-processing.

Consistency: the paper clamps negative noisy counts at 0, which adds about scale/2 spurious counts
to every empty cell and drags the prior towards uniform (on a heavy-tailed label, its mean moves by
several standard errors at small epsilon). The default instead projects the noisy counts onto
{c >= 0, sum c = n} in Euclidean norm ("norm-sub", Wang et al., "Locally Differentially Private
Frequency Estimation with Consistency", NDSS 2020): the same clamp after subtracting one common
shift. n, the number of labelled examples, is public under label DP (neighbouring data sets differ
in one label, never in size). Measured on the synthetic ad-conversion labels (64 cells, epsilon1
0.05), the error of the prior's mean drops from 1.43 to 0.57 (clamp vs project, RMS of 20 runs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

import numpy as np

from shared.domain import LabelDomain, check_epsilon, check_labels, check_probabilities
from shared.errors import InvalidParameterError
from shared.mechanisms.discrete_laplace import sample_discrete_laplace
from shared.rng import Rng, below_sampler

Consistency = Literal["project", "clamp"]
CONSISTENCY_RULES: tuple[str, ...] = ("project", "clamp")
_SATURATE = 2**1000
# Histogram cells a release may ask for; the bounds must allow that many distinct float cells.
MAX_BINS = 4096


def project_to_simplex(counts: np.ndarray, *, total: float) -> np.ndarray:
    """Euclidean projection of ``counts`` onto {c >= 0, sum c = total} (norm-sub).

    The projection is max(counts - tau, 0) for the unique tau making the sum ``total``
    (Duchi et al., ICML 2008, Figure 1: sort, cumulative sums, largest feasible prefix).
    """
    values = np.asarray(counts, dtype=np.float64)
    if total <= 0:
        return np.zeros_like(values)
    # Shifting every count by the same amount does not move the projection; shifting by the
    # largest keeps the sums of order `total` even when the noise dwarfs it (tiny epsilon), so
    # rank 1 stays feasible in floating point as it is exactly (its test reads total > 0).
    shifted = values - values.max()
    ordered = np.sort(shifted)[::-1]
    cumulative = np.cumsum(ordered)
    ranks = np.arange(1, values.size + 1)
    feasible = ordered - (cumulative - total) / ranks > 0
    rho = int(ranks[feasible][-1])
    tau = (cumulative[rho - 1] - total) / rho
    return np.maximum(shifted - tau, 0.0)


def check_bins(bins: int) -> int:
    """The number of histogram cells, an integer >= 1."""
    if isinstance(bins, bool) or not isinstance(bins, int | np.integer) or bins < 1:
        raise InvalidParameterError(f"bins ({bins!r}) must be an integer >= 1")
    return int(bins)


def bin_edges(*, lo: float, hi: float, bins: int) -> np.ndarray:
    """The public grid: ``bins`` equal-width cells on ``[lo, hi]`` (k + 1 edges).

    Refused (clear error) if float64 cannot represent it: cells narrower than the spacing of
    floats near the bounds, or a cell count per unit of label that overflows.
    """
    domain = LabelDomain(lo=lo, hi=hi)
    k = check_bins(bins)
    edges = np.linspace(domain.lo, domain.hi, k + 1)
    if not (math.isfinite(k / domain.width) and np.all(np.diff(edges) > 0)):
        raise InvalidParameterError(
            f"bins ({k}) equal cells of [{domain.lo!r}, {domain.hi!r}] are not representable "
            "in float64: use fewer bins or wider label bounds"
        )
    return edges


def bin_index(labels: np.ndarray, *, lo: float, hi: float, bins: int) -> np.ndarray:
    """Cell of each (clipped) label; ``hi`` itself falls in the last cell."""
    clipped = np.clip(labels, lo, hi)
    index = np.floor((clipped - lo) * (bins / (hi - lo))).astype(np.int64)
    return np.minimum(index, bins - 1)


def bin_counts(labels: np.ndarray, *, lo: float, hi: float, bins: int) -> np.ndarray:
    """Exact (non-private) counts of the clipped labels per cell (the grid checked first)."""
    bin_edges(lo=lo, hi=hi, bins=bins)  # a grid float64 cannot represent: a clear error
    return np.bincount(bin_index(labels, lo=lo, hi=hi, bins=bins), minlength=bins).astype(np.int64)


@dataclass(frozen=True, kw_only=True)
class Prior:
    """A piecewise-constant label density: mass ``probs[i]`` spread uniformly on cell i."""

    edges: np.ndarray
    probs: np.ndarray

    def __post_init__(self) -> None:
        edges = np.ascontiguousarray(self.edges, dtype=np.float64)
        probs = np.ascontiguousarray(self.probs, dtype=np.float64)
        if edges.ndim != 1 or probs.ndim != 1 or edges.size != probs.size + 1 or probs.size < 1:
            raise InvalidParameterError(
                f"a prior needs k >= 1 probs and k + 1 edges, got {probs.size} and {edges.size}"
            )
        if not (np.all(np.isfinite(edges)) and np.all(np.diff(edges) > 0)):
            raise InvalidParameterError("prior edges must be finite and strictly increasing")
        probs = check_probabilities(probs, name="prior probs")
        edges.setflags(write=False)
        probs.setflags(write=False)
        object.__setattr__(self, "edges", edges)
        object.__setattr__(self, "probs", probs)

    @property
    def k(self) -> int:
        """Number of cells."""
        return int(self.probs.size)

    @property
    def lo(self) -> float:
        return float(self.edges[0])

    @property
    def hi(self) -> float:
        return float(self.edges[-1])

    @property
    def midpoints(self) -> np.ndarray:
        return 0.5 * (self.edges[:-1] + self.edges[1:])

    def cdf(self, x: float | np.ndarray) -> np.ndarray:
        """P(Y <= x), linear inside each cell."""
        cumulative = np.concatenate(([0.0], np.cumsum(self.probs)))
        return np.clip(np.interp(x, self.edges, cumulative), 0.0, 1.0)

    def mean(self) -> float:
        """E[Y] under the piecewise-uniform density."""
        return float(np.dot(self.probs, self.midpoints))

    def second_moment(self) -> float:
        """E[Y^2] under the piecewise-uniform density."""
        a, b = self.edges[:-1], self.edges[1:]
        return float(np.dot(self.probs, (a * a + a * b + b * b) / 3.0))

    def variance(self) -> float:
        return max(self.second_moment() - self.mean() ** 2, 0.0)

    def to_dict(self) -> dict[str, list[float]]:
        return {"edges": self.edges.tolist(), "probs": self.probs.tolist()}

    @classmethod
    def from_counts(cls, counts: np.ndarray, *, edges: np.ndarray) -> Prior:
        """Normalise non-negative counts; all-zero counts give the uniform prior."""
        clamped = np.maximum(np.asarray(counts, dtype=np.float64), 0.0)
        total = clamped.sum()
        probs = clamped / total if total > 0 else np.full(clamped.size, 1.0 / clamped.size)
        return cls(edges=edges, probs=probs)

    @classmethod
    def from_samples(cls, samples: np.ndarray, *, lo: float, hi: float, bins: int) -> Prior:
        """A KNOWN (non-private) prior: the exact histogram of ``samples`` on the public grid.

        Only for a prior that is public anyway (simulations, tests); a histogram of private
        labels must go through :func:`private_histogram`.
        """
        values = check_labels(samples)
        edges = bin_edges(lo=lo, hi=hi, bins=bins)
        return cls.from_counts(bin_counts(values, lo=lo, hi=hi, bins=bins), edges=edges)


def private_histogram(
    labels: np.ndarray,
    *,
    lo: float,
    hi: float,
    bins: int,
    epsilon: float,
    rng: Rng,
    consistency: Consistency = "project",
) -> Prior:
    """An epsilon-label-DP histogram prior of ``labels`` on ``bins`` cells of ``[lo, hi]``.

    Implements Ghazi et al. 2022, Algorithm 4, with exact discrete Laplace noise of scale
    2/epsilon (CKS 2020) on the integer counts. ``consistency="project"`` (default) projects the
    noisy counts onto the simplex of total n (module docstring); ``"clamp"`` is the paper's
    clamp at 0. Either way the result is normalised (uniform if every count ends at 0).
    ``epsilon = inf`` means no noise.
    """
    if consistency not in CONSISTENCY_RULES:
        raise InvalidParameterError(
            f"consistency ({consistency!r}) must be one of {', '.join(CONSISTENCY_RULES)}"
        )
    values = check_labels(labels)
    check_epsilon(epsilon, allow_inf=True)
    edges = bin_edges(lo=lo, hi=hi, bins=bins)
    counts = bin_counts(values, lo=lo, hi=hi, bins=len(edges) - 1)
    return noisy_histogram(
        counts, n=values.size, lo=lo, hi=hi, epsilon=epsilon, rng=rng, consistency=consistency
    )


def noisy_histogram(
    counts: np.ndarray,
    *,
    n: int,
    lo: float,
    hi: float,
    epsilon: float,
    rng: Rng,
    consistency: Consistency = "project",
) -> Prior:
    """The noise step of :func:`private_histogram`, on given exact per-cell ``counts``.

    ``counts`` are :func:`bin_counts` of the n clipped labels (summed over any partition of the
    labels: the Spark job adds each partition's counts), ``n`` their total. Draws one discrete
    Laplace sample of scale 2/epsilon per cell, in cell order, exactly as
    :func:`private_histogram` does (it calls this). Privacy as :func:`private_histogram`.
    """
    if consistency not in CONSISTENCY_RULES:
        raise InvalidParameterError(
            f"consistency ({consistency!r}) must be one of {', '.join(CONSISTENCY_RULES)}"
        )
    eps = check_epsilon(epsilon, allow_inf=True)
    cells = np.asarray(counts)
    edges = bin_edges(lo=lo, hi=hi, bins=int(cells.size))
    if cells.ndim != 1 or not np.issubdtype(cells.dtype, np.integer) or np.any(cells < 0):
        raise InvalidParameterError("counts must be a 1-d array of integers >= 0")
    if int(cells.sum()) != n:
        raise InvalidParameterError(f"counts add up to {int(cells.sum())}, not n = {n}")
    if math.isinf(eps):
        return Prior.from_counts(cells, edges=edges)
    scale = Fraction(2) / Fraction(eps)  # the float epsilon, taken exactly
    # Exact integer sums (at tiny epsilon the noise outgrows int64 and even float64), then a
    # fixed saturation at +-2^1000 and the float conversion: functions of count + noise alone.
    # One buffered sampler for every cell's draw (the OS CSPRNG: one os.urandom buffer).
    source = below_sampler(rng)
    noisy = np.array(
        [
            float(
                min(max(int(count) + sample_discrete_laplace(source, scale), -_SATURATE), _SATURATE)
            )
            for count in cells
        ]
    )
    if consistency == "project":
        return Prior.from_counts(project_to_simplex(noisy, total=n), edges=edges)
    return Prior.from_counts(noisy, edges=edges)
