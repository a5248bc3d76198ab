"""Benchmark: the Spark release (spark_release.job) in local mode vs the single-process one.

For each n: synthetic universe of n ids, 20% labelled (exponential labels), written to Parquet
by Spark; a real labels-party process; the job end to end (wall time per stage, from
``JobResult.timings``); peak RSS of the driver's Python process and of the JVM + Python workers
(sampled from /proc every 0.2 s); and ``shared.randomizer.execute`` on the same labels in one
process (n <= 10^7). ``--repeat R`` runs the job R times on the same inputs and prints the
median; ``--cli`` times the whole ``labeldp release --engine spark`` command instead, each run in
a fresh process (Spark's start included). Usage::

    .venv/bin/python -m bench.spark_release --n 1000000 10000000 [--repeat 5] [--cli]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from spark_release.job import JobConfig


def _rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as handle:
                out.extend(int(x) for x in handle.read().split())
    except OSError:
        pass
    return out


class MemorySampler:
    """Peak RSS of this process (the driver's Python) and of all its descendants (JVM, workers)."""

    def __init__(self) -> None:
        self.driver = 0
        self.others = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        me = os.getpid()
        while not self._stop.is_set():
            self.driver = max(self.driver, _rss_kib(me))
            stack, total = _children(me), 0
            while stack:
                pid = stack.pop()
                total += _rss_kib(pid)
                stack.extend(_children(pid))
            self.others = max(self.others, total)
            time.sleep(0.2)

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def make_inputs(spark: object, n: int, directory: Path) -> tuple[Path, Path]:
    from pyspark.sql import functions as F

    examples, labels = directory / "examples", directory / "labels"
    ids = spark.range(n).select(  # type: ignore[attr-defined]
        F.format_string("id%012d", F.col("id")).alias("example_id"), F.col("id")
    )
    ids.select("example_id").write.parquet(str(examples))
    labelled = ids.where(F.hash(F.col("id")) % 5 == 0).select(
        "example_id", (-F.log(F.rand(seed=7) + F.lit(1e-12)) * 25.0).alias("value")
    )
    labelled.write.parquet(str(labels))
    return examples, labels


def single_process(n: int, seed: int) -> dict[str, float]:
    from shared.plan import plan_release
    from shared.randomizer import execute
    from shared.rng import SystemRandom

    gen = np.random.default_rng(seed)
    labels = np.where(gen.random(n) < 0.2, gen.exponential(25.0, n), 0.0)
    plan = plan_release(n=n, lo=0.0, hi=100.0, epsilon="1", mechanism="auto")
    start = time.perf_counter()
    execute(plan, labels, SystemRandom())
    return {"seconds": time.perf_counter() - start}


def kernel_rate(n: int = 2_000_000) -> float:
    """Labels per second of one core in the chosen mechanism's randomize (the executor's call)."""
    from shared.plan import plan_release
    from shared.randomizer import choose_randomizer, measure
    from shared.rng import SystemRandom

    gen = np.random.default_rng(0)
    labels = np.where(gen.random(n) < 0.2, gen.exponential(25.0, n), 0.0).clip(0, 100)
    plan = plan_release(n=n, lo=0.0, hi=100.0, epsilon="1", mechanism="auto")
    _, mech = choose_randomizer(plan, measure(plan, labels, SystemRandom()))
    mech.randomize(labels[:1000], SystemRandom())
    start = time.perf_counter()
    mech.randomize(labels, SystemRandom())
    return n / (time.perf_counter() - start)


def cli_run(config: JobConfig) -> float:
    """Seconds of ``labeldp release --engine spark`` for ``config``, in a fresh process."""
    from spark_release.cli import TOKEN_ENV

    command = [
        sys.executable, "-m", "labeldp", "release", "--engine", "spark",
        "--dataset", config.dataset, "--labels-url", config.labels_url,
        "--examples", config.examples, "--labels", config.labels,
        "--epsilon", str(config.epsilon), "--out", str(config.out),
    ]  # fmt: skip
    start = time.perf_counter()
    done = subprocess.run(
        command, capture_output=True, text=True, env={**os.environ, TOKEN_ENV: config.token}
    )
    if done.returncode:
        raise RuntimeError(f"labeldp release failed ({done.returncode}): {done.stderr[-2000:]}")
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--master", default="local[2]")
    parser.add_argument(
        "--arrow-batch", type=int, nargs="+", default=None,
        help="rows per Arrow batch to compare side by side (default: the job's own setting)",
    )  # fmt: skip
    parser.add_argument(
        "--repeat", type=int, default=1,
        help="runs of the job per n and batch on the same inputs (each spends epsilon 1 of 10)",
    )  # fmt: skip
    parser.add_argument(
        "--cli", action="store_true",
        help="run each job as `labeldp release --engine spark` in a fresh process (its own JVM, "
        "the command's default settings) and time the whole command",
    )  # fmt: skip
    args = parser.parse_args()

    from demo.services import new_tokens, start_labels_party
    from shared.service.client import LabelsPartyClient
    from spark_release import DRIVER_MEMORY
    from spark_release.job import ARROW_BATCH_ROWS, JobConfig, run, spark_session

    spark = spark_session(
        args.master, {"spark.driver.memory": DRIVER_MEMORY, "spark.ui.showConsoleProgress": "false"}
    )
    batches = args.arrow_batch or [ARROW_BATCH_ROWS]
    spark.sparkContext.setLogLevel("ERROR")
    cores = spark.sparkContext.defaultParallelism
    print(f"kernel: {kernel_rate():.3g} labels/s on one core")
    with tempfile.TemporaryDirectory(prefix="spark-bench-") as tmp:
        root = Path(tmp)
        tokens = new_tokens()
        service = start_labels_party(root, tokens)
        try:
            for n in args.n:
                name = f"bench{n}"
                with LabelsPartyClient(service.url, token=tokens["operator"]) as client:
                    client.request(
                        "POST", "/v1/datasets", idempotent=False,
                        json_body={"name": name, "label_min": 0.0, "label_max": 100.0,
                                   "default_label": 0.0, "epsilon_budget": "10"},
                    )  # fmt: skip
                t0 = time.perf_counter()
                examples, labels = make_inputs(spark, n, root / name)
                generate = time.perf_counter() - t0
                print(f"n={n:.0e}: generate {generate:.1f}s", flush=True)
                jobs: list[float] = []
                runs = [batch for batch in batches for _ in range(args.repeat)]
                for run_number, batch in enumerate(runs):
                    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(batch))
                    config = JobConfig(
                        dataset=name, labels_url=service.url, token=tokens["advertiser"],
                        examples=str(examples), labels=str(labels), epsilon=Decimal("1"),
                        out=root / f"{name}-message-{run_number}",
                    )  # fmt: skip
                    if args.cli:
                        total = cli_run(config)
                        jobs.append(total)
                        print(f"  labeldp release --engine spark: {total:.1f}s", flush=True)
                        continue
                    with MemorySampler() as memory:
                        start = time.perf_counter()
                        result = run(config, spark=spark)
                        total = time.perf_counter() - start
                    jobs.append(total)
                    stages = ", ".join(f"{k} {v:.1f}s" for k, v in result.timings.items())
                    rate = n / result.timings["noise_randomize_write"] / cores
                    line = (
                        f"  arrow batch {batch}: job {total:.1f}s ({stages}); randomize+write "
                        f"stage {rate:.3g} labels/s/core; peak RSS driver python "
                        f"{memory.driver / 1024:.0f} MiB, JVM + workers "
                        f"{memory.others / 1024:.0f} MiB"
                    )
                    if n <= 10_000_000:
                        single = single_process(n, seed=1)["seconds"]
                        ratio = total / single
                        line += f"; single-process {single:.2f}s (Spark / single {ratio:.1f}x)"
                    print(line, flush=True)
                if len(jobs) > 1:
                    print(f"  job over {len(jobs)} runs: median {statistics.median(jobs):.1f}s, "
                          f"min {min(jobs):.1f}s, max {max(jobs):.1f}s", flush=True)  # fmt: skip
        finally:
            service.stop()
    spark.stop()


if __name__ == "__main__":
    main()
