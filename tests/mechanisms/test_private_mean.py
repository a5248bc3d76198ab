"""The DP label mean: its sensitivity, noise scale, DP inequality, variance formula, accuracy."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.errors import InvalidParameterError
from shared.mechanisms import private_mean as module
from shared.mechanisms.private_mean import MEAN_LEVELS, private_mean, private_mean_variance

finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)


def rounded_sum(labels: np.ndarray, lo: float, hi: float) -> int:
    """The integer sum the mechanism noises (its docstring's rounding)."""
    clipped = np.clip(labels, lo, hi)
    return int(np.rint((clipped - lo) / (hi - lo) * MEAN_LEVELS).astype(np.int64).sum())


@settings(max_examples=300, deadline=None)
@given(
    st.lists(finite, min_size=1, max_size=30),
    st.integers(min_value=0, max_value=29),
    finite,
    st.sampled_from([(0.0, 1.0), (-3.0, 400.0), (0.0, 1e-3), (-1e6, 1e6)]),
)
def test_changing_one_label_moves_the_sum_by_at_most_the_levels(
    labels: list[float], index: int, replacement: float, bounds: tuple[float, float]
) -> None:
    """L1 sensitivity MEAN_LEVELS for ANY neighbour, labels far outside the bounds included."""
    lo, hi = bounds
    data = np.array(labels)
    neighbour = data.copy()
    neighbour[index % data.size] = replacement
    assert abs(rounded_sum(data, lo, hi) - rounded_sum(neighbour, lo, hi)) <= MEAN_LEVELS


@pytest.mark.parametrize("eps", [1e-3, 0.05, 1.0, 8.0])
def test_noise_scale_is_levels_over_epsilon(monkeypatch: pytest.MonkeyPatch, eps: float) -> None:
    seen: list[Fraction] = []

    def spy(rng: Any, scale: Fraction) -> int:
        seen.append(scale)
        return 0

    monkeypatch.setattr(module, "sample_discrete_laplace", spy)
    y = np.array([0.0, 0.25, 1.0])
    assert private_mean(y, lo=0.0, hi=1.0, epsilon=eps, rng=np.random.default_rng(0)) == (
        pytest.approx(np.mean(y), abs=1e-4)
    )
    assert seen == [Fraction(MEAN_LEVELS) / Fraction(eps)]


@pytest.mark.parametrize("eps", [0.01, 0.3, 2.0])
def test_the_dp_inequality_holds_for_the_worst_neighbours(eps: float) -> None:
    """P(t | D) / P(t | D') <= e^eps for every output t, D and D' differing in one extreme label.

    Discrete Laplace of scale s: log P(t | D) - log P(t | D') = (|t - S'| - |t - S|) / s, which
    is largest where t is beyond both sums; evaluated exactly on a window around them.
    """
    scale = MEAN_LEVELS / eps
    low = rounded_sum(np.array([0.0, 0.5, 0.5]), 0.0, 1.0)
    high = rounded_sum(np.array([1.0, 0.5, 0.5]), 0.0, 1.0)
    outputs = np.arange(low - 3 * MEAN_LEVELS, high + 3 * MEAN_LEVELS, 997)
    log_ratio = (np.abs(outputs - high) - np.abs(outputs - low)) / scale
    assert log_ratio.max() <= eps * (1 + 1e-12)
    assert log_ratio.max() == pytest.approx(eps, rel=1e-9)  # tight: the bound is attained


def test_variance_formula_matches_the_empirical_variance() -> None:
    y = np.random.default_rng(1).uniform(0.0, 1.0, 1000)
    rng = np.random.default_rng(2)
    eps = 0.5
    draws = np.array([private_mean(y, lo=0.0, hi=1.0, epsilon=eps, rng=rng) for _ in range(800)])
    predicted = private_mean_variance(lo=0.0, hi=1.0, epsilon=eps, n=y.size)
    assert predicted == pytest.approx(2 * (1.0 / (eps * y.size)) ** 2, rel=1e-3)
    assert np.var(draws) == pytest.approx(predicted, rel=0.15)
    assert abs(draws.mean() - y.mean()) < 4 * math.sqrt(predicted / draws.size)


def test_accurate_at_large_epsilon_bounded_at_tiny_epsilon() -> None:
    y = np.random.default_rng(3).uniform(0.0, 1.0, 5000)
    rng = np.random.default_rng(4)
    estimates = [private_mean(y, lo=0.0, hi=1.0, epsilon=10.0, rng=rng) for _ in range(20)]
    assert abs(np.mean(estimates) - y.mean()) < 1e-3
    tiny = [private_mean(y[:3], lo=0.0, hi=1.0, epsilon=0.01, rng=rng) for _ in range(20)]
    assert all(0.0 <= v <= 1.0 for v in tiny)
    assert np.std(tiny) > 0.05  # at 3 labels and eps 0.01 the noise must dominate


def test_exact_at_infinite_epsilon_and_clear_errors() -> None:
    y = np.array([-5.0, 0.5, 9.0])
    assert private_mean(y, lo=0.0, hi=1.0, epsilon=math.inf, rng=None) == pytest.approx(0.5)
    assert private_mean_variance(lo=0.0, hi=1.0, epsilon=math.inf, n=3) == 0.0
    with pytest.raises(InvalidParameterError):
        private_mean(y, lo=0.0, hi=1.0, epsilon=0.0, rng=np.random.default_rng(0))
    with pytest.raises(InvalidParameterError):
        private_mean_variance(lo=0.0, hi=1.0, epsilon=1.0, n=0)
