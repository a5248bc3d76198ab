"""Fixtures for the Spark job: one local[2] SparkSession and one real labels-party process."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from demo.services import ServiceProcess, new_tokens, start_labels_party
from shared.client import LabelsPartyClient, RetryPolicy


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


@dataclass
class LabelsParty:
    service: ServiceProcess
    tokens: dict[str, str]

    @property
    def url(self) -> str:
        return self.service.url

    def client(self, role: str) -> LabelsPartyClient:
        fast = RetryPolicy(attempts=2, base_delay=0.05, factor=2.0, max_delay=0.1)
        return LabelsPartyClient(self.url, token=self.tokens[role], retry=fast)

    def create_dataset(self, name: str, *, budget: str = "10", **fields: Any) -> None:
        body = {"name": name, "label_min": 0.0, "label_max": 100.0, "default_label": 0.0,
                "epsilon_budget": budget, **fields}  # fmt: skip
        with self.client("operator") as client:
            client.request("POST", "/v1/datasets", idempotent=False, json_body=body)

    def dataset(self, name: str) -> dict[str, Any]:
        with self.client("advertiser") as client:
            return dict(client.request("GET", f"/v1/datasets/{name}", idempotent=True).json())

    def ledger(self, name: str) -> list[dict[str, Any]]:
        with self.client("operator") as client:
            page = client.request(
                "GET", "/v1/ledger", idempotent=True, params={"dataset": name}
            ).json()
        return list(page["entries"])


@pytest.fixture(scope="module")
def labels_party(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabelsParty]:
    workdir = tmp_path_factory.mktemp("labels")
    tokens = new_tokens()
    service = start_labels_party(workdir, tokens)
    try:
        yield LabelsParty(service=service, tokens=tokens)
    finally:
        service.stop()


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
