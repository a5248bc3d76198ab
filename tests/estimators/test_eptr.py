"""Algorithm 2 (ePTR) against its formulas, both paths, and a seeded release-frequency check."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binomtest, chisquare, norm

from shared.errors import InvalidParameterError
from shared.estimators.eptr import (
    eptr_noise_scale,
    eptr_release,
    eptr_release_probability,
    eptr_threshold,
)

EPS = st.floats(min_value=0.05, max_value=16.0)
DELTA = st.floats(min_value=1e-9, max_value=0.5)


def _logit(p: float) -> float:
    return math.log(p) - math.log1p(-p)


def test_threshold_probability_and_scale_match_the_formulas() -> None:
    for eps, delta in [(1.0, 0.01), (0.5, 1e-6), (4.0, 0.3), (0.01, 0.5)]:
        m = 1.0 + 2.0 / eps * math.log(max(1.0 / delta, 1.0 / eps))
        assert eptr_threshold(epsilon=eps, delta=delta) == pytest.approx(m, rel=1e-15)
        for gamma in [0.0, 1.0, m, 2 * m, 50.0]:
            z = eps / 2 * (gamma - m)
            p = math.exp(z) / (math.exp(z) + 1.0)
            assert eptr_release_probability(gamma=gamma, epsilon=eps, delta=delta) == (
                pytest.approx(p, rel=1e-12)
            )
        sd = 2 * 0.3 / eps * math.sqrt(2 * math.log(1.25 / delta))
        assert eptr_noise_scale(alpha=0.3, epsilon=eps, delta=delta) == pytest.approx(sd)
    # The case M = 1 + (2/eps) log(1/eps) (1/eps > 1/delta) is the one chosen when eps < delta.
    assert eptr_threshold(epsilon=0.01, delta=0.5) == pytest.approx(1 + 200 * math.log(100))


def test_no_reply_path_returns_the_fixed_message() -> None:
    rng = np.random.default_rng(1)
    out = eptr_release(
        np.array([1.0, 2.0]), gamma=0.0, alpha=1.0, epsilon=1.0, delta=1e-6,
        no_reply=np.array([9.0, -9.0]), rng=rng,
    )  # fmt: skip
    assert not out.released
    assert np.array_equal(out.value, [9.0, -9.0])
    assert out.release_probability < 1e-6
    assert out.noise_scale == pytest.approx(2 / 1.0 * math.sqrt(2 * math.log(1.25e6)))


def test_release_path_adds_gaussian_noise_of_the_stated_scale() -> None:
    rng = np.random.default_rng(2)
    estimate = np.full(40_000, 3.0)
    out = eptr_release(
        estimate, gamma=1e6, alpha=0.5, epsilon=2.0, delta=0.01, no_reply=0.0, rng=rng
    )
    assert out.released and out.release_probability == 1.0
    noise = (out.value - estimate) / out.noise_scale
    assert abs(noise.mean()) < 0.03 and abs(noise.std() - 1.0) < 0.02
    # Shape of the law: 10 equiprobable normal cells, chi-square goodness of fit.
    cells = np.searchsorted(norm.ppf(np.linspace(0, 1, 11)[1:-1]), noise)
    assert chisquare(np.bincount(cells, minlength=10)).pvalue > 1e-4


@pytest.mark.slow
def test_release_frequency_matches_the_probability() -> None:
    rng = np.random.default_rng(3)
    eps, delta = 1.0, 0.01
    gamma = eptr_threshold(epsilon=eps, delta=delta) - 1.5  # p = sigmoid(-0.75), about 0.32
    p = eptr_release_probability(gamma=gamma, epsilon=eps, delta=delta)
    trials = 4000
    hits = sum(
        eptr_release(
            np.zeros(1), gamma=gamma, alpha=1.0, epsilon=eps, delta=delta, no_reply=0.0, rng=rng
        ).released
        for _ in range(trials)
    )
    assert binomtest(hits, trials, p).pvalue > 1e-4


@settings(max_examples=200, deadline=None)
@given(eps=EPS, delta=DELTA, gamma=st.floats(min_value=0.0, max_value=1e3))
def test_test_step_is_eps_half_dp_for_a_one_lipschitz_gamma(
    eps: float, delta: float, gamma: float
) -> None:
    """Neighbours move gamma by <= 1: the log-odds of releasing move by <= eps / 2."""
    p0 = eptr_release_probability(gamma=gamma, epsilon=eps, delta=delta)
    p1 = eptr_release_probability(gamma=gamma + 1.0, epsilon=eps, delta=delta)
    assert 0.0 <= p0 <= p1 <= 1.0
    # Where 1 - p is below 1e-6 the double p itself carries the rounding (module caveat).
    if 0.0 < p0 < p1 < 1.0 - 1e-6:
        assert _logit(p1) - _logit(p0) == pytest.approx(eps / 2, rel=1e-6, abs=1e-9)
        # Hence P(release) and P(no reply) each change by a factor <= e^(eps/2).
        assert p1 / p0 <= math.exp(eps / 2) * (1 + 1e-6)
        assert (1 - p0) / (1 - p1) <= math.exp(eps / 2) * (1 + 1e-6)


@settings(max_examples=200, deadline=None)
@given(eps=EPS, delta=DELTA)
def test_release_probability_at_gamma_zero_is_below_delta(eps: float, delta: float) -> None:
    p = eptr_release_probability(gamma=0.0, epsilon=eps, delta=delta)
    assert p <= math.exp(-eps / 2) * min(delta, eps) * (1 + 1e-9)


@pytest.mark.parametrize(
    ("field", "kwargs"),
    [
        ("estimate", {"estimate": [np.nan]}),
        ("estimate", {"estimate": []}),
        ("gamma", {"gamma": -1.0}),
        ("gamma", {"gamma": math.inf}),
        ("alpha", {"alpha": 0.0}),
        ("epsilon", {"epsilon": 0.0}),
        ("epsilon", {"epsilon": math.inf}),
        ("delta", {"delta": 0.0}),
        ("delta", {"delta": 1.0}),
        ("no_reply", {"no_reply": [1.0, 2.0, 3.0]}),
        ("no_reply", {"no_reply": math.nan}),
    ],
)
def test_bad_input_names_the_field(field: str, kwargs: dict) -> None:
    args = {
        "estimate": [1.0, 2.0], "gamma": 3.0, "alpha": 1.0, "epsilon": 1.0, "delta": 0.01,
        "no_reply": 0.0, "rng": np.random.default_rng(0),
    } | kwargs  # fmt: skip
    estimate = args.pop("estimate")
    with pytest.raises(InvalidParameterError, match=field):
        eptr_release(estimate, **args)
