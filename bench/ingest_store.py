"""The labels party's store layer on PostgreSQL, batch by batch, side by side with another tree.

Run: ``python -m bench.ingest_store [--baseline DIR] [--rounds 3] [--batches 40]`` with DIR a
checkout of an earlier commit (``git worktree add DIR COMMIT``). It starts a durable PostgreSQL
server as the tests do (``tests.postgres``, fsync on) and, each round, for this tree and the
baseline in fresh processes, times ``labels_party.intake.ingest.store_labels`` on two workloads
into a new database each: ``new``, batches of 10^4 new ids into one growing dataset (the
incremental ingest of JSON batches), and ``resend``, each earlier batch sent again after a newer
one (every row unchanged, the dataset at another version, so its digest cannot short-cut it).
Prints the median milliseconds per batch of each round and the medians over rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

BATCH = 10_000
HERE = Path(__file__).resolve().parents[1]


def worker(url: str, workload: str, batches: int) -> float:
    """Median milliseconds per batch of ``workload`` in the tree on ``sys.path``."""
    import numpy as np

    from labels_party.catalog import datasets as ds
    from labels_party.db.engine import Database, create_schema, make_engine
    from labels_party.intake import ingest
    from labels_party.intake.parsing import LabelRows

    engine = make_engine(url)
    create_schema(engine)
    db = Database(engine)
    spec = ds.DatasetSpec(
        name="d", label_min=0, label_max=10, default_label=0, epsilon_budget=Decimal(1)
    )
    ds.create_dataset(db, spec, actor_role="operator")
    rng = np.random.default_rng(0)
    previous = None
    times: list[float] = []
    for b in range(batches):
        ids = [f"id{b:04d}-{i:05d}" for i in range(BATCH)]
        rows = LabelRows(example_ids=ids, values=rng.uniform(0, 10, BATCH))
        start = time.perf_counter()
        ingest.store_labels(db, dataset="d", rows=rows, overwrite=False)
        if workload == "new" and b > 0:  # the first batch goes into an empty dataset (COPY)
            times.append(time.perf_counter() - start)
        if workload == "resend" and previous is not None:
            start = time.perf_counter()
            again = ingest.store_labels(db, dataset="d", rows=previous, overwrite=False)
            times.append(time.perf_counter() - start)
            assert again.unchanged == BATCH, again
        previous = rows
    engine.dispose()
    return 1e3 * statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, default=None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--worker", nargs=2, metavar=("URL", "WORKLOAD"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker[0], args.worker[1], args.batches)))
        return 0
    sys.path.insert(0, str(HERE))
    from tests.postgres import PostgresServer, find_bindir

    bindir = find_bindir()
    if bindir is None:
        print("no PostgreSQL server binaries (apt-get install postgresql)", file=sys.stderr)
        return 2
    trees = {"this tree": HERE, **({"baseline": args.baseline} if args.baseline else {})}
    server = PostgresServer(bindir).init().start(durable=True)
    results: dict[tuple[str, str], list[float]] = {}
    try:
        for round_ in range(args.rounds):
            for workload in ("new", "resend"):
                for name, tree in trees.items():
                    # This file runs as a script; the tree's packages come from PYTHONPATH.
                    command = [
                        sys.executable,
                        str(Path(__file__).resolve()),
                        "--batches",
                        str(args.batches),
                        "--worker",
                        server.create_database(),
                        workload,
                    ]
                    env = {**os.environ, "PYTHONPATH": str(tree)}
                    done = subprocess.run(command, env=env, cwd=tree, capture_output=True,
                                          text=True, check=True)  # fmt: skip
                    value = float(done.stdout.strip().splitlines()[-1])
                    results.setdefault((workload, name), []).append(value)
                    print(f"round {round_ + 1} {workload:6} {name:9} {value:7.1f} ms", flush=True)
    finally:
        server.stop()
    print("\n| workload | " + " | ".join(trees) + (" | ratio |" if args.baseline else " |"))
    print("|---" * (len(trees) + 1 + bool(args.baseline)) + "|")
    for workload in ("new", "resend"):
        medians = [statistics.median(results[(workload, name)]) for name in trees]
        cells = " | ".join(f"{m:.1f} ms" for m in medians)
        ratio = f" | {medians[0] / medians[1]:.2f}" if args.baseline else ""
        print(f"| {workload} | {cells}{ratio} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
