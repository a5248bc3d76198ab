"""The exact unbiased randomizer (``shared.mechanisms.unbiased``): privacy on the integers,
unbiasedness, the sampler against its own probabilities, the message round trip, the services."""

from __future__ import annotations

import json
import math
from decimal import Decimal, localcontext
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import stats

from bench.accuracy import mechanisms as bench_mechanisms
from bench.baselines import unbiased as bench_unbiased
from shared.debias import affine_debias, mechanism_from_header
from shared.errors import InvalidParameterError
from shared.mechanisms import _unbiased_lp as lp
from shared.mechanisms import registry
from shared.mechanisms import unbiased as U
from shared.mechanisms.histogram import Prior
from shared.message import MessagePart, NoisyHistogram
from shared.plan import mechanisms
from shared.randomizer import build_mechanism, label_randomizer
from shared.rng import SystemRandom
from shared.selection import score
from shared.service.client import LabelsPartyClient
from tests.mechanisms import test_registry

D = U.WEIGHT_TOTAL
LO, HI = 0.0, 10.0
SKEWED = Prior(
    edges=np.linspace(LO, HI, 65),
    probs=np.concatenate([np.full(16, 4.0), np.full(32, 1.0), np.zeros(8), np.full(8, 0.5)])
    / 100.0,
)


def exact_exp(eps: float) -> Decimal:
    with localcontext() as ctx:
        ctx.prec = 60
        return Decimal(eps).exp()


def assert_exactly_private(mech: U.ExactUnbiased) -> None:
    """Every entry >= 1, rows summing to D, and max / min <= e^eps per column (60 digits)."""
    w = mech.weights
    assert w.dtype == np.int64 and np.all(w >= 1)
    assert all(int(s) == D for s in w.sum(axis=1))
    bound = exact_exp(mech.epsilon)
    for high, low in zip(w.max(axis=0).tolist(), w.min(axis=0).tolist(), strict=True):
        assert Decimal(high) <= bound * Decimal(low)
    assert not U.dp_violations(w, mech.epsilon)


@st.composite
def priors(draw: st.DrawFn) -> Prior:
    k = draw(st.sampled_from([1, 2, 3, 8, 16, 40, 64]))
    shape = draw(st.sampled_from(["point", "uniform", "sparse", "edges", "empty-middle"]))
    probs = np.zeros(k)
    if shape == "point":
        probs[draw(st.integers(0, k - 1))] = 1.0
    elif shape == "uniform":
        probs[:] = 1.0
    elif shape == "edges":
        probs[0] = probs[-1] = 1.0
    elif shape == "empty-middle":
        probs[:] = 1.0
        probs[k // 4 : (3 * k) // 4] = 0.0
    else:
        probs[:] = draw(st.lists(st.integers(0, 3), min_size=k, max_size=k))
    if probs.sum() == 0:
        probs[-1] = 1.0
    lo = draw(st.sampled_from([0.0, -5.0, 1e6]))
    width = draw(st.sampled_from([1e-3, 1.0, 1e4]))
    return Prior(edges=np.linspace(lo, lo + width, k + 1), probs=probs / probs.sum())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prior=priors(), eps=st.one_of(st.floats(0.01, 50.0), st.sampled_from([0.01, 36.0, 50.0])))
def test_the_integer_weights_are_exactly_epsilon_dp_for_any_prior(prior: Prior, eps: float) -> None:
    mech = U.build(prior, epsilon=eps)
    assert_exactly_private(mech)
    assert mech.input_grid[0] == prior.lo and mech.input_grid[-1] == prior.hi
    # Unbiased at every grid point, from the integers (exact rationals).
    z = [Fraction(v) for v in mech.output_values]
    for i, g in enumerate(mech.input_grid):
        mean = sum(Fraction(int(w)) * v for w, v in zip(mech.weights[i], z, strict=True)) / D
        assert abs(float(mean) - g) <= U._bias_tolerance(mech.input_grid, mech.output_values)


@pytest.mark.parametrize("eps", [0.01, 0.1, 1 / 3, 1.0, 2.0, 8.0, 30.0, 44.0, 50.0, 745.0])
def test_exp_lower_bound_is_below_e_to_the_epsilon_and_tight(eps: float) -> None:
    bound = U.exp_lower_bound(eps)
    exact = exact_exp(min(eps, 44.0))
    as_decimal = Decimal(bound.numerator) / Decimal(bound.denominator)
    assert as_decimal <= exact
    assert as_decimal >= exact * (1 - Decimal(2) ** -60)


def test_epsilon_below_the_floor_is_refused_and_auto_skips_it() -> None:
    with pytest.raises(InvalidParameterError, match="too small"):
        U.build(SKEWED, epsilon=5e-5)
    assert registry.get("unbiased").candidates(SKEWED, epsilon=5e-5) == []
    assert len(registry.get("unbiased").candidates(SKEWED, epsilon=1.0)) == 1


def brute_force_moments(mech: U.ExactUnbiased, y: float) -> tuple[Fraction, Fraction]:
    """E[noisy | y] and E[noisy^2 | y] by enumerating the rounding and the integer weights."""
    low, threshold = (int(a[0]) for a in mech.rounding(np.array([y])))
    up = Fraction(threshold, 2**U.ROUNDING_BITS)
    z = [Fraction(v) for v in mech.output_values]
    mean = second = Fraction(0)
    for row, p_row in ((low, 1 - up), (low + 1, up)):
        for w, v in zip(mech.weights[row], z, strict=True):
            mean += p_row * Fraction(int(w), D) * v
            second += p_row * Fraction(int(w), D) * v * v
    return mean, second


@pytest.mark.parametrize("eps", [0.3, 2.0, 8.0])
def test_unbiased_against_brute_force_for_labels_everywhere(eps: float) -> None:
    mech = U.build(SKEWED, epsilon=eps)
    labels = np.concatenate(
        [np.linspace(LO, HI, 37), [np.nextafter(HI, LO), 1e-9, 3.3, -4.0, 25.0]]
    )
    mean, var = mech.conditional_moments(labels)
    span = mech.output_values[-1] - mech.output_values[0]
    for y, m, v in zip(labels, mean, var, strict=True):
        exact_mean, exact_second = brute_force_moments(mech, float(y))
        assert abs(float(exact_mean) - np.clip(y, LO, HI)) <= 1e-8 * span
        assert m == pytest.approx(float(exact_mean), abs=1e-12 * span)
        assert v == pytest.approx(float(exact_second - exact_mean**2), rel=1e-9, abs=1e-12)
    assert mech.affine_expectation() == (1.0, 0.0)
    # The criterion sees no bias and the variance under the prior; one transform (raw).
    scores = score(mech, SKEWED, n=1000, model_dim=10)
    assert set(scores) == {"raw"} and scores["raw"].bias2 < 1e-18 * span**2
    assert mech.expected_squared_error(SKEWED) == pytest.approx(scores["raw"].variance, rel=1e-9)


@pytest.mark.parametrize("label", [LO, 0.77, 2.5, 7.3, HI, -3.0, 40.0])
def test_sampling_frequencies_match_output_probability(label: float) -> None:
    mech = U.build(SKEWED, epsilon=1.0)
    n = 200_000
    samples = mech.randomize(np.full(n, label), np.random.default_rng(23))
    index = np.searchsorted(mech.output_values, samples)
    assert np.all(mech.output_values[index] == samples)
    counts = np.bincount(index, minlength=mech.output_values.size)
    probs = mech.output_probability(mech.output_values, label)
    assert probs.sum() == pytest.approx(1.0, abs=1e-12) and np.all(probs > 0)
    keep = probs * n >= 5
    obs = np.append(counts[keep], counts[~keep].sum())
    exp = np.append(probs[keep], probs[~keep].sum()) * n
    if exp[-1] < 1e-9:
        obs, exp = obs[:-1], exp[:-1]
    assert stats.chisquare(obs, exp * n / exp.sum()).pvalue > 1e-4


def test_the_kernel_gives_what_the_numpy_description_gives_for_the_same_draws() -> None:
    """``randomize`` (numba, one pass) against :meth:`rounding` plus a search of the
    cumulative weights (numpy), draw for draw, on labels everywhere including the grid."""
    mech = U.build(SKEWED, epsilon=2.0)
    rng = np.random.default_rng(8)
    g = mech.input_grid
    y = np.concatenate(
        [rng.uniform(-3.0, 13.0, 50_000), g, np.nextafter(g, -np.inf), [1e300, -1e300]]
    )
    up = rng.integers(0, 2**U.ROUNDING_BITS, y.size)
    draw = rng.integers(0, D, y.size)
    low, threshold = mech.rounding(y)
    row = low + (up < threshold)
    position = np.searchsorted(mech._cumulative, draw + row * D, side="right")
    expected = mech.output_values[position - row * mech.output_values.size]

    class Replay(np.random.Generator):
        def __init__(self) -> None:
            super().__init__(np.random.PCG64(0))
            self.queue = [up, draw]

        def integers(self, low, high, size=None):  # type: ignore[override]
            return self.queue.pop(0)

    assert np.array_equal(mech.randomize(y, Replay()), expected)


def test_rounding_probability_is_r_over_two_to_the_53() -> None:
    mech = U.build(SKEWED, epsilon=1.0)
    g = mech.input_grid
    low, threshold = mech.rounding(np.array([g[3], 0.25 * g[3] + 0.75 * g[4], g[-1], 99.0]))
    assert low.tolist() == [3, 3, g.size - 2, g.size - 2]
    assert threshold[0] == 0 and threshold[2] == threshold[3] == 2**53
    assert threshold[1] == math.ceil(0.75 * 2**53) or abs(threshold[1] - 0.75 * 2**53) < 2**4


@pytest.mark.parametrize("eps", [0.5, 4.0])
def test_it_honours_the_registry_protocol(eps: float) -> None:
    mech = U.build(Prior(edges=np.linspace(0.0, 10.0, 6), probs=np.full(5, 0.2)), epsilon=eps)
    test_registry.test_every_mechanism_honours_the_protocol(mech)


def test_from_params_round_trips_through_json_and_the_message_schema() -> None:
    mech = U.build(SKEWED, epsilon=2.0)
    params = mech.public_params()
    assert params["mechanism"] == "unbiased"
    wire = json.loads(json.dumps(params))
    rebuilt = registry.get("unbiased").from_params(wire)
    assert rebuilt == mech and np.array_equal(rebuilt.weights, mech.weights)
    # The message's params schema (list[float]) carries the integers exactly (< 2^53).
    part = MessagePart(
        n=3,
        mechanism="unbiased",
        params=wire,
        histogram=NoisyHistogram(edges=list(SKEWED.edges), probs=list(SKEWED.probs)),
    )
    assert U.ExactUnbiased.from_params(part.params) == mech


def _tampered(params: dict, change) -> dict:
    out = dict(params)
    m = len(params["output_values"])
    weights = np.array(params["weights"], dtype=np.float64).reshape(-1, m)
    change(weights)
    out["weights"] = weights.ravel().tolist()
    return out


def test_from_params_refuses_a_tampered_weight_matrix() -> None:
    mech = U.build(SKEWED, epsilon=1.0)
    params = mech.public_params()
    column = int(np.argmax(mech.weights.max(axis=0) - mech.weights.min(axis=0)))
    row = int(np.argmax(mech.weights[:, column]))
    other = (column + 1) % mech.output_values.size

    def leak(w: np.ndarray) -> None:  # the column's max pushed to 3x its min, row sum kept
        extra = 3 * w[:, column].min() - w[row, column]
        w[row, column] += extra
        w[row, other] -= extra

    def zero(w: np.ndarray) -> None:
        w[0, other] += w[0, column]
        w[0, column] = 0

    for change, message in [
        (leak, "not 1.0-DP"),
        (zero, r"\[1, 2\^53\]"),
        (lambda w: w.__setitem__((0, 0), w[0, 0] + 0.5), "whole"),
        (lambda w: w.__setitem__((0, 0), w[0, 0] + 1), "sum to"),
    ]:
        with pytest.raises(InvalidParameterError, match=message):
            U.ExactUnbiased.from_params(_tampered(params, change))
    with pytest.raises(InvalidParameterError, match="not 0.5-DP"):
        U.ExactUnbiased.from_params({**params, "epsilon": 0.5})
    with pytest.raises(InvalidParameterError, match="exactly"):
        U.ExactUnbiased.from_params({**params, "extra": 1})
    with pytest.raises(InvalidParameterError, match="unbiased"):  # outputs shifted: biased
        shifted = [v + 1.0 for v in params["output_values"]]
        U.ExactUnbiased.from_params({**params, "output_values": shifted})


def test_the_bench_baseline_and_variant_go_through_the_product() -> None:
    """One LP: the benchmark's float baseline solves it with ``_unbiased_lp``, and the accuracy
    benchmark's "unbiased" variant releases the product mechanism itself."""
    assert bench_unbiased.lp is lp
    assert bench_mechanisms.UNBIASED_CELLS == U.UNBIASED_CELLS
    grid = U.coarse_grid(SKEWED)
    weights = lp.rounding_weights(SKEWED, grid)
    float_mech = bench_unbiased.optimal_unbiased(input_grid=grid, weights=weights, epsilon=1.0)
    exact = U.build(SKEWED, epsilon=1.0)
    assert exact.expected_squared_error(SKEWED) == pytest.approx(
        float_mech.grid_squared_error(weights) + _rounding_error(SKEWED, grid), rel=1e-3
    )
    rng = np.random.default_rng(4)
    y = np.clip(rng.normal(5.0, 2.0, 2000), LO, HI)
    ctx = bench_mechanisms.CellContext(dataset="t", y=y, lo=LO, hi=HI, epsilon=2.0)
    built = bench_mechanisms.VARIANTS["unbiased"].build(ctx, {}, rng)
    assert isinstance(built.randomizer, U.ExactUnbiased)
    assert built.randomizer.epsilon == ctx.shared_split[1]
    assert built.affine == (1.0, 0.0)
    assert_exactly_private(built.randomizer)


def _rounding_error(prior: Prior, grid: np.ndarray) -> float:
    """E[(rounded - y)^2] of randomized rounding: (y - g_l)(g_{l+1} - y), by quadrature."""
    y = np.linspace(prior.lo, prior.hi, 200_001)
    density = np.repeat(prior.probs / np.diff(prior.edges), 1)[
        np.clip(np.searchsorted(prior.edges, y, side="right") - 1, 0, prior.k - 1)
    ]
    low = np.clip(np.searchsorted(grid, y, side="right") - 1, 0, grid.size - 2)
    var = (y - grid[low]) * (grid[low + 1] - y)
    return float(np.trapezoid(density * var, y))


def test_coarse_grid_keeps_the_bounds_and_at_most_the_cells() -> None:
    assert np.array_equal(U.coarse_grid(SKEWED), SKEWED.edges[::4])
    small = Prior(edges=np.linspace(0, 1, 6), probs=np.full(5, 0.2))
    assert np.array_equal(U.coarse_grid(small), small.edges)
    odd = Prior(edges=np.linspace(0, 1, 51), probs=np.full(50, 0.02))
    grid = U.coarse_grid(odd)
    assert grid[0] == 0 and grid[-1] == 1 and grid.size == 17


def test_the_pipeline_releases_it_by_name() -> None:
    """``mechanism="unbiased"`` through the plan and the release step (the services' path)."""
    assert "unbiased" in mechanisms()
    assert registry.get("unbiased").in_auto  # measured: bench/results/worst_case.md
    _, mech = build_mechanism(SKEWED, epsilon=1.5, mechanism="unbiased")
    assert isinstance(mech, U.ExactUnbiased)
    labels = np.random.default_rng(0).uniform(LO, HI, 5000)
    out = label_randomizer(
        labels, lo=LO, hi=HI, epsilon1=0.5, epsilon2=2.5, mechanism="unbiased",
        rng=np.random.default_rng(1),
    )  # fmt: skip
    assert out.mechanism == "unbiased"
    released = registry.get("unbiased").from_params(out.params)
    assert released.epsilon <= 2.5
    assert set(np.unique(out.noisy_labels)) <= set(released.output_values)
    se = out.noisy_labels.std() / math.sqrt(labels.size)
    assert abs(out.noisy_labels.mean() - labels.mean()) < 5 * se


def test_unbiased_is_released_pulled_and_debiased_through_both_services(tmp_path: Path) -> None:
    rng = np.random.default_rng(12)
    n = 3000
    ids = [f"u{i:05d}" for i in range(n)]
    x = rng.uniform(0.0, 1.0, size=n)
    y = np.clip(10.0 * x + rng.normal(0, 0.5, n), 0.0, 10.0)
    with test_registry._labels_server(tmp_path / "labels.db") as url:
        operator, advertiser, publisher = (
            LabelsPartyClient(url, token=test_registry.TOKENS[role])
            for role in ("operator", "advertiser", "publisher")
        )
        operator.create_dataset(
            "unb", label_min=0.0, label_max=10.0, default_label=0.0, epsilon_budget=10
        )
        publisher.register_examples("unb", ids)
        advertiser.post_labels("unb", ids, y)
        preview = advertiser.preview_release("unb", epsilon=4, mechanism="unbiased")
        assert preview["plan"]["mechanism"] == "unbiased"
        release = advertiser.create_release("unb", epsilon=4, mechanism="unbiased")
        assert release.mechanism == "unbiased"
        pulled = publisher.download_message(release.id)
        assert pulled.header.mechanism == "unbiased"
        mech = mechanism_from_header(pulled.header)
        assert isinstance(mech, U.ExactUnbiased)
        assert_exactly_private(mech)
        assert set(np.unique(pulled.noisy_labels)) <= set(mech.output_values)
        debiased = affine_debias(pulled.header, pulled.noisy_labels)
        assert np.array_equal(debiased, pulled.noisy_labels)  # already unbiased: (1, 0)
        se = debiased.std() / np.sqrt(n)
        assert abs(debiased.mean() - y.mean()) < 5 * se
        with test_registry.features_service(tmp_path, url) as features:
            _, (low, high) = test_registry.train_and_predict(features, "unb", ids, x, release.id)
            assert high > low + 3  # the signal (slope 10) is learnt from the noisy labels


def test_the_csprng_path_takes_the_low_bits_of_raw_words(monkeypatch: pytest.MonkeyPatch) -> None:
    """From the OS CSPRNG, the rounding and response draws are the low 53 bits of 2 n raw
    words, in that order (exactly uniform: 2^53 divides 2^64), and nothing else is drawn
    (n below ``LABELS_PER_DRAW``: one chunk; several in ``test_unbiased_kernels``)."""
    import shared.rng as rng_module

    mech = U.build(SKEWED, epsilon=2.0)
    n = 5_000
    y = np.random.default_rng(3).uniform(-3.0, 13.0, n)
    words = np.random.default_rng(4).integers(0, 2**64, 2 * n, dtype=np.uint64)
    served: list[int] = []

    class FixedBytes:
        def urandom(self, size: int) -> bytes:
            served.append(size)
            assert size == words.nbytes
            return words.tobytes()

    monkeypatch.setattr(rng_module, "os", FixedBytes())
    low = (words & np.uint64(2**53 - 1)).astype(np.int64)
    up, draw = low[:n], low[n:]
    lower, threshold = mech.rounding(y)
    row = lower + (up < threshold)
    position = np.searchsorted(mech._cumulative, draw + row * D, side="right")
    expected = mech.output_values[position - row * mech.output_values.size]
    assert np.array_equal(mech.randomize(y, SystemRandom()), expected)
    assert served == [16 * n]


def test_auto_compares_the_family_only_from_its_minimum_epsilon() -> None:
    """Below ``AUTO_MIN_EPSILON`` ``auto`` sees no unbiased candidate (its noise is too wide for
    the criterion to weigh), though the family itself is still built when asked for."""
    family = registry.get("unbiased")
    below = np.nextafter(U.AUTO_MIN_EPSILON, 0.0)
    assert family.candidates(SKEWED, epsilon=below) == []
    assert family.candidates(SKEWED, epsilon=0.3) == []
    assert len(family.candidates(SKEWED, epsilon=U.AUTO_MIN_EPSILON)) == 1
    assert U.build(SKEWED, epsilon=0.3).epsilon == 0.3
