"""The unbiased family's margin in ``auto``, exactly, for every margin at once.

``python -m bench.accuracy.margin_study --datasets nonlinear,linear --epsilons 1.5,3,4
[--runs 10] [--first-run 0] [--margins 1,0.95,0.9,0.85,0.8]``

Each row runs :func:`bench.accuracy.worst_case.ratios` twice on the same splits and seeds: once
with ``auto`` as the product runs it (the least C) and once without the unbiased family. The
histogram's noise is drawn before the choice, so a release where a margin m (take the unbiased
family only where its C is at most m times the best other family's) sends the choice back IS
the second run's release: the mean test MSE for every m follows exactly from the two runs and
the ratio (unbiased C) / (best other C) each release saw (recorded at
``shared.selection.pick``). Measured and rejected: bench/results/worst_case.md, "A margin for
the unbiased family".
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from bench.accuracy import data as datasets
from bench.accuracy import mechanisms, worst_case
from shared import selection
from shared.mechanisms import registry
from shared.mechanisms.unbiased import MECHANISM_NAME

MARGINS = (1.0, 0.95, 0.9, 0.85, 0.8)


@contextmanager
def family_as(name: str, **changes: Any) -> Iterator[None]:
    """The registered family ``name`` with ``changes`` (registration order kept), restored."""
    before = registry.families()
    for family in before:
        registry.unregister(family.name)
    try:
        for family in before:
            registry.register(
                dataclasses.replace(family, **changes) if family.name == name else family
            )
        yield
    finally:
        for family in registry.families():
            registry.unregister(family.name)
        for family in before:
            registry.register(family)


@contextmanager
def recorded_ratios(out: list[float]) -> Iterator[None]:
    """Append, per choice ``auto`` makes, (best unbiased C) / (best other C); inf if none."""
    original = selection.pick

    def pick(found: list[selection.Candidate]) -> selection.Candidate:
        mine = [c.score.criterion for c in found if c.name == MECHANISM_NAME]
        other = [c.score.criterion for c in found if c.name != MECHANISM_NAME]
        out.append(min(mine) / min(other) if mine and other else math.inf)
        return original(found)

    selection.pick = pick  # type: ignore[assignment]
    try:
        yield
    finally:
        selection.pick = original  # type: ignore[assignment]


def true_terms(candidate: selection.Candidate, labels: np.ndarray) -> tuple[float, float]:
    """bias^2 and variance of ``candidate``'s target under the labels themselves (not the
    noisy prior): what its C estimates. A diagnostic: it reads the exact labels."""
    mean, var = selection.target_moments(candidate.mechanism, labels)[candidate.score.transform]
    return float(np.mean((mean - labels) ** 2)), float(np.mean(var))


@contextmanager
def printed_true_terms(n_eps: int) -> Iterator[None]:
    """Print, per release where the unbiased family would win on C, both families' terms under
    the noisy prior and under the training labels (captured from the accuracy runner)."""
    original_pick, original_measure = selection.pick, mechanisms.measure
    seen: dict[str, Any] = {"count": 0}

    def measure(plan: Any, y: np.ndarray, rng: Any, **kwargs: Any) -> Any:
        seen["labels"] = np.clip(np.asarray(y, dtype=np.float64), plan.lo, plan.hi)
        return original_measure(plan, y, rng, **kwargs)

    def pick(found: list[selection.Candidate]) -> selection.Candidate:
        index, seen["count"] = seen["count"], seen["count"] + 1
        mine = [c for c in found if c.name == MECHANISM_NAME]
        other = [c for c in found if c.name != MECHANISM_NAME]
        if mine and other:
            u = min(mine, key=lambda c: c.score.criterion)
            o = min(other, key=lambda c: c.score.criterion)
            if u.score.criterion < o.score.criterion:
                n = seen["labels"].size
                scale = u.score.criterion - u.score.bias2
                scale = scale / u.score.variance if u.score.variance > 0 else 0.0
                (ub2, uv), (ob2, ov) = (true_terms(c, seen["labels"]) for c in (u, o))
                print(
                    f"trial {index // n_eps} release {index % n_eps}: n {n}; {o.name} bias^2 "
                    f"{o.score.bias2:.3g} (true {ob2:.3g}), variance {o.score.variance:.4g} "
                    f"(true {ov:.4g}); unbiased variance {u.score.variance:.4g} (true {uv:.4g}); "
                    f"C ratio {u.score.criterion / o.score.criterion:.3f} "
                    f"(true {(ub2 + scale * uv) / (ob2 + scale * ov):.3f})",
                    flush=True,
                )
        return original_pick(found)

    selection.pick, mechanisms.measure = pick, measure  # type: ignore[assignment]
    try:
        yield
    finally:
        selection.pick, mechanisms.measure = original_pick, original_measure  # type: ignore[assignment]


def study(
    data: datasets.Dataset,
    *,
    epsilons: Sequence[float],
    runs: int,
    first_run: int = 0,
    margins: Sequence[float] = MARGINS,
) -> dict[float, dict[str, Any]]:
    """Per epsilon: the mean test MSE of out of the box at each margin, and the picks."""
    seen: list[float] = []
    with recorded_ratios(seen):  # the product: the least C
        least = worst_case.ratios(data, epsilons=epsilons, runs=runs, first_run=first_run)
    with family_as(MECHANISM_NAME, in_auto=False):
        without = worst_case.ratios(data, epsilons=epsilons, runs=runs, first_run=first_run)
    # The runner releases trial by trial, each trial's epsilons in the order given.
    ratio = {
        (trial, eps): seen[trial * len(epsilons) + j]
        for trial in range(runs)
        for j, eps in enumerate(epsilons)
    }
    out: dict[float, dict[str, Any]] = {}
    for eps in epsilons:
        row: dict[str, Any] = {"margins": {}}
        for m in margins:
            mses = [
                least[eps][t].product_mse if ratio[t, eps] <= m else without[eps][t].product_mse
                for t in range(runs)
            ]
            row["margins"][m] = statistics.mean(mses)
        row["never"] = statistics.mean(r.product_mse for r in without[eps])
        row["picks"] = {m: sum(ratio[t, eps] <= m for t in range(runs)) for m in margins}
        out[eps] = row
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.accuracy.margin_study")
    parser.add_argument("--datasets", default="nonlinear,linear")
    parser.add_argument("--epsilons", default="1.5,3,4")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--first-run", type=int, default=0)
    parser.add_argument("--margins", default=",".join(str(m) for m in MARGINS))
    parser.add_argument(
        "--true-terms",
        action="store_true",
        help="instead: per release that least C gives the unbiased family, its C terms under the "
        "noisy prior and under the training labels",
    )
    args = parser.parse_args(argv)
    epsilons = [float(e) for e in args.epsilons.split(",")]
    if args.true_terms:
        for name in args.datasets.split(","):
            print(name, flush=True)
            with printed_true_terms(len(epsilons)):
                worst_case.ratios(
                    datasets.load(name), epsilons=epsilons, runs=args.runs, first_run=args.first_run
                )
        return 0
    margins = [float(m) for m in args.margins.split(",")]
    head = " | ".join(f"m = {m:g}" for m in margins)
    print(f"| data set | eps | least C: mean MSE | {head} | never unbiased | picks |")
    print("|---" * (len(margins) + 5) + "|")
    for name in args.datasets.split(","):
        rows = study(
            datasets.load(name),
            epsilons=epsilons,
            runs=args.runs,
            first_run=args.first_run,
            margins=margins,
        )
        for eps, row in rows.items():
            base = row["margins"][margins[0]]
            cells = " | ".join(f"{row['margins'][m] / base:.3f}" for m in margins)
            picks = " -> ".join(str(row["picks"][m]) for m in margins)
            never = row["never"] / base
            print(
                f"| {name} | {eps:g} | {base:.4g} | {cells} | {never:.3f} | {picks} |", flush=True
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
