"""The twice-rejected rule of tests.fresh_draws: a biased sampler still fails, a chance
rejection alone does not."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from tests.fresh_draws import assert_fits


def test_one_chance_rejection_is_drawn_again_and_forgiven() -> None:
    pvalues = iter([1e-6, 0.4])
    assert_fits(lambda: next(pvalues))


def test_a_first_sample_that_fits_is_not_drawn_again() -> None:
    calls: list[int] = []
    assert_fits(lambda: calls.append(1) or 0.3)
    assert calls == [1]


def test_a_biased_sampler_is_rejected_on_both_samples() -> None:
    rng = np.random.default_rng(5)

    def pvalue() -> float:  # a die whose last face comes up 1% too often
        draws = rng.choice(3, size=200_000, p=[0.33, 0.33, 0.34])
        return float(stats.chisquare(np.bincount(draws, minlength=3)).pvalue)

    with pytest.raises(AssertionError, match="two independent samples"):
        assert_fits(pvalue)
