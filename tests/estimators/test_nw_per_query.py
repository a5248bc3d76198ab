"""ePTR-NW with one public c0 per query (per-query test, noise scaled per query), the reference
rule that chooses those constants, and the Gaussian smoother of released values."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.errors import InvalidParameterError
from shared.estimators.eptr import eptr_release, eptr_threshold
from shared.estimators.kernel import (
    eptr_nw,
    gaussian_kernel,
    kernel_bound,
    nw_alpha,
    nw_gammas,
    nw_noise_factors,
    nw_thresholds,
    query_overlap,
    smooth_interpolate,
)
from shared.estimators.nw_constants import REFERENCE_RELEASE, REFERENCE_SDS, reference_c0

LO, HI = 0.0, 5.0


def _nw_vector(x: np.ndarray, y: np.ndarray, q: np.ndarray, sigma: float) -> np.ndarray:
    k = gaussian_kernel(q, x, bandwidth=sigma)
    d = k.sum(axis=1)
    return np.where(d > 0, k @ y / np.where(d > 0, d, 1.0), 0.5 * (LO + HI))


def _alpha(queries: np.ndarray, c: np.ndarray, tau: np.ndarray, *, n: int, sigma: float) -> float:
    """alpha of ``eptr_nw`` for per-query c and tau, restated from its docstring."""
    weights = (c.min() / (c * tau)) ** 2
    overlap = min(
        float(weights.sum()), 2.0 * query_overlap(queries, bandwidth=sigma, weights=weights)
    )
    return nw_alpha(span=HI - LO, k_max=kernel_bound(2, sigma), c0=float(c.min()), n=n,
                    overlap=overlap)  # fmt: skip


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(2, 50),
    power=st.sampled_from([0.0, 0.5, 1.0]),
)
def test_per_query_gamma_is_a_salbo_for_the_scaled_vector_by_brute_force(
    seed: int, n: int, power: float
) -> None:
    """Definition 2.1 on every tried neighbour, per-query c: gamma is 1-Lipschitz; where
    gamma > 0 each query moves by <= (hi - lo) max(k, k') / (c_q n) and the released vector
    f / tau by <= alpha in L2."""
    rng = np.random.default_rng(seed)
    sigma = 0.3
    x = rng.uniform(0, 1, size=(n, 2))
    if n > 3:
        x[: n // 3] = x[0]  # duplicated rows
    y = rng.choice([LO, HI, 0.7], size=n)
    queries = np.vstack([x[0], x[0] + 0.05, rng.uniform(-0.5, 1.5, size=(3, 2))])
    k_max = kernel_bound(2, sigma)
    c = rng.uniform(0.02, 1.5, size=queries.shape[0]) * k_max / n
    tau = nw_noise_factors(c, power=power)
    alpha = _alpha(queries, c, tau, n=n, sigma=sigma)
    g = float(nw_gammas(gaussian_kernel(queries, x, bandwidth=sigma).sum(axis=1), n=n, c0=c,
                        k_max=k_max).min())  # fmt: skip
    f = _nw_vector(x, y, queries, sigma)
    for row in {0, n - 1, int(rng.integers(n))}:
        places = [*queries, np.array([50.0, 50.0]), *rng.uniform(-1, 2, size=(5, 2))]
        for place in places:
            for label in (LO, HI, float(rng.uniform(LO, HI))):
                x2, y2 = x.copy(), y.copy()
                x2[row], y2[row] = place, label
                d2 = gaussian_kernel(queries, x2, bandwidth=sigma).sum(axis=1)
                g2 = float(nw_gammas(d2, n=n, c0=c, k_max=k_max).min())
                assert abs(g - g2) <= 1.0 + 1e-9
                if g > 0:
                    move = np.abs(f - _nw_vector(x2, y2, queries, sigma))
                    k = gaussian_kernel(queries, x[row : row + 1], bandwidth=sigma)[:, 0]
                    k2 = gaussian_kernel(queries, x2[row : row + 1], bandwidth=sigma)[:, 0]
                    assert np.all(move <= (HI - LO) * np.maximum(k, k2) / (c * n) * (1 + 1e-9))
                    assert float(np.linalg.norm(move / tau)) <= alpha * (1 + 1e-9)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), m=st.integers(1, 10), sigma=st.floats(0.05, 1.0))
def test_weighted_query_overlap_bounds_the_weighted_kernel_sum_everywhere(
    seed: int, m: int, sigma: float
) -> None:
    rng = np.random.default_rng(seed)
    q = rng.uniform(0, 1, size=(m, 2))
    if m > 2:
        q[1] = q[0]
    w = rng.uniform(0.0, 3.0, size=m)
    bound = query_overlap(q, bandwidth=sigma, weights=w)
    probes = np.vstack([q, (q[:, None, :] + q[None, :, :]).reshape(-1, 2) / 2,
                        rng.uniform(-0.5, 1.5, size=(2000, 2))])  # fmt: skip
    sq = ((probes[:, None, :] - q[None, :, :]) ** 2).sum(axis=2)
    assert (np.exp(-sq / sigma**2) @ w).max() <= bound * (1 + 1e-12)
    assert bound <= w.sum() * (1 + 1e-12)
    assert query_overlap(q, bandwidth=sigma, weights=np.ones(m)) == pytest.approx(
        query_overlap(q, bandwidth=sigma), rel=1e-12
    )


def _data(n: int = 3000, seed: int = 5) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 1, size=(n, 2))
    return x, np.clip(2.5 + 2 * np.sin(3 * x[:, 0]) + 0.2 * rng.normal(size=n), LO, HI)


QUERIES = np.array([[0.5, 0.5], [0.3, 0.6], [0.9, 0.1]])


def test_one_c0_for_every_query_is_the_scalar_release_exactly() -> None:
    x, y = _data()
    kw = {"epsilon": 2.0, "delta": 1e-3, "bandwidth": 0.1, "lo": LO, "hi": HI}
    one = eptr_nw(x, y, QUERIES, c0=0.3, rng=np.random.default_rng(1), **kw)
    vec = eptr_nw(x, y, QUERIES, c0=np.full(3, 0.3), rng=np.random.default_rng(1), **kw)
    assert np.array_equal(one.values, vec.values) and one.alpha == vec.alpha
    assert np.array_equal(one.noise_factors, np.ones(3)) and one.gamma == vec.gamma


@pytest.mark.parametrize("power", [0.0, 0.5, 1.0])
def test_per_query_release_is_algorithm_2_on_the_scaled_vector(power: float) -> None:
    """values = tau (f / tau + N(0, s^2)): query q's noise is s tau_q, tau_q = (c_min / c_q)^p;
    gamma is the per-query minimum; the no-reply is returned as given."""
    x, y = _data()
    sigma, n = 0.1, 3000
    k_max = kernel_bound(2, sigma)
    c = np.array([0.2, 0.4, 0.05])
    kw = {"epsilon": 2.0, "delta": 1e-3, "bandwidth": sigma, "lo": LO, "hi": HI}
    out = eptr_nw(x, y, QUERIES, c0=c, rng=np.random.default_rng(7), noise_power=power, **kw)
    tau = (0.05 / c) ** power
    assert np.allclose(out.noise_factors, tau, rtol=1e-15)
    alpha = _alpha(QUERIES, c, tau, n=n, sigma=sigma)
    assert out.alpha == pytest.approx(alpha, rel=1e-12)
    degree = gaussian_kernel(QUERIES, x, bandwidth=sigma).sum(axis=1)
    assert out.gamma == pytest.approx(max(float((degree - c * n).min()), 0.0) / k_max)
    f = _nw_vector(x, y, QUERIES, sigma)
    ref = eptr_release(f / tau, gamma=out.gamma, alpha=alpha, epsilon=2.0, delta=1e-3,
                       no_reply=0.0, rng=np.random.default_rng(7))  # fmt: skip
    assert out.released and ref.released
    assert np.allclose(out.values, ref.value * tau, rtol=1e-12)
    assert out.noise_scale == ref.noise_scale
    # Too demanding a c for one query: gamma = 0, the no-reply comes back exactly.
    far = eptr_nw(x, y, QUERIES, c0=np.array([0.2, 5.0, 0.05]), rng=np.random.default_rng(7),
                  no_reply=np.array([1.0, 2.0, 3.0]), noise_power=power, **kw)  # fmt: skip
    assert far.gamma == 0.0 and not far.released and list(far.values) == [1.0, 2.0, 3.0]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"c0": np.array([0.1, 0.2])}, "c0"),  # not one per query
        ({"c0": np.array([0.1, 0.0, 0.2])}, "c0"),
        ({"c0": np.array([0.1, math.nan, 0.2])}, "c0"),
        ({"c0": -1.0}, "c0"),
        ({"c0": True}, "c0"),
        ({"c0": "x"}, "c0"),
        ({"c0": 0.1, "noise_power": 1.5}, "noise_power"),
        ({"c0": 0.1, "noise_power": -0.1}, "noise_power"),
    ],
)
def test_per_query_bad_input(kwargs: dict, field: str) -> None:
    x, y = _data(n=50)
    with pytest.raises(InvalidParameterError, match=field):
        eptr_nw(x, y, QUERIES, epsilon=1.0, delta=1e-3, bandwidth=0.1, lo=LO, hi=HI,
                rng=np.random.default_rng(0), **kwargs)  # fmt: skip
    assert nw_thresholds(0.5, 2).tolist() == [0.5, 0.5]


def test_reference_c0_is_the_documented_rule() -> None:
    rng = np.random.default_rng(3)
    reference = rng.uniform(0, 1, size=(4000, 2))
    sigma, n, eps, delta, floor = 0.1, 1000, 1.0, 0.01, 5.0
    queries = np.array([[0.5, 0.5], [0.2, 0.8], [3.0, 3.0]])
    c = reference_c0(queries, reference, n=n, bandwidth=sigma, epsilon=eps, delta=delta,
                     floor=floor)  # fmt: skip
    k_max = kernel_bound(2, sigma)
    predicted = gaussian_kernel(queries, reference, bandwidth=sigma).sum(axis=1) / k_max / 4
    margin = 2 / eps * math.log(REFERENCE_RELEASE / (1 - REFERENCE_RELEASE))
    units = predicted - eptr_threshold(epsilon=eps, delta=delta) - margin
    units -= REFERENCE_SDS * np.sqrt(predicted * 1.25)
    assert np.allclose(c * n / k_max, np.maximum(units, floor), rtol=1e-12)
    assert c[2] * n / k_max == pytest.approx(floor)  # far from the reference: the floor
    # Data from the reference's population pass the test at every query but the far one.
    x = rng.uniform(0, 1, size=(n, 2))
    degree = gaussian_kernel(queries[:2], x, bandwidth=sigma).sum(axis=1)
    assert np.all(degree - c[:2] * n >= eptr_threshold(epsilon=eps, delta=delta) * k_max)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"n": 0}, "n"),
        ({"bandwidth": 0.0}, "bandwidth"),
        ({"floor": 0.0}, "floor"),
        ({"epsilon": -1.0}, "epsilon"),
        ({"delta": 2.0}, "delta"),
        ({"reference": np.zeros((3, 3))}, "reference"),
    ],
)
def test_reference_c0_bad_input(kwargs: dict, field: str) -> None:
    args = {"reference": np.zeros((5, 2)), "n": 10, "bandwidth": 0.1, "epsilon": 1.0,
            "delta": 0.01, "floor": 1.0, **kwargs}  # fmt: skip
    with pytest.raises(InvalidParameterError, match=field):
        reference_c0(QUERIES, **args)


def test_smooth_interpolate_is_a_kernel_average_of_the_released_values() -> None:
    q = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    v = np.array([1.0, 2.0, 4.0])
    points = np.array([[0.2, 0.3], [0.0, 0.0], [100.0, 0.0]])
    out = smooth_interpolate(q, v, points, bandwidth=0.5)
    w = np.exp(-((points[:2, None, :] - q[None]) ** 2).sum(axis=2) / (2 * 0.25))
    assert np.allclose(out[:2], w @ v / w.sum(axis=1), rtol=1e-12)
    assert out[2] == 2.0  # every weight underflows: the nearest query's value
    assert np.allclose(smooth_interpolate(q, np.full(3, 1.5), points, bandwidth=0.1), 1.5)
    with pytest.raises(InvalidParameterError, match="values"):
        smooth_interpolate(q, v[:2], points, bandwidth=0.5)
    with pytest.raises(InvalidParameterError, match="bandwidth"):
        smooth_interpolate(q, v, points, bandwidth=0.0)
    with pytest.raises(InvalidParameterError, match="points"):
        smooth_interpolate(q, v, np.zeros((2, 3)), bandwidth=0.5)
