"""The Spark release on a standalone cluster: a master and two workers as separate processes.

The other Spark tests run in ``local[2]``, where the driver, the executors' JVM and the Python
workers share one process tree. Here Spark's own scripts start a master and two workers (one
core each), the job's driver runs in its own process (the ``labeldp`` command, or a script for
the test hook that fails a task), and the randomizing tasks run in executors the workers launch:
the same invariants as the local tests must hold across those process boundaries.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from features_party.parquet_message import read_parquet_message
from tests.spark_release.conftest import LabelsParty, write_inputs
from tests.spark_release.test_job import _data, _verify_ledger

START_TIMEOUT_S = 120.0
JOB_TIMEOUT_S = 600.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _master_state(ui_port: int) -> dict[str, Any]:
    """The master's status page as JSON (workers, running and completed applications)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=5) as response:
        return json.loads(response.read())


def _wait_for(condition: Any, what: str, procs: list[subprocess.Popen[bytes]], logs: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        for proc in procs:
            if proc.poll() is not None:
                raise RuntimeError(f"a Spark daemon exited ({proc.args}); logs in {logs}")
        try:
            if condition():
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"timed out waiting for {what}; logs in {logs}")


class Cluster:
    """A running standalone cluster: its master URL and status page."""

    def __init__(self, url: str, ui_port: int, env: dict[str, str]) -> None:
        self.url = url
        self.ui_port = ui_port
        self.env = env

    def state(self) -> dict[str, Any]:
        return _master_state(self.ui_port)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """``spark-class`` Master and two Workers (1 core, 1 GiB each) on loopback; stopped after."""
    import pyspark

    spark_home = Path(pyspark.__file__).parent
    spark_class = spark_home / "bin" / "spark-class"
    work = tmp_path_factory.mktemp("spark-cluster")
    env = {
        **os.environ,
        "SPARK_HOME": str(spark_home),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": str(work / "logs"),
        "PYSPARK_PYTHON": sys.executable,
    }
    port, ui_port = _free_port(), _free_port()
    url = f"spark://127.0.0.1:{port}"
    procs: list[subprocess.Popen[bytes]] = []

    def start(name: str, *args: str) -> None:
        log = (work / f"{name}.log").open("wb")
        procs.append(
            subprocess.Popen(
                [str(spark_class), *args],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )

    try:
        start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
              "--port", str(port), "--webui-port", str(ui_port))  # fmt: skip
        _wait_for(lambda: _master_state(ui_port) is not None, "the master", procs, work)
        for i in range(2):
            worker_dir = work / f"worker{i}"
            worker_dir.mkdir()
            start(f"worker{i}", "org.apache.spark.deploy.worker.Worker", url,
                  "--host", "127.0.0.1", "--cores", "1", "--memory", "1g",
                  "--webui-port", str(_free_port()), "--work-dir", str(worker_dir))  # fmt: skip

        def two_alive() -> bool:
            workers = _master_state(ui_port)["workers"]
            return sum(w["state"] == "ALIVE" for w in workers) == 2

        _wait_for(two_alive, "two workers", procs, work)
        yield Cluster(url, ui_port, env)
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)


def _apps(cluster: Cluster) -> list[dict[str, Any]]:
    state = cluster.state()
    return [*state.get("activeapps", []), *state.get("completedapps", [])]


def test_the_labeldp_command_releases_on_the_cluster(
    cluster: Cluster, labels_party: LabelsParty, tmp_path: Path
) -> None:
    """``labeldp release --engine spark --master spark://...``: charged, then published, every id
    once, the ledger verifies; the application ran on the cluster's two workers."""
    name = "cluster_cli"
    labels_party.create_dataset(name)
    ids, labelled = _data(6000, seed=21)
    examples, labels = write_inputs(tmp_path / "in", ids, labelled)
    out = tmp_path / "message"
    before = {app["id"] for app in _apps(cluster)}
    done = subprocess.run(
        [sys.executable, "-m", "labeldp", "release", "--engine", "spark", "--master", cluster.url,
         "--dataset", name, "--labels-url", labels_party.url, "--examples", str(examples),
         "--labels", str(labels), "--epsilon", "1", "--out", str(out)],
        env={**cluster.env, "LABELDP_ADVERTISER_TOKEN": labels_party.tokens["advertiser"]},
        capture_output=True, text=True, timeout=JOB_TIMEOUT_S, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    assert json.loads(done.stdout)["out"] == str(out)
    with labels_party.client("publisher") as client:
        header, got_ids, noisy = read_parquet_message(out, labels_party=client)
    assert got_ids == sorted(ids) and noisy.size == header.n == len(ids)
    entries = [e for e in labels_party.ledger(name) if e["kind"] != "dataset"]
    assert [e["kind"] for e in entries] == ["histogram", "randomizer", "publication"]
    assert [e["message_sha256"] for e in entries] == [None, None, header.body_sha256]
    assert Decimal(labels_party.dataset(name)["epsilon_spent"]) == Decimal("1")
    _verify_ledger(labels_party)
    new = [app for app in _apps(cluster) if app["id"] not in before]
    assert [app["name"] for app in new] == ["labeldp-release"]
    assert new[0]["cores"] == 2  # one executor on each worker


DRIVER = """
import json, sys
from decimal import Decimal
from pathlib import Path
from spark_release.job import JobConfig, run, spark_session

args = json.loads(sys.argv[1])
spark = spark_session(args["master"], {"spark.executor.memory": "512m",
                                       "spark.sql.shuffle.partitions": "4"})
spark.sparkContext.setLogLevel("ERROR")
config = JobConfig(dataset=args["dataset"], labels_url=args["url"], token=args["token"],
                   examples=args["examples"], labels=args["labels"], epsilon=Decimal("1"),
                   out=Path(args["out"]), mechanism="rr_on_bins", seed=5,
                   fail_first_attempt=True)
result = run(config, spark=spark)
executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size()
print(json.dumps({"release": result.release["id"], "executors": executors}))
spark.stop()
"""


def test_a_task_failed_on_an_executor_is_retried_without_a_second_visible_randomization(
    cluster: Cluster, labels_party: LabelsParty, tmp_path: Path
) -> None:
    """The randomizing task of partition 0 fails on its first attempt inside an executor; the
    scheduler retries it, and the published body is one randomization: every id once, the
    header's hash, one charge."""
    name = "cluster_retry"
    labels_party.create_dataset(name)
    ids, labelled = _data(5000, seed=22)
    examples, labels = write_inputs(tmp_path / "in", ids, labelled)
    out = tmp_path / "message"
    args = {"master": cluster.url, "dataset": name, "url": labels_party.url,
            "token": labels_party.tokens["advertiser"], "examples": str(examples),
            "labels": str(labels), "out": str(out)}  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, json.dumps(args)],
        env=cluster.env, capture_output=True, text=True, timeout=JOB_TIMEOUT_S, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    printed = json.loads(done.stdout.strip().splitlines()[-1])
    assert printed["executors"] == 3  # the driver's block manager and one executor per worker
    header, got_ids, noisy = read_parquet_message(out)  # hash and order verified
    assert got_ids == sorted(ids) and noisy.size == len(ids)
    assert header.release_id == printed["release"] and header.mechanism == "rr_on_bins"
    assert set(noisy.tolist()) <= set(header.params["output_values"])
    assert Decimal(labels_party.dataset(name)["epsilon_spent"]) == Decimal("1")
    kinds = [e["kind"] for e in labels_party.ledger(name)]
    assert kinds == ["dataset", "histogram", "randomizer", "publication"]
    _verify_ledger(labels_party)
