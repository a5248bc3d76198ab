"""ePTR-Bayes (Algorithm 3): gamma (13), alpha, the step-5 revision, the SaLBo property."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.errors import InvalidParameterError
from shared.estimators._checks import project_rows
from shared.estimators.bayes import (
    bayes_alpha,
    bayes_gamma,
    bayes_statistics,
    eptr_bayes,
    revise_priors,
)


def _data(n: int, priors: tuple[float, ...], rng: np.random.Generator, gap: float = 3.0):
    k = len(priors)
    y = rng.choice(k, size=n, p=priors)
    means = gap * np.eye(k, 10)
    return means[y] + rng.normal(size=(n, 10)), y, means


def test_gamma_alpha_and_a_useful_classifier() -> None:
    rng = np.random.default_rng(1)
    x, y, means = _data(6000, (0.75, 0.15, 0.10), rng)
    c0, r_x = 0.04, 8.0
    out = eptr_bayes(x, y, n_classes=3, epsilon=4.0, delta=0.01, r_x=r_x, c0=c0, rng=rng)
    counts = np.bincount(y, minlength=3)
    assert out.gamma == max(counts.min() - c0 * 6000 - 1, 0)
    assert out.alpha == pytest.approx(2 / 6000 * math.sqrt(2 * r_x**2 / c0**2 + 2))
    assert out.released
    assert out.priors.sum() == pytest.approx(1.0) and np.all(out.priors > 0)
    test_x, test_y, _ = _data(20_000, (1 / 3, 1 / 3, 1 / 3), rng)
    assert np.mean(out.predict(test_x) == test_y) > 0.85
    assert np.allclose(out.means, means, atol=0.5)


def test_rare_class_gives_the_no_reply() -> None:
    rng = np.random.default_rng(2)
    x, y, _ = _data(500, (0.9, 0.09, 0.01), rng)
    out = eptr_bayes(x, y, n_classes=3, epsilon=1.0, delta=1e-6, r_x=8.0, c0=0.05, rng=rng)
    assert out.gamma == 0.0 and not out.released
    assert np.allclose(out.priors, 1 / 3) and np.all(out.means == 0.0)


def test_step_five_revision() -> None:
    revised = revise_priors(np.array([0.9, -0.2, 0.01]), c0=0.05)
    assert np.allclose(revised, np.array([0.9, 0.05, 0.05]) / 1.0)
    assert revised.sum() == pytest.approx(1.0)


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), row=st.integers(0, 299), new_class=st.integers(0, 2))
def test_gamma_is_a_salbo(seed: int, row: int, new_class: int) -> None:
    """gamma is 1-Lipschitz; where gamma > 0 the released vector moves by <= alpha in L2."""
    rng = np.random.default_rng(seed)
    r_x, c0 = 5.0, 0.1
    x, y, _ = _data(300, (0.5, 0.3, 0.2), rng)
    x2, y2 = x.copy(), y.copy()
    x2[row] = rng.normal(size=10) * 4
    y2[row] = new_class

    def stats(a: np.ndarray, b: np.ndarray) -> tuple[float, np.ndarray]:
        counts, priors, means = bayes_statistics(project_rows(a, r_x), b, 3)
        return bayes_gamma(counts, n=300, c0=c0), np.concatenate([priors, means.ravel()])

    g1, v1 = stats(x, y)
    g2, v2 = stats(x2, y2)
    assert abs(g1 - g2) <= 1.0
    if g1 > 0:
        alpha = 2 / 300 * math.sqrt(2 * r_x**2 / c0**2 + 2)
        assert np.linalg.norm(v1 - v2) <= alpha * (1 + 1e-9)


GOOD = {"n_classes": 2, "epsilon": 1.0, "delta": 0.01, "r_x": 3.0, "c0": 0.1}
X = np.random.default_rng(0).normal(size=(10, 2))
Y = np.array([0, 1] * 5)


@pytest.mark.parametrize(
    ("field", "y", "kwargs"),
    [
        ("n_classes", Y, {"n_classes": 1}),
        ("class labels in 0..1", np.array([0, 2] * 5), {}),
        ("integer class labels", Y + 0.5, {}),
        ("y must be 1-D", Y[:9], {}),
        ("c0", Y, {"c0": 0.6}),
        ("r_x", Y, {"r_x": -1.0}),
        ("delta", Y, {"delta": 2.0}),
        ("epsilon", Y, {"epsilon": 0.0}),
    ],
)
def test_bad_input(field: str, y: np.ndarray, kwargs: dict) -> None:
    with pytest.raises(InvalidParameterError, match=field):
        eptr_bayes(X, y, rng=np.random.default_rng(0), **(GOOD | kwargs))


def test_bayes_alpha_is_the_closed_form_and_inf_beyond_the_doubles() -> None:
    """alpha = (2 / n) sqrt(2 r_x^2 / c0^2 + 2); +inf where it overflows, never an exception
    (c0^2 underflowing to 0 raised ZeroDivisionError: a 500 for a given c0 of 1e-320)."""
    assert bayes_alpha(r_x=3.0, c0=0.1, n=50) == pytest.approx(2 / 50 * math.sqrt(2 * 900 + 2))
    assert bayes_alpha(r_x=1e200, c0=0.1, n=50) == math.inf
    assert bayes_alpha(r_x=1.0, c0=1e-320, n=50) == math.inf
    rng = np.random.default_rng(2)
    x = rng.normal(size=(60, 2))
    classes = np.arange(60) % 2
    out = eptr_bayes(x, classes, n_classes=2, epsilon=1.0, delta=1e-6, r_x=1.0, c0=1e-320, rng=rng)
    assert out.alpha == math.inf and not out.released
    assert np.allclose(out.priors, 0.5) and np.all(out.means == 0.0)
