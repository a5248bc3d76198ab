"""Fixtures for the Spark job: one local[2] SparkSession and one real labels-party process."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.labels_process import LabelsParty, running_labels_party


def _spark_or_skip() -> None:
    if shutil.which("java") is None:
        pytest.skip(
            "no java on PATH: tests/run.sh installs openjdk-17-jre-headless",
            allow_module_level=True,
        )
    try:
        import pyarrow  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError:
        pytest.skip(
            "pyspark / pyarrow not installed: pip install -e '.[spark]'", allow_module_level=True
        )
    probe = subprocess.run(["java", "-version"], capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip("java is installed but does not run", allow_module_level=True)


_spark_or_skip()


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """local[2] with up to 2 attempts per task (the retry test makes the first one fail)."""
    from spark_release.job import spark_session

    session = spark_session(
        "local[2,2]",
        {
            "spark.sql.shuffle.partitions": "4",
            "spark.default.parallelism": "2",
            "spark.driver.memory": "1g",
        },
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="module")
def labels_party(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabelsParty]:
    with running_labels_party(tmp_path_factory.mktemp("labels")) as party:
        yield party


def write_inputs(
    directory: Path, ids: list[str], labelled: dict[str, float | None]
) -> tuple[Path, Path]:
    """examples.parquet (example_id) and labels.parquet (example_id, value)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    directory.mkdir(parents=True, exist_ok=True)
    examples, labels = directory / "examples.parquet", directory / "labels.parquet"
    pq.write_table(pa.table({"example_id": pa.array(ids, pa.string())}), examples)
    pq.write_table(
        pa.table(
            {
                "example_id": pa.array(list(labelled), pa.string()),
                "value": pa.array(list(labelled.values()), pa.float64()),
            }
        ),
        labels,
    )
    return examples, labels
