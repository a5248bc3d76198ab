"""Nadaraya-Watson: ePTR-NW (Algorithm 5) on a query vector and label-DP NW's exact sensitivity."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.errors import InvalidParameterError
from shared.estimators.kernel import (
    eptr_nw,
    gaussian_kernel,
    interpolate,
    kernel_bound,
    label_dp_nw,
    nw_gamma,
    nw_predict,
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
    assert out.gamma == pytest.approx(max(degree.min() - c0 * 3000 - 2 * k_max, 0) / (2 * k_max))
    assert out.alpha == pytest.approx(math.sqrt(2) * 4 * r_f * k_max / (c0 * 3000))
    assert out.released and out.values.shape == (2,)
    # A query far from the data has degree ~0: gamma = 0 and the no-reply comes back.
    far = eptr_nw(
        x, y, np.array([[5.0, 5.0]]), epsilon=1.0, delta=1e-6, bandwidth=sigma, r_f=r_f,
        c0=c0, rng=rng, no_reply=np.array([-1.0]),
    )  # fmt: skip
    assert far.gamma == 0.0 and not far.released and far.values[0] == -1.0


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), row=st.integers(0, 399))
def test_eptr_nw_gamma_is_a_salbo(seed: int, row: int) -> None:
    """gamma is 1-Lipschitz; where gamma > 0 each query moves by <= the per-point alpha."""
    rng = np.random.default_rng(seed)
    sigma, c0, r_f = 0.3, 0.2, 1.0
    x = rng.uniform(0, 1, size=(400, 2))
    y = rng.uniform(-2, 2, size=400)
    x2, y2 = x.copy(), y.copy()
    x2[row] = rng.uniform(-1, 2, size=2)
    y2[row] = rng.uniform(-3, 3)
    queries = np.array([[0.5, 0.5], [0.2, 0.8], [0.9, 0.1]])
    k_max = kernel_bound(2, sigma)

    def stats(a: np.ndarray, b: np.ndarray) -> tuple[float, np.ndarray]:
        k = gaussian_kernel(queries, a, bandwidth=sigma)
        d = k.sum(axis=1)
        f = np.clip(k @ np.clip(b, -r_f, r_f) / d, -r_f, r_f)
        return nw_gamma(d, n=400, c0=c0, k_max=k_max), f

    g1, f1 = stats(x, y)
    g2, f2 = stats(x2, y2)
    assert abs(g1 - g2) <= 1.0 + 1e-9
    if g1 > 0:
        alpha_point = 4 * r_f * k_max / (c0 * 400)
        assert np.all(np.abs(f1 - f2) <= alpha_point * (1 + 1e-9))


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
