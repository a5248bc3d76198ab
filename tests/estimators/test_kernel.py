"""Nadaraya-Watson: ePTR-NW (Algorithm 5) on a query vector and label-DP NW's exact sensitivity."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import expit, log_expit

from shared.errors import InvalidParameterError
from shared.estimators.eptr import (
    _hockey_stick,
    eptr_noise_scale,
    eptr_release_probability,
    eptr_threshold,
)
from shared.estimators.kernel import (
    eptr_nw,
    gaussian_kernel,
    interpolate,
    kernel_bound,
    label_dp_nw,
    nw_alpha,
    nw_gamma,
    nw_predict,
    query_overlap,
)

LO, HI = 0.0, 5.0
BANDWIDTH = 0.4


def _designs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(21)
    random = rng.uniform(0, 1, size=(30, 2))
    isolated = rng.uniform(0, 1, size=(30, 2))
    isolated[4] = [2.5, 2.5]  # a lone point: the only data near the query placed beside it
    duplicated = np.repeat(rng.uniform(0, 1, size=(6, 2)), 5, axis=0)
    return {"random": random, "isolated": isolated, "duplicated": duplicated}


QUERIES = np.array([[0.5, 0.5], [0.1, 0.9], [2.4, 2.5], [1.0, 1.0]])


def _nw(x: np.ndarray, y: np.ndarray, q: np.ndarray) -> np.ndarray:
    return nw_predict(x, y, q, bandwidth=BANDWIDTH, default=math.nan)


@pytest.mark.parametrize("name", ["random", "isolated", "duplicated"])
def test_label_dp_nw_vector_sensitivity_is_the_brute_force_maximum(name: str) -> None:
    x = _designs()[name]
    rng = np.random.default_rng(3)
    y = rng.uniform(LO, HI, size=x.shape[0])
    out = label_dp_nw(x, y, QUERIES, lo=LO, hi=HI, epsilon=1.0, bandwidth=BANDWIDTH, rng=rng)
    worst = 0.0
    for i in range(x.shape[0]):
        y0, y1 = y.copy(), y.copy()
        y0[i], y1[i] = LO, HI
        worst = max(worst, float(np.abs(_nw(x, y0, QUERIES) - _nw(x, y1, QUERIES)).sum()))
    assert worst <= out.sensitivity * (1 + 1e-7)
    assert worst == pytest.approx(out.sensitivity, rel=1e-7)


@pytest.mark.parametrize("name", ["random", "isolated", "duplicated"])
def test_label_dp_nw_single_query_sensitivity_is_max_kernel_over_degree(name: str) -> None:
    x = _designs()[name]
    y = np.zeros(x.shape[0])
    for query in QUERIES:
        k = gaussian_kernel(query[None, :], x, bandwidth=BANDWIDTH)[0]
        expected = k.max() * (HI - LO) / k.sum()
        got = label_dp_nw(
            x, y, query[None, :], lo=LO, hi=HI, epsilon=1.0, bandwidth=BANDWIDTH,
            rng=np.random.default_rng(0),
        ).sensitivity  # fmt: skip
        assert got == pytest.approx(expected, rel=1e-7)
    # The lone point decides the query beside it alone: sensitivity near the whole range.
    if name == "isolated":
        lone = label_dp_nw(
            x, y, QUERIES[2:3], lo=LO, hi=HI, epsilon=1.0, bandwidth=BANDWIDTH,
            rng=np.random.default_rng(0),
        )  # fmt: skip
        assert lone.sensitivity > 0.99 * (HI - LO)


def test_label_dp_nw_centres_on_nw_and_interpolates_exactly_at_queries() -> None:
    x = _designs()["random"]
    rng = np.random.default_rng(4)
    y = rng.uniform(LO, HI, size=x.shape[0])
    out = label_dp_nw(x, y, QUERIES, lo=LO, hi=HI, epsilon=1e9, bandwidth=BANDWIDTH, rng=rng)
    assert np.allclose(out.values, _nw(x, y, QUERIES), atol=1e-4)
    assert np.array_equal(out.predict(QUERIES), out.values)
    between = out.predict(np.array([[0.3, 0.7]]))
    assert out.values.min() - 1e-12 <= between[0] <= out.values.max() + 1e-12


def test_eptr_nw_gamma_alpha_and_both_paths() -> None:
    rng = np.random.default_rng(5)
    x = rng.uniform(0, 1, size=(3000, 2))
    y = np.sin(3 * x[:, 0]) + 0.1 * rng.normal(size=3000)
    queries = np.array([[0.5, 0.5], [0.3, 0.6]])
    sigma, c0, r_f = 0.1, 0.3, 2.0
    out = eptr_nw(x, y, queries, epsilon=2.0, delta=1e-3, bandwidth=sigma, r_f=r_f, c0=c0, rng=rng)
    k_max = (2 * math.pi) ** -1 * sigma**-2
    degree = gaussian_kernel(queries, x, bandwidth=sigma).sum(axis=1)
    assert out.gamma == pytest.approx(max(degree.min() - c0 * 3000, 0) / k_max)
    gap = float(np.sum((queries[0] - queries[1]) ** 2))
    overlap = min(2.0, 2.0 * (1.0 + math.exp(-gap / (4 * sigma**2))))
    assert out.alpha == pytest.approx(2 * r_f * k_max * math.sqrt(overlap) / (c0 * 3000))
    assert out.released and out.values.shape == (2,)
    # One query: alpha is half the paper's 4 R_f K_max / (c0 n).
    one = eptr_nw(x, y, queries[:1], epsilon=2.0, delta=1e-3, bandwidth=sigma, r_f=r_f, c0=c0,
                  rng=rng)  # fmt: skip
    assert one.alpha == pytest.approx(0.5 * 4 * r_f * k_max / (c0 * 3000))
    # [lo, hi] = [0, 5]: alpha scales with hi - lo, not with 2 max(|lo|, |hi|).
    box = eptr_nw(x, y, queries[:1], epsilon=2.0, delta=1e-3, bandwidth=sigma, lo=0.0, hi=5.0,
                  c0=c0, rng=rng)  # fmt: skip
    assert box.alpha == pytest.approx(5.0 * k_max / (c0 * 3000))
    # A query far from the data has degree ~0: gamma = 0 and the no-reply comes back.
    far = eptr_nw(
        x, y, np.array([[5.0, 5.0]]), epsilon=1.0, delta=1e-6, bandwidth=sigma, r_f=r_f,
        c0=c0, rng=rng, no_reply=np.array([-1.0]),
    )  # fmt: skip
    assert far.gamma == 0.0 and not far.released and far.values[0] == -1.0
    # Without a no-reply given it is the middle of the public label interval, not 0 (a model
    # that was not released then predicts the middle of [lo, hi]).
    middle = eptr_nw(
        x, y, np.array([[5.0, 5.0], [6.0, 6.0]]), epsilon=1.0, delta=1e-6, bandwidth=sigma,
        lo=1.0, hi=4.0, c0=c0, rng=rng,
    )  # fmt: skip
    assert not middle.released and middle.values.tolist() == [2.5, 2.5]


def _nw_vector(x: np.ndarray, y: np.ndarray, q: np.ndarray, sigma: float) -> np.ndarray:
    k = gaussian_kernel(q, x, bandwidth=sigma)
    d = k.sum(axis=1)
    return np.where(d > 0, k @ y / np.where(d > 0, d, 1.0), 0.5 * (LO + HI))


def _neighbours(
    x: np.ndarray, y: np.ndarray, row: int, queries: np.ndarray, rng: np.random.Generator
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Neighbours replacing example ``row``: the worst candidates (x' on a query, far away;
    y' at either bound) and random ones."""
    places = [*queries, np.array([50.0, 50.0]), x[row], *rng.uniform(-1, 2, size=(6, 2))]
    out = []
    for place in places:
        for label in (LO, HI, float(rng.uniform(LO, HI))):
            x2, y2 = x.copy(), y.copy()
            x2[row], y2[row] = place, label
            out.append((x2, y2))
    return out


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(2, 60), c0=st.floats(0.01, 3.0))
def test_eptr_nw_gamma_is_a_salbo_by_brute_force(seed: int, n: int, c0: float) -> None:
    """Definition 2.1 on every tried neighbour: gamma is 1-Lipschitz; where gamma > 0 the
    vector moves by <= alpha in L2 and each query by <= (hi - lo) max(k, k') / (c0 n)."""
    rng = np.random.default_rng(seed)
    sigma = 0.3
    x = rng.uniform(0, 1, size=(n, 2))
    if n > 3:
        x[: n // 3] = x[0]  # duplicated rows
    y = rng.choice([LO, HI, 0.7], size=n)
    queries = np.vstack([x[0], rng.uniform(-0.5, 1.5, size=(3, 2))])
    k_max = kernel_bound(2, sigma)
    overlap = min(4.0, 2.0 * query_overlap(queries, bandwidth=sigma))
    alpha = nw_alpha(span=HI - LO, k_max=k_max, c0=c0, n=n, overlap=overlap)
    d = gaussian_kernel(queries, x, bandwidth=sigma).sum(axis=1)
    g = nw_gamma(d, n=n, c0=c0, k_max=k_max)
    f = _nw_vector(x, y, queries, sigma)
    for row in {0, n - 1, int(rng.integers(n))}:
        for x2, y2 in _neighbours(x, y, row, queries, rng):
            d2 = gaussian_kernel(queries, x2, bandwidth=sigma).sum(axis=1)
            assert abs(g - nw_gamma(d2, n=n, c0=c0, k_max=k_max)) <= 1.0 + 1e-9
            if g > 0:
                move = np.abs(f - _nw_vector(x2, y2, queries, sigma))
                k = gaussian_kernel(queries, x[row : row + 1], bandwidth=sigma)[:, 0]
                k2 = gaussian_kernel(queries, x2[row : row + 1], bandwidth=sigma)[:, 0]
                assert np.all(move <= (HI - LO) * np.maximum(k, k2) / (c0 * n) * (1 + 1e-9))
                assert float(np.linalg.norm(move)) <= alpha * (1 + 1e-9)


def test_eptr_nw_single_query_bound_is_reached() -> None:
    """The closed form (hi - lo) K_max / d(X) is attained: example i sits on the query with
    label hi, every other label is lo, and the neighbour moves it far away with label lo."""
    sigma, n = 0.3, 40
    rng = np.random.default_rng(9)
    x = rng.uniform(0, 1, size=(n, 2))
    query = x[:1].copy()
    y = np.full(n, LO)
    y[0] = HI
    x2, y2 = x.copy(), y.copy()
    x2[0], y2[0] = [100.0, 100.0], LO
    d = gaussian_kernel(query, x, bandwidth=sigma).sum()
    move = abs(_nw_vector(x, y, query, sigma)[0] - _nw_vector(x2, y2, query, sigma)[0])
    assert move == pytest.approx((HI - LO) * kernel_bound(2, sigma) / d, rel=1e-12)
    # ... and that is <= alpha for any c0 with d >= c0 n, = alpha at c0 = d / n.
    alpha = nw_alpha(span=HI - LO, k_max=kernel_bound(2, sigma), c0=d / n, n=n)
    assert move == pytest.approx(alpha, rel=1e-12)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), m=st.integers(1, 12), sigma=st.floats(0.05, 1.0))
def test_query_overlap_bounds_the_kernel_sum_everywhere(seed: int, m: int, sigma: float) -> None:
    rng = np.random.default_rng(seed)
    q = rng.uniform(0, 1, size=(m, 2))
    if m > 2:
        q[1] = q[0]  # a repeated query
    bound = query_overlap(q, bandwidth=sigma)
    probes = np.vstack([q, (q[:, None, :] + q[None, :, :]).reshape(-1, 2) / 2,
                        rng.uniform(-0.5, 1.5, size=(2000, 2))])  # fmt: skip
    sq = ((probes[:, None, :] - q[None, :, :]) ** 2).sum(axis=2)
    assert np.exp(-sq / sigma**2).sum(axis=1).max() <= bound * (1 + 1e-12)
    assert bound <= m


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 4.0, 16.0])
def test_eptr_nw_exact_delta_on_worst_neighbours_never_exceeds_the_charge(
    epsilon: float,
) -> None:
    """The exact (epsilon, delta) of the released output (no-reply atom + Gaussian) on the
    worst neighbour pairs, at degrees around the release threshold: <= the charged delta."""
    delta, sigma, n, c0 = 0.01, 0.3, 200, 0.5
    k_max = kernel_bound(2, sigma)
    threshold = eptr_threshold(epsilon=epsilon, delta=delta)
    query = np.array([[0.5, 0.5]])
    alpha = nw_alpha(span=HI - LO, k_max=k_max, c0=c0, n=n)
    scale = eptr_noise_scale(alpha=alpha, epsilon=epsilon, delta=delta)
    worst = 0.0
    # Degrees putting gamma at 0, just above 0, around M and far above it.
    for gamma in [0.0, 0.3, 0.99, 1.0, threshold - 1, threshold, threshold + 3, 10 * threshold]:
        # Build X with d(x_q) = c0 n + gamma K_max: example 0 on the query (label hi), the
        # rest at the distance that makes up the degree, labels lo; X' moves example 0 away.
        rest = c0 * n + gamma * k_max - k_max
        if rest <= 0:
            continue
        r2 = -2 * sigma**2 * math.log(rest / ((n - 1) * k_max))
        if r2 < 0:
            continue
        x = np.vstack([query, query + np.array([[math.sqrt(r2), 0.0]]).repeat(n - 1, axis=0)])
        y = np.full(n, LO)
        y[0] = HI
        x2, y2 = x.copy(), y.copy()
        x2[0], y2[0] = [100.0, 100.0], LO
        g1 = nw_gamma(gaussian_kernel(query, x, bandwidth=sigma).sum(axis=1), n=n, c0=c0,
                      k_max=k_max)  # fmt: skip
        g2 = nw_gamma(gaussian_kernel(query, x2, bandwidth=sigma).sum(axis=1), n=n, c0=c0,
                      k_max=k_max)  # fmt: skip
        shift = abs(_nw_vector(x, y, query, sigma)[0] - _nw_vector(x2, y2, query, sigma)[0])
        if g1 > 0 or g2 > 0:
            assert shift <= alpha * (1 + 1e-9)
        z1, z2 = 0.5 * epsilon * (g1 - threshold), 0.5 * epsilon * (g2 - threshold)
        assert math.isclose(
            float(expit(z1)), eptr_release_probability(gamma=g1, epsilon=epsilon, delta=delta)
        )
        for a, b in ((z1, z2), (z2, z1)):
            logs = [log_expit(np.array([v])) for v in (a, -a, b, -b)]
            step = _hockey_stick(*logs, shift=shift / scale, epsilon=epsilon)
            worst = max(worst, float(step[0]))
    assert worst <= delta


X2 = np.random.default_rng(0).uniform(0, 1, size=(20, 2))
LABEL_GOOD = {"lo": LO, "hi": HI, "epsilon": 1.0, "bandwidth": BANDWIDTH}


@pytest.mark.parametrize(
    ("field", "queries", "kwargs"),
    [
        ("queries", np.zeros((3, 3)), {}),  # dimension does not match the features
        ("queries", np.array([[1e6, 1e6]]), {}),  # zero kernel degree
        ("queries", np.array([[np.nan, 0.0]]), {}),
        ("bandwidth", QUERIES, {"bandwidth": 0.0}),
        ("hi", QUERIES, {"hi": -1.0}),
        ("epsilon", QUERIES, {"epsilon": math.nan}),
    ],
)
def test_label_dp_nw_bad_input(field: str, queries: np.ndarray, kwargs: dict) -> None:
    with pytest.raises(InvalidParameterError, match=field):
        label_dp_nw(
            X2, np.zeros(20), queries, rng=np.random.default_rng(0), **(LABEL_GOOD | kwargs)
        )


EPTR_GOOD = {"epsilon": 1.0, "delta": 0.01, "bandwidth": 0.2, "r_f": 1.0, "c0": 0.1}


@pytest.mark.parametrize(
    ("field", "queries", "kwargs"),
    [
        ("queries", np.zeros((2, 5)), {}),
        ("delta", QUERIES, {"delta": 1.0}),
        ("delta", QUERIES, {"delta": -0.1}),
        ("r_f", QUERIES, {"r_f": 0.0}),
        ("c0", QUERIES, {"c0": -1.0}),
        ("bandwidth", QUERIES, {"bandwidth": math.inf}),
        ("lo and hi", QUERIES, {"lo": 0.0}),
        ("hi", QUERIES, {"lo": 1.0, "hi": 0.0}),
        ("r_f", QUERIES, {"r_f": None}),
    ],
)
def test_eptr_nw_bad_input(field: str, queries: np.ndarray, kwargs: dict) -> None:
    with pytest.raises(InvalidParameterError, match=field):
        eptr_nw(X2, np.zeros(20), queries, rng=np.random.default_rng(0), **(EPTR_GOOD | kwargs))


def test_nw_features_must_be_finite_and_labels_match() -> None:
    bad = X2.copy()
    bad[0, 0] = np.inf
    with pytest.raises(InvalidParameterError, match="X must be finite"):
        label_dp_nw(bad, np.zeros(20), QUERIES, rng=np.random.default_rng(0), **LABEL_GOOD)
    with pytest.raises(InvalidParameterError, match="y must be 1-D with 20"):
        eptr_nw(X2, np.zeros(19), QUERIES, rng=np.random.default_rng(0), **EPTR_GOOD)


def test_interpolate_bad_input() -> None:
    with pytest.raises(InvalidParameterError, match="values"):
        interpolate(QUERIES, np.zeros(3), QUERIES)
    with pytest.raises(InvalidParameterError, match="points"):
        interpolate(QUERIES, np.zeros(4), np.zeros((1, 3)))
    with pytest.raises(InvalidParameterError, match="neighbours"):
        interpolate(QUERIES, np.zeros(4), QUERIES, neighbours=0)


def test_eptr_nw_is_never_refused_by_the_labels() -> None:
    """Public constants (r_f 1e295, bandwidth 1e-10: K_max r_f 4e304, 10^4 rows at the query)
    whose sum of K y_i overflows a double: it was inf - inf = NaN for labels of both signs (a
    refusal, 'estimate must be finite', after the labels were read and before anything is
    charged) and finite for labels of one sign. Whether ePTR-NW answers must not depend on the
    labels; every public check (alpha, gamma) passes here."""
    n, r_f = 10_000, 1e295
    x = np.zeros((n, 1))
    for y in (np.full(n, r_f), np.resize([r_f, -r_f], n), np.zeros(n)):
        out = eptr_nw(
            x, y, np.zeros((1, 1)), epsilon=1.0, delta=1e-6, bandwidth=1e-10, c0=1e-3, r_f=r_f,
            rng=np.random.default_rng(0),
        )  # fmt: skip
        assert np.all(np.isfinite(out.values))
        assert math.isfinite(out.alpha)


def test_the_label_dp_map_needs_no_kernel_peak() -> None:
    """W = K / d(x_q): K_max cancels, so nw_map computes in its units. Found by a fuzzer: K_max
    itself (sigma^-d) overflowed a double for a small bandwidth in many dimensions (sigma 0.05,
    d 300: a 500 for a label-DP NW release). W is the normalised exponential either way."""
    from shared.estimators.kernel import nw_map

    rng = np.random.default_rng(4)
    x = rng.normal(scale=0.01, size=(50, 300))
    queries = x[:3] + 1e-4
    weights = nw_map(x, queries, bandwidth=0.05)
    sq = ((queries[:, None, :] - x[None, :, :]) ** 2).sum(axis=2)
    shape = np.exp(-sq / (2 * 0.05**2))
    assert np.allclose(weights, shape / shape.sum(axis=1, keepdims=True), rtol=1e-12)
    small = nw_map(x[:, :2], queries[:, :2], bandwidth=0.5)
    assert np.allclose(small.sum(axis=1), 1.0)
