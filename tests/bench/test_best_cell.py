"""bench.accuracy.best_cell: the best candidate selected on some runs, re-measured on others."""

from __future__ import annotations

import pytest

from bench.accuracy import best_cell, data
from bench.accuracy.worst_case import Row


def test_the_best_cell_is_selected_on_the_first_runs_and_measured_on_fresh_ones() -> None:
    """Two candidates on 1,000 linear labels at epsilon 2, one run per stage: the selected one
    has the lowest selection mean, and its fresh runs are other trials than the selection's."""
    cells = best_cell.measure(
        data.make_linear(n=1000), epsilons=[2.0], runs=1, candidates=["rr_on_bins", "rp_auto"]
    )
    cell = cells[2.0]
    assert set(cell.selection) == {"auto", "rr_on_bins", "rp_auto"}
    assert cell.best == min(("rr_on_bins", "rp_auto"), key=cell.selection.__getitem__)
    assert len(cell.product_fresh) == len(cell.best_fresh) == 1
    fresh_auto = cell.product_fresh[0].product_mse
    assert fresh_auto > 0 and fresh_auto != cell.selection["auto"]  # another split, other noise


def test_the_table_reports_both_stages() -> None:
    cell = best_cell.Cell(
        best="rp_auto",
        selection={"auto": 2.0, "rp_auto": 1.0},
        product_fresh=[Row(0.5, 1.0, "ridge", 3.0), Row(0.7, 1.0, "ridge", 1.0)],
        best_fresh=[Row(0.4, 1.0, "ridge", 2.0)],
    )
    line = best_cell.table({"toy": {1.0: cell}}).splitlines()[-1]
    assert line == "| toy | 1 | rp_auto | 2.000 | **1.000** | 2 | 0.600 / 0.700 |"


def test_the_product_is_not_a_candidate() -> None:
    with pytest.raises(SystemExit):
        best_cell.main(["--candidates", "auto"])


def test_confirm_reruns_a_given_cell_on_the_runs_it_is_told() -> None:
    cells = best_cell.confirm(
        data.make_linear(n=1000), epsilons=[2.0], runs=2, first_run=5, best="rp_auto"
    )
    cell = cells[2.0]
    assert cell.best == "rp_auto" and cell.selection == {}
    assert len(cell.product_fresh) == len(cell.best_fresh) == 2
    again = best_cell.confirm(
        data.make_linear(n=1000), epsilons=[2.0], runs=1, first_run=6, best="rp_auto"
    )[2.0]
    assert again.product_fresh[0].product_mse == cell.product_fresh[1].product_mse  # trial 6


def test_paired_interval_closed_forms() -> None:
    # Every run's ratio the same: every resample's ratio of means is that ratio.
    assert best_cell.paired_interval([2.0, 4.0, 6.0], [1.0, 2.0, 3.0]) == (2.0, 2.0)
    # Two runs, one draw from the bootstrap's four resamples each: the interval lies within the
    # smallest and largest resample ratios (1/2 and 3/1) and around the plain ratio 4/3.
    low, high = best_cell.paired_interval([1.0, 3.0], [2.0, 1.0])
    assert 0.5 <= low < 4.0 / 3.0 < high <= 3.0


def test_confirm_table_line() -> None:
    cell = best_cell.Cell(
        best="rp_auto",
        selection={},
        product_fresh=[Row(0.5, 1.0, "ridge", 2.0), Row(0.7, 1.0, "ridge", 2.0)],
        best_fresh=[Row(0.4, 1.0, "ridge", 2.0), Row(0.4, 1.0, "ridge", 2.0)],
    )
    line = best_cell.confirm_table({"toy": {1.0: cell}}).splitlines()[-1]
    assert line == "| toy | 1 | rp_auto | 2 | 2 | 2 | **1.000** | 1.000 - 1.000 | 0.600 / 0.700 |"


def test_confirm_refuses_the_product_and_unknown_cells() -> None:
    for name in ("auto", "nope"):
        with pytest.raises(SystemExit):
            best_cell.main(["--confirm", name])
