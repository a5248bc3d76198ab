"""The two-step pipeline: histogram -> parameter choice from the prior -> randomizer."""

from __future__ import annotations

import inspect
import math
from dataclasses import replace
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared import plan, randomizer, selection
from shared.errors import InvalidParameterError
from shared.mechanisms import registry, rp_with_prior
from shared.mechanisms.histogram import Prior
from shared.mechanisms.private_mean import private_mean_variance
from shared.mechanisms.rp_with_prior import RPWithPrior
from shared.mechanisms.rr_on_bins import RROnBins
from shared.plan import MEAN_SHARE_KNOTS, default_mean_share, default_split, release_mean_share
from shared.randomizer import build_mechanism, label_randomizer
from shared.rng import SystemRandom


@pytest.fixture
def labels(rng: np.random.Generator) -> np.ndarray:
    return np.clip(rng.lognormal(1.0, 0.8, size=20_000), 0, 40)


@pytest.mark.parametrize("mechanism", ["rpwithprior", "rr_on_bins", "auto"])
def test_release_carries_every_public_parameter(labels: np.ndarray, mechanism: str) -> None:
    release = label_randomizer(
        labels,
        lo=0,
        hi=40,
        epsilon1=0.1,
        epsilon2=1.0,
        mechanism=mechanism,
        rng=3 if False else np.random.default_rng(3),
    )
    assert release.n == labels.size
    assert release.epsilon == pytest.approx(1.1)
    assert release.prior.k == plan.DEFAULT_BINS
    rebuilt = (RPWithPrior if release.mechanism == "rpwithprior" else RROnBins).from_params(
        release.params
    )
    assert rebuilt.public_params() == release.params
    assert math.isfinite(release.expected_label_mse)


def test_auto_picks_the_lower_expected_error(labels: np.ndarray) -> None:
    prior = Prior.from_samples(labels, lo=0, hi=40, bins=64)
    errors = {
        name: build_mechanism(prior, epsilon=1.0, mechanism=name)[1].expected_squared_error(prior)
        for name in ("rpwithprior", "rr_on_bins")
    }
    chosen, _ = build_mechanism(prior, epsilon=1.0, mechanism="auto")
    assert chosen == min(errors, key=errors.__getitem__)


def test_expected_error_matches_the_realised_error_under_a_known_prior(
    rng: np.random.Generator,
) -> None:
    # Labels drawn from the piecewise-uniform prior itself, so the closed forms are exact.
    prior = Prior(edges=np.linspace(0, 10, 11), probs=np.array([5, 9, 7, 4, 3, 2, 1, 1, 1, 1]) / 34)
    cells = rng.choice(10, size=200_000, p=prior.probs)
    labels = rng.uniform(prior.edges[cells], prior.edges[cells + 1])
    for name in ("rpwithprior", "rr_on_bins"):
        _, mechanism = build_mechanism(prior, epsilon=1.5, mechanism=name)
        realised = np.mean((mechanism.randomize(labels, rng) - labels) ** 2)
        assert realised == pytest.approx(mechanism.expected_squared_error(prior), rel=0.03)


def test_outside_rule_is_chosen_for_not_swapped(labels: np.ndarray) -> None:
    prior = Prior.from_samples(labels, lo=0, hi=40, bins=32)
    _, mechanism = build_mechanism(prior, epsilon=1.0, mechanism="rpwithprior", outside="uniform")
    assert mechanism.public_params()["outside"] == "uniform"


def test_seeded_releases_are_reproducible(labels: np.ndarray) -> None:
    def run() -> np.ndarray:
        return label_randomizer(
            labels,
            lo=0,
            hi=40,
            epsilon1=0.2,
            epsilon2=2.0,
            mechanism="auto",
            rng=np.random.default_rng(11),
        ).noisy_labels

    np.testing.assert_array_equal(run(), run())


def test_production_randomness_runs_end_to_end(labels: np.ndarray) -> None:
    release = label_randomizer(
        labels,
        lo=0,
        hi=40,
        epsilon1=0.2,
        epsilon2=2.0,
        mechanism="rpwithprior",
        rng=SystemRandom(),
    )
    a1, a2, zeta = (release.params[key] for key in ("a1", "a2", "zeta"))
    assert np.all(release.noisy_labels >= a1 - zeta) and np.all(release.noisy_labels <= a2 + zeta)


def test_infinite_epsilon_releases_the_clipped_labels(labels: np.ndarray) -> None:
    release = label_randomizer(
        np.append(labels, 99.0),
        lo=0,
        hi=40,
        epsilon1=math.inf,
        epsilon2=math.inf,
        mechanism="auto",
        rng=np.random.default_rng(0),
        allow_nonprivate=True,
    )
    assert release.mechanism == "none"
    np.testing.assert_array_equal(release.noisy_labels, np.append(labels, 40.0))


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"epsilon1": 0.0}, "epsilon1"),
        ({"epsilon2": -1.0}, "epsilon2"),
        ({"epsilon2": math.nan}, "epsilon2"),
        ({"lo": 5.0, "hi": 5.0}, "lo"),
        ({"labels": np.array([1.0, np.nan])}, "finite"),
        ({"labels": np.array([])}, "empty"),
        ({"bins": 0}, "bins"),
        ({"mechanism": "laplace"}, "mechanism"),
        ({"mystery": 1}, "unknown mechanism parameter"),
    ],
)
def test_invalid_input_is_refused(overrides: dict[str, object], match: str) -> None:
    kwargs: dict[str, object] = {
        "labels": np.array([1.0, 2.0]),
        "lo": 0.0,
        "hi": 4.0,
        "epsilon1": 0.5,
        "epsilon2": 1.0,
        "mechanism": "auto",
        "rng": np.random.default_rng(0),
    }
    kwargs.update(overrides)
    labels = kwargs.pop("labels")
    with pytest.raises(InvalidParameterError, match=match):
        label_randomizer(labels, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("mechanism", "epsilon", "n", "expected_epsilon1"),
    [
        ("auto", 1.0, 1_000_000, 0.05),  # floor: sqrt(64 / 1e6) = 0.008 is below 0.05
        ("rr_on_bins", 4.0, 10_000, 0.08),  # the paper's sqrt(k / n), k = 64
        ("auto", 0.4, 100, 0.1),  # sqrt(k / n) capped at a quarter of the total
        ("auto", 0.05, 1_000_000, 0.045),  # a tiny total: 90% to the histogram
        ("rpwithprior", 1.0, 1_000_000, 0.002),  # sqrt(k / n) with k = 4 eps^2 = 4
        ("rpwithprior", 4.0, 10_000, 0.08),  # k = 64
        ("rpwithprior", 0.3, 10_000, 0.01),  # k = 1 below epsilon 0.5; the floor has faded
        ("rpwithprior", 0.5, 100, 0.1),  # sqrt(1 / 100) = 0.1 is below 40% of the total
        ("rpwithprior", 0.05, 1_000_000, 0.045),  # below 0.1 the floor applies in full
        ("rpwithprior", 0.2, 1_000_000, 0.025),  # halfway through the fade: half of 0.05
    ],
)
def test_default_split_uses_only_public_quantities(
    mechanism: str, epsilon: float, n: int, expected_epsilon1: float
) -> None:
    eps1, eps2 = default_split(epsilon, n=n, mechanism=mechanism)
    assert eps1 == pytest.approx(expected_epsilon1)
    assert eps1 + eps2 == pytest.approx(epsilon) and eps2 > 0


@pytest.mark.parametrize(
    ("epsilon", "share"),
    [(0.01, 0.9), (0.1, 0.9), (0.2, 0.6), (0.3, 0.3), (0.8, 0.3), (1.0, 0.3), (1.5, 0.15)]
    + [(2.0, 0.0), (8.0, 0.0), (math.inf, 0.0)],
)
def test_the_mean_share_follows_its_knots(epsilon: float, share: float) -> None:
    """Piecewise linear in the total epsilon: most of epsilon1 where the randomizer carries
    nothing, 30% around 0.3-1, none from 2 on (MEAN_SHARE_KNOTS and the reasons beside them)."""
    assert default_mean_share(epsilon) == pytest.approx(share)
    assert all(0.0 <= s < 1.0 for _, s in MEAN_SHARE_KNOTS)


def test_default_split_refuses_an_empty_data_set_and_unknown_mechanisms() -> None:
    with pytest.raises(InvalidParameterError, match="n "):
        default_split(1.0, n=0)
    with pytest.raises(InvalidParameterError, match="mechanism"):
        default_split(1.0, n=100, mechanism="laplace")


@given(
    epsilon=st.floats(min_value=1e-6, max_value=100.0),
    n=st.integers(min_value=1, max_value=10**9),
)
def test_the_rpwithprior_split_is_public_bounded_and_continuous_in_epsilon(
    epsilon: float, n: int
) -> None:
    """0 < epsilon1 <= 90% of the total (40% from 0.3 on), and no jump across the fade.

    Up to the short decimal the split is rounded to: half a unit of the total's 6th digit."""
    eps1, eps2 = default_split(epsilon, n=n, mechanism="rpwithprior")
    share = 0.9 if epsilon < 0.3 else 0.4
    digit = 10.0 ** (math.floor(math.log10(epsilon)) - 5)
    assert 0 < eps1 <= share * epsilon * (1 + 1e-12) + digit / 2 and eps2 > 0
    nearby, _ = default_split(epsilon * (1 + 1e-9), n=n, mechanism="rpwithprior")
    assert nearby == pytest.approx(eps1, rel=1e-6, abs=2 * digit)


@pytest.mark.parametrize("epsilon1", [0.01, 0.05, 0.3, 1.2])
def test_epsilon1_buys_the_histogram_and_the_label_mean_exactly(
    labels: np.ndarray, epsilon1: float
) -> None:
    """histogram + mean <= epsilon1 exactly (rational sum); the mean is DP-noised and bounded;
    the default share follows the total epsilon (none from 2 on); mean_share 0 spends nothing
    on it; a share outside [0, 1) is refused."""
    common = {"lo": 0.0, "hi": 40.0, "epsilon2": 0.5, "mechanism": "auto"}
    release = label_randomizer(labels, epsilon1=epsilon1, rng=np.random.default_rng(2), **common)
    assert release.plan.label_mean_float is not None and release.plan.histogram_float is not None
    share = default_mean_share(epsilon1 + 0.5)
    assert release.plan.label_mean_float == pytest.approx(share * epsilon1)
    assert Fraction(release.plan.histogram_float) + Fraction(
        release.plan.label_mean_float
    ) <= Fraction(epsilon1)
    assert release.label_mean is not None and 0.0 <= release.label_mean <= 40.0
    assert release.plan.label_mean_variance == private_mean_variance(
        lo=0.0, hi=40.0, epsilon=release.plan.label_mean_float, n=labels.size
    )
    if epsilon1 >= 0.3:  # n = 20,000: the noise sd is at most 40 sqrt(2) / (0.05 n) ~ 0.06
        assert abs(release.label_mean - labels.mean()) < 0.5
    plain = label_randomizer(
        labels, epsilon1=epsilon1, rng=np.random.default_rng(2), mean_share=0.0, **common
    )
    assert plain.label_mean is None and plain.plan.histogram_float == epsilon1
    large = label_randomizer(
        labels, epsilon1=epsilon1, rng=np.random.default_rng(2), **(common | {"epsilon2": 2.0})
    )
    assert large.label_mean is None and large.plan.histogram_float == epsilon1
    for bad in (-0.1, 1.0, float("nan")):
        with pytest.raises(InvalidParameterError, match="mean_share"):
            label_randomizer(
                labels, epsilon1=epsilon1, rng=np.random.default_rng(2), mean_share=bad, **common
            )


def test_no_mean_is_bought_where_the_features_party_could_never_use_it() -> None:
    """1,595 labels in [0, 1]: at epsilon 0.05 (90% of epsilon1 = 0.045 on the mean, noise sd
    0.022 <= 0.05) the mean is bought; RPWithPrior's epsilon1 = 0.025 at 0.3 would leave it
    0.0075 (sd 0.12 > 0.05 of the range, which no m passes): the histogram keeps it all.
    An explicit RPWithPrior release never buys one."""
    assert release_mean_share(0.045, 0.005, n=1595, lo=0.0, hi=1.0) == pytest.approx(0.9)
    assert release_mean_share(0.025, 0.275, n=1595, lo=0.0, hi=1.0) == 0.0
    assert release_mean_share(0.025, 0.275, n=100_000, lo=0.0, hi=1.0) == pytest.approx(0.3)
    assert release_mean_share(0.2, 2.0, n=100_000, lo=0.0, hi=1.0) == 0.0  # none from 2 on
    # RPWithPrior keeps its deliberately small epsilon1 for the histogram.
    rp = release_mean_share(0.045, 0.005, n=100_000, lo=0.0, hi=1.0, mechanism="rpwithprior")
    assert rp == 0.0


@pytest.mark.parametrize("mechanism", ["auto", "rpwithprior"])
def test_parameter_choice_never_sees_labels(
    labels: np.ndarray, monkeypatch: pytest.MonkeyPatch, mechanism: str
) -> None:
    """Only the histogram, the DP mean and ``randomize`` receive raw labels; the choice gets the
    prior."""
    seen: list[tuple[tuple[object, ...], dict[str, object]]] = []
    real = randomizer.build_mechanism

    def spy(*args: object, **kwargs: object) -> object:
        seen.append((args, kwargs))
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(randomizer, "build_mechanism", spy)
    label_randomizer(
        labels,
        lo=0,
        hi=40,
        epsilon1=0.5,
        epsilon2=1.0,
        mechanism=mechanism,
        rng=np.random.default_rng(0),
    )
    # One build from the noisy prior (``public_randomizer`` builds its families directly).
    assert len(seen) == 1
    for args, kwargs in seen:
        assert isinstance(args[0], Prior)
        assert not any(isinstance(value, np.ndarray) for value in (*args, *kwargs.values()))
    assert "labels" not in inspect.signature(real).parameters


def test_auto_falls_back_when_one_candidate_cannot_be_realised(labels: np.ndarray) -> None:
    prior = Prior.from_samples(labels, lo=0, hi=40, bins=16)
    with pytest.raises(InvalidParameterError):
        build_mechanism(prior, epsilon=1e-13, mechanism="rpwithprior")
    name, mechanism = build_mechanism(prior, epsilon=1e-13, mechanism="auto")
    assert name == "rr_on_bins"
    assert mechanism.public_params()["epsilon"] == 1e-13


def test_default_bins_are_adaptive_and_explicit_bins_still_win(rng: np.random.Generator) -> None:
    small = rng.uniform(0, 1, 1595)
    common = {"lo": 0.0, "hi": 1.0, "epsilon2": 1.0, "mechanism": "auto"}
    release = label_randomizer(small, epsilon1=0.05, rng=np.random.default_rng(1), **common)
    assert release.prior.k == selection.adaptive_bins(1595, 0.05) == 16
    explicit = label_randomizer(
        small, epsilon1=0.05, bins=64, rng=np.random.default_rng(1), **common
    )
    assert explicit.prior.k == 64
    exact = label_randomizer(
        small, epsilon1=math.inf, rng=np.random.default_rng(1), allow_nonprivate=True, **common
    )
    assert exact.prior.k == plan.DEFAULT_BINS


def test_pipeline_auto_minimises_c_with_the_public_n(
    labels: np.ndarray, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[dict[str, object]] = []
    real = randomizer.build_mechanism

    def spy(*args: object, **kwargs: object) -> object:
        seen.append(kwargs)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(randomizer, "build_mechanism", spy)
    release = label_randomizer(
        labels,
        lo=0,
        hi=40,
        epsilon1=0.5,
        epsilon2=1.0,
        mechanism="auto",
        rng=np.random.default_rng(0),
        model_dim=3,
    )
    assert seen[0]["n"] == labels.size and seen[0]["model_dim"] == 3
    best = selection.choose(release.prior, epsilon=1.0, n=labels.size, model_dim=3)
    assert release.mechanism == best.name
    assert release.recommended_transform == best.score.transform
    assert release.params == best.mechanism.public_params()


def test_rr_on_bins_keeps_the_least_label_mse_choice(labels: np.ndarray) -> None:
    prior = Prior.from_samples(labels, lo=0, hi=40, bins=64)
    with_n = build_mechanism(prior, epsilon=1.0, mechanism="rr_on_bins", n=labels.size, model_dim=5)
    without = build_mechanism(prior, epsilon=1.0, mechanism="rr_on_bins")
    assert with_n[1].public_params() == without[1].public_params()


@pytest.mark.parametrize("select", ["mse", "paper"])
def test_rpwithprior_with_an_explicit_select_keeps_that_rule(
    labels: np.ndarray, select: str
) -> None:
    prior = Prior.from_samples(labels, lo=0, hi=40, bins=64)
    _, chosen = build_mechanism(
        prior, epsilon=1.0, mechanism="rpwithprior", n=labels.size, select=select, zeta=2.0
    )
    rule = rp_with_prior.choose_parameters(prior, epsilon=1.0, select=select, zeta=2.0)
    assert chosen == rule
    # Without n (nothing to weigh the variance by) the least-label-MSE rule stays the default.
    _, without_n = build_mechanism(prior, epsilon=1.0, mechanism="rpwithprior")
    assert without_n == rp_with_prior.choose_parameters(prior, epsilon=1.0, select="mse")


def test_pipeline_rpwithprior_minimises_c_over_rpwithprior_only(labels: np.ndarray) -> None:
    """With n known and no select, RPWithPrior's (interval, zeta) is the least-C candidate."""
    release = label_randomizer(
        labels,
        lo=0,
        hi=40,
        epsilon1=0.5,
        epsilon2=1.0,
        mechanism="rpwithprior",
        rng=np.random.default_rng(0),
        model_dim=4,
    )
    best = selection.choose(
        release.prior, epsilon=1.0, n=labels.size, model_dim=4, families=("rpwithprior",)
    )
    assert release.mechanism == "rpwithprior"
    assert release.params == best.mechanism.public_params()
    assert release.recommended_transform == best.score.transform
    # ... which differs here from the least-label-MSE interval, and is better on C.
    mse_rule = rp_with_prior.choose_parameters(release.prior, epsilon=1.0, select="mse")
    assert mse_rule.public_params() != release.params
    mse_c = min(
        s.criterion
        for s in selection.score(mse_rule, release.prior, n=labels.size, model_dim=4).values()
    )
    assert best.score.criterion < mse_c


def test_release_recommends_a_transform_for_every_mechanism(labels: np.ndarray) -> None:
    for mechanism in ("rpwithprior", "rr_on_bins", "auto"):
        release = label_randomizer(
            labels,
            lo=0,
            hi=40,
            epsilon1=0.5,
            epsilon2=4.0,
            mechanism=mechanism,
            rng=np.random.default_rng(0),
        )
        assert release.recommended_transform in ("raw", "debiased")
    none = label_randomizer(
        labels,
        lo=0,
        hi=40,
        epsilon1=0.5,
        epsilon2=math.inf,
        mechanism="auto",
        rng=np.random.default_rng(0),
        allow_nonprivate=True,
    )
    assert none.recommended_transform == "raw"


@pytest.mark.parametrize("bad", [0, 2.5, True, "8"])
def test_invalid_model_dim_is_refused(bad: object) -> None:
    with pytest.raises(InvalidParameterError, match="model_dim"):
        label_randomizer(
            np.array([1.0, 2.0]),
            lo=0.0,
            hi=4.0,
            epsilon1=0.5,
            epsilon2=1.0,
            mechanism="auto",
            rng=np.random.default_rng(0),
            model_dim=bad,
        )


def test_whether_a_release_is_refused_never_depends_on_the_labels() -> None:
    """The randomizer is chosen AFTER the epsilon1 noise is drawn and BEFORE anything is
    charged: a refusal there that depends on the noisy prior is an uncharged, repeatable
    function of the labels (the advertiser's 422, the operator's refused-release trail).
    RPWithPrior with select "mse" at epsilon2 1e-13 after epsilon1 2: the interval picked from
    the prior of all-zero labels cannot be realised exactly, the one of spread labels can."""
    plan_ = plan.plan_release(
        n=1000, lo=0.0, hi=1.0, epsilon1="2", epsilon2="1e-13", mechanism="rpwithprior",
        options={"select": "mse"},
    )  # fmt: skip
    outcomes: dict[str, set[str]] = {}
    for name, labels in (("zeros", np.zeros(1000)), ("spread", np.linspace(0.0, 1.0, 1000))):
        for seed in range(5):
            try:
                randomizer.execute(plan_, labels, np.random.default_rng(seed))
                outcomes.setdefault(name, set()).add("released")
            except InvalidParameterError:
                outcomes.setdefault(name, set()).add("refused")
    assert outcomes["zeros"] == outcomes["spread"]
    assert len(outcomes["zeros"]) == 1


def test_any_exception_of_the_noisy_priors_build_falls_back_to_the_public_randomizer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Not only the refusals known today: an unforeseen exception that a noisy prior triggers
    in the build (here an IndexError) must not escape, uncharged, as a function of the labels."""
    plan_ = plan.plan_release(n=1000, lo=0.0, hi=1.0, epsilon="1", mechanism="auto")
    measured = randomizer.measure(plan_, np.linspace(0.0, 1.0, 1000), np.random.default_rng(0))

    def broken(*_args: object, **_kwargs: object) -> None:
        raise IndexError("a bug the noisy prior reaches")

    monkeypatch.setattr(randomizer, "_build_for", broken)
    name, chosen = randomizer.choose_randomizer(plan_, measured)
    public_name, public = randomizer.public_randomizer(plan_)
    assert name == public_name and chosen.public_params() == public.public_params()


def test_the_public_randomizer_is_built_once_per_public_input(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A service release asks for the stand-in twice (``plan_for``'s refusal, then
    ``choose_randomizer``): the unbiased LP (30-40 ms) is built once per public input, -0.0
    and 0.0 are different inputs, and an option JSON cannot key is built afresh, the same."""
    built: list[tuple[object, ...]] = []
    original = randomizer._uniform_prior_randomizer

    def counted(*args: Any) -> tuple[str, Any]:
        built.append(args[:5])
        return original(*args)

    monkeypatch.setattr(randomizer, "_uniform_prior_randomizer", counted)
    randomizer._kept_public_randomizer.cache_clear()
    unbiased = plan.plan_release(n=800, lo=0.0, hi=1.0, epsilon="2", mechanism="unbiased")
    first = randomizer.public_randomizer(unbiased)
    measured = randomizer.measure(unbiased, np.linspace(0, 1, 800), np.random.default_rng(1))
    randomizer.choose_randomizer(unbiased, measured)
    assert randomizer.public_randomizer(unbiased) is first and len(built) == 1
    negative_zero = plan.plan_release(n=800, lo=-0.0, hi=1.0, epsilon="2", mechanism="unbiased")
    randomizer.public_randomizer(negative_zero)
    assert len(built) == 2 and math.copysign(1.0, built[1][0]) == -1.0  # type: ignore[arg-type]
    odd = replace(unbiased, options={"unused": object()})
    with pytest.raises(InvalidParameterError, match="unused"):
        randomizer.public_randomizer(odd)  # not keyed: built afresh, refused by name
    assert len(built) == 3


@pytest.mark.parametrize("broken_name", ["recommended_transform", "expected_squared_error"])
def test_an_exception_of_the_releases_summaries_leaves_their_public_defaults(
    monkeypatch: pytest.MonkeyPatch, broken_name: str
) -> None:
    """The expected label MSE and the recommended transform are computed under the noisy prior
    after the noise is drawn and before the service charges: an exception there (here a
    ZeroDivisionError) must not escape either; the release carries NaN and "raw" instead
    (``Release``'s defaults), the randomized labels and parameters unchanged."""
    plan_ = plan.plan_release(n=1000, lo=0.0, hi=1.0, epsilon="1", mechanism="rr_on_bins")
    labels = np.linspace(0.0, 1.0, 1000)
    sound = randomizer.execute(plan_, labels, np.random.default_rng(3))

    def broken(*_args: object, **_kwargs: object) -> None:
        raise ZeroDivisionError("a bug the noisy prior reaches")

    if broken_name == "recommended_transform":
        monkeypatch.setattr(randomizer, "recommended_transform", broken)
    else:
        mechanism_type = type(randomizer.choose_randomizer(plan_, randomizer.measure(
            plan_, labels, np.random.default_rng(3)))[1])  # fmt: skip
        monkeypatch.setattr(mechanism_type, "expected_squared_error", broken)
    release = randomizer.execute(plan_, labels, np.random.default_rng(3))
    assert math.isnan(release.expected_label_mse) and release.recommended_transform == "raw"
    assert release.mechanism == sound.mechanism and release.params == sound.params
    np.testing.assert_array_equal(release.noisy_labels, sound.noisy_labels)


def test_the_public_randomizer_reads_the_plan_alone_and_is_cheap_for_auto() -> None:
    """``public_randomizer``: the plan's family with default parameters on the uniform prior
    (auto: the first realisable family, not the whole selection, which cost 24 ms on every
    10^6-label release); the same parameters for the same plan, whatever n; a plan no family
    can realise is refused, as often as asked."""
    fixed = {"lo": 0.0, "hi": 1.0, "epsilon1": "0.1", "epsilon2": "0.9", "bins": 16}
    auto = plan.plan_release(n=500, mechanism="auto", **fixed)
    other_n = plan.plan_release(n=10**6, mechanism="auto", **fixed)
    name, mechanism = randomizer.public_randomizer(auto)
    assert name == registry.families()[0].name == "rpwithprior"
    assert mechanism.public_params() == randomizer.public_randomizer(other_n)[1].public_params()
    named = plan.plan_release(n=500, lo=0.0, hi=1.0, epsilon="1", mechanism="rr_on_bins")
    assert randomizer.public_randomizer(named)[0] == "rr_on_bins"
    tiny = plan.plan_release(
        n=500, lo=0.0, hi=1.0, epsilon1="1", epsilon2="1e-13", mechanism="unbiased"
    )
    for _ in range(2):
        with pytest.raises(InvalidParameterError, match="epsilon"):
            randomizer.public_randomizer(tiny)
