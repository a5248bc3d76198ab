"""The epsilon1 step: exact discrete Laplace, the private histogram and the Prior."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from shared.errors import InvalidParameterError
from shared.mechanisms.discrete_laplace import (
    bernoulli_exp,
    discrete_laplace_noise,
    sample_discrete_laplace,
)
from shared.mechanisms.histogram import (
    Prior,
    bin_counts,
    bin_edges,
    private_histogram,
    project_to_simplex,
)
from shared.rng import SystemRandom


def discrete_laplace_pmf(z: np.ndarray, scale: float) -> np.ndarray:
    """Closed form: P(z) = (1 - q) / (1 + q) * q^|z| with q = exp(-1/scale)."""
    q = math.exp(-1.0 / scale)
    return (1 - q) / (1 + q) * q ** np.abs(z)


@pytest.mark.parametrize("gamma", [Fraction(0), Fraction(1, 3), Fraction(1), Fraction(7, 3)])
def test_bernoulli_exp_frequency(rng: np.random.Generator, gamma: Fraction) -> None:
    trials = 20_000
    hits = sum(bernoulli_exp(rng, gamma) for _ in range(trials))
    expected = math.exp(-float(gamma))
    assert stats.binomtest(hits, trials, expected).pvalue > 1e-4


@pytest.mark.parametrize("scale", [0.5, 2.0, 13.7])
def test_discrete_laplace_matches_its_pmf(rng: np.random.Generator, scale: float) -> None:
    draws = discrete_laplace_noise(rng, scale=scale, size=40_000)
    support = np.arange(-int(8 * scale) - 3, int(8 * scale) + 4)
    expected = discrete_laplace_pmf(support, scale) * draws.size
    observed = np.array([np.count_nonzero(draws == z) for z in support])
    # Merge the thin tails so each chi-square cell expects at least 5 draws.
    keep = expected >= 5
    tail_expected = draws.size - expected[keep].sum()
    tail_observed = draws.size - observed[keep].sum()
    f_obs = np.append(observed[keep], tail_observed)
    f_exp = np.append(expected[keep], tail_expected)
    assert stats.chisquare(f_obs, f_exp).pvalue > 1e-4


def test_discrete_laplace_from_the_csprng_has_the_right_variance() -> None:
    scale = 4.0
    draws = discrete_laplace_noise(SystemRandom(), scale=scale, size=20_000)
    q = math.exp(-1 / scale)
    variance = 2 * q / (1 - q) ** 2
    assert abs(draws.mean()) < 5 * math.sqrt(variance / draws.size)
    assert abs(draws.var() / variance - 1) < 0.1


def test_discrete_laplace_rejects_bad_scale(rng: np.random.Generator) -> None:
    with pytest.raises(InvalidParameterError, match="scale"):
        sample_discrete_laplace(rng, Fraction(0))


def test_histogram_dp_inequality_is_analytic() -> None:
    """Neighbouring count vectors differ by one unit in two cells: ratio <= e^eps exactly."""
    epsilon, bins = 0.7, 5
    scale = 2.0 / epsilon
    counts = np.array([3, 0, 10, 1, 4])
    rng = np.random.default_rng(0)
    for _ in range(200):
        src, dst = rng.choice(bins, size=2, replace=False)
        neighbour = counts.copy()
        neighbour[src] -= 1
        neighbour[dst] += 1
        noisy = rng.integers(-20, 30, size=bins)  # any released count vector
        p = np.prod(discrete_laplace_pmf(noisy - counts, scale))
        q = np.prod(discrete_laplace_pmf(noisy - neighbour, scale))
        assert p / q <= math.exp(epsilon) * (1 + 1e-9)


def test_bin_counts_cover_bounds_and_beyond() -> None:
    labels = np.array([-5.0, 0.0, 0.49, 0.5, 1.0, 7.0])
    counts = bin_counts(np.clip(labels, 0, 1), lo=0.0, hi=1.0, bins=2)
    assert counts.tolist() == [3, 3]


def test_private_histogram_is_close_for_large_n(rng: np.random.Generator) -> None:
    labels = rng.uniform(0, 10, size=200_000)
    prior = private_histogram(labels, lo=0.0, hi=10.0, bins=10, epsilon=1.0, rng=rng)
    assert prior.k == 10
    np.testing.assert_allclose(prior.probs, 0.1, atol=0.005)
    np.testing.assert_allclose(prior.edges, np.linspace(0, 10, 11))


def test_private_histogram_infinite_epsilon_is_exact(rng: np.random.Generator) -> None:
    labels = np.array([0.1, 0.2, 0.9, 0.95])
    prior = private_histogram(labels, lo=0.0, hi=1.0, bins=2, epsilon=math.inf, rng=rng)
    assert prior.probs.tolist() == [0.5, 0.5]


def test_all_zero_noisy_counts_give_the_uniform_prior() -> None:
    prior = Prior.from_counts(np.array([-3, 0, -1]), edges=np.array([0.0, 1.0, 2.0, 3.0]))
    np.testing.assert_allclose(prior.probs, 1 / 3)


def test_private_histogram_is_deterministic_under_a_seed() -> None:
    labels = np.linspace(0, 1, 1000)
    first = private_histogram(labels, lo=0, hi=1, bins=8, epsilon=0.5, rng=np.random.default_rng(3))
    second = private_histogram(
        labels, lo=0, hi=1, bins=8, epsilon=0.5, rng=np.random.default_rng(3)
    )
    np.testing.assert_array_equal(first.probs, second.probs)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"labels": [np.nan]}, "finite"),
        ({"labels": [np.inf]}, "finite"),
        ({"labels": []}, "empty"),
        ({"epsilon": 0.0}, "epsilon"),
        ({"epsilon": -1.0}, "epsilon"),
        ({"epsilon": math.nan}, "epsilon"),
        ({"lo": 1.0, "hi": 1.0}, "lo"),
        ({"lo": 2.0, "hi": 1.0}, "lo"),
        ({"bins": 0}, "bins"),
        ({"bins": 2.5}, "bins"),
    ],
)
def test_private_histogram_rejects_invalid_input(
    rng: np.random.Generator, kwargs: dict[str, object], match: str
) -> None:
    args: dict[str, object] = {"labels": [0.5], "lo": 0.0, "hi": 1.0, "bins": 4, "epsilon": 1.0}
    args.update(kwargs)
    labels = args.pop("labels")
    with pytest.raises(InvalidParameterError, match=match):
        private_histogram(np.asarray(labels, dtype=float), rng=rng, **args)  # type: ignore[arg-type]


def test_prior_cdf_and_moments_match_brute_force() -> None:
    prior = Prior(edges=np.array([0.0, 1.0, 3.0, 4.0]), probs=np.array([0.2, 0.5, 0.3]))
    grid = np.linspace(0, 4, 400_001)
    density = np.repeat(prior.probs / np.diff(prior.edges), [100_000, 200_000, 100_000])
    density = np.append(density, density[-1])
    weights = density / density.sum()
    assert prior.mean() == pytest.approx(np.dot(weights, grid), abs=1e-4)
    assert prior.second_moment() == pytest.approx(np.dot(weights, grid**2), abs=1e-3)
    assert prior.cdf(2.0) == pytest.approx(0.45)
    assert prior.cdf(-1.0) == 0.0 and prior.cdf(9.0) == 1.0


@pytest.mark.parametrize(
    ("edges", "probs"),
    [
        ([0.0, 1.0], [0.5]),
        ([0.0, 1.0, 1.0], [0.5, 0.5]),
        ([0.0, 1.0], [1.0, 0.0]),
        ([0.0, 1.0, 2.0], [1.5, -0.5]),
        ([0.0, np.inf], [1.0]),
    ],
)
def test_prior_validation(edges: list[float], probs: list[float]) -> None:
    with pytest.raises(InvalidParameterError):
        Prior(edges=np.array(edges), probs=np.array(probs))


@settings(max_examples=50, deadline=None)
@given(
    samples=st.lists(st.floats(-100, 100), min_size=1, max_size=50),
    bins=st.integers(1, 20),
)
def test_from_samples_is_a_probability_vector(samples: list[float], bins: int) -> None:
    prior = Prior.from_samples(np.array(samples), lo=-10.0, hi=10.0, bins=bins)
    assert prior.probs.sum() == pytest.approx(1.0)
    assert np.all(prior.probs >= 0)
    np.testing.assert_allclose(prior.edges, bin_edges(lo=-10.0, hi=10.0, bins=bins))


@settings(max_examples=60, deadline=None)
@given(
    counts=st.lists(st.integers(-50, 200), min_size=1, max_size=12),
    total=st.integers(1, 500),
)
def test_projection_is_the_closest_consistent_count_vector(counts: list[int], total: int) -> None:
    noisy = np.array(counts, dtype=float)
    projected = project_to_simplex(noisy, total=total)
    assert np.all(projected >= 0) and projected.sum() == pytest.approx(total)
    # Optimality (KKT): c = max(noisy - tau, 0) for one common tau; no random feasible point
    # is closer to the noisy counts.
    positive = projected > 0
    shifts = (noisy - projected)[positive]
    np.testing.assert_allclose(shifts, shifts[0], atol=1e-9)
    assert np.all(noisy[~positive] <= shifts[0] + 1e-9)
    others = np.random.default_rng(0).dirichlet(np.ones(noisy.size), size=200) * total
    distance = np.linalg.norm(projected - noisy)
    assert np.all(np.linalg.norm(others - noisy, axis=1) >= distance - 1e-9)


def test_projection_removes_the_clamping_bias_on_a_sparse_histogram(
    rng: np.random.Generator,
) -> None:
    labels = np.concatenate([np.zeros(9_000), rng.uniform(0, 10, size=1_000)])
    errors = {"clamp": [], "project": []}
    for consistency in errors:
        for _ in range(30):
            prior = private_histogram(
                labels, lo=0, hi=100, bins=50, epsilon=0.05, rng=rng, consistency=consistency
            )
            errors[consistency].append(prior.mean() - labels.mean())
    rms = {key: float(np.sqrt(np.mean(np.square(value)))) for key, value in errors.items()}
    assert rms["project"] < 0.5 * rms["clamp"]


def test_unknown_consistency_rule_is_refused(rng: np.random.Generator) -> None:
    with pytest.raises(InvalidParameterError, match="consistency"):
        private_histogram(np.ones(3), lo=0, hi=2, bins=2, epsilon=1.0, rng=rng, consistency="round")  # type: ignore[arg-type]
