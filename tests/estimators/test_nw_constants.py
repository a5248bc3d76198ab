"""ePTR-NW constants chosen by the product (shared.estimators.nw_constants): the budget rule adds
up exactly, the bandwidth rule reads only public values, the degree estimate's sensitivity by
brute force over adversarial neighbours, c0 finite and positive for any input with the
documented no-reply margin, and the whole release runs ePTR-NW with the constants it reports."""

from __future__ import annotations

import math
from decimal import Decimal

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from shared import epsilon as amounts
from shared.errors import InvalidParameterError
from shared.estimators import constants as C
from shared.estimators import kernel
from shared.estimators import nw_constants as NC
from shared.estimators.eptr import eptr_threshold

OMITTED = st.lists(st.sampled_from(NC.NW_CONSTANTS), min_size=1, max_size=2, unique=True)


@settings(max_examples=200, deadline=None)
@given(
    digits=st.integers(1, 10**9),
    exponent=st.integers(-12, 6),
    delta=st.decimals(min_value="1e-12", max_value="0.5", places=12),
    omitted=OMITTED,
)
def test_the_split_adds_up_exactly(
    digits: int, exponent: int, delta: Decimal, omitted: list[str]
) -> None:
    epsilon = Decimal(digits).scaleb(exponent)
    assume(delta > 0)
    split = NC.nw_split(epsilon=epsilon, delta=delta, omitted=tuple(omitted))
    assert amounts.add(split.constants_epsilon, split.eptr_epsilon) == epsilon  # exactly
    assert NC.split_epsilon(split) == epsilon and split.delta == delta
    assert split.chosen == (("c0",) if "c0" in omitted else ())
    assert split.by_rule == (("bandwidth",) if "bandwidth" in omitted else ())
    if "c0" in omitted:
        part = split.parts["c0"]
        assert part > 0 and Decimal(split.part_float("c0")) <= part
        assert abs(float(part) - NC.SHARES["c0"] * float(epsilon)) <= 1e-5 * float(epsilon)
    else:  # the bandwidth alone costs nothing: ePTR-NW gets all of epsilon
        assert split.parts == {} and split.constants_epsilon == 0 and split.eptr_epsilon == epsilon
    assert Decimal(split.eptr_float) <= split.eptr_epsilon and split.eptr_float > 0
    public = split.public()
    assert public["chosen"] == [n for n in NC.NW_CONSTANTS if n in omitted]
    assert public["constants"]["delta"] == "0" and public["eptr"]["delta"] == amounts.text(delta)


def test_the_documented_split_for_epsilon_one() -> None:
    split = NC.nw_split(epsilon="1", delta="0.01", omitted=("bandwidth", "c0"))
    assert split.public() == {
        "chosen": ["bandwidth", "c0"],
        "constants": {"epsilon": "0.1", "delta": "0", "parts": {"c0": "0.1"}},
        "eptr": {"epsilon": "0.9", "delta": "0.01"},
    }
    lines = split.explanation()
    assert len(lines) == 3 and "n^(-1/(d+4))" in lines[0] and "Laplace" in lines[1]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"epsilon": "1e-320", "delta": "0.01", "omitted": ("c0",)}, "epsilon"),
        ({"epsilon": "1", "delta": "1", "omitted": ("c0",)}, "delta"),
        ({"epsilon": "1", "delta": "0.01", "omitted": ()}, "omitted"),
        ({"epsilon": "1", "delta": "0.01", "omitted": ("r_f",)}, "omitted"),
    ],
)
def test_the_split_refuses_naming_what_to_fix(kwargs: dict, match: str) -> None:
    with pytest.raises(InvalidParameterError, match=match):
        NC.nw_split(**kwargs)


def test_the_bandwidth_rule_is_scotts_on_the_queries_spread() -> None:
    rng = np.random.default_rng(3)
    queries = rng.normal(2.0, 0.5, size=(64, 3))
    spread = math.sqrt(float(np.mean((queries - queries.mean(axis=0)) ** 2)))
    sigma = NC.rule_bandwidth(queries, n=1000)
    assert sigma == pytest.approx(NC.BANDWIDTH_FACTOR * spread * 1000 ** (-1 / 7), rel=1e-12)
    # A public function of the queries, n and d: translation changes nothing, scale scales it,
    # and more data shrinks it at the rate n^(-1/(d+4)).
    assert NC.rule_bandwidth(queries + 100.0, n=1000) == pytest.approx(sigma, rel=1e-9)
    assert NC.rule_bandwidth(3.0 * queries, n=1000) == pytest.approx(3.0 * sigma, rel=1e-12)
    assert NC.rule_bandwidth(queries, n=128_000) == pytest.approx(sigma / 2.0, rel=1e-12)


@pytest.mark.parametrize("queries", [[[1.0, 2.0]], [[1.0, 2.0], [1.0, 2.0]], [[-3.0]] * 5])
def test_the_bandwidth_rule_refuses_queries_without_spread(queries: list) -> None:
    with pytest.raises(InvalidParameterError, match="bandwidth"):
        NC.rule_bandwidth(np.array(queries), n=100)


def _min_degree(x: np.ndarray, queries: np.ndarray, sigma: float) -> float:
    _, degree = kernel.nw_estimate(queries, x, np.zeros(x.shape[0]), bandwidth=sigma)
    return float(degree.min())


@pytest.mark.parametrize("seed", range(6))
def test_the_smallest_degree_moves_by_at_most_k_max_under_any_replacement(seed: int) -> None:
    """Brute force: every example of a data set replaced by adversarial points (on each query,
    far away, between queries, a copy of another example) moves min_q d(x_q) by <= K_max, and
    some replacement moves it by more than K_max / 2 (the bound is nearly reached)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(30, 2))
    queries = x[:6] + 0.01  # queries where the data are: one example carries each degree
    sigma = 0.4
    k_max = kernel.kernel_bound(2, sigma)
    base = _min_degree(x, queries, sigma)
    candidates = [*queries, np.array([1e3, -1e3]), 0.5 * (queries[0] + queries[1]), *x[:5]]
    worst = 0.0
    for i in range(x.shape[0]):
        for point in candidates:
            other = x.copy()
            other[i] = point
            moved = abs(_min_degree(other, queries, sigma) - base)
            assert moved <= k_max * (1 + 1e-12)
            worst = max(worst, moved)
    assert worst > 0.5 * k_max  # the bound is not vacuous here


def test_the_degree_estimate_is_the_min_degree_plus_laplace_of_scale_one_over_epsilon() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 2))
    queries = rng.normal(size=(5, 2))
    sigma, epsilon = 0.5, 2.0
    k_max = kernel.kernel_bound(2, sigma)
    truth = _min_degree(x, queries, sigma) / k_max
    draws = np.array(
        [
            NC.noisy_min_degree(x, queries, bandwidth=sigma, epsilon=epsilon, rng=rng)
            for _ in range(4000)
        ]
    )
    noise = draws - truth
    assert abs(np.median(noise)) < 0.05  # Laplace(1 / epsilon): median 0, mean |.| = 1 / eps
    assert np.mean(np.abs(noise)) == pytest.approx(1.0 / epsilon, rel=0.06)


@settings(max_examples=300, deadline=None)
@given(
    units=st.one_of(
        st.floats(-1e300, 1e300, allow_nan=False), st.sampled_from([0.0, -1.0, 1.0, 5e5])
    ),
    n=st.integers(1, 10**7),
    k_max=st.floats(1e-300, 1e300),
    eptr_epsilon=st.sampled_from([0.05, 0.9, 3.6, 30.0]),
    delta=st.sampled_from([1e-9, 1e-3, 0.05]),
)
def test_c0_is_finite_positive_and_at_most_the_largest_degree_for_any_input(
    units: float, n: int, k_max: float, eptr_epsilon: float, delta: float
) -> None:
    c0_epsilon = eptr_epsilon / 9.0
    try:
        c0 = NC.choose_nw_c0(
            units, n=n, k_max=k_max, eptr_epsilon=eptr_epsilon, delta=delta,
            c0_epsilon=c0_epsilon,
        )  # fmt: skip
    except InvalidParameterError as exc:  # only where K_max / n leaves the doubles
        assert not (math.isfinite(k_max / n) and k_max / n > 0.0) or "bandwidth" in str(exc)
        return
    assert math.isfinite(c0) and c0 > 0.0
    assert c0 * n <= k_max * n * (1 + 1e-12)  # no degree exceeds n K_max
    assert c0 * n >= k_max * (1 - 1e-12)  # at least one example's worth


def test_c0_leaves_the_documented_no_reply_margin_on_dense_data() -> None:
    eptr_epsilon, c0_epsilon, delta = 3.6, 0.4, 0.01
    m = eptr_threshold(epsilon=eptr_epsilon, delta=delta)
    c0 = NC.choose_nw_c0(
        500.0, n=1000, k_max=2.0, eptr_epsilon=eptr_epsilon, delta=delta, c0_epsilon=c0_epsilon
    )
    g = 500.0 - m - c0 * 1000 / 2.0  # c0 n / K_max = D~ - M - g
    assert g >= 1.0
    assert C.no_reply_probability(g, eptr_epsilon=eptr_epsilon, lambda_epsilon=c0_epsilon / 2)
    assert C.no_reply_probability(
        g, eptr_epsilon=eptr_epsilon, lambda_epsilon=c0_epsilon / 2
    ) <= NC.NO_REPLY * (1 + 1e-6)
    # Sparse data (an estimate below the margin): half the estimate, then one example's worth.
    sparse = NC.choose_nw_c0(
        10.0, n=1000, k_max=2.0, eptr_epsilon=eptr_epsilon, delta=delta, c0_epsilon=c0_epsilon
    )
    assert sparse * 1000 / 2.0 == pytest.approx(5.0)
    assert NC.choose_nw_c0(
        -3.0, n=1000, k_max=2.0, eptr_epsilon=eptr_epsilon, delta=delta, c0_epsilon=c0_epsilon
    ) * 1000 / 2.0 == pytest.approx(1.0)


def test_the_whole_release_runs_eptr_nw_with_the_constants_it_reports() -> None:
    rng = np.random.default_rng(8)
    x = rng.normal(size=(2000, 2))
    y = np.clip(1.0 + x[:, 0] + 0.1 * rng.normal(size=2000), 0.0, 3.0)
    queries = np.array([[a, b] for a in (-0.5, 0.0, 0.5) for b in (-0.5, 0.0, 0.5)])
    split = NC.nw_split(epsilon="4", delta="0.0001", omitted=("bandwidth", "c0"))
    out = NC.eptr_nw_chosen(x, y, queries, split=split, rng=rng, lo=0.0, hi=3.0)
    assert out.bandwidth == NC.rule_bandwidth(queries, n=2000)
    k_max = kernel.kernel_bound(2, out.bandwidth)
    overlap = min(9.0, 2.0 * kernel.query_overlap(queries, bandwidth=out.bandwidth))
    alpha = kernel.nw_alpha(span=3.0, k_max=k_max, c0=out.c0, n=2000, overlap=overlap)
    assert out.fit.alpha == pytest.approx(alpha, rel=1e-12)
    assert out.fit.released and out.fit.gamma > eptr_threshold(epsilon=3.6, delta=1e-4)
    truth = 1.0 + queries[:, 0]  # smoothing bias below 0.2 here, plus the released noise
    assert np.max(np.abs(out.fit.values - truth)) < 0.2 + 5.0 * out.fit.noise_scale
    params = out.header_params()
    assert params == {
        "bandwidth": out.bandwidth, "c0": out.c0, "constants_chosen": "bandwidth,c0",
        "constants_epsilon": "0.4", "eptr_epsilon": "3.6",
    }  # fmt: skip
    # Given constants are used as given: only c0 chosen.
    only_c0 = NC.nw_split(epsilon="4", delta="0.0001", omitted=("c0",))
    given = NC.eptr_nw_chosen(
        x, y, queries, split=only_c0, rng=rng, lo=0.0, hi=3.0, given={"bandwidth": 0.3}
    )
    assert given.bandwidth == 0.3 and given.header_params()["constants_chosen"] == "c0"


@pytest.mark.parametrize(
    "queries", [[[1e200], [-1e200]], [[1e308], [-1e308]], [[1e-300], [0.0]], [[5e-324], [0.0]]]
)
def test_the_bandwidth_rule_never_overflows_midway(queries: list) -> None:
    """Extreme but finite queries: a positive finite sigma (refused later, naming bandwidth, if
    its K_max is not a positive double) or a refusal naming bandwidth; never a warning."""
    try:
        sigma = NC.rule_bandwidth(np.array(queries), n=10)
    except InvalidParameterError as exc:
        assert "bandwidth" in str(exc)
        return
    assert math.isfinite(sigma) and sigma > 0.0
