"""`labeldp demo` run again and again: its private model against the constant, run by run.

``python -m bench.demo_runs [--runs 10] [--epsilon 1] [--out bench/results/demo_runs.md]
[-- extra demo options]``

Each run is the whole demo as a user starts it (both services on 127.0.0.1, SQLite, the
built-in synthetic ad conversions with their default seed, so the labels are the same every
run); the release's noise comes from the OS CSPRNG, so every run is a fresh release. Reports
each run's mechanism, chosen model and test MSE over the constant model's (the mean of the TRUE
training labels, as the demo prints it), then the median and the worst. Issue 25's target at
epsilon 1: median <= 0.90, no run above 1.0.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from bench import emit


def one_run(epsilon: float, extra: Sequence[str]) -> dict[str, object]:
    """One `labeldp demo --json` run; its summary plus the wall time."""
    command = [sys.executable, "-m", "labeldp", "demo", "--json", "--quiet", "--clean"]
    tic = time.perf_counter()
    done = subprocess.run(
        [*command, "--epsilon", repr(epsilon), *extra], capture_output=True, text=True, check=True
    )
    summary = json.loads(done.stdout)
    summary["seconds"] = time.perf_counter() - tic
    return summary


def table(runs: list[dict[str, object]]) -> str:
    """One row per run, then the median and the worst ratio to the constant."""
    lines = [
        "| run | mechanism | model | test MSE / constant | seconds |",
        "|---|---|---|---|---|",
    ]
    ratios = []
    for i, run in enumerate(runs, 1):
        ratio = float(run["mse_private"]) / float(run["mse_constant"])  # type: ignore[arg-type]
        ratios.append(ratio)
        lines.append(
            f"| {i} | {run['mechanism']} | {run['model_chosen']} | {ratio:.3f} | "
            f"{float(run['seconds']):.0f} |"  # type: ignore[arg-type]
        )
    lines.append(
        f"\nMedian {statistics.median(ratios):.3f}, worst {max(ratios):.3f}, best "
        f"{min(ratios):.3f} of {len(ratios)} runs."
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.demo_runs")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("extra", nargs="*", help="more `labeldp demo` options (after --)")
    args = parser.parse_args(argv)
    runs = []
    for i in range(args.runs):
        runs.append(one_run(args.epsilon, args.extra))
        print(f"run {i + 1}: {runs[-1]['model_chosen']}", file=sys.stderr, flush=True)
    emit(table(runs), args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
