"""The split study runs on a simulated set (no kit files needed) and writes its table."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bench.accuracy import data, split_study
from shared.plan import plan_release


def test_the_oracle_is_never_beaten_on_the_grid_and_the_report_names_both_rules(
    tmp_path: Path,
) -> None:
    dataset = data.make_linear(n=2_000, d=3, seed=1)
    rows = split_study.study(dataset, epsilons=[0.5, 2.0], draws=2)
    assert [r.epsilon for r in rows] == [0.5, 2.0]
    for row in rows:
        assert row.best_epsilon1 in split_study.GRID and row.best > 0
        assert row.current_epsilon1 == split_study.rp_epsilon1(row.epsilon, row.n)
        assert row.previous_epsilon1 == split_study.auto_epsilon1(row.epsilon, row.n)
        assert np.isfinite([row.current, row.previous]).all()
    out = tmp_path / "split.md"
    assert split_study.main(["--datasets", "linear", "--epsilons", "1", "--draws", "1",
                             "--out", str(out)]) == 0  # fmt: skip
    text = out.read_text()
    assert "## linear" in text and "RP / best" in text and "Geometric mean" in text


def test_the_prior_mean_study_measures_a_bias_that_vanishes_with_epsilon1(tmp_path: Path) -> None:
    """On zero-heavy labels the projected histogram's mean is biased upwards at small epsilon1
    (the mechanism the ads discussion names), and the study reports it next to the DP mean."""
    from bench.accuracy import prior_mean_bias

    rng = np.random.default_rng(3)
    y = np.where(rng.random(4000) < 0.85, 0.0, rng.uniform(0, 400, 4000))
    zeros = data.Dataset(
        name="zeros", x=np.zeros((4000, 1)), y=y, lo=0.0, hi=400.0, bounds_source="test",
        description="85% zeros",
    )  # fmt: skip
    small, large = prior_mean_bias.study(zeros, epsilons=[0.05, 8.0], draws=60)
    assert small.bias > 0 and small.mse_share > 5 * small.dp_constant_share
    # The message's own DP mean costs the plan's part of epsilon1 (96% of epsilon where auto
    # releases mean first), the constant all of epsilon: the same Laplace error at another
    # epsilon (variance ~ 1 / epsilon^2). From epsilon 2 on the release buys none.
    assert np.isnan(large.message_mean_share)
    for row in (small,):
        plan = plan_release(n=row.n, lo=0.0, hi=400.0, epsilon=row.epsilon, mechanism="auto")
        expected = row.dp_constant_share * (row.epsilon / plan.label_mean_float) ** 2
        assert row.message_mean_share == pytest.approx(expected, rel=1e-3)
    assert large.mse_share < small.mse_share
    text = prior_mean_bias.render([small, large], draws=60)
    assert "| zeros | 3,200 | 0.05 |" in text
