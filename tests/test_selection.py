"""shared.selection: the closed-form moments, the criterion C, the candidates, adaptive bins."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared import selection
from shared.errors import InvalidParameterError
from shared.mechanisms import rp_with_prior, rr_on_bins
from shared.mechanisms.histogram import Prior
from shared.plan import labels_can_train
from shared.randomizer import build_mechanism


@pytest.fixture
def prior() -> Prior:
    return Prior.from_samples(np.random.default_rng(6).beta(2, 5, 5000), lo=0.0, hi=1.0, bins=32)


def _mechanisms(prior: Prior) -> list[object]:
    return [
        rp_with_prior.choose_parameters(prior, epsilon=1.0, select="paper", zeta=0.1),
        rp_with_prior.choose_parameters(
            prior, epsilon=2.0, select="mse", zeta=0.05, outside="uniform"
        ),
        rr_on_bins.optimal_bins_for_prior(prior, epsilon=1.0),
        rr_on_bins.optimal_bins_for_prior(prior, epsilon=0.5, max_bins=3),
    ]


@pytest.mark.parametrize("index", range(4))
def test_moments_match_the_real_samplers(prior: Prior, index: int) -> None:
    """E[noisy | y], Var(noisy | y) against 40,000 draws of the production sampler per label."""
    mechanism = _mechanisms(prior)[index]
    rng = np.random.default_rng(index)
    a1 = getattr(mechanism, "a1", 0.3)
    # Inside, at and beyond the interval (outside rules), and at the bounds.
    y = np.array([0.0, 0.02, max(a1 - 0.01, 0.0), 0.2, 0.5, 0.97, 1.0])
    mean, var = selection.conditional_moments(mechanism, y)
    draws = np.stack([mechanism.randomize(np.full(40_000, v), rng) for v in y])
    sd = np.sqrt(var / 40_000)
    assert np.all(np.abs(draws.mean(axis=1) - mean) <= 5 * sd + 1e-6)
    assert np.allclose(draws.var(axis=1), var, rtol=0.05, atol=1e-4)


@pytest.mark.parametrize("index", range(4))
def test_criterion_terms_are_exact_integrals_under_the_prior(prior: Prior, index: int) -> None:
    """bias^2 and E Var against a dense midpoint rule (error O(h^2) away from the jumps)."""
    mechanism = _mechanisms(prior)[index]
    scores = selection.score(mechanism, prior, n=1000, model_dim=10)
    t = (np.arange(4000) + 0.5) / 4000
    width = np.diff(prior.edges)
    y = (prior.edges[:-1, None] + width[:, None] * t[None, :]).ravel()
    w = np.repeat(prior.probs / t.size, t.size)
    mean, var = selection.conditional_moments(mechanism, y)
    a, b = mechanism.affine_expectation()
    assert set(scores) == {"raw", "debiased"}
    for transform, (m, v) in {
        "raw": (mean, var),
        "debiased": ((mean - b) / a, var / a**2),
    }.items():
        s = scores[transform]
        assert s.bias2 == pytest.approx(np.dot(w, (m - y) ** 2), rel=1e-4, abs=1e-9)
        assert s.variance == pytest.approx(np.dot(w, v), rel=1e-4)
        assert s.criterion == pytest.approx(s.bias2 + 10 / 1000 * s.variance)


def test_realised_model_input_error_matches_the_criterion_terms(prior: Prior) -> None:
    """Labels drawn from the piecewise-uniform prior: bias^2 + Var is the targets' MSE."""
    rng = np.random.default_rng(11)
    cells = rng.choice(prior.k, size=400_000, p=prior.probs)
    y = prior.edges[cells] + rng.random(cells.size) * np.diff(prior.edges)[cells]
    for mechanism in _mechanisms(prior):
        scores = selection.score(mechanism, prior, n=10, model_dim=1)
        noisy = mechanism.randomize(y, rng)
        a, b = mechanism.affine_expectation()
        for transform, target in (("raw", noisy), ("debiased", (noisy - b) / a)):
            s = scores[transform]
            assert np.mean((target - y) ** 2) == pytest.approx(s.bias2 + s.variance, rel=0.02)


def test_no_debiased_target_when_the_map_is_the_identity_or_flat() -> None:
    prior = Prior(edges=np.linspace(0, 1, 5), probs=np.array([0.4, 0.3, 0.2, 0.1]))
    flat = rr_on_bins.optimal_bins_for_prior(prior, epsilon=1.0, max_bins=1)  # a = 0
    assert set(selection.score(flat, prior, n=100, model_dim=1)) == {"raw"}


def test_auto_picks_the_brute_force_minimiser_of_c(prior: Prior) -> None:
    n, dim = 2000, 7
    found = selection.candidate_mechanisms(prior, epsilon=1.0)
    assert {name for name, _ in found} == {"rpwithprior", "rr_on_bins", "unbiased"}
    best = min(
        (
            (s.criterion, name, m, s.transform)
            for name, m in found
            for s in selection.score(m, prior, n=n, model_dim=dim).values()
        ),
        key=lambda item: item[0],
    )
    name, mechanism = build_mechanism(prior, epsilon=1.0, mechanism="auto", n=n, model_dim=dim)
    assert name == best[1]
    inner = getattr(mechanism, "inner", mechanism)
    assert inner == best[2]
    assert selection.recommended_transform(mechanism, prior, n=n, model_dim=dim) == best[3]
    # ... and it beats the least-label-MSE choice on C (that is the point of it).
    old_name, old = build_mechanism(prior, epsilon=1.0, mechanism="auto")
    old_c = min(s.criterion for s in selection.score(old, prior, n=n, model_dim=dim).values())
    assert best[0] <= old_c


@pytest.mark.parametrize("zeta", [None, 0.07])
def test_rpwithprior_picks_the_brute_force_minimiser_of_c_among_its_candidates(
    prior: Prior, zeta: float | None
) -> None:
    n, dim = 3000, 5
    found = selection.candidate_mechanisms(prior, epsilon=1.0, zeta=zeta)
    rp = [m for name, m in found if name == "rpwithprior"]
    assert len(rp) > (1 if zeta is None else 0)
    assert all(zeta is None or m.zeta == zeta for m in rp)
    scored = [
        (s.criterion, m, s.transform)
        for m in rp
        for s in selection.score(m, prior, n=n, model_dim=dim).values()
    ]
    best = min(scored, key=lambda item: item[0])
    name, mechanism = build_mechanism(
        prior, epsilon=1.0, mechanism="rpwithprior", n=n, model_dim=dim, zeta=zeta
    )
    assert name == "rpwithprior" and mechanism == best[1]
    assert selection.recommended_transform(mechanism, prior, n=n, model_dim=dim) == best[2]
    # The restriction is the family: only RPWithPrior candidates, the same ones as "auto" sees.
    assert selection.candidate_mechanisms(
        prior, epsilon=1.0, zeta=zeta, families=("rpwithprior",)
    ) == [("rpwithprior", m) for m in rp]


def test_families_restrict_the_candidates_and_are_checked(prior: Prior) -> None:
    only_rr = selection.candidate_mechanisms(prior, epsilon=1.0, families=("rr_on_bins",))
    assert only_rr and {name for name, _ in only_rr} == {"rr_on_bins"}
    for bad in ((), ("laplace",), "rpwithprior"):
        with pytest.raises(InvalidParameterError, match="families"):
            selection.candidate_mechanisms(prior, epsilon=1.0, families=bad)  # type: ignore[arg-type]


def test_large_n_prefers_unbiased_targets_small_n_trades_bias_for_variance() -> None:
    prior = Prior.from_samples(
        np.random.default_rng(7).uniform(0.0, 5.0, 5000), lo=0.0, hi=5.0, bins=16
    )
    # Without the unbiased family (which has no bias at all and wins at large n, below).
    biased = ("rpwithprior", "rr_on_bins")
    small = selection.choose(prior, epsilon=1.0, n=50, model_dim=8, families=biased)
    large = selection.choose(prior, epsilon=1.0, n=10**7, model_dim=8, families=biased)
    assert large.score.transform == "debiased" and large.score.bias2 < 1e-3
    unbiased = selection.choose(prior, epsilon=1.0, n=10**7, model_dim=8)
    assert unbiased.name == "unbiased" and unbiased.score.transform == "raw"
    assert unbiased.score.criterion <= large.score.criterion
    assert small.score.bias2 > 0.1
    assert small.score.criterion < large.score.bias2 + 8 / 50 * large.score.variance


def test_options_restrict_the_candidates(prior: Prior) -> None:
    found = selection.candidate_mechanisms(prior, epsilon=1.0, zeta=0.1, select="paper", max_bins=3)
    rp = [m for name, m in found if name == "rpwithprior"]
    rr = [m for name, m in found if name == "rr_on_bins"]
    assert len(rp) == 1 and rp[0].zeta == 0.1
    assert rr and all(m.d <= 3 for m in rr)
    uniform = selection.candidate_mechanisms(prior, epsilon=1.0, outside="uniform")
    assert all(m.outside == "uniform" for name, m in uniform if name == "rpwithprior")
    for bad in ({"outside": "mirror"}, {"select": "best"}, {"loss": "huber"}):
        with pytest.raises(InvalidParameterError):
            selection.candidate_mechanisms(prior, epsilon=1.0, **bad)


def test_candidates_that_cannot_be_realised_are_skipped(prior: Prior) -> None:
    found = selection.candidate_mechanisms(prior, epsilon=1e-13)
    assert any(name == "rr_on_bins" for name, _ in found)
    for _name, mechanism in found:  # only realisable ones (e.g. a1 = a2) are kept
        assert mechanism.randomize(np.array([0.5]), np.random.default_rng(0)).size == 1


@pytest.mark.parametrize(
    ("n", "epsilon1", "expected"),
    [
        (1595, 0.05, 16),  # Crime at small epsilon: 19.9 -> 16
        (1595, 0.0125, 4),  # 4.98 -> 4
        (16_512, 0.05, 64),  # 206 -> 256, capped at 64
        (100, 0.05, 2),  # floor
        (1, 0.001, 2),
        (1000, 0.1, 32),  # 25 -> 2^round(4.64) = 32
        (1000, 0.09, 16),  # 22.5 -> 2^round(4.49) = 16
        (10**6, math.inf, 64),
    ],
)
def test_adaptive_bins_table(n: int, epsilon1: float, expected: int) -> None:
    assert selection.adaptive_bins(n, epsilon1) == expected


def test_adaptive_bins_and_the_plan_take_amounts_beyond_the_floats() -> None:
    """n epsilon1 / 4 overflowing to inf (epsilon1 1e300, n 10^10) is the cap, its limit, not
    an OverflowError (a server error for a public request)."""
    from shared.plan import plan_release

    assert selection.adaptive_bins(10**10, 1e300) == selection.MAX_ADAPTIVE_BINS
    assert selection.adaptive_bins(10**10, 1e300, max_bins=90) == 90
    huge = plan_release(n=10**10, lo=0.0, hi=1.0, epsilon="2e300", epsilon1="1e300")
    assert huge.bins == selection.MAX_ADAPTIVE_BINS


def test_adaptive_bins_respects_the_cap_and_refuses_bad_input() -> None:
    assert selection.adaptive_bins(10**6, 1.0, max_bins=8) == 8
    for bad in ({"n": 0}, {"n": 2.5}, {"epsilon1": 0.0}, {"epsilon1": math.nan}):
        kwargs = {"n": 100, "epsilon1": 1.0, **bad}
        with pytest.raises(InvalidParameterError):
            selection.adaptive_bins(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "10", 10**10])
def test_model_dim_is_a_positive_integer(bad: object) -> None:
    with pytest.raises(InvalidParameterError, match="model_dim"):
        selection.check_model_dim(bad)


@pytest.mark.parametrize(
    ("n", "epsilon2", "expected"),
    [
        (8000, 0.3, 10),  # 720 / 80 = 9: the floor
        (8000, 1.0, 100),
        (8000, 2.0, 300),  # 400: the cap
        (1276, 0.5, 10),
        (16000, 1.0, 200),
        (1, math.inf, 300),  # no noise: the most flexible model
        (10**9, 1e300, 300),  # n epsilon2^2 overflows a float: still the cap
    ],
)
def test_default_model_dim_table(n: int, epsilon2: float, expected: int) -> None:
    assert selection.default_model_dim(n, epsilon2) == expected


@settings(max_examples=300, deadline=None)
@given(
    n=st.integers(min_value=1, max_value=10**9),
    epsilon2=st.floats(min_value=1e-6, max_value=1e300),
    more=st.integers(min_value=0, max_value=10**6),
)
def test_default_model_dim_is_the_signal_rule(n: int, epsilon2: float, more: int) -> None:
    """d = floor(n eps2^2 / 80) in [10, 300], growing with n; where it is above 10 the mean-first
    gate (n eps2^2 >= 20 d) passes for it exactly as for 10, so both parties read one rule."""
    d = selection.default_model_dim(n, epsilon2)
    signal = n * epsilon2 * epsilon2 / 80.0
    closed = 300 if signal >= 300 else max(10, math.floor(signal))
    assert d == closed
    assert selection.default_model_dim(n + more, epsilon2) >= d
    assert labels_can_train(n=n, epsilon2=epsilon2, model_dim=d) is labels_can_train(
        n=n, epsilon2=epsilon2, model_dim=selection.DEFAULT_MODEL_DIM
    )
    assert selection.model_dim_for(None, n=n, epsilon2=epsilon2) == d
    assert selection.model_dim_for(7, n=n, epsilon2=epsilon2) == 7


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "10"])
def test_default_model_dim_refuses_a_bad_n(bad: object) -> None:
    with pytest.raises(InvalidParameterError, match="n"):
        selection.default_model_dim(bad, 1.0)  # type: ignore[arg-type]


def test_auto_without_model_dim_chooses_for_the_default(prior: Prior) -> None:
    """The engine's choice with n and no model_dim is the choice for default_model_dim."""
    for n, eps in ((500, 0.5), (20000, 1.0), (8000, 2.0)):
        d = selection.default_model_dim(n, eps)
        implicit = build_mechanism(prior, epsilon=eps, mechanism="auto", n=n)
        explicit = build_mechanism(prior, epsilon=eps, mechanism="auto", n=n, model_dim=d)
        assert implicit[0] == explicit[0]
        assert vars(implicit[1]).keys() == vars(explicit[1]).keys()
        for key, value in vars(implicit[1]).items():
            other = vars(explicit[1])[key]
            assert np.array_equal(value, other) if isinstance(value, np.ndarray) else value == other


def test_pick_is_the_least_c_first_of_equals() -> None:
    def candidate(name: str, criterion: float) -> selection.Candidate:
        score = selection.Score(transform="raw", bias2=0.0, variance=1.0, criterion=criterion)
        return selection.Candidate(name=name, mechanism=None, score=score)

    rp, unbiased, rr = (
        candidate("rpwithprior", 2.0),
        candidate("unbiased", 1.0),
        candidate("rr", 1.0),
    )
    assert selection.pick([rp, unbiased, rr]) is unbiased  # no margin: a close call is a win
    assert selection.pick([rp, rr, unbiased]) is rr
    with pytest.raises(InvalidParameterError, match="no candidate"):
        selection.pick([])
