"""bench/estimators_nw.py --quick end to end (the Figure 3 study, issue 22, item 4): every
section's code path in seconds, on a small synthetic stand-in for California Housing (so the
test runs, and fast, whether or not ``cal_housing.data`` is installed), and the skip line
without the data."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest

from bench import estimators_nw


def synthetic_housing(rows: int = 3000, seed: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """4 features in [0, 1] concentrated near the centre (dense enough for the honest run's
    public queries at bandwidth 0.1), a smooth label in [0, 5] plus noise."""
    rng = np.random.default_rng(seed)
    x = np.clip(rng.normal(0.5, 0.06, size=(rows, 4)), 0.0, 1.0)
    y = 2.5 + 8.0 * (x[:, 0] - 0.5) - 5.0 * (x[:, 1] - 0.5) + rng.normal(0.0, 0.3, rows)
    return x, np.clip(y, 0.0, estimators_nw.HOUSING_LABEL_HI)


def test_quick_run_writes_every_section(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(estimators_nw, "load_housing", lambda rows: synthetic_housing())
    out = tmp_path / "nw.md"
    assert estimators_nw.main(["--quick", "--out", str(out)]) == 0
    text = out.read_text()
    for heading in (
        "### Figure 3 search: per-point ePTR-NW (the paper's protocol)",
        "### Figure 3 side by side",
        "Honest targets (issue 22)",
        "Released share (per point",
    ):
        assert heading in text, heading
    for variant in estimators_nw.VARIANTS:
        assert f"| {variant} | 0.12 | 20 |" in text, variant
    # One row per epsilon in the side-by-side table, each cell a finite number.
    for eps in estimators_nw.EPSILONS:
        row = next(line for line in text.splitlines() if line.startswith(f"| {eps:g} | "))
        numbers = [float(v) for v in re.findall(r"\d+\.\d+", row)]
        assert numbers and all(math.isfinite(v) and v >= 0 for v in numbers), row
    assert "--quick" in text and not re.search(r"\bnan\b|\binf\b", text)


def test_quick_run_without_the_data_says_it_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(estimators_nw, "load_housing", lambda rows: None)
    out = tmp_path / "nw.md"
    assert estimators_nw.main(["--quick", "--out", str(out)]) == 0
    assert out.read_text().startswith("Skipped: `cal_housing.data`")
