"""RR-on-Bins optimality: kernels vs direct sums, DP vs brute force, DP vs the LP of Theorem 5."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy.optimize import linprog

from shared.mechanisms import _bins_kernels as kernels
from shared.mechanisms import rr_on_bins as rr
from shared.mechanisms.rr_on_bins import RROnBins, optimal_bins, pointwise_loss

LOSSES = ("squared", "absolute", "poisson")


def random_prior(
    rng: np.random.Generator, k: int, *, zero_fraction: float = 0.2, offset: float = 0.5
) -> tuple[np.ndarray, np.ndarray]:
    """k distinct sorted values in (0, 40) and masses with some exact zeros."""
    values = np.sort(rng.choice(np.arange(40), size=k, replace=False)).astype(float) + offset
    probs = rng.gamma(0.7, size=k)
    probs[rng.random(k) < zero_fraction] = 0.0
    if probs.sum() == 0:
        probs[rng.integers(k)] = 1.0
    return values, probs / probs.sum()


def direct_bin_cost(
    values: np.ndarray, probs: np.ndarray, a: int, b: int, epsilon: float, loss: str
) -> tuple[float, float]:
    """The paper's L[a][b] = min_c sum_y p_y e^{eps [a <= y <= b]} loss(c, y), by brute force."""
    inside = (np.arange(values.size) >= a) & (np.arange(values.size) <= b)
    w = probs * np.where(inside, math.exp(epsilon), 1.0)
    keep = w > 0
    if loss == "absolute":  # piecewise linear and convex: minimum at a value
        costs = [np.dot(w[keep], np.abs(c - values[keep])) for c in values]
        j = int(np.argmin(costs))
        return float(costs[j]), float(values[j])
    c = float(np.dot(w, values) / w.sum())  # squared and Poisson: the weighted mean
    return float(np.dot(w[keep], pointwise_loss(loss, c, values[keep]))), c


def brute_force_loss(
    values: np.ndarray, probs: np.ndarray, epsilon: float, loss: str, max_bins: int | None = None
) -> float:
    """Least expected loss over every partition of the values into intervals (2^(k-1) of them)."""
    k = values.size
    best = math.inf
    for cuts in itertools.product((False, True), repeat=k - 1):
        starts = [0] + [i + 1 for i, cut in enumerate(cuts) if cut]
        if max_bins is not None and len(starts) > max_bins:
            continue
        ends = [*starts[1:], k]
        total = sum(
            direct_bin_cost(values, probs, a, b - 1, epsilon, loss)[0]
            for a, b in zip(starts, ends, strict=True)
        )
        best = min(best, total / (len(starts) - 1 + math.exp(epsilon)))
    return best


def lp_optimum(
    values: np.ndarray, probs: np.ndarray, outputs: np.ndarray, epsilon: float, loss: str
) -> float:
    """Least expected loss of ANY epsilon-DP mechanism from the values to ``outputs`` (LP (2)).

    Variables M[y, o] = P(o | y); rows sum to 1; M[y', o] <= e^eps M[y, o] for all y != y'.
    """
    k, m = values.size, outputs.size
    n = k * m
    cost = (probs[:, None] * pointwise_loss(loss, outputs[None, :], values[:, None])).ravel()
    a_eq = np.zeros((k, n))
    for y in range(k):
        a_eq[y, y * m : (y + 1) * m] = 1.0
    rows = []
    for y, y2 in itertools.permutations(range(k), 2):
        block = np.zeros((m, n))
        block[np.arange(m), y2 * m + np.arange(m)] = 1.0
        block[np.arange(m), y * m + np.arange(m)] = -math.exp(epsilon)
        rows.append(block)
    result = linprog(
        cost,
        A_ub=np.vstack(rows),
        b_ub=np.zeros(len(rows) * m),
        A_eq=a_eq,
        b_eq=np.ones(k),
        bounds=(0, None),
        method="highs",
    )
    assert result.status == 0, result.message
    return float(result.fun)


# ---------------------------------------------------------------- kernels vs direct computation


@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("epsilon", [0.05, 1.0, 6.0])
def test_amortised_bin_costs_match_direct_sums(loss: str, epsilon: float) -> None:
    rng = np.random.default_rng(7)
    for _ in range(4):
        values, probs = random_prior(rng, 14, zero_fraction=0.0)
        s = rr._support(values, probs, epsilon=epsilon, loss=loss)
        x = s.x  # the kernels' (scaled, centred) coordinates
        costs, centers = kernels.cost_matrix(s.args())
        e_eps = math.exp(epsilon)  # kernels divide the paper's weights by e^eps
        for a in range(x.size):
            for b in range(a, x.size):
                want_cost, want_center = direct_bin_cost(x, probs, a, b, epsilon, loss)
                assert costs[a, b] * e_eps == pytest.approx(want_cost, rel=1e-10, abs=1e-12)
                if loss == "absolute":  # any point of a flat stretch is a median: check its cost
                    inside = (np.arange(x.size) >= a) & (np.arange(x.size) <= b)
                    w = probs * np.where(inside, e_eps, 1.0)
                    at_center = np.dot(w, np.abs(centers[a, b] - x))
                    assert at_center == pytest.approx(want_cost, rel=1e-10, abs=1e-12)
                else:
                    assert centers[a, b] == pytest.approx(want_center, rel=1e-12, abs=1e-14)
                # The single-bin (non-amortised) kernel agrees with the amortised row.
                single = kernels.bin_cost(a, b, s.args())
                assert single[0] == pytest.approx(costs[a, b], rel=1e-12, abs=1e-14)
                assert single[1] == centers[a, b] or loss == "absolute"


def test_absolute_walk_handles_a_heavy_bin_far_from_the_global_median() -> None:
    # Mass far left, a bin far right: upweighting the bin drags the median across many values.
    values = np.arange(30.0)
    probs = np.r_[np.full(10, 0.09), np.full(20, 0.1 / 20)]
    s = rr._support(values, probs, epsilon=5.0, loss="absolute")
    costs, _ = kernels.cost_matrix(s.args())
    for a, b in [(20, 29), (25, 25), (10, 29), (0, 29), (29, 29)]:
        want, _ = direct_bin_cost(s.x, probs, a, b, 5.0, "absolute")
        assert costs[a, b] * math.exp(5.0) == pytest.approx(want, rel=1e-10)


# ---------------------------------------------------------------- DP vs brute force


@pytest.mark.parametrize("loss", LOSSES)
def test_optimal_bins_matches_brute_force_over_all_interval_partitions(loss: str) -> None:
    rng = np.random.default_rng(11)
    for trial in range(40):
        k = int(rng.integers(1, 9))
        values, probs = random_prior(rng, k)
        epsilon = float(rng.choice([0.1, 0.5, 1.0, 2.0, 4.0, 8.0]))
        mechanism = optimal_bins(values, probs, epsilon=epsilon, loss=loss)
        got = mechanism.expected_loss(values, probs, loss)
        want = brute_force_loss(values, probs, epsilon, loss)
        assert got == pytest.approx(want, rel=1e-9, abs=1e-12), (trial, values, probs, epsilon)


@pytest.mark.parametrize("loss", LOSSES)
def test_capped_bins_match_brute_force_with_at_most_max_bins(loss: str) -> None:
    rng = np.random.default_rng(12)
    for _ in range(25):
        values, probs = random_prior(rng, int(rng.integers(2, 9)), zero_fraction=0.1)
        epsilon = float(rng.choice([2.0, 4.0, 8.0]))  # large epsilon: the cap binds
        cap = int(rng.integers(1, 4))
        mechanism = optimal_bins(values, probs, epsilon=epsilon, loss=loss, max_bins=cap)
        assert mechanism.d <= cap
        got = mechanism.expected_loss(values, probs, loss)
        assert got == pytest.approx(brute_force_loss(values, probs, epsilon, loss, cap), rel=1e-9)


@pytest.mark.parametrize("loss", LOSSES)
def test_dinkelbach_agrees_with_algorithm_2_over_every_bin_count(loss: str) -> None:
    rng = np.random.default_rng(13)
    for _ in range(10):
        values, probs = random_prior(rng, 30, zero_fraction=0.0)
        for epsilon in (0.3, 3.0, 12.0):
            s = rr._support(values, probs, epsilon=epsilon, loss=loss)
            exact = rr._partition_loss(s, rr._dinkelbach(s))
            layered = rr._partition_loss(s, rr._capped(s, s.k))
            assert exact == pytest.approx(layered, rel=1e-12, abs=1e-14)


# ---------------------------------------------------------------- Theorem 5: DP vs LP


@pytest.mark.parametrize("loss", LOSSES)
def test_optimal_bins_equals_lp_optimum_over_all_dp_mechanisms(loss: str) -> None:
    """Theorem 5/8: the LP over ALL epsilon-DP mechanisms to a grid holding RR-on-Bins' outputs
    cannot beat RR-on-Bins (and cannot do worse, since RR-on-Bins is one of its solutions)."""
    rng = np.random.default_rng(5)
    for trial in range(6):
        k = int(rng.integers(3, 6))
        values, probs = random_prior(rng, k, zero_fraction=0.15, offset=1.0)  # > 0 for Poisson
        epsilon = float([0.3, 1.0, 2.5][trial % 3])
        mechanism = optimal_bins(values, probs, epsilon=epsilon, loss=loss)
        grid = np.union1d(np.linspace(values[0], values[-1], 25), mechanism.output_values)
        ours = mechanism.expected_loss(values, probs, loss)
        best = lp_optimum(values, probs, grid, epsilon, loss)
        assert best == pytest.approx(ours, rel=1e-6, abs=1e-8), (trial, values, probs, epsilon)
        if mechanism.d > 1:  # the comparison has teeth: a single bin is measurably worse
            single = optimal_bins(values, probs, epsilon=epsilon, loss=loss, max_bins=1)
            assert single.expected_loss(values, probs, loss) > best + 1e-6 * abs(best)


def test_lp_over_a_grid_without_rr_outputs_is_never_better() -> None:
    # A grid missing the optimal outputs: the LP optimum can only be worse than RR-on-Bins.
    values = np.array([0.0, 1.0, 3.0, 7.0])
    probs = np.array([0.4, 0.1, 0.2, 0.3])
    mechanism = optimal_bins(values, probs, epsilon=1.0)
    ours = mechanism.expected_loss(values, probs)
    grid = np.linspace(0.0, 7.0, 8)
    assert not np.isin(mechanism.output_values, grid).any()
    assert lp_optimum(values, probs, grid, 1.0, "squared") >= ours * (1 - 1e-7)


# ---------------------------------------------------------------- cheap optimality at larger k


def not_worse(loss: float, other: float) -> bool:
    """loss <= other up to rounding (Poisson losses can be negative)."""
    return loss <= other + 1e-12 * abs(other)


@pytest.mark.parametrize("loss", LOSSES)
def test_optimum_beats_simple_feasible_binnings_at_k_401(loss: str) -> None:
    rng = np.random.default_rng(3)
    values = np.arange(401.0) + 1.0
    probs = rng.gamma(0.3, size=401)
    probs /= probs.sum()
    for epsilon in (0.5, 2.0, 8.0):
        best = optimal_bins(values, probs, epsilon=epsilon, loss=loss)
        ours = best.expected_loss(values, probs, loss)
        s = rr._support(values, probs, epsilon=epsilon, loss=loss)
        exact = rr._partition_loss(s, rr._dinkelbach(s))  # in the kernels' units
        for d in (1, 2, 5, 20, 100, 401):  # equal-count binnings, each a feasible RR-on-Bins
            starts = np.unique(np.linspace(0, s.k, d, endpoint=False).astype(np.int64))
            assert not_worse(exact, rr._partition_loss(s, starts))
        capped = optimal_bins(values, probs, epsilon=epsilon, loss=loss, max_bins=3)
        assert not_worse(ours, capped.expected_loss(values, probs, loss))


@pytest.mark.parametrize("loss", LOSSES)
def test_huge_and_tiny_labels_give_the_scaled_mechanism(loss: str) -> None:
    values, probs = random_prior(np.random.default_rng(8), 12, offset=1.0)
    base = optimal_bins(values, probs, epsilon=3.0, loss=loss)
    assert base.d >= 2
    for factor in (2.0**-1000, 1e-200, 1e150, 2.0**1000):
        scaled = optimal_bins(values * factor, probs, epsilon=3.0, loss=loss)
        assert np.allclose(scaled.output_values / factor, base.output_values, rtol=1e-12)
        assert np.allclose(scaled.thresholds / factor, base.thresholds, rtol=1e-12)


def test_merge_ties_turns_decreasing_outputs_into_increasing_ones() -> None:
    # A light bin between heavy ones is pulled to the global mean, above its right neighbour.
    values = np.array([0.0, 1.0, 2.0, 10.0])
    probs = np.array([0.3, 0.001, 0.399, 0.3])
    s = rr._support(values, probs, epsilon=1.0, loss="squared")
    starts = np.array([0, 1, 2, 3])
    assert np.any(np.diff(rr._outputs(s, starts, values)) <= 0)
    merged, outputs = rr._merge_ties(s, starts, values)
    assert np.all(np.diff(outputs) > 0)
    assert merged.size < starts.size
    RROnBins(thresholds=np.arange(outputs.size - 1.0), output_values=outputs, epsilon=1.0)
