"""The engine's release of 10^6 labels against the randomness limit, stage by stage.

Run: ``python -m bench.release_limit [--n 1000000] [--rounds 9] [--out FILE]``.

Issue 26: a release should cost at most 2x the OS CSPRNG's own time for the bytes it draws.
Each round times, in one process and one after the other: the whole release as the service
runs it (``shared.randomizer.execute`` of ``plan_release(epsilon=1)``, production randomness:
``SystemRandom``), each of its stages on the same inputs (clip, the exact counts, the noisy
histogram and mean, the randomizer's choice, the per-label randomization, the public
description), and ``os.urandom`` of exactly the bytes the release drew (counted in a first
run). Medians over rounds; the ratio is release / urandom of the same round's medians.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

import shared.rng
from bench import emit
from shared.plan import plan_release
from shared.randomizer import (
    LabelCounts,
    choose_randomizer,
    clip,
    describe,
    execute,
    noisy_prior_from_counts,
)
from shared.rng import SystemRandom

MECHANISMS = ("rpwithprior", "rr_on_bins", "auto")


@contextmanager
def counted_urandom() -> Iterator[list[int]]:
    """Count the bytes ``shared.rng`` draws from ``os.urandom`` inside the block."""
    drawn = [0]
    real = os.urandom

    class _Counting:
        def __getattr__(self, name: str) -> object:
            return getattr(os, name)

        @staticmethod
        def urandom(size: int) -> bytes:
            drawn[0] += size
            return real(size)

    shared.rng.os = _Counting()  # type: ignore[assignment]
    try:
        yield drawn
    finally:
        shared.rng.os = os


def _timed(run: Callable[[], object]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def measure(mechanism: str, labels: np.ndarray, *, rounds: int) -> dict[str, float]:
    """Median seconds of the release, its stages and urandom of the same bytes."""
    plan = plan_release(n=labels.size, lo=0.0, hi=400.0, mechanism=mechanism, epsilon=1.0)
    rng = SystemRandom()
    execute(plan, labels, rng)  # warm-up: numba compiled, caches hot
    with counted_urandom() as drawn:
        execute(plan, labels, rng)
    nbytes = drawn[0]
    clipped = clip(plan, labels)
    counts = LabelCounts.of(plan, clipped)
    measured = noisy_prior_from_counts(plan, counts, rng)
    name, randomizer = choose_randomizer(plan, measured)
    noisy = randomizer.randomize(clipped, rng)
    stages: dict[str, Callable[[], object]] = {
        "release": lambda: execute(plan, labels, rng),
        "urandom": lambda: os.urandom(nbytes),
        "clip": lambda: clip(plan, labels),
        "counts": lambda: LabelCounts.of(plan, clipped),
        "noise": lambda: noisy_prior_from_counts(plan, counts, rng),
        "choose": lambda: choose_randomizer(plan, measured),
        "randomize": lambda: randomizer.randomize(clipped, rng),
        "describe": lambda: describe(plan, measured, name, randomizer, noisy),
    }
    samples: dict[str, list[float]] = {key: [] for key in stages}
    for _ in range(rounds):
        for key, run in stages.items():
            samples[key].append(_timed(run))
    out = {key: statistics.median(values) for key, values in samples.items()}
    out["bytes"] = float(nbytes)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10**6)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    labels = np.clip(np.random.default_rng(1).lognormal(2.0, 1.2, size=args.n), 0, 400)
    stages = ("clip", "counts", "noise", "choose", "randomize", "describe")
    lines = [
        f"`python -m bench.release_limit --n {args.n} --rounds {args.rounds}` on "
        f"{datetime.now(UTC):%Y-%m-%d}, {platform.machine()}, {os.cpu_count()} CPUs, numpy "
        f"{np.__version__}; medians of {args.rounds} rounds (ms).",
        "",
        "| mechanism | MB drawn | urandom of those bytes | release | release / urandom | "
        + " | ".join(stages)
        + " |",
        "|---" * (5 + len(stages)) + "|",
    ]
    for mechanism in MECHANISMS:
        got = measure(mechanism, labels, rounds=args.rounds)
        ratio = got["release"] / got["urandom"]
        cells = " | ".join(f"{got[s] * 1e3:.1f}" for s in stages)
        lines.append(
            f"| {mechanism} | {got['bytes'] / 1e6:.1f} | {got['urandom'] * 1e3:.1f} | "
            f"{got['release'] * 1e3:.1f} | {ratio:.2f} | {cells} |"
        )
        print(lines[-1], flush=True)
    emit("\n".join(lines), args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
