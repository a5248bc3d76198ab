"""RPWithPrior: optimal interval, exact grid sampler, density, error formulas, DP inequality."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate, stats

from shared.errors import InvalidParameterError
from shared.mechanisms._interval_kernels import cell_values, window_starts
from shared.mechanisms.histogram import Prior
from shared.mechanisms.rp_with_prior import (
    RPWithPrior,
    interval_objective,
    optimal_interval,
)

ONE = 2.0**53


def random_prior(rng: np.random.Generator, k: int, *, offset: float = 0.0) -> Prior:
    """Unequal cells, some empty, heavy-tailed masses: the awkward cases for the interval."""
    edges = offset + np.cumsum(np.concatenate(([rng.normal()], rng.random(k) + 0.05)))
    probs = rng.random(k) ** 3
    probs[rng.random(k) < 0.25] = 0.0
    if probs.sum() == 0.0:
        probs[int(rng.integers(0, k))] = 1.0
    return Prior(edges=edges, probs=probs / probs.sum())


def objective_grid(prior: Prior, a1: np.ndarray, a2: np.ndarray, eps: float, zeta: float):
    """F(A1, A2) on a mesh (A1 <= A2 only; -inf elsewhere), straight from the definition."""
    lo, hi = np.meshgrid(a1, a2, indexing="ij")
    mass = prior.cdf(hi) - prior.cdf(lo)
    value = 2 * zeta / (2 * zeta + math.exp(-eps) * (hi - lo)) * mass
    return np.where(lo <= hi, value, -np.inf)


# --------------------------------------------------------------------------- optimal interval
@pytest.mark.parametrize("seed", range(12))
def test_optimal_interval_matches_dense_grid_search(seed: int) -> None:
    rng = np.random.default_rng(seed)
    prior = random_prior(rng, int(rng.integers(1, 13)), offset=float(rng.choice([0.0, 1e4])))
    eps = float(rng.choice([0.05, 0.5, 1.0, 3.0, 8.0]))
    zeta = float(rng.choice([0.01, 0.1, 0.7, 3.0]))
    a1, a2 = optimal_interval(prior, epsilon=eps, zeta=zeta)
    assert a1 in prior.edges and a2 in prior.edges and a1 < a2
    best = interval_objective(prior, a1, a2, epsilon=eps, zeta=zeta)
    # 601 points across (and beyond) the support, edges deliberately NOT on the grid ...
    dense = np.linspace(prior.lo - 0.5, prior.hi + 0.5, 601) + 1e-7
    assert objective_grid(prior, dense, dense, eps, zeta).max() <= best * (1 + 1e-12)
    # ... and with the edges added, the grid maximum is exactly ours.
    with_edges = np.union1d(dense, prior.edges)
    assert objective_grid(prior, with_edges, with_edges, eps, zeta).max() == pytest.approx(
        best, rel=1e-12
    )


@pytest.mark.parametrize("seed", range(40))
def test_hull_method_finds_the_same_maximum(seed: int) -> None:
    rng = np.random.default_rng(1000 + seed)
    prior = random_prior(rng, int(rng.integers(1, 400)))
    eps = float(rng.choice([0.01, 0.5, 2.0, 10.0, 40.0, 800.0]))
    zeta = float(rng.choice([1e-4, 0.05, 0.5, 5.0]))
    pairs = optimal_interval(prior, epsilon=eps, zeta=zeta)
    hull = optimal_interval(prior, epsilon=eps, zeta=zeta, method="hull")
    assert interval_objective(prior, *hull, epsilon=eps, zeta=zeta) == pytest.approx(
        interval_objective(prior, *pairs, epsilon=eps, zeta=zeta), rel=1e-12
    )


def test_optimal_interval_exact_tie_takes_smallest_edges() -> None:
    # Two equal spikes: [0, 1] and [2, 3] give the same F (exactly); [0, 3] is worse here.
    prior = Prior(edges=np.array([0.0, 1.0, 2.0, 3.0]), probs=np.array([0.5, 0.0, 0.5]))
    assert optimal_interval(prior, epsilon=1.0, zeta=0.1) == (0.0, 1.0)
    flipped = Prior(edges=prior.edges, probs=prior.probs[::-1].copy())
    assert optimal_interval(flipped, epsilon=1.0, zeta=0.1) == (0.0, 1.0)


def test_optimal_interval_is_deterministic_and_covers_whole_uniform_prior() -> None:
    prior = Prior(edges=np.linspace(2.0, 7.0, 51), probs=np.full(50, 0.02))
    # A uniform prior: F grows with the interval, so the whole support wins.
    assert optimal_interval(prior, epsilon=1.0, zeta=0.5) == (2.0, 7.0)
    rng = np.random.default_rng(5)
    other = random_prior(rng, 40)
    first = optimal_interval(other, epsilon=0.7, zeta=0.3)
    assert all(optimal_interval(other, epsilon=0.7, zeta=0.3) == first for _ in range(3))


def test_interval_objective_definition() -> None:
    prior = Prior(edges=np.array([0.0, 1.0, 3.0]), probs=np.array([0.25, 0.75]))
    # mass in [0.5, 2] = 0.125 + 0.375; gamma/2zeta = (2 * 0.4 + e^-1 * 1.5) / 0.8
    expected = 0.8 / (0.8 + math.exp(-1.0) * 1.5) * 0.5
    assert interval_objective(prior, 0.5, 2.0, epsilon=1.0, zeta=0.4) == pytest.approx(expected)
    with pytest.raises(InvalidParameterError, match="a1"):
        interval_objective(prior, 2.0, 1.0, epsilon=1.0, zeta=0.4)


# --------------------------------------------------------------------------- grid mechanics
def test_grid_constants_and_window_placement() -> None:
    mech = RPWithPrior(a1=0.0, a2=1.0, zeta=0.25, epsilon=1.0, grid_cells=12)
    assert mech.cell_width == 0.125 and mech.window_cells == 4
    assert mech.output_range == (-0.25, 1.25)
    np.testing.assert_array_equal(
        mech.window_start(np.array([-5.0, 0.0, 0.5, 1.0, 9.0])), [0, 0, 4, 8, 8]
    )
    values = mech.output_values()
    assert values.size == 12 and values[0] == -0.1875 and values[-1] == 1.1875
    # The window of y = 0.5 is [0.25, 0.75]: cells 4..7.
    assert values[4] - mech.cell_width / 2 == 0.25 and values[7] + mech.cell_width / 2 == 0.75


def test_kernels_match_numpy_reference() -> None:
    rng = np.random.default_rng(1)
    mech = RPWithPrior(a1=-3.0, a2=11.0, zeta=0.7, epsilon=2.0, grid_cells=1000)
    labels = np.concatenate((rng.normal(4, 8, 5000), [-3.0, 11.0, -3.0 + 1e-12]))
    w, top = mech.cell_width, 1000 - mech.window_cells
    reference = np.clip(np.rint((np.clip(labels, -3.0, 11.0) + 3.0) / w), 0, top)
    np.testing.assert_array_equal(window_starts(labels, -3.0, 11.0, w, top), reference)
    np.testing.assert_array_equal(mech.window_start(labels), reference)
    cells = rng.integers(0, 1000, 5000)
    np.testing.assert_array_equal(cell_values(cells, -3.7, w), -3.7 + (cells + 0.5) * w)


def test_cell_index_inverts_output_values() -> None:
    mech = RPWithPrior(a1=1e3, a2=1e3 + 5.0, zeta=0.3, epsilon=1.0)
    cells = np.array([0, 1, 12345, mech.grid_cells - 1])
    np.testing.assert_array_equal(mech.cell_index(mech.output_values(cells)), cells)


# --------------------------------------------------------------------------- the DP inequality
LABELS = np.array(
    [-1e9, -3.0, -1.0 - 1e-12, -1.0, -0.999, -0.6, 0.0, 0.31, 1.7, 2.4999, 2.5, 2.5 + 1e-12, 7.0]
)


def ratio_bound(prob: np.ndarray, eps: float) -> float:
    """max over outputs and label pairs of p(out | y) / p(out | y'), divided by e^eps."""
    assert np.all(prob >= 0)
    support = prob > 0
    # The support of every label is the same set of outputs (zero rows must coincide).
    assert np.all(support == support[:1]), "support differs between labels"
    columns = prob[:, support[0]]
    log_ratio = np.log(columns.max(axis=0)) - np.log(columns.min(axis=0))
    return math.exp(float(log_ratio.max()) - eps)  # in logs: e^800 overflows


@pytest.mark.parametrize("outside", ["project", "uniform"])
@pytest.mark.parametrize("eps", [1e-6, 0.1, 1.0, 4.0, 12.0, 30.0])
def test_density_ratio_is_at_most_e_eps(outside: str, eps: float) -> None:
    mech = RPWithPrior(a1=-1.0, a2=2.5, zeta=0.4, epsilon=eps, outside=outside)
    low, high = mech.output_range
    outputs = np.concatenate(
        (
            np.linspace(low - 1.0, high + 1.0, 801),
            [low, high, -1.4, -0.6, 2.1, 2.9],  # window edges of the boundary labels
            LABELS - 0.4,
            LABELS + 0.4,
        )
    )
    density = mech.density(outputs[None, :], LABELS[:, None])
    assert np.all(density[:, (outputs < low) | (outputs > high)] == 0)
    assert ratio_bound(density, eps) <= 1 + 1e-9


@pytest.mark.parametrize("outside", ["project", "uniform"])
@pytest.mark.parametrize("eps", [1e-9, 0.1, 1.0, 4.0, 12.0, 40.0, 800.0])
@pytest.mark.parametrize("cells", [1, 7, 64, 1000])
def test_cell_probability_ratio_is_at_most_e_eps_on_every_cell(
    outside: str, eps: float, cells: int
) -> None:
    mech = RPWithPrior(a1=-1.0, a2=2.5, zeta=0.4, epsilon=eps, outside=outside, grid_cells=cells)
    pmf = mech.cell_probability(np.arange(cells)[None, :], LABELS[:, None])
    np.testing.assert_allclose(pmf.sum(axis=1), 1.0, rtol=1e-12)
    assert ratio_bound(pmf, eps) <= 1 + 1e-9
    assert np.all(mech.cell_probability(np.array([-1, cells]), 0.0) == 0)


@pytest.mark.parametrize("outside", ["project", "uniform"])
@pytest.mark.parametrize("eps", [1e-9, 0.5, 2.0, 40.0])
def test_cell_probability_ratio_on_default_grid(outside: str, eps: float) -> None:
    mech = RPWithPrior(a1=-1.0, a2=2.5, zeta=0.4, epsilon=eps, outside=outside)
    n, m = mech.grid_cells, mech.window_cells
    starts = mech.window_start(LABELS)
    # Every cell where some label's pmf can change value, plus the ends of the grid.
    probe = np.unique(
        np.clip(np.concatenate([starts - 1, starts, starts + m - 1, starts + m]), 0, n - 1)
    )
    probe = np.union1d(probe, [0, 1, n // 2, n - 2, n - 1])
    pmf = mech.cell_probability(probe[None, :], LABELS[:, None])
    assert ratio_bound(pmf, eps) <= 1 + 1e-9
    p_in, p_out = mech.cell_probability(np.array([starts[6], 0]), 0.0)
    assert m * p_in + (n - m) * p_out == pytest.approx(1.0, rel=1e-14)


@pytest.mark.parametrize("eps", [0.01, 1.0, 5.0, 10.0])
def test_cell_probability_is_the_discrete_analogue_of_3_4(eps: float) -> None:
    mech = RPWithPrior(a1=0.0, a2=4.0, zeta=0.5, epsilon=eps)
    n, m = mech.grid_cells, mech.window_cells
    gamma = m + math.exp(-eps) * (n - m)
    p_in, p_out = mech.cell_probability(np.array([mech.window_start(2.0), 0]), 2.0)
    assert p_in == pytest.approx(1 / gamma, rel=1e-12)
    assert p_out == pytest.approx(math.exp(-eps) / gamma, rel=1e-12)
    # Rounded to the private side: never more likely in the window than the ideal pmf.
    assert mech.threshold / ONE <= m / gamma


def test_large_epsilon_keeps_every_cell_reachable() -> None:
    # e^-800 underflows; the realised pmf must still give every cell a positive probability.
    mech = RPWithPrior(a1=0.0, a2=1.0, zeta=0.1, epsilon=800.0)
    assert mech.threshold == ONE - 1
    assert mech.cell_probability(np.array([mech.grid_cells - 1]), 0.0)[0] > 0


def test_uniform_rule_ignores_labels_outside() -> None:
    mech = RPWithPrior(a1=0.0, a2=1.0, zeta=0.2, epsilon=1.0, outside="uniform", grid_cells=50)
    cells = np.arange(50)
    for y in (-100.0, -1e-9, 1.0 + 1e-9, 7.0):
        np.testing.assert_array_equal(mech.cell_probability(cells, y), np.full(50, 1 / 50))
        np.testing.assert_allclose(mech.density(np.array([-0.2, 0.5]), y), 1 / 1.4, rtol=1e-15)
    # Labels at the bounds are inside: they get (3.4), not the uniform rule.
    assert mech.cell_probability(np.array([0]), 0.0)[0] > 1 / 50


# --------------------------------------------------------------------------- the sampler
@pytest.mark.parametrize("outside", ["project", "uniform"])
@pytest.mark.parametrize("y", [-2.0, 0.0, 0.37, 1.0, 3.0])
def test_sampler_matches_cell_probability_small_grid(outside: str, y: float) -> None:
    mech = RPWithPrior(a1=0.0, a2=1.0, zeta=0.3, epsilon=1.5, outside=outside, grid_cells=40)
    rng = np.random.default_rng([len(outside), int(100 * y) + 1000])
    cells = mech.randomize_cells(np.full(200_000, y), rng)
    observed = np.bincount(cells, minlength=40)
    expected = mech.cell_probability(np.arange(40), y) * cells.size
    assert stats.chisquare(observed, expected).pvalue > 1e-4


@pytest.mark.slow
@pytest.mark.parametrize("outside", ["project", "uniform"])
def test_sampler_matches_cell_probability_default_grid(outside: str) -> None:
    mech = RPWithPrior(a1=1.0, a2=4.0, zeta=0.35, epsilon=0.8, outside=outside)
    n, m = mech.grid_cells, mech.window_cells
    bounds = np.linspace(0, n, 61).round().astype(np.int64)  # 60 coarse bins of cells
    p_in, p_out = mech.cell_probability(np.array([mech.window_start(2.0), 0]), 2.0)
    rng = np.random.default_rng(11)
    for y in (0.2, 1.0, 2.345, 4.0, 6.0):
        cells = mech.randomize_cells(np.full(300_000, y), rng)
        observed = np.bincount(np.searchsorted(bounds, cells, side="right") - 1, minlength=60)
        size = np.diff(bounds)
        if outside == "uniform" and not 1.0 <= y <= 4.0:
            expected = size / n
        else:
            s = int(mech.window_start(y))
            overlap = np.clip(np.minimum(bounds[1:], s + m) - np.maximum(bounds[:-1], s), 0, None)
            expected = overlap * p_in + (size - overlap) * p_out
        assert expected.sum() == pytest.approx(1.0, rel=1e-12)
        assert stats.chisquare(observed, expected * cells.size).pvalue > 1e-4


def test_sampler_deterministic_under_seed_and_on_grid() -> None:
    mech = RPWithPrior(a1=-2.0, a2=3.0, zeta=0.5, epsilon=1.0, outside="uniform")
    labels = np.random.default_rng(0).normal(0.5, 3.0, 10_000)
    first = mech.randomize(labels, np.random.default_rng(42))
    np.testing.assert_array_equal(first, mech.randomize(labels, np.random.default_rng(42)))
    assert not np.array_equal(first, mech.randomize(labels, np.random.default_rng(43)))
    np.testing.assert_array_equal(mech.output_values(mech.cell_index(first)), first)


def test_sampler_works_with_the_system_csprng() -> None:
    from shared.rng import SystemRandom

    mech = RPWithPrior(a1=0.0, a2=1.0, zeta=0.2, epsilon=1.0, outside="uniform")
    out = mech.randomize(np.array([-1.0, 0.0, 0.5, 1.0, 2.0] * 100), SystemRandom())
    low, high = mech.output_range
    assert out.shape == (500,) and np.all((out > low) & (out < high))


@settings(max_examples=60, deadline=None)
@given(
    a1=st.floats(-100, 100),
    width=st.floats(0, 100),
    zeta=st.floats(1e-3, 50),
    eps=st.floats(0.01, 30),
    cells=st.integers(1, 2**24),
    outside=st.sampled_from(["project", "uniform"]),
    labels=st.lists(st.floats(-1e3, 1e3), min_size=1, max_size=50),
    seed=st.integers(0, 2**32 - 1),
)
def test_outputs_always_on_grid_inside_range_and_deterministic(
    a1, width, zeta, eps, cells, outside, labels, seed
) -> None:
    mech = RPWithPrior(
        a1=a1, a2=a1 + width, zeta=zeta, epsilon=eps, outside=outside, grid_cells=cells
    )
    y = np.array(labels)
    index = mech.randomize_cells(y, np.random.default_rng(seed))
    assert np.all((index >= 0) & (index < cells))
    out = mech.randomize(y, np.random.default_rng(seed))
    np.testing.assert_array_equal(out, mech.output_values(index))
    low, high = mech.output_range
    assert np.all((out >= low) & (out <= high))
    np.testing.assert_array_equal(mech.cell_index(out), index)
    assert np.all(mech.cell_probability(index, y) > 0)


# --------------------------------------------------------------------------- accuracy formulas
def piecewise_samples(prior: Prior, n: int, rng: np.random.Generator) -> np.ndarray:
    cell = rng.choice(prior.k, size=n, p=prior.probs)
    return prior.edges[cell] + rng.random(n) * np.diff(prior.edges)[cell]


MSE_CASES = [
    # (a1, a2, zeta, eps, outside): interval on, off, inside and beyond the prior's support
    (1.0, 3.0, 0.4, 1.0, "project"),
    (0.7, 2.2, 1.3, 0.3, "project"),
    (-1.0, 6.0, 0.2, 2.0, "project"),
    (2.0, 2.0, 0.5, 1.0, "project"),
    (0.7, 2.2, 0.3, 3.0, "uniform"),
    (1.5, 4.5, 0.8, 0.5, "uniform"),
]
PRIOR = Prior(edges=np.array([0.0, 0.5, 1.5, 2.0, 4.0, 5.0]), probs=[0.1, 0.3, 0.2, 0.3, 0.1])


def numerical_mse(mech: RPWithPrior, prior: Prior) -> float:
    """Double integral of (t - y)^2 f(t | y) f_Y(y) with quad, split at every kink."""
    low, high = mech.output_range

    def inner(y: float) -> float:
        p = min(max(y, mech.a1), mech.a2)
        points = sorted({low, high, max(low, p - mech.zeta), min(high, p + mech.zeta)})
        total = 0.0
        for left, right in zip(points[:-1], points[1:], strict=False):
            total += integrate.quad(
                lambda t, y=y: (t - y) ** 2 * float(mech.density(t, y)), left, right
            )[0]
        return total

    total = 0.0
    for i in range(prior.k):
        lo_, hi_ = prior.edges[i], prior.edges[i + 1]
        cuts = sorted({lo_, hi_, *[x for x in (mech.a1, mech.a2) if lo_ < x < hi_]})
        density = prior.probs[i] / (hi_ - lo_)
        for left, right in zip(cuts[:-1], cuts[1:], strict=False):
            total += density * integrate.quad(inner, left, right, epsabs=1e-13)[0]
    return total


@pytest.mark.parametrize("case", MSE_CASES)
def test_expected_squared_error_matches_numerical_integration(case) -> None:
    a1, a2, zeta, eps, outside = case
    mech = RPWithPrior(a1=a1, a2=a2, zeta=zeta, epsilon=eps, outside=outside)
    assert mech.expected_squared_error(PRIOR) == pytest.approx(numerical_mse(mech, PRIOR), rel=1e-8)


@pytest.mark.parametrize("case", MSE_CASES)
def test_expected_squared_error_matches_monte_carlo(case) -> None:
    a1, a2, zeta, eps, outside = case
    mech = RPWithPrior(a1=a1, a2=a2, zeta=zeta, epsilon=eps, outside=outside)
    rng = np.random.default_rng(7)
    y = piecewise_samples(PRIOR, 400_000, rng)
    squared = (mech.randomize(y, rng) - y) ** 2
    error = squared.std() / math.sqrt(y.size)
    assert abs(squared.mean() - mech.expected_squared_error(PRIOR)) < 5 * error


def test_paper_appendix_d_expression_lacks_the_one_minus_e_eps_factor() -> None:
    # Appendix D's "E[loss | y]" = 2 zeta P(y)/gamma + e^-eps (A1 + A2)(A2 - A1 + 2 zeta)/(2 gamma)
    # is really the conditional mean with the window term missing (1 - e^-eps): the true mean
    # (by quadrature) is a y + b, and the paper's expression is off by 2 zeta e^-eps y / gamma.
    mech = RPWithPrior(a1=1.0, a2=3.0, zeta=0.4, epsilon=0.5)
    delta, gamma, y = math.exp(-0.5), mech.gamma, 2.2
    mean = integrate.quad(lambda t: t * float(mech.density(t, y)), 0.6, 3.4, points=[1.8, 2.6])[0]
    a, b = mech.affine_expectation()
    assert a * y + b == pytest.approx(mean, rel=1e-12)
    paper = 2 * 0.4 * y / gamma + delta / (2 * gamma) * (1.0 + 3.0) * (3.0 - 1.0 + 0.8)
    assert paper - mean == pytest.approx(2 * 0.4 * delta * y / gamma, rel=1e-9)


@pytest.mark.parametrize("y", [1.0, 1.3, 2.0, 2.71, 3.0])
def test_affine_expectation(y: float) -> None:
    mech = RPWithPrior(a1=1.0, a2=3.0, zeta=0.45, epsilon=0.8)
    a, b = mech.affine_expectation()
    low, high = mech.output_range
    points = [low, max(low, y - 0.45), min(high, y + 0.45), high]
    numeric = sum(
        integrate.quad(lambda t: t * float(mech.density(t, y)), left, right)[0]
        for left, right in zip(points[:-1], points[1:], strict=False)
    )
    assert a * y + b == pytest.approx(numeric, rel=1e-10)
    # The grid sampler's exact mean is within a couple of cells of the continuous one.
    start = int(mech.window_start(y))
    probe = 0 if start > 0 else mech.grid_cells - 1  # a cell outside the window
    p_in, p_out = mech.cell_probability(np.array([start, probe]), y)
    assert p_in > p_out
    window = mech.output_values(np.arange(start, start + mech.window_cells))
    all_values = mech.output_values()
    mean = p_out * all_values.sum() + (p_in - p_out) * window.sum()
    assert abs(mean - (a * y + b)) < 2 * mech.cell_width


# --------------------------------------------------------------------------- parameters / errors
def test_public_params_round_trip_through_json() -> None:
    mech = RPWithPrior(a1=0.25, a2=3.5, zeta=0.1, epsilon=0.7, outside="uniform", grid_cells=1000)
    params = json.loads(json.dumps(mech.public_params()))
    assert params == {
        "a1": 0.25,
        "a2": 3.5,
        "zeta": 0.1,
        "epsilon": 0.7,
        "outside": "uniform",
        "grid_cells": 1000,
    }
    assert RPWithPrior.from_params(params) == mech == RPWithPrior(**params)
    assert RPWithPrior.from_params({"a1": 0, "a2": 1, "zeta": 1, "epsilon": 1}).grid_cells == 2**24


GOOD = {"a1": 0.0, "a2": 1.0, "zeta": 0.2, "epsilon": 1.0}


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"epsilon": 0.0}, "epsilon"),
        ({"epsilon": -1.0}, "epsilon"),
        ({"epsilon": math.nan}, "epsilon"),
        ({"epsilon": math.inf}, "epsilon"),
        ({"a1": 2.0}, "a1"),
        ({"a1": math.nan}, "a1"),
        ({"a2": math.inf}, "a2"),
        ({"a1": "0"}, "a1"),
        ({"zeta": 0.0}, "zeta"),
        ({"zeta": -0.1}, "zeta"),
        ({"zeta": math.nan}, "zeta"),
        ({"zeta": True}, "zeta"),
        ({"grid_cells": 0}, "grid_cells"),
        ({"grid_cells": 2**49}, "grid_cells"),
        ({"grid_cells": 10.0}, "grid_cells"),
        ({"grid_cells": True}, "grid_cells"),
        ({"outside": "clip"}, "outside"),
        ({"a1": -1e308, "a2": 1e308}, "output range"),
        ({"epsilon": 1e-17}, "epsilon"),
    ],
)
def test_invalid_parameters_are_refused(changes: dict, match: str) -> None:
    with pytest.raises(InvalidParameterError, match=match):
        RPWithPrior(**{**GOOD, **changes})


@pytest.mark.parametrize(
    "labels", [[0.5, math.nan], [math.inf], [-math.inf, 0.0], [], [[0.1, 0.2]]]
)
def test_invalid_labels_are_refused(labels: list) -> None:
    mech = RPWithPrior(**GOOD)
    with pytest.raises(InvalidParameterError, match="labels"):
        mech.randomize(np.array(labels), np.random.default_rng(0))


def test_other_invalid_inputs() -> None:
    mech = RPWithPrior(**GOOD)
    with pytest.raises(InvalidParameterError, match="cells"):
        mech.cell_probability(np.array([0.5]), 0.0)
    with pytest.raises(InvalidParameterError, match="finite"):
        mech.cell_probability(np.array([0]), math.nan)
    with pytest.raises(InvalidParameterError, match="finite"):
        mech.density(np.array([math.nan]), 0.0)
    with pytest.raises(InvalidParameterError, match="unknown"):
        RPWithPrior.from_params({**GOOD, "sigma": 1})
    with pytest.raises(InvalidParameterError, match="missing"):
        RPWithPrior.from_params({"a1": 0.0})
    with pytest.raises(InvalidParameterError, match="prior"):
        optimal_interval([0.5, 0.5], epsilon=1.0, zeta=0.1)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="epsilon"):
        optimal_interval(PRIOR, epsilon=math.inf, zeta=0.1)
    with pytest.raises(InvalidParameterError, match="zeta"):
        optimal_interval(PRIOR, epsilon=1.0, zeta=0.0)
    with pytest.raises(InvalidParameterError, match="method"):
        optimal_interval(PRIOR, epsilon=1.0, zeta=0.1, method="fast")
