"""The exact Gaussian mechanism: Karney's pieces against their closed forms, the law of the
outputs against the normal, the cells against exact Gaussian masses, and the public grid."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

import shared.mechanisms.gaussian as gaussian
from shared.errors import InvalidParameterError
from shared.mechanisms.gaussian import _accept_b, _half_normal, gaussian_mechanism, grid_step
from shared.rng import SystemRandom, below_sampler
from tests.fresh_draws import assert_fits


def test_algorithm_b_accepts_with_its_closed_form_probability() -> None:
    """P(B accepts | x) = exp(-x (2k + x) / (2k + 2)) for a fixed x (three digits given; a
    comparison needing a fourth draws it, a 2^-96 effect)."""
    rng = np.random.default_rng(11)
    below = below_sampler(rng)
    for k in (0, 1, 3):
        for x in (0.3, 0.9):
            trials, hits = 6000, 0
            for _ in range(trials):
                u = gaussian._URand(below)
                whole = int(x * 2**96)
                u.digits = [
                    (whole >> 64) & 0xFFFFFFFF,
                    (whole >> 32) & 0xFFFFFFFF,
                    whole & 0xFFFFFFFF,
                ]
                hits += _accept_b(below, k, u)
            p = math.exp(-x * (2 * k + x) / (2 * k + 2))
            assert stats.binomtest(hits, trials, p).pvalue > 1e-4, (k, x, hits / trials, p)


def test_half_normal_integer_part_has_the_normal_masses() -> None:
    """k of Algorithm N is floor(|N|): P(k = j) = 2 (Phi(j + 1) - Phi(j))."""
    below = below_sampler(np.random.default_rng(12))
    ks = np.array([_half_normal(below)[0] for _ in range(20_000)])
    edges = np.array([0, 1, 2, 3])
    observed = [np.sum(ks == j) for j in edges[:-1]] + [np.sum(ks >= 3)]
    masses = 2 * np.diff(stats.norm.cdf(np.append(edges, np.inf)))
    assert stats.chisquare(observed, masses * ks.size).pvalue > 1e-4


def test_seeded_draws_are_standard_normal() -> None:
    out = gaussian_mechanism(np.zeros(20_000), scale=1.0, rng=np.random.default_rng(13))
    assert stats.kstest(out, "norm").pvalue > 1e-4
    cells = np.searchsorted(stats.norm.ppf(np.linspace(0, 1, 11)[1:-1]), out)
    assert stats.chisquare(np.bincount(cells, minlength=10)).pvalue > 1e-4


def test_fresh_draws_are_normal_around_the_value() -> None:
    def pvalue() -> float:
        out = gaussian_mechanism(np.full(8000, -3.3), scale=0.7, rng=SystemRandom())
        return stats.kstest((out + 3.3) / 0.7, "norm").pvalue

    assert_fits(pvalue)


@pytest.mark.parametrize(("value", "scale"), [(0.3, 1.5), (-2.75, 1.0), (5.1, 3.0)])
def test_cells_have_exactly_the_gaussian_masses(
    monkeypatch: pytest.MonkeyPatch, value: float, scale: float
) -> None:
    """With a coarse grid (step 2^floor(log2 s)) the cell of value + s N has probability
    Phi((c + 1) h - v) / s) - Phi((c h - v) / s): the sign, the offset and the digit-by-digit
    decision of the cell, checked against the exact masses."""
    monkeypatch.setattr(gaussian, "GRID_BITS", 0)
    step = float(grid_step(scale))
    out = gaussian_mechanism(np.full(20_000, value), scale=scale, rng=np.random.default_rng(14))
    cells = np.floor(out / step).astype(np.int64)
    assert np.array_equal(out, (cells + 0.5) * step)  # midpoints of the grid, nothing else
    low, high = int(np.floor((value - 4 * scale) / step)), int(np.floor((value + 4 * scale) / step))
    edges = np.arange(low, high + 2) * step
    masses = np.diff(
        stats.norm.cdf((np.concatenate([[-np.inf], edges[1:-1], [np.inf]]) - value) / scale)
    )
    observed = np.bincount(np.clip(cells, low, high) - low, minlength=high - low + 1)
    assert stats.chisquare(observed, masses * out.size).pvalue > 1e-4


@settings(max_examples=60, deadline=None)
@given(
    value=st.floats(min_value=-1e6, max_value=1e6),
    scale=st.floats(min_value=1e-3, max_value=1e3),
    seed=st.integers(0, 2**32 - 1),
)
def test_outputs_are_midpoints_of_a_grid_of_the_scale_alone(
    value: float, scale: float, seed: int
) -> None:
    """The set of possible outputs depends on the scale only (Mironov's attack reads it)."""
    out = gaussian_mechanism(np.full(4, value), scale=scale, rng=np.random.default_rng(seed))
    step = grid_step(scale)
    assert step <= Fraction(scale) / 2**40 < 2 * step
    for o in out.tolist():
        if abs(o) < 2**50 * step:  # exactly representable there: the midpoint itself
            assert (Fraction(o) / step - Fraction(1, 2)).denominator == 1
        assert abs(o - value) < 40 * scale + abs(value) * 2**-50


def test_extreme_scales_and_values_stay_finite() -> None:
    rng = np.random.default_rng(15)
    assert np.all(gaussian_mechanism(np.full(4, 1e300), scale=1e-300, rng=rng) == 1e300)
    tiny = gaussian_mechanism(np.zeros(200), scale=5e-324, rng=rng)
    assert np.all(np.abs(tiny) < 1e-320) and np.any(tiny != 0)
    huge = gaussian_mechanism(np.full(200, 1.7e308), scale=1.7e308, rng=rng)
    assert np.all(np.isfinite(huge)) and np.any(huge == np.finfo(np.float64).max)
    assert gaussian_mechanism(np.zeros((2, 3)), scale=1.0, rng=rng).shape == (2, 3)


@pytest.mark.parametrize(
    ("values", "scale"),
    [(0.0, 0.0), (0.0, -1.0), (0.0, math.nan), (0.0, math.inf), (math.nan, 1.0), (math.inf, 1.0)],
)
def test_bad_input_is_refused(values: float, scale: float) -> None:
    with pytest.raises(InvalidParameterError):
        gaussian_mechanism(values, scale=scale, rng=np.random.default_rng(0))
