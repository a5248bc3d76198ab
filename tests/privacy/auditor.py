"""An empirical epsilon auditor: a statistical LOWER bound on a mechanism's privacy loss.

Implements the black-box test of Ding et al., "Detecting Violations of Differential Privacy"
(CCS 2018, the "stochastic tester"), with the event chosen from samples as in Bichsel et al.,
"DP-Sniper" (S&P 2021) and Google's DP-Auditorium (histogram-based testers):

1. sample the mechanism's output many times on two neighbouring label sets D and D';
2. on a first (selection) part of the samples, choose an event E and a direction: the set of
   output categories whose estimated ratio P(o | D) / P(o | D') is largest, the prefix of that
   ranking that maximises the bound of step 3 computed on the selection samples;
3. on an independent (test) part, count the hits of E under D and D' and bound
   epsilon >= log((p_low(E | D) - delta) / p_high(E | D')) with Clopper-Pearson bounds, each at
   confidence 1 - alpha / 2.

Why the test is sound: E is a function of the selection samples only, hence independent of the
test samples. If the mechanism is (epsilon, delta)-DP, P(E | D) <= e^epsilon P(E | D') + delta;
the bound exceeds epsilon only if p_low > P(E | D) or p_high < P(E | D'), which together have
probability at most alpha. So ``AuditResult.violates`` is a false alarm with probability at most
alpha per audit, whatever the mechanism, sample sizes or event.

Outputs are reduced to integer categories first (any function of the output is post-processing,
so the bound stays valid): a column with few distinct values keeps them; a continuous column is
cut at quantiles of the selection samples, with every cut value (an atom, e.g. a clipped bound)
kept as a category of its own.

Pure functions: numpy arrays in, numbers out; the only randomness is the caller's sampler.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.stats import beta

from shared.rng import resolve_rng

# A sampler draws ``size`` outputs of the mechanism on one label set: (labels, size, rng) ->
# an array of shape (size,) or (size, k) (k features of each output).
Sampler = Callable[[np.ndarray, int, np.random.Generator], np.ndarray]


def clopper_pearson(
    hits: np.ndarray | int, trials: np.ndarray | int, *, alpha: float
) -> tuple[np.ndarray, np.ndarray]:
    """Exact two-sided (1 - alpha) binomial confidence intervals (Clopper & Pearson 1934).

    Each side is a one-sided bound at level alpha / 2: P(p < low) <= alpha / 2 and
    P(p > high) <= alpha / 2, by the beta-binomial identity. Vectorised over ``hits``.
    """
    k = np.asarray(hits, dtype=np.float64)
    n = np.asarray(trials, dtype=np.float64)
    if np.any(n < 1) or np.any(k < 0) or np.any(k > n):
        raise ValueError(f"need 0 <= hits ({hits}) <= trials ({trials}) and trials >= 1")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha ({alpha}) must be in (0, 1)")
    # Beta shape parameters must be > 0: the edge cases 0 and n are exact (0 and 1).
    low = beta.ppf(alpha / 2, np.maximum(k, 1.0), n - k + 1)
    high = beta.ppf(1 - alpha / 2, k + 1, np.maximum(n - k, 1.0))
    return np.where(k == 0, 0.0, low), np.where(k == n, 1.0, high)


def epsilon_lower_bound(
    hits_a: np.ndarray | int,
    trials_a: int,
    hits_b: np.ndarray | int,
    trials_b: int,
    *,
    alpha: float,
    delta: float = 0.0,
) -> np.ndarray:
    """log((p_low(a) - delta) / p_high(b)): with confidence 1 - alpha, epsilon is at least this.

    -inf where the lower bound on P(E | D) does not exceed delta (no evidence at all).
    """
    low_a, _ = clopper_pearson(hits_a, trials_a, alpha=alpha)
    _, high_b = clopper_pearson(hits_b, trials_b, alpha=alpha)
    margin = low_a - delta
    with np.errstate(divide="ignore"):
        return np.where(margin > 0.0, np.log(np.maximum(margin, 0.0) / high_b), -np.inf)


def _column_codes(selection: np.ndarray, max_levels: int) -> Callable[[np.ndarray], np.ndarray]:
    """A map from one feature column to integer categories, fixed by the selection samples."""
    levels = np.unique(selection)
    if levels.size <= max_levels:
        # Exact values; a value never seen in selection gets the category levels.size.
        def exact(column: np.ndarray) -> np.ndarray:
            index = np.searchsorted(levels, column)
            found = (index < levels.size) & (levels[np.minimum(index, levels.size - 1)] == column)
            return np.where(found, index, levels.size)

        return exact
    cuts = np.unique(np.quantile(selection, np.linspace(0.0, 1.0, max_levels + 1)[1:-1]))

    def binned(column: np.ndarray) -> np.ndarray:
        # Interval i between cuts -> 2 i; exactly cut i -> 2 i + 1 (atoms stay separate).
        index = np.searchsorted(cuts, column, side="left")
        on_cut = (index < cuts.size) & (cuts[np.minimum(index, cuts.size - 1)] == column)
        return 2 * index + on_cut

    return binned


def categorizer(
    selection: np.ndarray, *, max_levels: int = 64
) -> Callable[[np.ndarray], np.ndarray]:
    """Integer category of each output (row), chosen from the selection samples alone.

    ``selection`` has shape (n,) or (n, k); each column is mapped by itself (exact values, or
    quantile bins with atoms kept), and the k codes are combined into one integer.
    """
    table = np.asarray(selection, dtype=np.float64)
    table = table[:, None] if table.ndim == 1 else table
    maps = [_column_codes(table[:, j], max_levels) for j in range(table.shape[1])]

    def codes(samples: np.ndarray) -> np.ndarray:
        rows = np.asarray(samples, dtype=np.float64)
        rows = rows[:, None] if rows.ndim == 1 else rows
        combined = np.zeros(rows.shape[0], dtype=np.int64)
        for j, column_map in enumerate(maps):
            combined = combined * (2 * max_levels + 2) + column_map(rows[:, j])
        return combined

    return codes


@dataclass(frozen=True)
class Event:
    """A set of output categories and the direction it separates: ``"a>b"`` or ``"b>a"``."""

    categories: np.ndarray
    direction: str


def select_event(codes_a: np.ndarray, codes_b: np.ndarray, *, alpha: float) -> Event:
    """The event (set of categories, direction) with the largest bound on the selection samples.

    For each direction, categories are ranked by (count_hi + 1/2) / (count_lo + 1/2) and every
    prefix of the ranking is scored by :func:`epsilon_lower_bound` on the same counts; the best
    prefix of either direction wins (DP-Sniper's threshold on the likelihood ratio).
    """
    categories, inverse = np.unique(np.concatenate([codes_a, codes_b]), return_inverse=True)
    count_a = np.bincount(inverse[: codes_a.size], minlength=categories.size)
    count_b = np.bincount(inverse[codes_a.size :], minlength=categories.size)
    best = (-math.inf, Event(categories[:1], "a>b"))
    for direction, high, low, n_high, n_low in (
        ("a>b", count_a, count_b, codes_a.size, codes_b.size),
        ("b>a", count_b, count_a, codes_b.size, codes_a.size),
    ):
        order = np.argsort(-(high + 0.5) / (low + 0.5), kind="stable")
        scores = epsilon_lower_bound(
            np.cumsum(high[order]), n_high, np.cumsum(low[order]), n_low, alpha=alpha
        )
        size = int(np.argmax(scores)) + 1
        if scores[size - 1] > best[0]:
            best = (float(scores[size - 1]), Event(categories[order[:size]], direction))
    return best[1]


@dataclass(frozen=True)
class AuditResult:
    """The outcome of one audit: the lower bound on epsilon and the evidence behind it."""

    claimed: float
    lower_bound: float
    alpha: float
    event: Event
    hits: tuple[int, int]  # test hits of the event under (the higher side, the lower side)
    trials: tuple[int, int]

    @property
    def violates(self) -> bool:
        """Whether the claim is refuted with confidence 1 - alpha."""
        return self.lower_bound > self.claimed

    def __str__(self) -> str:
        return (
            f"epsilon >= {self.lower_bound:.4f} (claimed {self.claimed:g}, alpha {self.alpha:.1e};"
            f" event of {self.event.categories.size} categories {self.event.direction}, hits "
            f"{self.hits[0]}/{self.trials[0]} vs {self.hits[1]}/{self.trials[1]})"
        )


def audit_samples(
    selection: tuple[np.ndarray, np.ndarray],
    test: tuple[np.ndarray, np.ndarray],
    *,
    epsilon: float,
    alpha: float,
    delta: float = 0.0,
    max_levels: int = 64,
) -> AuditResult:
    """Choose the event on ``selection`` = (outputs on D, outputs on D'), bound it on ``test``."""
    codes = categorizer(np.concatenate(selection), max_levels=max_levels)
    event = select_event(codes(selection[0]), codes(selection[1]), alpha=alpha)
    in_a = np.isin(codes(test[0]), event.categories)
    in_b = np.isin(codes(test[1]), event.categories)
    high, low = (in_a, in_b) if event.direction == "a>b" else (in_b, in_a)
    hits = (int(high.sum()), int(low.sum()))
    trials = (high.size, low.size)
    bound = float(
        epsilon_lower_bound(hits[0], trials[0], hits[1], trials[1], alpha=alpha, delta=delta)
    )
    return AuditResult(epsilon, bound, alpha, event, hits, trials)


def draw(
    sampler: Sampler,
    labels_a: np.ndarray,
    labels_b: np.ndarray,
    *,
    n_select: int,
    n_test: int,
    seed: int,
) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """Selection and test samples on both label sets, from four independent seeded streams."""
    streams = resolve_rng(seed).spawn(4)
    selection = (
        sampler(labels_a, n_select, streams[0]),
        sampler(labels_b, n_select, streams[1]),
    )
    test = (sampler(labels_a, n_test, streams[2]), sampler(labels_b, n_test, streams[3]))
    return selection, test


def audit(
    sampler: Sampler,
    labels_a: np.ndarray,
    labels_b: np.ndarray,
    *,
    epsilon: float,
    alpha: float,
    n_select: int,
    n_test: int,
    seed: int,
    delta: float = 0.0,
    max_levels: int = 64,
) -> AuditResult:
    """Audit ``sampler`` on the neighbouring label sets (``labels_a``, ``labels_b``)."""
    selection, test = draw(sampler, labels_a, labels_b, n_select=n_select, n_test=n_test, seed=seed)
    return audit_samples(
        selection, test, epsilon=epsilon, alpha=alpha, delta=delta, max_levels=max_levels
    )


def repeat(
    one: Callable[[np.ndarray, np.random.Generator], np.ndarray | float],
) -> Sampler:
    """A sampler from a mechanism that releases one output per call (a Python loop)."""

    def sampler(labels: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
        return np.array([one(labels, rng) for _ in range(size)], dtype=np.float64)

    return sampler
