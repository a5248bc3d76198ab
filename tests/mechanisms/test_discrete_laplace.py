"""Exact discrete Laplace on integers: the same draws as the Fraction formulation, exactly
distributed from the OS CSPRNG's buffered bytes too."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

import shared.rng
from shared.errors import InvalidParameterError
from shared.mechanisms.discrete_laplace import (
    bernoulli_exp,
    bernoulli_sigmoid,
    discrete_laplace_noise,
    discrete_laplace_samples,
    sample_discrete_laplace,
)
from shared.mechanisms.histogram import noisy_histogram
from shared.rng import Rng, SystemRandom, randbelow
from tests.fresh_draws import assert_fits

# ------------------------------------------------- the Fraction formulation, as it was written


def _ref_bernoulli(rng: Rng, p: Fraction) -> bool:
    return randbelow(rng, p.denominator) < p.numerator


def _ref_bernoulli_exp_le1(rng: Rng, gamma: Fraction) -> bool:
    k = 1
    while _ref_bernoulli(rng, gamma / k):
        k += 1
    return k % 2 == 1


def ref_bernoulli_exp(rng: Rng, gamma: Fraction) -> bool:
    whole = math.floor(gamma)
    for _ in range(whole):
        if not _ref_bernoulli_exp_le1(rng, Fraction(1)):
            return False
    return _ref_bernoulli_exp_le1(rng, gamma - whole)


def ref_sample(rng: Rng, scale: Fraction) -> int:
    t, s = scale.numerator, scale.denominator
    while True:
        u = randbelow(rng, t)
        if not ref_bernoulli_exp(rng, Fraction(u, t)):
            continue
        v = 0
        while ref_bernoulli_exp(rng, Fraction(1)):
            v += 1
        y = (u + t * v) // s
        negative = randbelow(rng, 2) == 1
        if negative and y == 0:
            continue
        return -y if negative else y


SCALES = [
    Fraction(2) / Fraction(0.034999999999999996),  # the bench's histogram scale
    Fraction(1024) / Fraction(0.015),
    Fraction(1, 3),
    Fraction(7, 3),
    Fraction(1),
    Fraction(13.7),
]


@pytest.mark.parametrize("scale", SCALES)
def test_seeded_draws_are_the_fraction_formulations_draw_for_draw(scale: Fraction) -> None:
    """Same seed, same samples and the Generator left in the same state."""
    new, old = np.random.default_rng(5), np.random.default_rng(5)
    got = discrete_laplace_samples(new, scale, 300)
    assert got == [ref_sample(old, scale) for _ in range(300)]
    assert new.integers(0, 2**62) == old.integers(0, 2**62)


@settings(max_examples=80, deadline=None)
@given(
    gamma=st.fractions(min_value=0, max_value=5, max_denominator=10**6),
    seed=st.integers(0, 2**32 - 1),
)
def test_bernoulli_exp_is_the_fraction_formulation(gamma: Fraction, seed: int) -> None:
    new, old = np.random.default_rng(seed), np.random.default_rng(seed)
    assert [bernoulli_exp(new, gamma) for _ in range(20)] == [
        ref_bernoulli_exp(old, gamma) for _ in range(20)
    ]
    assert new.integers(0, 2**62) == old.integers(0, 2**62)


def pmf(z: np.ndarray, scale: float) -> np.ndarray:
    q = math.exp(-1.0 / scale)
    return (1 - q) / (1 + q) * q ** np.abs(z)


@pytest.mark.parametrize("scale", [0.7, 3.0, 57.142857142857146])
def test_csprng_draws_match_the_pmf_chi_square(scale: float) -> None:
    def pvalue() -> float:
        draws = discrete_laplace_noise(SystemRandom(), scale=scale, size=30_000)
        support = np.arange(-int(6 * scale) - 2, int(6 * scale) + 3)
        expected = pmf(support, scale) * draws.size
        observed = np.array([np.count_nonzero(draws == z) for z in support])
        keep = expected >= 5
        f_obs = np.append(observed[keep], draws.size - observed[keep].sum())
        f_exp = np.append(expected[keep], draws.size - expected[keep].sum())
        return float(stats.chisquare(f_obs, f_exp).pvalue)

    assert_fits(pvalue)


class CountingOs:
    """``shared.rng.os`` that counts ``urandom`` calls and bytes."""

    def __init__(self) -> None:
        self.calls = 0
        self.nbytes = 0

    def urandom(self, size: int) -> bytes:
        import os

        self.calls += 1
        self.nbytes += size
        return os.urandom(size)


def test_csprng_noise_comes_from_few_buffered_urandom_calls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """64 histogram cells of the bench's scale: a handful of ``os.urandom`` calls (through
    ``shared.rng``, so the bench counts them), not one system call per Bernoulli trial."""
    counting = CountingOs()
    monkeypatch.setattr(shared.rng, "os", counting)
    counts = np.full(64, 1000, dtype=np.int64)
    prior = noisy_histogram(counts, n=64_000, lo=0.0, hi=400.0, epsilon=0.035, rng=SystemRandom())
    assert prior.k == 64
    assert 1 <= counting.calls <= 12 and counting.nbytes <= 48 * 1024


def test_single_draw_and_bad_scales() -> None:
    assert isinstance(sample_discrete_laplace(SystemRandom(), Fraction(5, 2)), int)
    for bad in (Fraction(0), Fraction(-1, 2)):
        with pytest.raises(InvalidParameterError, match="scale"):
            sample_discrete_laplace(SystemRandom(), bad)
    with pytest.raises(InvalidParameterError, match="gamma"):
        bernoulli_exp(SystemRandom(), Fraction(-1))


@pytest.mark.parametrize(
    "z", [Fraction(0), Fraction(1, 3), Fraction(-2), Fraction(7), Fraction(-9, 4)]
)
def test_bernoulli_sigmoid_has_the_logistic_probability(z: Fraction) -> None:
    below = shared.rng.below_sampler(np.random.default_rng(21))
    trials = 20_000
    hits = sum(bernoulli_sigmoid(below, z) for _ in range(trials))
    p = 1.0 / (1.0 + math.exp(-float(z)))
    assert stats.binomtest(hits, trials, p).pvalue > 1e-4


def test_bernoulli_sigmoid_from_the_csprng_and_at_extreme_log_odds() -> None:
    p = 1.0 / (1.0 + math.exp(-0.8))
    assert_fits(
        lambda: (
            stats.binomtest(
                sum(bernoulli_sigmoid(SystemRandom(), Fraction(4, 5)) for _ in range(4000)), 4000, p
            ).pvalue
        )
    )
    # |z| = 10^300: certain outcomes, decided in a few draws (one failure ends exp(-z)).
    rng = np.random.default_rng(22)
    assert all(bernoulli_sigmoid(rng, Fraction(10**300)) for _ in range(200))
    assert not any(bernoulli_sigmoid(rng, Fraction(-(10**300))) for _ in range(200))
