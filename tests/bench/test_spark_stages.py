"""bench.spark_stages: the per-stage table read back from a Spark event log."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.spark_stages import VARIANTS, stage_table


def _task(stage: int, run_ms: int, cpu_ns: int, written: int, records: int) -> dict[str, Any]:
    return {
        "Event": "SparkListenerTaskEnd",
        "Stage ID": stage,
        "Task Metrics": {
            "Executor Run Time": run_ms,
            "Executor CPU Time": cpu_ns,
            "JVM GC Time": 10,
            "Disk Bytes Spilled": 0,
            "Shuffle Write Metrics": {"Shuffle Bytes Written": written},
            "Shuffle Read Metrics": {"Total Records Read": records},
            "Input Metrics": {"Records Read": 0},
        },
    }


def _stage(stage: int, tasks: int, start_ms: int, end_ms: int) -> dict[str, Any]:
    info = {"Stage ID": stage, "Number of Tasks": tasks}
    info |= {"Submission Time": start_ms, "Completion Time": end_ms}
    return {"Event": "SparkListenerStageCompleted", "Stage Info": info}


def test_tasks_before_their_stage_are_summed_not_overwritten(tmp_path: Path) -> None:
    # Spark logs a stage's task ends BEFORE its completion: the completion must not reset them.
    events = [
        {"Event": "SparkListenerApplicationStart"},
        _task(3, 1500, 1_000_000_000, 2**20, 7),
        _task(3, 2500, 2_000_000_000, 2**21, 5),
        _stage(3, 2, 10_000, 12_500),
        _task(4, 100, 0, 0, 0),
        _stage(4, 1, 20_000, 20_100),  # 0.1 s: below the table's 0.5 s floor
    ]
    log = tmp_path / "app" / "events"
    log.parent.mkdir()
    log.write_text("\n".join(json.dumps(event) for event in events) + "\n")
    (row,) = stage_table(tmp_path)
    assert row["stage"] == 3 and row["tasks"] == 2
    assert row["wall"] == 2.5 and row["run"] == 4.0 and row["cpu"] == 3.0
    assert abs(row["gc"] - 0.02) < 1e-12
    assert row["written"] == 3.0 and row["read"] == 12


def test_variants_are_spark_settings() -> None:
    assert VARIANTS["base"] == {}
    assert all(key.startswith("spark.") for conf in VARIANTS.values() for key in conf)
