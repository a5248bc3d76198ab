"""ePTR-OLS (Algorithm 4) and label-DP OLS: sensitivities by brute force, privacy ratios, errors."""

from __future__ import annotations

import math
from decimal import Decimal
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.domain import LabelDomain
from shared.errors import InvalidParameterError
from shared.estimators import registry
from shared.estimators._checks import project_rows, project_vector
from shared.estimators._linear import LABEL_LEVELS, QuantisedMap, label_levels
from shared.estimators.eptr import eptr_noise_scale
from shared.estimators.ols import (
    eptr_design,
    eptr_ols,
    label_dp_ols,
    ols_alpha,
    ols_gamma,
    ols_map,
    ols_no_reply,
)
from shared.estimators.registry import FitArgs
from tests.estimators.conftest import designs

LO, HI = -2.0, 3.0


def _ols(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.linalg.lstsq(x, y, rcond=None)[0]


@pytest.mark.parametrize("name", ["random", "leverage", "collinear"])
def test_label_dp_ols_sensitivity_is_the_brute_force_maximum(name: str) -> None:
    x = designs()[name]
    rng = np.random.default_rng(5)
    y = rng.uniform(LO, HI, size=x.shape[0])
    reported = label_dp_ols(x, y, lo=LO, hi=HI, epsilon=1.0, rng=rng).sensitivity
    worst = 0.0
    for i in range(x.shape[0]):  # every single-label change to each extreme
        for a, b in ((LO, HI), (y[i], LO), (y[i], HI)):
            y0, y1 = y.copy(), y.copy()
            y0[i], y1[i] = a, b
            worst = max(worst, float(np.abs(_ols(x, y0) - _ols(x, y1)).sum()))
    gram_inv = np.linalg.inv(x.T @ x)
    formula = max(np.abs(gram_inv @ x[i]).sum() for i in range(x.shape[0])) * (HI - LO)
    rtol = 1e-6 if name != "collinear" else 1e-4  # lstsq itself loses digits at cond ~ 1e4
    assert reported == pytest.approx(formula, rel=1e-7)
    assert worst <= reported * (1 + rtol)  # never exceeded
    assert worst == pytest.approx(reported, rel=rtol)  # and tight


@pytest.mark.parametrize("name", ["random", "leverage", "collinear"])
def test_integer_release_sensitivity_is_exact_and_the_ratio_is_bounded(name: str) -> None:
    """The released integers T + Z: every one-label change moves T by <= S in L1, some by S."""
    x = designs()[name]
    q = QuantisedMap.from_weights(ols_map(x))
    s = int(q.column_l1().max()) * LABEL_LEVELS
    rng = np.random.default_rng(6)
    levels = label_levels(rng.uniform(LO, HI, size=x.shape[0]), LabelDomain(lo=LO, hi=HI))
    t = np.array(q.apply(levels), dtype=object)
    eps = 0.7
    moves = []
    for i in range(x.shape[0]):
        for new in (0, LABEL_LEVELS):
            other = levels.copy()
            other[i] = new
            moves.append(np.array(q.apply(other), dtype=object) - t)
    l1 = [int(sum(abs(v) for v in m)) for m in moves]
    assert max(l1) <= s
    top = int(np.argmax(q.column_l1()))
    full = levels.copy()
    full[top] = 0
    far = levels.copy()
    far[top] = LABEL_LEVELS
    gap = np.array(q.apply(far), dtype=object) - np.array(q.apply(full), dtype=object)
    assert int(sum(abs(v) for v in gap)) == s  # tight, exactly
    # Output log-density ratio of discrete Laplace(S / eps) noise, analytically, at outputs o:
    # log P(o | T) - log P(o | T') = eps / S (|o - T'|_1 - |o - T|_1) <= eps.
    for move in moves:
        for o in (t, t + move, t - 3 * move, t + np.array([s] * t.size, dtype=object)):
            ratio = sum(abs(a - b - c) - abs(a - b) for a, b, c in zip(o, t, move, strict=True))
            assert eps * ratio / s <= eps
    o = t + gap  # the worst output reaches e^eps exactly
    assert eps * sum(abs(a - b) for a, b in zip(o, t, strict=True)) / s == pytest.approx(eps)


def test_label_dp_ols_noise_is_centred_with_the_laplace_scale() -> None:
    x = designs()["random"]
    rng = np.random.default_rng(7)
    y = rng.uniform(LO, HI, size=x.shape[0])
    draws = np.array(
        [label_dp_ols(x, y, lo=LO, hi=HI, epsilon=2.0, rng=rng).coef for _ in range(600)]
    )
    one = label_dp_ols(x, y, lo=LO, hi=HI, epsilon=2.0, rng=rng)
    centre = _ols(x, y)
    assert np.all(np.abs(draws.mean(axis=0) - centre) < 5 * one.noise_scale * math.sqrt(2 / 600))
    # Discrete Laplace on a fine grid: standard deviation sqrt(2) b.
    assert np.allclose(draws.std(axis=0), math.sqrt(2) * one.noise_scale, rtol=0.15)
    assert one.noise_scale == pytest.approx(one.sensitivity / 2.0)


def test_labels_outside_the_bounds_are_clipped() -> None:
    x = designs()["random"]
    y = np.full(x.shape[0], 100.0)
    huge = label_dp_ols(x, y, lo=LO, hi=HI, epsilon=1e9, rng=np.random.default_rng(0)).coef
    assert np.allclose(huge, _ols(x, np.full(x.shape[0], HI)), atol=1e-6)


def test_eptr_ols_gamma_alpha_and_both_paths() -> None:
    rng = np.random.default_rng(8)
    x = rng.normal(size=(2000, 3))
    y = x @ np.array([0.5, -0.2, 0.1]) + rng.normal(size=2000)
    r_x, c0 = 4.0, 0.5
    out = eptr_ols(x, y, epsilon=2.0, delta=1e-3, r_x=r_x, r_theta=1.0, c0=c0, rng=rng)
    xp = project_rows(x, r_x)
    lam = np.linalg.eigvalsh(xp.T @ xp)[0]
    assert out.gamma == pytest.approx(max(lam - c0 * 2000 - 2 * r_x**2, 0) / (2 * r_x**2))
    assert out.alpha == pytest.approx(4 * r_x**2 * 1.0 / (c0 * 2000))
    assert out.released and out.coef.shape == (3,)
    assert out.noise_scale == pytest.approx(
        eptr_noise_scale(alpha=out.alpha, epsilon=2.0, delta=1e-3), rel=1e-12
    )
    # Too few rows for c0: gamma = 0, the no-reply comes back (probability < delta).
    small = eptr_ols(
        x[:20], y[:20], epsilon=1.0, delta=1e-6, r_x=r_x, r_theta=1.0, c0=c0, rng=rng,
        no_reply=np.array([7.0, 7.0, 7.0]),
    )  # fmt: skip
    assert small.gamma == 0.0 and not small.released and np.all(small.coef == 7.0)


def test_ols_alpha_is_the_closed_form_and_inf_beyond_the_doubles() -> None:
    """alpha = 4 r_x^2 r_theta / (c0 n) (16); +inf where it overflows, never an exception
    (r_x^2 in Python floats raised OverflowError from r_x ~1.3e154: a 500 for a given r_x)."""
    assert ols_alpha(r_x=4.0, r_theta=0.5, c0=0.25, n=100) == pytest.approx(4 * 16 * 0.5 / 25)
    assert ols_alpha(r_x=1e200, r_theta=1.0, c0=0.1, n=10) == math.inf
    assert ols_alpha(r_x=1.0, r_theta=1.0, c0=5e-324, n=10) == math.inf
    x = np.random.default_rng(3).normal(size=(40, 2))
    y = np.ones(40)
    out = eptr_ols(
        x, y, epsilon=1.0, delta=1e-6, r_x=1e200, r_theta=1.0, c0=0.1, intercept=True,
        rng=np.random.default_rng(0), no_reply=np.array([0.0, 0.0, 7.0]),
    )  # fmt: skip
    assert out.alpha == math.inf and not out.released and np.array_equal(out.coef, [0, 0, 7])
    # The intercept's design at such an r_x: the features unprojected, no NaN.
    design = eptr_design(x, 1e200, intercept=True)
    assert np.array_equal(design[:, :2], x) and np.all(design[:, 2] == 1.0)
    assert ols_gamma(design, r_x=1e200, c0=0.1) == 0.0


def test_eptr_ols_does_not_refuse_a_singular_private_design() -> None:
    x = np.ones((50, 2))  # rank 1: gamma is 0, the release is almost surely the no-reply
    out = eptr_ols(
        x, np.ones(50), epsilon=1.0, delta=1e-6, r_x=2.0, r_theta=1.0, c0=0.1,
        rng=np.random.default_rng(0),
    )  # fmt: skip
    assert out.gamma == 0.0 and not out.released


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), row=st.integers(0, 199), scale=st.floats(0.0, 3.0))
def test_eptr_ols_gamma_is_a_salbo(seed: int, row: int, scale: float) -> None:
    """gamma is 1-Lipschitz, and where gamma > 0 a neighbour's projected OLS moves <= alpha."""
    rng = np.random.default_rng(seed)
    r_x, r_theta, c0 = 3.0, 1.0, 0.3
    x = rng.normal(size=(200, 2))
    y = x @ np.array([0.6, -0.4]) + rng.normal(size=200)
    x2, y2 = x.copy(), y.copy()
    x2[row] = rng.normal(size=2) * scale * 3
    y2[row] = rng.normal() * 10
    g1 = ols_gamma(project_rows(x, r_x), r_x=r_x, c0=c0)
    g2 = ols_gamma(project_rows(x2, r_x), r_x=r_x, c0=c0)
    assert abs(g1 - g2) <= 1.0 + 1e-9
    if g1 > 0:
        bound = r_x * r_theta

        def theta(a: np.ndarray, b: np.ndarray) -> np.ndarray:
            return project_vector(_ols(project_rows(a, r_x), np.clip(b, -bound, bound)), r_theta)

        alpha = 4 * r_x**2 * r_theta / (c0 * 200)
        assert np.linalg.norm(theta(x, y) - theta(x2, y2)) <= alpha * (1 + 1e-9)


GOOD = {"epsilon": 1.0, "lo": LO, "hi": HI}


@pytest.mark.parametrize(
    ("field", "x", "y", "kwargs"),
    [
        ("X", np.ones((10, 2)), np.zeros(10), {}),  # singular X^T X
        ("X", np.ones((1, 3)), np.zeros(1), {}),  # fewer rows than columns
        ("X", np.array([[1.0, np.nan], [0.0, 1.0], [1.0, 1.0]]), np.zeros(3), {}),
        ("X", np.zeros(5), np.zeros(5), {}),  # not 2-D
        ("y", np.eye(3), np.zeros(4), {}),
        ("y", np.eye(3), np.array([0.0, np.inf, 1.0]), {}),
        ("lo", np.eye(3), np.zeros(3), {"lo": 5.0}),
        ("epsilon", np.eye(3), np.zeros(3), {"epsilon": -1.0}),
    ],
)
def test_label_dp_ols_bad_input(field: str, x: np.ndarray, y: np.ndarray, kwargs: dict) -> None:
    with pytest.raises(InvalidParameterError, match=field):
        label_dp_ols(x, y, rng=np.random.default_rng(0), **(GOOD | kwargs))


EPTR_GOOD = {"epsilon": 1.0, "delta": 0.01, "r_x": 2.0, "r_theta": 1.0, "c0": 0.1}


@pytest.mark.parametrize(
    ("field", "kwargs"),
    [
        ("delta", {"delta": 0.0}),
        ("delta", {"delta": 1.5}),
        ("epsilon", {"epsilon": 0}),
        ("r_x", {"r_x": 0.0}),
        ("r_theta", {"r_theta": -1.0}),
        ("c0", {"c0": math.nan}),
    ],
)
def test_eptr_ols_bad_input(field: str, kwargs: dict) -> None:
    with pytest.raises(InvalidParameterError, match=field):
        eptr_ols(np.eye(3), np.zeros(3), rng=np.random.default_rng(0), **(EPTR_GOOD | kwargs))


def test_eptr_ols_refuses_fewer_rows_than_columns_and_non_finite_features() -> None:
    with pytest.raises(InvalidParameterError, match="fewer rows"):
        eptr_ols(np.ones((2, 3)), np.zeros(2), rng=np.random.default_rng(0), **EPTR_GOOD)
    with pytest.raises(InvalidParameterError, match="X must be finite"):
        eptr_ols(np.full((4, 2), np.inf), np.zeros(4), rng=np.random.default_rng(0), **EPTR_GOOD)


def test_eptr_ols_intercept_is_added_after_the_projection() -> None:
    """Issue 22, item 6: rows far outside the ball keep their whole intercept (the ones are not
    shrunk with the features), every row stays inside the ball of radius r_x, and the fit
    recovers an offset the features cannot explain."""
    rng = np.random.default_rng(4)
    x = rng.normal(size=(4000, 2)) * 3.0
    y = x @ np.array([0.3, -0.1]) + 2.0 + rng.normal(0, 0.1, 4000)
    r_x = 3.0
    out = eptr_ols(
        x, y, epsilon=50.0, delta=1e-3, r_x=r_x, r_theta=10.0, c0=0.1, rng=rng, intercept=True
    )
    assert out.released and out.coef.shape == (3,)
    assert abs(out.coef[-1] - 2.0) < 0.2, out.coef
    shrunk = project_rows(x, math.sqrt(r_x**2 - 1))
    rows = np.column_stack([shrunk, np.ones(4000)])
    assert np.all(np.linalg.norm(rows, axis=1) <= r_x + 1e-12)
    with pytest.raises(InvalidParameterError, match="r_x"):
        eptr_ols(x, y, epsilon=1.0, delta=1e-3, r_x=1.0, r_theta=1.0, c0=0.1, rng=rng,
                 intercept=True)  # fmt: skip


def test_eptr_ols_replaces_an_overflowing_estimate_only_where_gamma_is_zero_everywhere() -> None:
    """Extreme scales (features 1e-200, labels 1e200): the least-squares solution overflows a
    double. It is replaced by 0 only where lambda_min < c0 n (that data set and every neighbour
    have gamma = 0, so the estimate never matters for privacy), instead of failing after the
    labels were read."""
    rng = np.random.default_rng(21)
    x = rng.normal(size=(40, 2)) * 1e-200
    y = rng.normal(size=40) * 1e200
    out = eptr_ols(x, y, epsilon=1.0, delta=1e-9, r_x=1.0, r_theta=1e250, c0=0.1, rng=rng)
    assert out.gamma == 0.0 and not out.released and np.all(out.coef == 0.0)
    # A row with a norm beyond the doubles is projected to 0 (inside the ball), no warning.
    big = rng.normal(size=(40, 2))
    big[0] = [1.5e308, 1.5e308]
    assert np.all(project_rows(big, 2.0)[0] == 0.0)
    # A row whose squared norm would overflow keeps its direction.
    assert np.allclose(project_rows(np.array([[1e200, 1e200]]), 2.0), [[2**0.5, 2**0.5]])


def test_ols_no_reply_is_zero_slopes_and_the_middle_of_the_label_interval() -> None:
    assert ols_no_reply(2, intercept=True, lo=1.0, hi=4.0).tolist() == [0.0, 0.0, 2.5]
    assert ols_no_reply(2, intercept=False, lo=1.0, hi=4.0).tolist() == [0.0, 0.0]


@pytest.mark.parametrize("constants_given", [True, False])
def test_an_unreleased_eptr_ols_through_the_family_predicts_the_middle_of_the_labels(
    constants_given: bool,
) -> None:
    """The service's path (registry family: design, fit, predict), constants given or chosen by
    the product: a release whose test fails (20 rows, c0 far above any design) is the no-reply,
    which predicts the middle of [lo, hi] = [1, 4] everywhere (it predicted 0 before)."""
    family = registry.get("ols")
    rng = np.random.default_rng(3)
    features = rng.normal(size=(20, 2))
    params = {"r_x": 2.0, "r_theta": 1.0, "c0": 50.0} if constants_given else {}
    design = family.design("eptr", params, features, ["a", "b"])
    split = family.split_of("eptr", params, Decimal(1), Decimal("1e-6"))
    args = FitArgs(
        privacy="eptr", epsilon=1.0, delta=1e-6, lo=1.0, hi=4.0, params=params, rng=rng,
        split=split,
    )  # fmt: skip
    fitted = family.fit(design, rng.uniform(1.0, 4.0, 20), args)
    assert not fitted.released and fitted.body["coef"] == [0.0, 0.0, 2.5]
    header = SimpleNamespace(columns=["a", "b"], intercept=True)
    body = SimpleNamespace(coef=fitted.body["coef"])
    assert family.predict(header, body, rng.normal(size=(5, 2))).tolist() == [2.5] * 5
