"""What the label-distribution studies (split_study, prior_mean_bias) share: labels and a CLI."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.accuracy import data
from bench.accuracy.runner import split_indices


def training_labels(dataset: data.Dataset) -> np.ndarray:
    """The clipped training labels of split 0, the labels both studies measure."""
    train, _ = split_indices(dataset.y.size, trial=0)
    return np.clip(dataset.y[train], dataset.lo, dataset.hi)


RESULTS = Path(__file__).resolve().parents[1] / "results"


@dataclass(frozen=True, kw_only=True)
class Command:
    """``python -m bench.accuracy.<name>``: the defaults of its options; it writes
    ``bench/results/<name>.md``."""

    name: str
    datasets: str
    epsilons: Sequence[float]
    draws: int

    @property
    def prog(self) -> str:
        return f"python -m bench.accuracy.{self.name}"

    @property
    def out(self) -> Path:
        return RESULTS / f"{self.name}.md"


def run(
    argv: Sequence[str] | None,
    command: Command,
    *,
    study: Callable[..., list[Any]],
    render: Callable[..., str],
) -> int:
    """Parse --datasets / --epsilons / --draws / --out, study each loadable set, write ``out``."""
    parser = argparse.ArgumentParser(prog=command.prog)
    parser.add_argument("--datasets", default=command.datasets)
    parser.add_argument("--epsilons", default=",".join(f"{e:g}" for e in command.epsilons))
    parser.add_argument("--draws", type=int, default=command.draws)
    parser.add_argument("--out", type=Path, default=command.out)
    args = parser.parse_args(argv)
    chosen = [float(e) for e in args.epsilons.split(",")]
    rows: list[Any] = []
    for name in args.datasets.split(","):
        try:
            dataset = data.load(name)
        except data.DatasetUnavailable as exc:
            print(f"skipping {name}: {exc}")
            continue
        rows += study(dataset, epsilons=chosen, draws=args.draws)
        print(f"{name}: done", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(render(rows, draws=args.draws) + "\n")
    print(f"wrote {args.out}")
    return 0
