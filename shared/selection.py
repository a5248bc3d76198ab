"""Choosing the randomizer for MODEL quality: C = bias^2 + (d / n) Var under the noisy prior.

The least-label-MSE randomizer (RR-on-Bins with optimal bins, Ghazi et al. 2022, Theorem 5) is
a low-variance, high-bias one, but a model fitted on n noisy targets averages the variance away
(roughly like d / n for d effective parameters) and keeps the bias. What predicts its test MSE
(measured in ``bench/results/accuracy_*.md``, "What predicts the model's test MSE") is

    C = E_y[(E[t | y] - y)^2] + (d / n) E_y[Var(t | y)],

with t the training target: the noisy label ("raw") or its debiased version (noisy - b) / a
(``shared.debias``), y drawn from the histogram prior. Everything here is a function of the
epsilon1-DP prior and of public numbers (n, d, epsilon), so the choice is post-processing and
costs no privacy; no function in this module ever receives a label.

Closed forms (y a label, p = clip(y, a1, a2)):
* RPWithPrior (Liu & Huang, density (3.4)): a mixture of U[a1 - zeta, a2 + zeta] with weight
  w = e^-eps W / gamma and U[p - zeta, p + zeta] with weight 1 - w (W = a2 - a1 + 2 zeta, gamma
  = 2 zeta + e^-eps (a2 - a1)); mean w c + (1 - w) p, second moment w (c^2 + W^2 / 12) +
  (1 - w)(p^2 + zeta^2 / 3), c the interval centre. Under the uniform rule (3.17) a label
  outside [a1, a2] gets U[a1 - zeta, a2 + zeta]: mean c, second moment c^2 + W^2 / 12.
* RR-on-Bins (Algorithm 1, with the realised integer odds of ``rr_on_bins.response_weights``):
  output v_phi(y) with probability keep, each other output with probability other; mean
  other sum(v) + (keep - other) v_phi(y), second moment other sum(v^2) + (keep - other) v_phi^2.
* Unbiased (Badanidiyuru et al. 2023, ``shared.mechanisms.unbiased``): a mixture of two rows of
  integer weights, the rounding probability linear in y within a grid cell; mean y (bias 0 on
  [lo, hi]), second moment linear in y, so the variance is quadratic there.
All are polynomials of degree <= 2 in y between the breakpoints (histogram edges, a1, a2, RR
thresholds, the unbiased randomizer's grid), so 2-point Gauss-Legendre per piece integrates
(E[t|y] - y)^2 and Var(t|y) against the piecewise-uniform prior exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from shared.domain import check_epsilon
from shared.errors import InvalidParameterError
from shared.mechanisms import registry
from shared.mechanisms.histogram import Prior

TRANSFORMS: tuple[str, ...] = ("raw", "debiased")
# The smallest default d: a ridge on about ten features. Measured on the committed accuracy
# records (bench/results/accuracy_*.md, "Pairwise accuracy of bias^2 + k variance/n by k"):
# k = 10 ordered the features party's models best where the labels are noisy.
DEFAULT_MODEL_DIM = 10
# The default d grows with the labels' signal (:func:`default_model_dim`): one effective
# parameter per SIGNAL_PER_DIM of n epsilon2^2, up to MAX_DEFAULT_MODEL_DIM. Measured side by
# side (bench/results/worst_case.md, "The model dimension the plan chooses").
SIGNAL_PER_DIM = 80.0
MAX_DEFAULT_MODEL_DIM = 300
MAX_MODEL_DIM = 10**9
# Histogram sizes of :func:`adaptive_bins`.
MIN_ADAPTIVE_BINS = 2
MAX_ADAPTIVE_BINS = 64
# A debiased transform needs a slope a clearly away from 0 and not the identity map.
_MIN_SLOPE = 1e-12
_RRKey = tuple[bytes, bytes]
_GAUSS = np.array([0.5 - 0.5 / math.sqrt(3.0), 0.5 + 0.5 / math.sqrt(3.0)])


def adaptive_bins(n: int, epsilon1: float, *, max_bins: int = MAX_ADAPTIVE_BINS) -> int:
    """Histogram size from public n and epsilon1: the power of two nearest n epsilon1 / 4.

    Clamped to [2, max_bins]. Each noisy count has standard deviation 2 sqrt(2) / epsilon1;
    with k cells of about n / k labels each the noise is small against the counts only while
    k << n epsilon1 / 2.8. At 64 cells, epsilon1 = 0.05 and n = 1,595 (Crime at epsilon 0.05-0.3)
    the noise swamps the counts, the prior's mean drifts and the pipeline ends worse than the
    constant (bench/results/accuracy_crime.md). epsilon1 = inf (exact histogram) gives max_bins.
    """
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
        raise InvalidParameterError(f"n ({n!r}) must be an integer >= 1")
    eps1 = check_epsilon(epsilon1, name="epsilon1", allow_inf=True)
    if isinstance(max_bins, bool) or not isinstance(max_bins, int) or max_bins < 1:
        raise InvalidParameterError(f"max_bins ({max_bins!r}) must be an integer >= 1")
    if math.isinf(eps1):
        return max_bins
    target = max(int(n) * eps1 / 4.0, 1.0)
    if math.isinf(target):  # n epsilon1 beyond the floats (epsilon1 ~1e300): the cap, as its limit
        return max_bins
    return int(min(max_bins, max(MIN_ADAPTIVE_BINS, 2 ** round(math.log2(target)))))


def check_model_dim(model_dim: Any) -> int:
    """The model's effective dimension d, an integer in [1, 10^9]."""
    if (
        isinstance(model_dim, bool)
        or not isinstance(model_dim, int | np.integer)
        or not 1 <= model_dim <= MAX_MODEL_DIM
    ):
        raise InvalidParameterError(f"model_dim ({model_dim!r}) must be an integer in [1, 10^9]")
    return int(model_dim)


def default_model_dim(n: int, epsilon2: float) -> int:
    """The d of C for a release that does not give one: n epsilon2^2 / 80, in [10, 300].

    The features party's ``auto`` picks its model by cross-validation on the noisy targets, and
    such a selection affords more effective parameters the less noisy the targets are (a
    nonparametric fit's variance term is (d_eff / n) sigma^2 with d_eff growing with n /
    sigma^2; an epsilon2-LDP target has sigma^2 of order (hi - lo)^2 / epsilon2^2). A d fixed at
    10 chose wide, noisy RPWithPrior windows under which only a ridge survives selection, where a
    tree ensemble on a narrower window was 2x better (nonlinear, epsilon 2). At or below
    n epsilon2^2 = 800 it is 10, so :func:`shared.plan.labels_can_train` reads the same either
    way. Public inputs only.
    """
    eps = check_epsilon(epsilon2, name="epsilon2", allow_inf=True)
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
        raise InvalidParameterError(f"n ({n!r}) must be an integer >= 1")
    signal = int(n) * eps * eps / SIGNAL_PER_DIM  # inf for an infinite or huge epsilon2
    if signal >= MAX_DEFAULT_MODEL_DIM:
        return MAX_DEFAULT_MODEL_DIM
    return max(DEFAULT_MODEL_DIM, math.floor(signal))


def model_dim_for(model_dim: Any, *, n: int, epsilon2: float) -> int:
    """``model_dim`` checked, or :func:`default_model_dim` where it is None."""
    if model_dim is None:
        return default_model_dim(n, epsilon2)
    return check_model_dim(model_dim)


def conditional_moments(mechanism: Any, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """E[noisy | y] and Var(noisy | y) of a registered mechanism (its own closed form)."""
    return mechanism.conditional_moments(np.asarray(y, dtype=np.float64))


def quadrature(prior: Prior, breaks: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights integrating piecewise cubics (pieces cut at ``breaks``) against the prior.

    2-point Gauss-Legendre on every piece between consecutive points of edges + breaks (inside
    [lo, hi]); exact for polynomials of degree <= 3 on each piece.
    """
    inner = np.asarray([] if breaks is None else breaks, dtype=np.float64)
    inner = inner[(inner > prior.lo) & (inner < prior.hi)]
    points = np.unique(np.concatenate((prior.edges, inner)))
    left, right = points[:-1], points[1:]
    cell = np.clip(np.searchsorted(prior.edges, left, side="right") - 1, 0, prior.k - 1)
    density = prior.probs[cell] / np.diff(prior.edges)[cell]
    mass = density * (right - left)
    nodes = left[:, None] + (right - left)[:, None] * _GAUSS[None, :]
    weights = np.repeat(mass / 2.0, 2)
    return nodes.ravel(), weights


@dataclass(frozen=True, kw_only=True)
class Score:
    """One (randomizer, transform) pair scored under the prior."""

    transform: str
    bias2: float  # E_y[(E[t | y] - y)^2]
    variance: float  # E_y[Var(t | y)]
    criterion: float  # bias2 + d / n * variance


def score(mechanism: Any, prior: Prior, *, n: int, model_dim: int) -> dict[str, Score]:
    """C for the raw and (where it applies) the debiased targets of ``mechanism``, exactly."""
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
        raise InvalidParameterError(f"n ({n!r}) must be an integer >= 1")
    scale = check_model_dim(model_dim) / int(n)
    y, w = quadrature(prior, mechanism.breakpoints())
    out = {}
    for transform, (m, v) in target_moments(mechanism, y).items():
        bias2 = float(np.dot(w, (m - y) ** 2))
        variance = float(np.dot(w, v))
        out[transform] = Score(
            transform=transform, bias2=bias2, variance=variance, criterion=bias2 + scale * variance
        )
    return out


def target_moments(mechanism: Any, y: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """E[t | y] and Var(t | y) per transform: the noisy label ("raw") and, where the mechanism's
    affine expectation is neither flat nor the identity, (noisy - b) / a ("debiased")."""
    mean, var = mechanism.conditional_moments(np.asarray(y, dtype=np.float64))
    a, b = (float(v) for v in mechanism.affine_expectation())
    targets = {"raw": (mean, var)}
    identity = abs(a - 1.0) <= _MIN_SLOPE and abs(b) <= _MIN_SLOPE
    if math.isfinite(a) and math.isfinite(b) and a > _MIN_SLOPE and not identity:
        targets["debiased"] = ((mean - b) / a, var / (a * a))
    return targets


def recommended_transform(mechanism: Any, prior: Prior, *, n: int, model_dim: int) -> str:
    """The transform ("raw" or "debiased") of ``mechanism`` with the lower C."""
    scores = score(mechanism, prior, n=n, model_dim=model_dim)
    return min(scores.values(), key=lambda s: s.criterion).transform


@dataclass(frozen=True, kw_only=True)
class Candidate:
    """A randomizer, its label transform and its score C."""

    name: str  # a registered mechanism name
    mechanism: Any  # a registry.LabelMechanism
    score: Score  # its transform and criterion C


def candidate_mechanisms(
    prior: Prior,
    *,
    epsilon: float,
    families: tuple[str, ...] | None = None,
    **options: Any,
) -> list[tuple[str, Any]]:
    """The randomizers ``choose`` compares, built from the prior alone.

    Each registered family (``shared.mechanisms.registry``, in registration order; only
    ``families`` if given) contributes its ``candidates`` for its own ``options``: RPWithPrior
    every zeta of its grid under both interval rules, RR-on-Bins its optimal bins under several
    caps, Unbiased its LP on the prior's edges at 16 cells. A candidate that cannot be realised
    exactly at this epsilon is skipped.
    """
    eps = check_epsilon(epsilon)
    known = registry.names()
    auto = tuple(family.name for family in registry.families() if family.in_auto)
    chosen = auto if families is None else families
    if isinstance(chosen, str) or not chosen or any(f not in known for f in chosen):
        raise InvalidParameterError(
            f"families ({families!r}) must be a non-empty subset of {known}"
        )
    out: list[tuple[str, Any]] = []
    for name in chosen:
        family = registry.get(name)
        mine = {k: v for k, v in options.items() if k in family.options and v is not None}
        out.extend((name, m) for m in family.candidates(prior, epsilon=eps, **mine))
    return out


def candidates(
    prior: Prior, *, epsilon: float, n: int, model_dim: int | None = None, **options: Any
) -> list[Candidate]:
    """Every candidate randomizer x transform with its C (``options``: see candidate_mechanisms;
    ``model_dim`` None: :func:`default_model_dim`)."""
    model_dim = model_dim_for(model_dim, n=n, epsilon2=epsilon)
    out = []
    for name, mechanism in candidate_mechanisms(prior, epsilon=epsilon, **options):
        for s in score(mechanism, prior, n=n, model_dim=model_dim).values():
            out.append(Candidate(name=name, mechanism=mechanism, score=s))
    return out


def choose(
    prior: Prior, *, epsilon: float, n: int, model_dim: int | None = None, **options: Any
) -> Candidate:
    """The (randomizer, transform) with the least C; ties go to the earlier candidate."""
    found = candidates(prior, epsilon=epsilon, n=n, model_dim=model_dim, **options)
    if not found:
        raise InvalidParameterError("no candidate randomizer can be built at this epsilon")
    return pick(found)


def pick(found: list[Candidate]) -> Candidate:
    """The candidate with the least C (the first of equals): the one rule ``choose`` applies.

    A margin for the unbiased family (take it only where its C is clearly the least) was
    measured and rejected: bench/results/worst_case.md, "A margin for the unbiased family".
    """
    if not found:
        raise InvalidParameterError("no candidate to pick from")
    return min(found, key=lambda c: c.score.criterion)
