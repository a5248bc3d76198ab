"""bench.accuracy.worst_case: the product against the DP constant, run by run (a smoke run)."""

from __future__ import annotations

import math

from bench.accuracy import data, worst_case


def test_the_product_beats_the_constant_on_linear_data_at_epsilon_two() -> None:
    """Two fresh runs on 1,000 simulated linear labels: every run's product is well below the
    same run's DP constant, and the second DP constant (the noise floor) is about the first."""
    rows = worst_case.ratios(data.make_linear(n=1000), epsilons=[2.0], runs=2, nonprivate=True)
    assert list(rows) == [2.0] and len(rows[2.0]) == 2
    for ratio, twin, chosen, _mse, exact in rows[2.0]:
        assert 0.0 < ratio < 0.5, (ratio, chosen)
        assert 0.0 <= exact < ratio  # the exact labels train a better model
        assert math.isfinite(twin) and 0.9 < twin < 1.1
        assert not chosen.startswith("constant")


def test_the_table_reports_median_worst_and_the_noise_floor() -> None:
    Row = worst_case.Row
    rows = {0.1: [Row(1.2, 1.0, "constant()/raw", 3.0), Row(0.9, 1.01, "ridge(lambda=1)/raw", 1.0),
                  Row(1.0, 1.02, "constant()/raw", 2.0)]}  # fmt: skip
    text = worst_case.table({"toy": rows})
    line = text.splitlines()[-1]
    assert line == "| toy | 0.1 | 3 | 1.000 | 1.200 | 1 | 2 | 1.010 / 1.020 | 2 | - |"
