"""Out of the box against the best product cell, the best re-measured on fresh splits (issue 25).

``python -m bench.accuracy.best_cell [--datasets nonlinear,linear,...] [--epsilons ...]
[--runs 10] [--candidates rp_auto,rr_on_bins,auto_net,unbiased] [--out FILE]``

The minimum over many variants on the same runs flatters whichever variant got lucky, so each
(data set, epsilon) is measured in two stages with the runner's trials (each its own 80/20
split, release noise and model seed; the features party's ``auto`` model throughout):

1. selection, trials 0 .. runs - 1: out of the box (labels party ``auto``, no options) and every
   candidate variant; the best cell is the candidate with the lowest mean test MSE;
2. fresh, trials runs .. 2 runs - 1: out of the box and that best candidate again.

The table gives both stages' ratio of mean test MSEs (out of the box / best cell; target at
most 1.05 on the fresh runs) and out of the box against the same fresh runs' DP constant
(median and worst run). Nothing is appended to the records.

``--confirm VARIANT --first-run K``: no selection; out of the box and ``VARIANT`` (a best cell
named by an earlier run) on trials K .. K + runs - 1, with a paired bootstrap 90% interval of
the ratio of mean test MSEs (runs resampled together), so a row's verdict says how sure it is.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from bench import emit
from bench.accuracy import data as datasets
from bench.accuracy import mechanisms as mech
from bench.accuracy.worst_case import Row, ratios

EPSILONS = (0.05, 0.1, 0.3, 0.5, 1.0, 2.0, 4.0, 8.0)
DATASETS = ("nonlinear", "linear", "crime", "housing", "ads")
CANDIDATES = ("rp_auto", "rr_on_bins", "auto_net", "unbiased")
PRODUCT = "auto"
TARGET = 1.05


class Cell(NamedTuple):
    """One (data set, epsilon): the selected best candidate and both stages' numbers."""

    best: str
    selection: dict[str, float]  # variant -> mean test MSE on the selection runs
    product_fresh: list[Row]
    best_fresh: list[Row]


def _mean_mse(rows: Sequence[Row]) -> float:
    return statistics.fmean(row.product_mse for row in rows)


def measure(
    data: datasets.Dataset, *, epsilons: Sequence[float], runs: int, candidates: Sequence[str]
) -> dict[float, Cell]:
    """Both stages for every epsilon of one data set."""
    selection: dict[str, dict[float, list[Row]]] = {
        variant: ratios(data, epsilons=epsilons, runs=runs, variant=variant)
        for variant in (PRODUCT, *candidates)
    }
    out: dict[float, Cell] = {}
    for eps in epsilons:
        means = {variant: _mean_mse(rows[eps]) for variant, rows in selection.items()}
        best = min(candidates, key=lambda v: means[v])
        fresh = {
            variant: ratios(data, epsilons=[eps], runs=runs, first_run=runs, variant=variant)[eps]
            for variant in (PRODUCT, best)
        }
        out[eps] = Cell(best, means, fresh[PRODUCT], fresh[best])
    return out


def confirm(
    data: datasets.Dataset, *, epsilons: Sequence[float], runs: int, first_run: int, best: str
) -> dict[float, Cell]:
    """Out of the box and a given best cell on trials ``first_run`` .. ``first_run + runs - 1``."""
    fresh = {
        variant: ratios(data, epsilons=epsilons, runs=runs, first_run=first_run, variant=variant)
        for variant in (PRODUCT, best)
    }
    return {eps: Cell(best, {}, fresh[PRODUCT][eps], fresh[best][eps]) for eps in epsilons}


def paired_interval(
    product: Sequence[float], best: Sequence[float], *, level: float = 0.9, draws: int = 10_000
) -> tuple[float, float]:
    """The paired bootstrap ``level`` interval of mean(product) / mean(best): run i's two test
    MSEs share a split, so runs are resampled together (percentile interval, seeded)."""
    a, b = np.asarray(product, dtype=float), np.asarray(best, dtype=float)
    picks = np.random.default_rng(0).integers(0, a.size, size=(draws, a.size))
    boot = a[picks].mean(axis=1) / b[picks].mean(axis=1)
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(boot, [tail, 1.0 - tail])
    return float(low), float(high)


def _markdown(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table of ``header`` and ``rows``."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _cells(results: dict[str, dict[float, Cell]]) -> list[tuple[str, float, Cell]]:
    return [(name, eps, cell) for name, by_eps in results.items() for eps, cell in by_eps.items()]


def _against_constant(cell: Cell) -> str:
    """Out of the box over the same fresh runs' DP constant: median / worst."""
    constant = [row.ratio for row in cell.product_fresh]
    return f"{statistics.median(constant):.3f} / {max(constant):.3f}"


def _bold_if_met(ratio: float) -> str:
    return f"**{ratio:.3f}**" if ratio <= TARGET else f"{ratio:.3f}"


def confirm_table(results: dict[str, dict[float, Cell]]) -> str:
    """The Markdown table of :func:`confirm`: the ratio, its interval and the runs' spread."""
    rows = []
    for name, eps, cell in _cells(results):
        product = [row.product_mse for row in cell.product_fresh]
        best = [row.product_mse for row in cell.best_fresh]
        low, high = paired_interval(product, best)
        rows.append([
            name, f"{eps:g}", mech.VARIANTS[cell.best].key, str(len(product)),
            f"{statistics.fmean(product):.4g}", f"{statistics.fmean(best):.4g}",
            _bold_if_met(statistics.fmean(product) / statistics.fmean(best)),
            f"{low:.3f} - {high:.3f}", _against_constant(cell),
        ])  # fmt: skip
    header = (
        "data set", "eps", "best cell (given)", "runs", "out of the box: mean MSE",
        "best cell: mean MSE", "out of the box / best", "paired bootstrap 90% interval",
        "out of the box / DP constant: median / worst",
    )  # fmt: skip
    return _markdown(header, rows)


def table(results: dict[str, dict[float, Cell]]) -> str:
    """The Markdown table: one row per (data set, epsilon)."""
    rows = [
        [
            name,
            f"{eps:g}",
            mech.VARIANTS[cell.best].key,
            f"{cell.selection[PRODUCT] / cell.selection[cell.best]:.3f}",
            _bold_if_met(_mean_mse(cell.product_fresh) / _mean_mse(cell.best_fresh)),
            f"{_mean_mse(cell.product_fresh):.4g}",
            _against_constant(cell),
        ]  # fmt: skip
        for name, eps, cell in _cells(results)
    ]
    header = (
        "data set", "eps", "best cell (selected)", "out of the box / best: selection runs",
        "out of the box / best: fresh runs", "out of the box, fresh: mean MSE",
        "out of the box / DP constant, fresh: median / worst",
    )  # fmt: skip
    return _markdown(header, rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.accuracy.best_cell")
    datasets.grid_arguments(parser, datasets=DATASETS, epsilons=EPSILONS, runs=10)
    parser.add_argument("--candidates", default=",".join(CANDIDATES))
    parser.add_argument("--confirm", default=None, help="a best cell to re-run, no selection")
    parser.add_argument("--first-run", type=int, default=None, help="with --confirm")
    args = parser.parse_args(argv)
    if args.confirm is not None:
        if args.confirm not in mech.VARIANTS or args.confirm == PRODUCT:
            parser.error(f"--confirm: unknown or the product itself: {args.confirm}")
        first = 2 * args.runs if args.first_run is None else args.first_run
        confirmed = datasets.measure_each(
            args,
            lambda data: confirm(
                data,
                epsilons=datasets.epsilons_of(args),
                runs=args.runs,
                first_run=first,
                best=args.confirm,
            ),
        )
        emit(confirm_table(confirmed), args.out)
        return 0
    candidates = [c for c in args.candidates.split(",") if c]
    unknown = sorted(set(candidates) - set(mech.VARIANTS))
    if unknown or PRODUCT in candidates:
        parser.error(f"--candidates: unknown or the product itself: {unknown or PRODUCT}")
    results = datasets.measure_each(
        args,
        lambda data: measure(
            data, epsilons=datasets.epsilons_of(args), runs=args.runs, candidates=candidates
        ),
    )
    emit(table(results), args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
