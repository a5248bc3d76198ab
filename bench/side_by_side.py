"""The full two-step release timed in this tree and in another checkout, side by side.

Run: ``python -m bench.side_by_side --baseline DIR [--out FILE]``, with DIR a checkout of an
earlier commit (``git worktree add DIR COMMIT``). Each round times both trees in fresh
processes, alternating which goes first, so machine noise hits both alike; the table reports
the medians over rounds and their ratio. The release is ``label_randomizer`` (adaptive bins,
default split, OS CSPRNG), the same call in both trees.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
_PROBE = """
import json, statistics, sys, time
import numpy as np
from shared.randomizer import label_randomizer
from shared.rng import SystemRandom
try:
    from shared.plan import default_split
except ImportError:
    from shared.randomizer import default_split
n, mechanism, repeats = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
labels = np.clip(np.random.default_rng(1).lognormal(2.0, 1.2, size=n), 0, 400)
eps1, eps2 = default_split(1.0, n=n)
def run():
    label_randomizer(labels, lo=0.0, hi=400.0, epsilon1=eps1, epsilon2=eps2,
                     mechanism=mechanism, rng=SystemRandom())
run()
samples = []
for _ in range(repeats):
    start = time.perf_counter(); run(); samples.append(time.perf_counter() - start)
print(json.dumps(statistics.median(samples)))
"""


def _time(tree: Path, n: int, mechanism: str, repeats: int) -> float:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, str(n), mechanism, str(repeats)],
        cwd=tree,
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    return float(json.loads(out.stdout.strip().splitlines()[-1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, required=True, help="checkout to compare with")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per process")
    parser.add_argument("--sizes", type=int, nargs="+", default=[10**5, 10**6])
    parser.add_argument("--mechanisms", nargs="+", default=["rpwithprior", "rr_on_bins", "auto"])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    baseline = args.baseline.resolve()
    commit = subprocess.run(
        ["git", "-C", str(baseline), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    rows = [
        "| n labels | mechanism | this tree (median) | baseline (median) | ratio |",
        "|---|---|---|---|---|",
    ]
    for n in args.sizes:
        for mechanism in args.mechanisms:
            ours, theirs = [], []
            for round_ in range(args.rounds):
                order = [(HERE, ours), (baseline, theirs)]
                for tree, sink in order if round_ % 2 == 0 else order[::-1]:
                    sink.append(_time(tree, n, mechanism, args.repeats))
            a, b = statistics.median(ours), statistics.median(theirs)
            rows.append(
                f"| {n:,} | {mechanism} | {a * 1e3:.1f} ms | {b * 1e3:.1f} ms | {a / b:.3f} |"
            )
            print(rows[-1], flush=True)
    text = "\n".join(
        [
            "# The release, this tree against a baseline checkout",
            "",
            f"Measured {datetime.now(UTC):%Y-%m-%d} on {platform.machine()} (2 shared cores), "
            f"baseline {commit or baseline.name}; {args.rounds} rounds, each a fresh process "
            f"per tree timing {args.repeats} releases after a warm-up, alternating order. "
            f"Command: `python -m bench.side_by_side --baseline DIR`.",
            "",
            *rows,
            "",
        ]
    )
    print(text)
    if args.out is not None:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
