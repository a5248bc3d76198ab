"""Benchmark: where the Spark release's joining pass spends its time, stage by stage.

Runs the job's joining pass (``joined_sorted``, the DISK_ONLY persist, ``frame_faults``: the part
of ``join_sort_count`` that the stages below make up) on synthetic Parquet inputs (made once, as
``bench/spark_release.py`` makes them), once per named Spark setting variant, alternating, each in
a fresh SparkContext with an event log; prints per stage the wall time, the tasks' run and JVM
CPU time, GC, shuffle bytes and spill, read back from the log. Usage::

    .venv/bin/python -m bench.spark_stages --n 30000000 --variants base nocompress_kryo base ...
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

VARIANTS: dict[str, dict[str, str]] = {
    "base": {},
    "nocompress_kryo": {
        "spark.shuffle.compress": "false",
        "spark.shuffle.spill.compress": "false",
        "spark.serializer": "org.apache.spark.serializer.KryoSerializer",
    },
    "no_aqe": {"spark.sql.adaptive.enabled": "false"},
    "sort_agg_codegen": {
        "spark.sql.codegen.aggregate.sortAggregate.enabled": "true",
        "spark.sql.codegen.aggregate.sortAggregate.withKeys.enabled": "true",
    },
}


def session(extra: dict[str, str], log_dir: Path) -> Any:
    """A fresh session with the job's settings, ``extra`` and an uncompressed event log."""
    from pyspark.sql import SparkSession

    from spark_release import DRIVER_MEMORY
    from spark_release.job import spark_session

    # The builder's options are class-level and outlive a stopped session: clear them, or a
    # variant's settings leak into the next one.
    SparkSession.builder._options.clear()
    log_dir.mkdir(parents=True, exist_ok=True)
    conf = {
        "spark.driver.memory": DRIVER_MEMORY,
        "spark.ui.showConsoleProgress": "false",
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": str(log_dir),
        "spark.eventLog.compress": "false",
        "spark.eventLog.rolling.enabled": "false",
        **extra,
    }
    spark = spark_session("local[2]", conf)
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def stage_table(log_dir: Path) -> list[dict[str, Any]]:
    """Per stage (from the event log): tasks, wall, run and CPU time, GC, shuffle, spill."""
    stages: dict[int, dict[str, Any]] = {}

    def entry(stage: int) -> dict[str, Any]:
        names = ("tasks", "wall", "run", "cpu", "gc", "written", "spill", "read")
        return stages.setdefault(stage, dict.fromkeys(names, 0))

    for path in (p for p in log_dir.rglob("*") if p.is_file()):
        for line in path.read_text().splitlines():
            event = json.loads(line)
            if event["Event"] == "SparkListenerStageCompleted":
                info = event["Stage Info"]
                row = entry(info["Stage ID"])
                row["tasks"] = info["Number of Tasks"]
                row["wall"] = (info["Completion Time"] - info["Submission Time"]) / 1000
            elif event["Event"] == "SparkListenerTaskEnd":
                metrics = event.get("Task Metrics") or {}
                row = entry(event["Stage ID"])
                row["run"] += metrics.get("Executor Run Time", 0) / 1000
                row["cpu"] += metrics.get("Executor CPU Time", 0) / 1e9
                row["gc"] += metrics.get("JVM GC Time", 0) / 1000
                written = metrics.get("Shuffle Write Metrics", {})
                row["written"] += written.get("Shuffle Bytes Written", 0) / 2**20
                row["spill"] += metrics.get("Disk Bytes Spilled", 0) / 2**20
                row["read"] += metrics.get("Shuffle Read Metrics", {}).get("Total Records Read", 0)
                row["read"] += metrics.get("Input Metrics", {}).get("Records Read", 0)
    return [dict(stage=k, **v) for k, v in sorted(stages.items()) if v["wall"] >= 0.5]


def joining_pass(spark: Any, examples: Path, labels: Path) -> float:
    """Seconds of the job's joining pass (count, join, persist, faults) on the inputs."""
    from decimal import Decimal

    from pyspark import StorageLevel

    from spark_release.job import JobConfig, frame_faults, joined_sorted, load_inputs

    config = JobConfig(
        dataset="bench", labels_url="http://127.0.0.1:9", token="unused",
        examples=str(examples), labels=str(labels), epsilon=Decimal("1"), out=Path("unused"),
    )  # fmt: skip
    universe, labelled = load_inputs(spark, config)
    start = time.perf_counter()
    n = universe.count()
    frame = joined_sorted(universe, labelled, default_label=0.0, n=n)
    frame = frame.persist(StorageLevel.DISK_ONLY)
    faults, rows = frame_faults(frame)
    seconds = time.perf_counter() - start
    frame.unpersist()
    if rows != n or faults.duplicate_examples or faults.outside:
        raise RuntimeError(f"unexpected joining pass result: {faults}, {rows} rows")
    return seconds


def main() -> None:
    from bench.spark_release import make_inputs

    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=30_000_000)
    parser.add_argument("--variants", nargs="+", default=["base", "nocompress_kryo"] * 3)
    args = parser.parse_args()
    unknown = sorted(set(args.variants) - set(VARIANTS))
    if unknown:
        parser.error(f"unknown variant(s) {unknown}; known: {sorted(VARIANTS)}")
    with tempfile.TemporaryDirectory(prefix="spark-stages-") as tmp:
        root = Path(tmp)
        spark = session({}, root / "log-inputs")
        start = time.perf_counter()
        examples, labels = make_inputs(spark, args.n, root / "inputs")
        print(f"n={args.n:.0e}: generate {time.perf_counter() - start:.1f}s", flush=True)
        spark.stop()
        for rep, name in enumerate(args.variants):
            log_dir = root / f"log-{rep}"
            spark = session(VARIANTS[name], log_dir)
            seconds = joining_pass(spark, examples, labels)
            spark.stop()
            print(f"{name} (run {rep}): joining pass {seconds:.1f}s", flush=True)
            for row in stage_table(log_dir):
                print(
                    f"  stage {row['stage']:3d}: {row['tasks']:3d} tasks, wall {row['wall']:6.1f}s,"
                    f" run {row['run']:6.1f}s, JVM CPU {row['cpu']:6.1f}s, GC {row['gc']:4.1f}s,"
                    f" records in {row['read']:.2e}, shuffle written {row['written']:6.0f} MiB,"
                    f" spill {row['spill']:5.0f} MiB",
                    flush=True,
                )


if __name__ == "__main__":
    main()
