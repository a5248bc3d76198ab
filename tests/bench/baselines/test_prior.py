"""The prior-based baselines: RRWithPrior and the LP "Unbiased" randomizer."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from scipy import sparse, stats
from scipy.optimize import linprog

from bench.baselines import (
    RRWithPrior,
    Unbiased,
    optimal_unbiased,
    rounding_weights,
    top_k_choice,
)
from bench.baselines.unbiased import output_range_bounds
from shared.errors import InvalidParameterError
from shared.mechanisms.histogram import Prior

LO, HI = 0.0, 4.0
RTOL = 1e-9


def assert_ratio_bounded(p: np.ndarray, q: np.ndarray, epsilon: float) -> None:
    worst = np.max(p - math.exp(epsilon) * q * (1.0 + RTOL), initial=-np.inf)
    assert worst <= 0.0, f"DP ratio violated by {worst:.3g}"


def check_matrix_dp(probs: np.ndarray, epsilon: float) -> None:
    """Every pair of rows (labels) within a factor e^eps on every output."""
    for i in range(probs.shape[0]):
        for j in range(probs.shape[0]):
            assert_ratio_bounded(probs[i], probs[j], epsilon)


def skewed_prior(bins: int = 16, seed: int = 0) -> Prior:
    samples = np.random.default_rng(seed).gamma(2.0, 0.6, 5000)
    return Prior.from_samples(samples, lo=LO, hi=HI, bins=bins)


def labels_everywhere(prior: Prior) -> np.ndarray:
    """Every midpoint and edge, points in between, and labels beyond both bounds."""
    return np.concatenate(
        [prior.midpoints, prior.edges, prior.edges[:-1] + 0.3 * np.diff(prior.edges), [-5, 1e6]]
    )


# ---------------------------------------------------------------- RRWithPrior


def test_top_k_matches_brute_force() -> None:
    rng = np.random.default_rng(1)
    for _ in range(50):
        probs = rng.dirichlet(np.full(12, 0.4))
        eps = float(rng.uniform(0.05, 6.0))
        k, top = top_k_choice(probs, epsilon=eps)
        order = np.argsort(-probs, kind="stable")
        values = [
            probs[order[:j]].sum() * math.exp(eps) / (math.exp(eps) + j - 1) for j in range(1, 13)
        ]
        assert k == 1 + int(np.argmax(values))
        assert set(top) == set(order[:k])


def test_top_k_extremes() -> None:
    uniform = np.full(8, 1 / 8)
    assert top_k_choice(uniform, epsilon=0.1)[0] == 8  # all equally likely: keep them all
    peaked = np.array([0.93] + [0.01] * 7)
    assert top_k_choice(peaked, epsilon=0.1)[0] == 1  # at small eps, answer the mode


@pytest.mark.parametrize("epsilon", [0.05, 0.5, 1.0, 3.0, 8.0])
def test_rr_with_prior_dp_ratio(epsilon: float) -> None:
    prior = skewed_prior()
    mech = RRWithPrior(prior=prior, epsilon=epsilon)
    probs = mech.output_probabilities(labels_everywhere(prior))
    assert np.allclose(probs.sum(axis=1), 1.0, atol=1e-12)
    check_matrix_dp(probs, epsilon)
    if 1 < mech.k < prior.k:  # labels inside and outside the top set both occur; tight ratio
        assert probs.max() / probs.min() == pytest.approx(math.exp(epsilon), rel=1e-12)


def test_rr_with_prior_probabilities() -> None:
    prior = skewed_prior()
    mech = RRWithPrior(prior=prior, epsilon=1.0)
    assert 1 < mech.k < prior.k
    inside = prior.midpoints[mech.top_cells[0]]
    outside_cell = np.setdiff1d(np.arange(prior.k), mech.top_cells)[0]
    outside = prior.midpoints[outside_cell]
    row_in, row_out = mech.output_probabilities([inside, outside])
    e = math.e
    assert row_in[0] == pytest.approx(e / (e + mech.k - 1))
    assert row_in[1:] == pytest.approx(np.full(mech.k - 1, 1 / (e + mech.k - 1)))
    assert row_out == pytest.approx(np.full(mech.k, 1 / mech.k))
    assert float(mech.pmf(inside, inside)) == pytest.approx(row_in[0])
    assert float(mech.pmf(inside + 1e-3, inside)) == 0.0  # not an output value


@pytest.mark.slow
@pytest.mark.parametrize("label", [0.1, 1.3, 3.9, 9.0])
def test_rr_with_prior_sampler_matches_pmf(label: float) -> None:
    mech = RRWithPrior(prior=skewed_prior(), epsilon=1.0)
    n = 100_000
    samples = mech.randomize(np.full(n, label), np.random.default_rng(17))
    counts = np.array([np.count_nonzero(samples == v) for v in mech.output_values])
    assert counts.sum() == n  # nothing outside the output values
    expected = mech.output_probabilities([label])[0] * n
    assert stats.chisquare(counts, expected).pvalue > 1e-4


# ---------------------------------------------------------------- Unbiased


def brute_force_lp(g: np.ndarray, w: np.ndarray, z: np.ndarray, epsilon: float) -> float:
    """The textbook LP: pairwise constraints P[i, j] <= e^eps P[i', j] for all i != i'."""
    k, m = g.size, z.size
    rows, cols, vals = [], [], []
    r = 0
    for j in range(m):
        for i in range(k):
            for i2 in range(k):
                if i != i2:
                    rows += [r, r]
                    cols += [i * m + j, i2 * m + j]
                    vals += [1.0, -math.exp(epsilon)]
                    r += 1
    a_ub = sparse.csr_matrix((vals, (rows, cols)), shape=(r, k * m))
    a_eq = sparse.vstack(
        [
            sparse.kron(sparse.identity(k), np.ones((1, m))),
            sparse.kron(sparse.identity(k), z[None, :]),
        ]
    )
    cost = (w[:, None] * (z[None, :] - g[:, None]) ** 2).ravel()
    result = linprog(
        cost,
        A_ub=a_ub,
        b_ub=np.zeros(r),
        A_eq=a_eq,
        b_eq=np.concatenate([np.ones(k), g]),
        bounds=(0, None),
        method="highs",
    )
    assert result.status == 0
    return float(result.fun)


@pytest.mark.parametrize("epsilon", [0.3, 1.0, 3.0])
def test_unbiased_lp_matches_pairwise_lp(epsilon: float) -> None:
    """The per-output auxiliary-variable LP is the same problem as the pairwise one."""
    g = np.array([0.0, 0.5, 1.5, 2.0, 4.0])
    w = np.array([0.1, 0.3, 0.3, 0.2, 0.1])
    lower, upper = output_range_bounds(g, epsilon=epsilon)
    z = np.linspace(lower - 0.01, upper + 0.01, 13)
    mech = optimal_unbiased(input_grid=g, weights=w, epsilon=epsilon, output_grid=z, refine=0)
    # The mechanism is solved at epsilon minus a 1e-4 relative slack: within 1e-3 of optimal.
    assert mech.grid_squared_error(w) == pytest.approx(brute_force_lp(g, w, z, epsilon), rel=1e-3)
    assert mech.grid_squared_error(w) >= brute_force_lp(g, w, z, epsilon) * (1 - 1e-9)


@pytest.mark.parametrize("epsilon", [0.05, 0.3, 1.0, 3.0, 8.0, 30.0])
@pytest.mark.parametrize("grid", ["edges", "midpoints"])
@pytest.mark.parametrize("rounding", ["randomized", "nearest"])
def test_unbiased_dp_and_unbiasedness(epsilon: float, grid: str, rounding: str) -> None:
    prior = skewed_prior(bins=12)
    mech = Unbiased.from_prior(prior, epsilon=epsilon, grid=grid, rounding=rounding)
    p, z = mech.probabilities, mech.output_grid
    assert np.allclose(p.sum(axis=1), 1.0, atol=1e-12)
    span = z[-1] - z[0]
    assert np.max(np.abs(p @ z - mech.input_grid)) <= 1e-9 * span  # exact, from the LP
    labels = labels_everywhere(prior)
    probs = mech.output_probabilities(labels)
    check_matrix_dp(probs, epsilon)
    if rounding == "randomized":  # unbiased for every label on the grid's span, not only nodes
        inside = (labels >= mech.input_grid[0]) & (labels <= mech.input_grid[-1])
        assert np.max(np.abs(probs[inside] @ z - labels[inside])) <= 1e-9 * span
        assert mech.affine_expectation() == (1.0, 0.0)
    else:
        assert mech.affine_expectation() is None


def test_unbiased_output_range_reaches_beyond_bounds_at_small_epsilon() -> None:
    prior = skewed_prior(bins=12)
    mech = Unbiased.from_prior(prior, epsilon=0.1)
    lower, upper = mech.output_range
    assert lower < LO - 5 * (HI - LO) and upper > HI + 5 * (HI - LO)
    lo_l, hi_u = output_range_bounds(prior.edges, epsilon=0.1 * (1 - 1e-4))
    assert lo_l <= lower and upper <= hi_u


def test_unbiased_beats_unbiased_randomized_response() -> None:
    """Appendix J's unbiased RR is feasible for the LP, so the LP can only do better."""
    prior = skewed_prior(bins=12)
    g = prior.edges
    w = rounding_weights(prior, g, rounding="randomized")
    for eps in (0.5, 2.0):
        mech = optimal_unbiased(input_grid=g, weights=w, epsilon=eps)
        k, e = g.size, math.exp(eps)
        zk = g + k * (g - g.mean()) / (e - 1)
        rr = np.full((k, k), 1 / (e + k - 1)) + np.eye(k) * (e - 1) / (e + k - 1)
        assert np.allclose(rr @ zk, g)
        rr_error = float(w @ (rr * (zk[None, :] - g[:, None]) ** 2).sum(axis=1))
        assert mech.grid_squared_error(w) < rr_error


def test_unbiased_rounding_weights_are_exact() -> None:
    prior = skewed_prior(bins=10)
    grid = np.array([0.3, 1.0, 1.7, 3.1])
    samples = np.random.default_rng(2).uniform(size=400_000)
    # Sample from the piecewise-uniform prior by inverting its CDF.
    cum = np.concatenate([[0.0], np.cumsum(prior.probs)])
    y = np.interp(samples, cum, prior.edges)
    yc = np.clip(y, grid[0], grid[-1])
    low = np.clip(np.searchsorted(grid, yc, side="right") - 1, 0, grid.size - 2)
    frac = (yc - grid[low]) / (grid[low + 1] - grid[low])
    mc = np.bincount(low, 1 - frac, minlength=4) + np.bincount(low + 1, frac, minlength=4)
    exact = rounding_weights(prior, grid, rounding="randomized")
    assert exact.sum() == pytest.approx(1.0)
    assert exact == pytest.approx(mc / y.size, abs=3e-3)
    nearest = rounding_weights(prior, grid, rounding="nearest")
    cuts = np.concatenate([[-np.inf], 0.5 * (grid[1:] + grid[:-1]), [np.inf]])
    assert nearest == pytest.approx(np.histogram(y, cuts)[0] / y.size, abs=3e-3)


@pytest.mark.slow
@pytest.mark.parametrize("label", [0.0, 0.77, 2.5, 4.0, 7.0])
def test_unbiased_sampler_matches_probabilities(label: float) -> None:
    mech = Unbiased.from_prior(skewed_prior(bins=12), epsilon=1.0)
    n = 100_000
    samples = mech.randomize(np.full(n, label), np.random.default_rng(23))
    index = np.searchsorted(mech.output_grid, samples)
    assert np.all(mech.output_grid[index] == samples)
    counts = np.bincount(index, minlength=mech.output_grid.size)
    probs = mech.output_probabilities([label])[0]
    keep = probs * n >= 5
    obs = np.append(counts[keep], counts[~keep].sum())
    exp = np.append(probs[keep], probs[~keep].sum()) * n
    if exp[-1] < 1e-9:
        obs, exp = obs[:-1], exp[:-1]
    assert stats.chisquare(obs, exp * n / exp.sum()).pvalue > 1e-4
    # Unbiased by Monte Carlo as well, for a label strictly inside the grid.
    if LO <= label <= HI:
        sd = math.sqrt(float(probs @ (mech.output_grid - label) ** 2))
        assert abs(samples.mean() - label) < 5 * sd / math.sqrt(n)


def test_unbiased_refuses_bad_matrices() -> None:
    g = np.array([0.0, 1.0])
    z = np.array([-1.0, 0.0, 1.0, 2.0])
    good = np.array([[0.3, 0.3, 0.2, 0.2], [0.2, 0.2, 0.3, 0.3]])
    # Not unbiased: means are 0.3 and 0.7, not 0 and 1.
    with pytest.raises(InvalidParameterError, match="not unbiased"):
        Unbiased(epsilon=1.0, input_grid=g, output_grid=z, probabilities=good)
    leaky = np.array([[0.5, 0.0, 0.5, 0.0], [0.0, 0.0, 1.0, 0.0]])  # unbiased, stochastic
    with pytest.raises(InvalidParameterError, match="DP"):  # 0.5 vs 0: infinite ratio
        Unbiased(epsilon=1.0, input_grid=g, output_grid=z, probabilities=leaky)
    too_wide = np.array([[0.5, 0.1, 0.3, 0.1], [0.1, 0.1, 0.5, 0.3]])  # ratio 5 > e
    with pytest.raises(InvalidParameterError, match="DP"):
        Unbiased(epsilon=1.0, input_grid=g, output_grid=z, probabilities=too_wide + 0.0)
    assert Unbiased(epsilon=2.0, input_grid=g, output_grid=z, probabilities=too_wide + 0.0)
    with pytest.raises(InvalidParameterError, match="sum to 1"):
        Unbiased(epsilon=1.0, input_grid=g, output_grid=z, probabilities=good * 0.9)
    with pytest.raises(InvalidParameterError, match="shape"):
        Unbiased(epsilon=1.0, input_grid=g, output_grid=z, probabilities=good[:, :3])


@pytest.mark.perf
def test_unbiased_solves_64_inputs_quickly() -> None:
    """The brief's budget: the LP for a 64-cell prior in under 2 s (4 s allowed on shared CI)."""
    prior = skewed_prior(bins=64)
    worst = 0.0
    for eps in (0.1, 1.0, 2.0, 4.0):
        start = time.perf_counter()
        Unbiased.from_prior(prior, epsilon=eps, grid="midpoints")
        worst = max(worst, time.perf_counter() - start)
    assert worst < 4.0
