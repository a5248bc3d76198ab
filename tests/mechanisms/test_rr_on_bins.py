"""RR-on-Bins mechanism: DP inequality, sampler vs its own distribution, API, validation."""

from __future__ import annotations

import json
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import chisquare

from shared.errors import InvalidParameterError
from shared.mechanisms import _bins_kernels as kernels
from shared.mechanisms.histogram import Prior
from shared.mechanisms.rr_on_bins import (
    RROnBins,
    optimal_bins,
    optimal_bins_for_prior,
    pointwise_loss,
    response_weights,
    switch_probability,
)
from shared.rng import SystemRandom

LOSSES = ("squared", "absolute", "poisson")


def skewed_prior(k: int = 41, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    values = np.linspace(0.0, 40.0, k)
    probs = rng.gamma(0.5, size=k) * np.exp(-values / 15)
    probs[rng.random(k) < 0.2] = 0.0
    return values, probs / probs.sum()


def probe_labels(mechanism: RROnBins, values: np.ndarray) -> np.ndarray:
    """Labels at the values, exactly at and next to every threshold, and far beyond the range."""
    t = mechanism.thresholds
    return np.concatenate(
        [
            values,
            t,
            np.nextafter(t, -np.inf),
            np.nextafter(t, np.inf),
            [values[0] - 1.0, values[-1] + 1.0, -1e300, 1e300, 0.5 * (values[0] + values[-1])],
        ]
    )


# ---------------------------------------------------------------- the DP inequality, analytically


@pytest.mark.parametrize("epsilon", [1e-3, 0.1, 1.0, 4.0, 12.0, 40.0, 300.0])
@pytest.mark.parametrize("loss", LOSSES)
def test_likelihood_ratio_is_at_most_e_epsilon_for_every_label_pair(
    epsilon: float, loss: str
) -> None:
    values, probs = skewed_prior()
    mechanism = optimal_bins(values, probs, epsilon=epsilon, loss=loss)
    for candidate in (
        mechanism,
        optimal_bins(values, probs, epsilon=epsilon, loss=loss, max_bins=7),
    ):
        matrix = candidate.output_probabilities(probe_labels(candidate, values))
        assert np.all(matrix > 0)
        assert np.allclose(matrix.sum(axis=1), 1.0, rtol=0, atol=1e-12)
        log_ratio = np.log(matrix.max(axis=0)) - np.log(matrix.min(axis=0))
        assert np.all(log_ratio <= epsilon + 1e-9)  # ratio <= e^eps (1 + 1e-9)
    if mechanism.d > 1:  # the bound is tight: some pair of labels reaches the realised K / O
        keep, other, _ = response_weights(mechanism.d, epsilon)
        assert log_ratio.max() == pytest.approx(math.log(keep / other), rel=1e-9)
        if epsilon <= 12:  # ... which is e^eps (beyond, the 2^-62 grid caps it near e^43)
            assert log_ratio.max() == pytest.approx(epsilon, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("epsilon", [1e-300, 1e-15, 0.5, 5.0, 20.0, 36.0, 40.0, 100.0, 800.0])
@pytest.mark.parametrize("d", [2, 3, 50, 10_000])
def test_realised_sampler_weights_keep_the_ratio_within_e_epsilon(epsilon: float, d: int) -> None:
    """The sampler keeps iff v < K for v uniform on [0, D): exact integer weights."""
    keep, other, total = response_weights(d, epsilon)
    assert keep + (d - 1) * other == total and 0 < other <= keep
    assert math.log(keep) - math.log(other) <= epsilon * (1 + 1e-15)
    assert switch_probability(d, epsilon) == (d - 1) * other / total
    if epsilon < 700:
        exact = Fraction(d - 1) / (Fraction(math.exp(epsilon)) + d - 1)
        realised = Fraction((d - 1) * other, total)
        assert realised >= exact * (1 - Fraction(1, 10**15))  # rounding only adds switching
        if exact > Fraction(10**9 * d, 2**62):  # far above the grid step: negligible rounding
            assert (realised - exact) / exact < 1e-9


def test_switch_probability_is_zero_with_a_single_bin() -> None:
    assert switch_probability(1, 1.0) == 0.0


# ---------------------------------------------------------------- sampler vs its own distribution


@pytest.mark.slow
def test_sampler_matches_output_probabilities_chi_square() -> None:
    values, probs = skewed_prior()
    mechanism = optimal_bins(values, probs, epsilon=3.0)
    assert mechanism.d >= 3
    rng = np.random.default_rng(2024)
    n = 40_000
    for label in [values[0] - 5.0, mechanism.thresholds[0], values[20], values[-1] + 99.0]:
        outputs = mechanism.randomize(np.full(n, label), rng)
        counts = np.array([np.count_nonzero(outputs == o) for o in mechanism.output_values])
        assert counts.sum() == n
        expected = n * mechanism.output_probabilities(label)
        assert chisquare(counts, expected).pvalue > 1e-4


def test_sampler_chooses_uniformly_among_the_other_outputs() -> None:
    # A small epsilon, many outputs: nearly every label switches, the d - 1 others equally often.
    mechanism = RROnBins(thresholds=np.arange(1.0, 9.0), output_values=np.arange(9.0), epsilon=0.01)
    outputs = mechanism.randomize(np.full(90_000, 4.5), np.random.default_rng(9))
    counts = np.bincount(outputs.astype(np.int64), minlength=9)
    expected = 90_000 * mechanism.output_probabilities(4.5)
    assert chisquare(counts, expected).pvalue > 1e-4


@pytest.mark.slow
@pytest.mark.parametrize("loss", LOSSES)
def test_expected_loss_matches_monte_carlo(loss: str) -> None:
    values, probs = skewed_prior()
    if loss == "poisson":
        values = values + 1.0
    mechanism = optimal_bins(values, probs, epsilon=1.0, loss=loss)
    rng = np.random.default_rng(77)
    labels = rng.choice(values, size=200_000, p=probs)
    losses = pointwise_loss(loss, mechanism.randomize(labels, rng), labels)
    standard_error = losses.std() / math.sqrt(losses.size)
    assert abs(losses.mean() - mechanism.expected_loss(values, probs, loss)) < 5 * standard_error


def test_expected_loss_of_a_single_bin_is_the_loss_of_a_constant() -> None:
    values = np.array([0.0, 2.0, 4.0])
    probs = np.array([0.25, 0.5, 0.25])
    mechanism = RROnBins(thresholds=[], output_values=[1.0], epsilon=1.0)
    assert mechanism.expected_loss(values, probs) == pytest.approx(0.25 * 1 + 0.5 * 1 + 0.25 * 9)
    assert mechanism.expected_loss(values, probs, "absolute") == pytest.approx(1.5)


def test_affine_expectation_matches_the_output_distribution() -> None:
    values, probs = skewed_prior()
    mechanism = optimal_bins(values, probs, epsilon=0.7)
    a, b = mechanism.affine_expectation()
    labels = probe_labels(mechanism, values)
    mean = mechanism.output_probabilities(labels) @ mechanism.output_values
    assert np.allclose(mean, a * mechanism.output_values[mechanism.phi(labels)] + b, rtol=1e-12)


@pytest.mark.perf
def test_randomize_of_a_million_labels_is_fast() -> None:
    import time

    values, probs = skewed_prior(401)
    mechanism = optimal_bins(values, probs, epsilon=2.0)
    labels = np.random.default_rng(0).uniform(-5, 45, 1_000_000)
    mechanism.randomize(labels[:10], np.random.default_rng(1))
    best = math.inf
    for _ in range(3):
        start = time.perf_counter()
        mechanism.randomize(labels, np.random.default_rng(1))
        best = min(best, time.perf_counter() - start)
    assert best < 0.1


def test_bin_index_kernel_matches_numpy_searchsorted() -> None:
    rng = np.random.default_rng(21)
    for m in (0, 1, 2, 7, 300):
        thresholds = np.sort(rng.choice(np.arange(1000.0), size=m, replace=False))
        labels = np.concatenate(
            [rng.uniform(-50, 1050, 5000), thresholds, np.nextafter(thresholds, -np.inf)]
        )
        want = np.searchsorted(thresholds, labels, side="right")
        assert np.array_equal(kernels.bin_index(labels, thresholds), want)


def test_apply_response_kernel_matches_a_numpy_reference() -> None:
    rng = np.random.default_rng(22)
    d, n = 6, 10_000
    keep, other, total = response_weights(d, 0.4)
    index = rng.integers(0, d, n)
    draws = rng.integers(0, total, n)
    switch = draws >= keep
    chosen = (draws[switch] - keep) // other
    want = index.copy()
    want[switch] = chosen + (chosen >= index[switch])
    got = index.copy()
    kernels.apply_response(got, draws, keep, other)
    assert np.array_equal(got, want)
    assert np.all(got[switch] != index[switch]) and np.array_equal(got[~switch], index[~switch])


# ---------------------------------------------------------------- structure of the result


def test_single_value_or_single_mass_gives_one_constant_output() -> None:
    one = optimal_bins(np.array([3.0]), np.array([1.0]), epsilon=1.0)
    assert one.d == 1 and one.output_values.tolist() == [3.0] and one.thresholds.size == 0
    massed = optimal_bins(np.arange(5.0), np.array([0, 0, 1.0, 0, 0]), epsilon=5.0)
    assert massed.d == 1 and massed.output_values.tolist() == [2.0]
    out = massed.randomize(np.array([-100.0, 2.0, 100.0]), np.random.default_rng(0))
    assert out.tolist() == [2.0, 2.0, 2.0]
    assert massed.output_probabilities(7.0).tolist() == [1.0]
    assert massed.affine_expectation() == (1.0, 0.0)
    zero = optimal_bins(np.arange(4.0), np.array([1.0, 0, 0, 0]), epsilon=1.0, loss="poisson")
    assert zero.output_values.tolist() == [0.0]


def test_phi_maps_values_to_their_bins_and_extremes_to_the_end_bins() -> None:
    values, probs = skewed_prior()
    mechanism = optimal_bins(values, probs, epsilon=3.0)
    assert mechanism.d >= 3
    bins = mechanism.phi(values)
    assert np.all(np.diff(bins) >= 0) and bins[0] == 0 and bins[-1] == mechanism.d - 1
    assert mechanism.phi(np.array([-1e300, 1e300])).tolist() == [0, mechanism.d - 1]
    # A threshold belongs to the bin above it (side="right").
    assert np.array_equal(mechanism.phi(mechanism.thresholds), np.arange(1, mechanism.d))
    for j, t in enumerate(mechanism.thresholds):  # halfway between two prior values
        below = values[values < t].max()
        above = values[values >= t].min()
        assert t == pytest.approx(0.5 * (below + above))
        assert mechanism.phi(below) == j and mechanism.phi(above) == j + 1


def test_zero_mass_values_go_to_the_nearer_output() -> None:
    values = np.arange(10.0)
    probs = np.array([0.5, 0, 0, 0, 0, 0, 0, 0, 0, 0.5])
    mechanism = optimal_bins(values, probs, epsilon=4.0)
    assert mechanism.d == 2
    low, high = mechanism.output_values
    for v in values:
        nearer = 0 if abs(v - low) <= abs(v - high) else 1
        assert mechanism.phi(v) == nearer


def test_large_epsilon_approaches_the_identity() -> None:
    values = np.array([1.0, 2.0, 5.0, 9.0])
    probs = np.array([0.1, 0.2, 0.3, 0.4])
    mechanism = optimal_bins(values, probs, epsilon=60.0)
    assert mechanism.d == 4
    assert np.allclose(mechanism.output_values, values, atol=1e-12)
    # Each other output keeps probability >= 2^-62 (the sampler's grid), not e^-60.
    assert mechanism.expected_loss(values, probs) < 1e-15


def test_optimal_bins_for_prior_cuts_at_cell_edges() -> None:
    rng = np.random.default_rng(4)
    prior = Prior.from_samples(rng.exponential(8.0, 5000), lo=0.0, hi=50.0, bins=50)
    mechanism = optimal_bins_for_prior(prior, epsilon=2.0)
    direct = optimal_bins(prior.midpoints, prior.probs, epsilon=2.0)
    assert mechanism.d >= 2
    assert np.all(np.isin(mechanism.thresholds, prior.edges[1:-1]))
    assert np.allclose(mechanism.thresholds, direct.thresholds, rtol=0, atol=1e-12)
    assert np.array_equal(mechanism.output_values, direct.output_values)
    cells = np.minimum(np.searchsorted(prior.edges, prior.midpoints, side="right") - 1, 49)
    assert np.array_equal(mechanism.phi(prior.edges[cells]), mechanism.phi(prior.midpoints))


def test_max_bins_caps_the_output_count_and_never_helps() -> None:
    values, probs = skewed_prior(101)
    free = optimal_bins(values, probs, epsilon=10.0)
    assert free.d > 4
    previous = math.inf
    for cap in (1, 2, 4, free.d - 1, free.d, free.d + 5):
        capped = optimal_bins(values, probs, epsilon=10.0, max_bins=cap)
        assert capped.d <= cap
        loss = capped.expected_loss(values, probs)
        assert loss <= previous * (1 + 1e-12)
        assert loss >= free.expected_loss(values, probs) * (1 - 1e-12)
        previous = loss
    assert optimal_bins(values, probs, epsilon=10.0, max_bins=free.d) == free


def test_public_params_round_trip_through_json() -> None:
    values, probs = skewed_prior()
    mechanism = optimal_bins(values, probs, epsilon=1.25)
    params = json.loads(json.dumps(mechanism.public_params()))
    assert params["mechanism"] == "rr_on_bins"
    again = RROnBins.from_params(params)
    assert again == mechanism and hash(again) == hash(mechanism)
    assert RROnBins.from_params({k: v for k, v in params.items() if k != "mechanism"}) == mechanism


@pytest.mark.parametrize(
    "params",
    [
        {"epsilon": 1.0, "thresholds": [], "output_values": [1.0], "extra": 1},
        {"epsilon": 1.0, "thresholds": []},
        {"mechanism": "laplace", "epsilon": 1.0, "thresholds": [], "output_values": [1.0]},
        {"epsilon": 1.0, "thresholds": [2.0, 1.0], "output_values": [0.0, 1.5, 3.0]},
        [1, 2],
    ],
)
def test_from_params_refuses_malformed_params(params: object) -> None:
    with pytest.raises(InvalidParameterError):
        RROnBins.from_params(params)  # type: ignore[arg-type]


def test_mechanism_arrays_are_read_only() -> None:
    mechanism = RROnBins(thresholds=[1.0], output_values=[0.0, 2.0], epsilon=1.0)
    with pytest.raises(ValueError):
        mechanism.output_values[0] = 5.0


# ---------------------------------------------------------------- properties (hypothesis)


@st.composite
def priors(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray]:
    k = draw(st.integers(1, 25))
    steps = draw(st.lists(st.integers(1, 50), min_size=k, max_size=k))
    start = draw(st.integers(0, 100))
    values = (start + np.cumsum(steps)).astype(float) / draw(st.sampled_from([1.0, 4.0, 1000.0]))
    masses = np.array(draw(st.lists(st.integers(0, 20), min_size=k, max_size=k)), dtype=float)
    if masses.sum() == 0:
        masses[draw(st.integers(0, k - 1))] = 1.0
    return values, masses / masses.sum()


@settings(max_examples=60, deadline=None)
@given(
    prior=priors(),
    epsilon=st.floats(0.01, 30.0),
    loss=st.sampled_from(LOSSES),
    cap=st.one_of(st.none(), st.integers(1, 6)),
    seed=st.integers(0, 2**32 - 1),
)
def test_outputs_are_published_values_and_seeded_runs_repeat(
    prior: tuple[np.ndarray, np.ndarray], epsilon: float, loss: str, cap: int | None, seed: int
) -> None:
    values, probs = prior
    mechanism = optimal_bins(values, probs, epsilon=epsilon, loss=loss, max_bins=cap)
    assert 1 <= mechanism.d <= min(values.size, cap or values.size)
    assert values[0] <= mechanism.output_values[0] and mechanism.output_values[-1] <= values[-1]
    if mechanism.d > 1:
        assert values[0] < mechanism.thresholds[0] and mechanism.thresholds[-1] <= values[-1]
    labels = np.concatenate([values, [values[0] - 1e6, values[-1] + 1e6]])
    first = mechanism.randomize(labels, np.random.default_rng(seed))
    assert np.all(np.isin(first, mechanism.output_values))
    assert np.array_equal(first, mechanism.randomize(labels, np.random.default_rng(seed)))
    assert np.all(np.isin(mechanism.randomize(labels, SystemRandom()), mechanism.output_values))
    # Never worse than the two trivial binnings: one bin, or one bin per value (if allowed).
    loss_value = mechanism.expected_loss(values, probs, loss)
    single = optimal_bins(values, probs, epsilon=epsilon, loss=loss, max_bins=1)
    assert loss_value <= single.expected_loss(values, probs, loss) + 1e-9 * abs(loss_value)


# ---------------------------------------------------------------- invalid inputs


GOOD_VALUES = np.array([0.0, 1.0, 2.0])
GOOD_PROBS = np.array([0.2, 0.3, 0.5])


@pytest.mark.parametrize(
    ("values", "probs", "kwargs", "message"),
    [
        (GOOD_VALUES, GOOD_PROBS, {"epsilon": 0.0}, "epsilon"),
        (GOOD_VALUES, GOOD_PROBS, {"epsilon": -1.0}, "epsilon"),
        (GOOD_VALUES, GOOD_PROBS, {"epsilon": math.inf}, "epsilon"),
        (GOOD_VALUES, GOOD_PROBS, {"epsilon": math.nan}, "epsilon"),
        (GOOD_VALUES, GOOD_PROBS, {"epsilon": "1"}, "epsilon"),  # strings are refused
        (GOOD_VALUES, GOOD_PROBS, {"epsilon": "x"}, "epsilon"),
        ([0.0, math.nan, 2.0], GOOD_PROBS, {"epsilon": 1.0}, "finite"),
        ([0.0, math.inf, 2.0], GOOD_PROBS, {"epsilon": 1.0}, "finite"),
        ([0.0, 2.0, 1.0], GOOD_PROBS, {"epsilon": 1.0}, "increasing"),
        ([0.0, 1.0, 1.0], GOOD_PROBS, {"epsilon": 1.0}, "increasing"),
        (GOOD_VALUES, [0.2, 0.3, 0.4], {"epsilon": 1.0}, "sum to 1"),
        (GOOD_VALUES, [0.6, -0.1, 0.5], {"epsilon": 1.0}, ">= 0"),
        (GOOD_VALUES, [0.2, math.nan, 0.5], {"epsilon": 1.0}, "finite"),
        (GOOD_VALUES, [0.5, 0.5], {"epsilon": 1.0}, "probs"),
        ([], [], {"epsilon": 1.0}, "empty"),
        ([[0.0, 1.0]], [[0.5, 0.5]], {"epsilon": 1.0}, "one-dimensional"),
        (["a", "b"], [0.5, 0.5], {"epsilon": 1.0}, "numbers"),
        (GOOD_VALUES, GOOD_PROBS, {"epsilon": 1.0, "max_bins": 0}, "max_bins"),
        (GOOD_VALUES, GOOD_PROBS, {"epsilon": 1.0, "max_bins": 2.5}, "max_bins"),
        (GOOD_VALUES, GOOD_PROBS, {"epsilon": 1.0, "max_bins": True}, "max_bins"),
        (GOOD_VALUES, GOOD_PROBS, {"epsilon": 1.0, "loss": "huber"}, "loss"),
        ([-1.0, 1.0, 2.0], GOOD_PROBS, {"epsilon": 1.0, "loss": "poisson"}, "values >= 0"),
    ],
)
def test_invalid_inputs_raise_a_clear_error(
    values: object, probs: object, kwargs: dict, message: str | None
) -> None:
    if message is None:
        assert optimal_bins(values, probs, **kwargs).epsilon == 1.0  # type: ignore[arg-type]
        return
    with pytest.raises(InvalidParameterError, match=message):
        optimal_bins(values, probs, **kwargs)  # type: ignore[arg-type]


def test_invalid_prior_object_and_mechanism_arguments_raise() -> None:
    with pytest.raises(InvalidParameterError, match="Prior"):
        optimal_bins_for_prior((GOOD_VALUES, GOOD_PROBS), epsilon=1.0)  # type: ignore[arg-type]
    mechanism = RROnBins(thresholds=[0.5, 1.5], output_values=[0.0, 1.0, 2.0], epsilon=1.0)
    rng = np.random.default_rng(0)
    for labels in ([], [0.0, math.nan], [math.inf], [[0.0]]):
        with pytest.raises(InvalidParameterError):
            mechanism.randomize(np.array(labels), rng)
    with pytest.raises(InvalidParameterError, match="rng"):
        mechanism.randomize(np.array([1.0]), 1234)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="finite"):
        mechanism.phi(math.nan)
    with pytest.raises(InvalidParameterError, match="finite"):
        mechanism.output_probabilities([0.0, math.inf])
    with pytest.raises(InvalidParameterError, match="sum to 1"):
        mechanism.expected_loss(GOOD_VALUES, [0.5, 0.5, 0.5])
    with pytest.raises(InvalidParameterError, match="loss"):
        mechanism.expected_loss(GOOD_VALUES, GOOD_PROBS, "huber")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"thresholds": [], "output_values": [], "epsilon": 1.0}, "at least one"),
        ({"thresholds": [1.0], "output_values": [0.0], "epsilon": 1.0}, "thresholds"),
        ({"thresholds": [1.0, 1.0], "output_values": [0.0, 1, 2], "epsilon": 1.0}, "increasing"),
        ({"thresholds": [1.0], "output_values": [2.0, 0.0], "epsilon": 1.0}, "increasing"),
        ({"thresholds": [math.nan], "output_values": [0.0, 2.0], "epsilon": 1.0}, "finite"),
        ({"thresholds": [1.0], "output_values": [0.0, math.inf], "epsilon": 1.0}, "finite"),
        ({"thresholds": [1.0], "output_values": [0.0, 2.0], "epsilon": 0.0}, "epsilon"),
        ({"thresholds": [1.0], "output_values": [0.0, 2.0], "epsilon": math.inf}, "epsilon"),
        ({"thresholds": ["x"], "output_values": [0.0, 2.0], "epsilon": 1.0}, "numbers"),
    ],
)
def test_constructor_refuses_bad_parameters(kwargs: dict, message: str) -> None:
    with pytest.raises(InvalidParameterError, match=message):
        RROnBins(**kwargs)
