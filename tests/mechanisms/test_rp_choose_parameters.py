"""RPWithPrior parameter choice: "mse" vs "paper", brute force, zeta grid, California Housing."""

from __future__ import annotations

import itertools
import math
import time

import numpy as np
import pytest

from bench.naive_algorithm1 import naive_optimal_interval, naive_optimal_interval_numba
from shared.errors import InvalidParameterError
from shared.mechanisms.histogram import Prior
from shared.mechanisms.rp_with_prior import (
    RPWithPrior,
    choose_parameters,
    interval_objective,
    optimal_interval,
    zeta_grid,
)
from tests.conftest import KIT_DATASETS


def random_prior(rng: np.random.Generator, k: int, *, lo: float = 0.0, hi: float = 5.0) -> Prior:
    probs = rng.random(k) ** 2
    probs[rng.random(k) < 0.2] = 0.0
    if probs.sum() == 0.0:
        probs[0] = 1.0
    return Prior(edges=np.linspace(lo, hi, k + 1), probs=probs / probs.sum())


@pytest.mark.parametrize("outside", ["project", "uniform"])
@pytest.mark.parametrize("seed", range(4))
def test_mse_choice_equals_brute_force_over_edge_pairs_and_zetas(outside: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    prior = random_prior(rng, 9, lo=-3.0, hi=float(rng.choice([2.0, 40.0])))
    eps = float(rng.choice([0.3, 1.0, 4.0]))
    zetas = zeta_grid(prior, size=8)
    errors = {}
    for (i, j), zeta in itertools.product(
        itertools.combinations_with_replacement(range(prior.k + 1), 2), zetas
    ):
        mech = RPWithPrior(
            a1=prior.edges[i], a2=prior.edges[j], zeta=zeta, epsilon=eps, outside=outside
        )
        errors[(i, j, zeta)] = mech.expected_squared_error(prior)
    for zeta in zetas:
        chosen = choose_parameters(prior, epsilon=eps, zeta=zeta, outside=outside)
        assert chosen.zeta == zeta and chosen.outside == outside
        assert chosen.a1 in prior.edges and chosen.a2 in prior.edges
        best_here = min(v for key, v in errors.items() if key[2] == zeta)
        assert chosen.expected_squared_error(prior) == pytest.approx(best_here, rel=1e-9)


@pytest.mark.parametrize("seed", range(6))
def test_mse_choice_equals_brute_force_on_the_default_grid(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    prior = random_prior(rng, 6)
    eps = float(rng.choice([0.2, 1.0, 2.0, 6.0]))
    brute = min(
        RPWithPrior(
            a1=prior.edges[i], a2=prior.edges[j], zeta=z, epsilon=eps
        ).expected_squared_error(prior)
        for (i, j), z in itertools.product(
            itertools.combinations_with_replacement(range(prior.k + 1), 2), zeta_grid(prior)
        )
    )
    chosen = choose_parameters(prior, epsilon=eps)
    assert chosen.a1 in prior.edges and chosen.a2 in prior.edges
    assert chosen.expected_squared_error(prior) == pytest.approx(brute, rel=1e-9)


@pytest.mark.parametrize("seed", range(10))
def test_mse_choice_is_never_worse_than_the_paper(seed: int) -> None:
    rng = np.random.default_rng(200 + seed)
    prior = random_prior(rng, int(rng.integers(1, 80)))
    eps = float(rng.choice([0.1, 0.5, 1.0, 2.0, 8.0]))
    outside = str(rng.choice(["project", "uniform"]))
    for zeta in (None, float(rng.choice([0.01, 0.3, 2.0]))):
        paper = choose_parameters(prior, epsilon=eps, select="paper", zeta=zeta, outside=outside)
        mse = choose_parameters(prior, epsilon=eps, select="mse", zeta=zeta, outside=outside)
        assert mse.expected_squared_error(prior) <= paper.expected_squared_error(prior) * (
            1 + 1e-12
        )


def test_paper_choice_is_algorithm1_interval_and_best_zeta_on_grid() -> None:
    prior = random_prior(np.random.default_rng(3), 30)
    chosen = choose_parameters(prior, epsilon=1.0, select="paper", zeta=0.4)
    assert (chosen.a1, chosen.a2) == optimal_interval(prior, epsilon=1.0, zeta=0.4)
    assert chosen.zeta == 0.4
    best = choose_parameters(prior, epsilon=1.0, select="paper")
    candidates = [
        RPWithPrior(a1=a1, a2=a2, zeta=z, epsilon=1.0).expected_squared_error(prior)
        for z in zeta_grid(prior)
        for a1, a2 in [optimal_interval(prior, epsilon=1.0, zeta=z)]
    ]
    assert best.expected_squared_error(prior) == min(candidates)


def test_zeta_grid_depends_only_on_public_edges() -> None:
    rng = np.random.default_rng(4)
    a, b = random_prior(rng, 20), random_prior(rng, 20)
    np.testing.assert_array_equal(zeta_grid(a), zeta_grid(b))
    grid = zeta_grid(a)
    assert grid.size == 32 and np.all(np.diff(grid) > 0)
    assert grid[0] == pytest.approx(5.0 * 2.0**-14) and grid[-1] == pytest.approx(5.0)


def test_choice_is_scale_and_shift_equivariant() -> None:
    # Moving the labels to other units moves the chosen parameters with them.
    prior = random_prior(np.random.default_rng(5), 40)
    moved = Prior(edges=1000.0 + 250.0 * prior.edges, probs=prior.probs)
    base = choose_parameters(prior, epsilon=1.5)
    other = choose_parameters(moved, epsilon=1.5)
    assert other.a1 == pytest.approx(1000.0 + 250.0 * base.a1)
    assert other.a2 == pytest.approx(1000.0 + 250.0 * base.a2)
    assert other.zeta == pytest.approx(250.0 * base.zeta)
    assert other.expected_squared_error(moved) == pytest.approx(
        250.0**2 * base.expected_squared_error(prior), rel=1e-9
    )


@pytest.mark.perf
def test_choose_parameters_speed_200_bins_32_zetas() -> None:
    prior = random_prior(np.random.default_rng(6), 200)
    choose_parameters(prior, epsilon=1.0)  # compile / load the cached kernels
    start = time.perf_counter()
    choose_parameters(prior, epsilon=1.0)
    assert time.perf_counter() - start < 0.5


def test_choose_parameters_invalid_inputs() -> None:
    prior = random_prior(np.random.default_rng(7), 10)
    with pytest.raises(InvalidParameterError, match="select"):
        choose_parameters(prior, epsilon=1.0, select="best")
    with pytest.raises(InvalidParameterError, match="epsilon"):
        choose_parameters(prior, epsilon=0.0)
    with pytest.raises(InvalidParameterError, match="epsilon"):
        choose_parameters(prior, epsilon=math.inf)
    with pytest.raises(InvalidParameterError, match="zeta"):
        choose_parameters(prior, epsilon=1.0, zeta=-1.0)
    with pytest.raises(InvalidParameterError, match="outside"):
        choose_parameters(prior, epsilon=1.0, outside="drop")
    with pytest.raises(InvalidParameterError, match="prior"):
        choose_parameters({"edges": [0, 1], "probs": [1]}, epsilon=1.0)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- naive Algorithm 1
@pytest.mark.parametrize("seed", range(25))
def test_naive_algorithm1_reaches_the_same_maximum(seed: int) -> None:
    rng = np.random.default_rng(300 + seed)
    k = int(rng.integers(1, 20))
    edges = np.cumsum(np.concatenate(([rng.normal()], rng.random(k) + 0.05)))
    probs = rng.random(k) ** 3
    probs[rng.random(k) < 0.2] = 0.0
    probs = probs / probs.sum() if probs.sum() > 0 else np.full(k, 1.0 / k)
    prior = Prior(edges=edges, probs=probs)
    eps, zeta = float(rng.choice([0.1, 1.0, 5.0])), float(rng.choice([0.01, 0.2, 2.0]))
    ours = interval_objective(
        prior, *optimal_interval(prior, epsilon=eps, zeta=zeta), epsilon=eps, zeta=zeta
    )
    for naive in (naive_optimal_interval, naive_optimal_interval_numba):
        interval = naive(edges, probs, epsilon=eps, zeta=zeta)
        value = interval_objective(prior, *interval, epsilon=eps, zeta=zeta)
        assert value == pytest.approx(ours, rel=1e-12)


# --------------------------------------------------------------------------- California Housing
HOUSING = KIT_DATASETS / "cal_housing.data"


@pytest.fixture(scope="module")
def housing_labels() -> np.ndarray:
    if not HOUSING.exists():
        pytest.skip("California Housing data set not present")
    return np.loadtxt(HOUSING, delimiter=",")[:, -1] / 100000.0


@pytest.mark.parametrize(
    ("eps", "paper_at_least", "mse_range"),
    [(1.0, 1.45, (1.15, 1.21)), (2.0, 1.15, (0.84, 0.90))],
)
def test_housing_mse_choice_beats_the_paper(
    housing_labels: np.ndarray, eps: float, paper_at_least: float, mse_range: tuple
) -> None:
    # Issue claim (64 bins, exact prior): 1.52 -> 1.19 at eps = 1 and 1.19 -> 0.88 at eps = 2.
    # Measured: paper 1.513 / 1.251 (32-value zeta grid), mse 1.180 / 0.870.
    prior = Prior.from_samples(housing_labels, lo=0.0, hi=5.0, bins=64)
    paper = choose_parameters(prior, epsilon=eps, select="paper")
    mse = choose_parameters(prior, epsilon=eps, select="mse")
    paper_error, mse_error = paper.expected_squared_error(prior), mse.expected_squared_error(prior)
    assert paper_error >= paper_at_least
    assert mse_range[0] <= mse_error <= mse_range[1]
    # The analytic error is what the real labels get (within-bin shape aside).
    rng = np.random.default_rng(8)
    empirical = np.mean((mse.randomize(housing_labels, rng) - housing_labels) ** 2)
    assert empirical == pytest.approx(mse_error, rel=0.03)
