"""bench/estimators.py --quick end to end: every section's code path on small sizes."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from bench import estimators


def test_quick_run_writes_every_section(tmp_path: Path) -> None:
    out = tmp_path / "estimators.md"
    assert estimators.main(["--quick", "--out", str(out)]) == 0
    text = out.read_text()
    for heading in ("Linear regression (Section 4.3)", "Bayes classifier (Section 3.3)"):
        assert heading in text
    for method in (
        "ePTR-OLS (tuned)",
        "ePTR-OLS (product)",
        "label-DP OLS",
        "FM (diffprivlib)",
        "RR-on-Bins",
        "ePTR-Bayes",
    ):
        assert method in text
    housing = estimators.load_housing(None) is not None
    assert ("label-DP NW (grid)" in text) == housing
    assert ("Skipped: `cal_housing.data`" in text) == (not housing)


def test_ols_trial_reports_finite_errors_for_every_method() -> None:
    rows = estimators.ols_trial(1000, 4.0, 500, np.random.default_rng(0))
    assert len(rows) == 8
    for param, mse in rows.values():
        assert math.isfinite(param) and param >= 0 and math.isfinite(mse) and mse > 0
    # Non-private OLS is close to theta at n = 1000; label-DP OLS at epsilon 4 nearly as close.
    assert rows["non-private OLS"][0] < 0.05
    assert rows["label-DP OLS"][0] < 0.1


def test_balanced_error_weighs_classes_equally() -> None:
    truth = np.array([0, 0, 0, 0, 1])
    assert estimators.balanced_error(np.zeros(5, dtype=int), truth) == 0.5
