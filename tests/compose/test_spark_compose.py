"""The compose profile "spark" (issue 26): the topology of
tests/spark_release/test_standalone_cluster.py as containers, from the local image
labeldp-spark:bookworm (services/build_base_image.sh --spark).

A Spark standalone master and two workers (one core each) run as separate containers on the
project's network next to the default labels party; the Parquet inputs are written into the lake
volume, which the workers and the driver mount at the same path; the driver, a one-shot
``spark-release`` container, runs ``labeldp release --engine spark --master
spark://spark-master:7077`` against the labels party by its service name. Checked: every id once
in the message, the header's hash and the labels party's record of it, the ledger (histogram,
randomizer, publication; spent = epsilon; the chain verifies), the signed receipt, and the
master's own status page (two workers ALIVE, the finished application on two cores). The project
always comes down with its volumes. Like test_compose.py, these tests skip only when the build
script reports that Docker cannot run on this machine.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import numpy as np
import pytest

from shared.service import receipt as rc
from tests.compose.test_compose import (
    Deployment,
    _compose_command,
    _free_loopback_port,
    _prepare_images,
    compose_env,
    running,
)

pytestmark = [pytest.mark.compose, pytest.mark.timeout(1500)]

PROFILE = "spark"
CLUSTER = ("spark-master", "spark-worker-1", "spark-worker-2")
SERVICES = ("labels", *CLUSTER)
DRIVER = "spark-release"
MASTER_URL = "spark://spark-master:7077"
MASTER_UI = "http://127.0.0.1:8080/json/"  # inside the master's container; not published
LABELS_URL = "http://labels:8001"  # the labels party by its service name
LAKE = "/lake"
ROLES = ("advertiser", "publisher", "operator")
RELEASE_TIMEOUT_S = 900

DATASET = "lake_clicks"
N = 3000

# Run in the driver's image (pyarrow is there, not necessarily on the host): the two inputs.
WRITE_INPUTS = """
import json, sys
import pyarrow as pa, pyarrow.parquet as pq
from pathlib import Path
args = json.loads(sys.argv[1])
folder = Path(args["folder"])
folder.mkdir(parents=True)
pq.write_table(pa.table({"example_id": pa.array(args["ids"], pa.string())}),
               folder / "examples.parquet")
pq.write_table(pa.table({"example_id": pa.array(list(args["labels"]), pa.string()),
                         "value": pa.array(list(args["labels"].values()), pa.float64())}),
               folder / "labels.parquet")
print("inputs", len(args["ids"]), len(args["labels"]))
"""

# Run in the driver's image: the publisher's read of the message (body hash, order, count, and
# the labels party's record of this very header), with the publisher token of the env file.
READ_MESSAGE = """
import json, os, sys
from features_party.parquet_message import read_parquet_message
from shared.service.client import LabelsPartyClient
with LabelsPartyClient(sys.argv[2], token=os.environ["LABELDP_PUBLISHER_TOKEN"]) as party:
    header, ids, noisy = read_parquet_message(sys.argv[1], labels_party=party)
print(json.dumps({"message": {"release_id": header.release_id, "n": header.n,
                              "body_sha256": header.body_sha256, "ids": ids,
                              "noisy": int(noisy.size),
                              "finite": bool(all(v == v for v in noisy.tolist()))}}))
"""

# Run in the master's container: its status page (workers, applications).
MASTER_STATE = (
    "import urllib.request; "
    f"print(urllib.request.urlopen('{MASTER_UI}', timeout=10).read().decode())"
)


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    """The labels party and the Spark master and workers of the profile, under a unique project
    name, the labels party on a free loopback port, fresh tokens; always taken down with its
    volumes (the lake too)."""
    _prepare_images("--spark")
    tokens = {role: secrets.token_urlsafe(24) for role in ROLES}
    env_file = tmp_path_factory.mktemp("spark") / "compose.env"
    env_file.write_text(
        "LABELDP_TOKENS=" + ",".join(f"{role}={tokens[role]}" for role in ROLES)
        + f"\nLABELDP_ADVERTISER_TOKEN={tokens['advertiser']}"
        + f"\nLABELDP_PUBLISHER_TOKEN={tokens['publisher']}\n",
        encoding="utf-8",
    )  # fmt: skip
    env_file.chmod(0o600)
    port = _free_loopback_port()
    dep = Deployment(
        project=f"labeldpspark{os.getpid()}{secrets.token_hex(3)}",
        compose=[*_compose_command(), "--profile", PROFILE],
        env=compose_env(env_file, LABELDP_LABELS_PORT=str(port)),
        labels_url=f"http://127.0.0.1:{port}",
        features_url="",  # no features party in this test
        tokens=tokens,
    )
    with running(dep, *SERVICES, healthy=SERVICES):
        yield dep


def _json_after(output: str, marker: str) -> Any:
    """The JSON value that starts at ``marker`` in a command's output (compose and Spark may
    add lines before and after it)."""
    start = output.find(marker)
    assert start >= 0, output[-4000:]
    value, _ = json.JSONDecoder().raw_decode(output, start)
    return value


def _master(dep: Deployment) -> dict[str, Any]:
    out = dep.run("exec", "-T", "spark-master", "python", "-c", MASTER_STATE)
    state: dict[str, Any] = _json_after(out, "{")
    return state


def _apps(state: dict[str, Any]) -> list[dict[str, Any]]:
    return [*state.get("activeapps", []), *state.get("completedapps", [])]


def _project_services(dep: Deployment) -> list[str]:
    out = subprocess.run(
        ["docker", "ps", "-a", "--filter", f"label=com.docker.compose.project={dep.project}",
         "--format", '{{.Label "com.docker.compose.service"}}'],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    return sorted(out.split())


def _data(n: int, seed: int) -> tuple[list[str], dict[str, float]]:
    """n click ids in a shuffled order and labels for a fifth of them."""
    gen = np.random.default_rng(seed)
    ids = [f"click-{i:06d}" for i in gen.permutation(n)]
    chosen = gen.choice(n, size=n // 5, replace=False)
    values = gen.exponential(25.0, chosen.size)
    return ids, {ids[i]: round(float(v), 6) for i, v in zip(chosen, values, strict=True)}


def test_the_cluster_is_two_workers_on_the_project_network_and_nothing_published(
    spark: Deployment,
) -> None:
    assert _project_services(spark) == sorted(SERVICES)  # the features party stays down
    for service in CLUSTER:
        info = spark.inspect(service)
        assert info["Config"]["User"] == "labeldp", (service, info["Config"]["User"])
        assert info["State"]["Health"]["Status"] == "healthy"
        assert list(info["NetworkSettings"]["Networks"]) == [f"{spark.project}_labeldp"]
        bindings = {p: h for p, h in info["NetworkSettings"]["Ports"].items() if h}
        assert bindings == {}, (service, bindings)
    for service in CLUSTER[1:]:
        lake = {m["Destination"]: m for m in spark.inspect(service)["Mounts"]}[LAKE]
        assert (lake["Type"], lake["Name"]) == ("volume", f"{spark.project}_spark-lake")
    state = _master(spark)
    assert state["status"] == "ALIVE"
    alive = [w for w in state["workers"] if w["state"] == "ALIVE"]
    assert len(alive) == 2 and state["aliveworkers"] == 2, state["workers"]
    assert sorted(w["cores"] for w in alive) == [1, 1]


def test_a_release_submitted_to_the_cluster_from_the_driver_container(spark: Deployment) -> None:
    """``labeldp release --engine spark --master spark://spark-master:7077`` in the one-shot
    driver container: charged, then published; every id once; the ledger and receipt agree."""
    operator = spark.labels("operator")
    operator.create_dataset(
        DATASET, label_min=0.0, label_max=100.0, default_label=0.0, epsilon_budget=4.0
    )
    ids, labelled = _data(N, seed=26)
    inputs, out = f"{LAKE}/in/{DATASET}", f"{LAKE}/releases/{DATASET}-r1"
    args = json.dumps({"folder": inputs, "ids": ids, "labels": labelled})
    written = spark.run("run", "--rm", "-T", "--no-deps", DRIVER, "python", "-c", WRITE_INPUTS,
                        args)  # fmt: skip
    assert f"inputs {N} {len(labelled)}" in written, written[-2000:]
    before = {app["id"] for app in _apps(_master(spark))}

    # The driver container; compose starts (here: finds) the labels party and both workers.
    done = spark.run(
        "run", "--rm", "-T", DRIVER, "labeldp", "release", "--engine", "spark",
        "--master", MASTER_URL, "--dataset", DATASET, "--labels-url", LABELS_URL,
        "--examples", f"{inputs}/examples.parquet", "--labels", f"{inputs}/labels.parquet",
        "--epsilon", "1", "--out", out, timeout=RELEASE_TIMEOUT_S,
    )  # fmt: skip
    printed = _json_after(done, '{\n  "release"')
    assert printed["out"] == out
    release_id = printed["release"]["id"]

    # The publisher's read, in the driver's image: hash, order, count, the recorded header.
    read = spark.run("run", "--rm", "-T", "--no-deps", DRIVER, "python", "-c", READ_MESSAGE,
                     out, LABELS_URL)  # fmt: skip
    message = _json_after(read, '{"message"')["message"]
    assert message["release_id"] == release_id
    assert message["ids"] == sorted(ids) and len(set(message["ids"])) == N  # every id once
    assert message["n"] == message["noisy"] == N and message["finite"]

    # The ledger: the charge (histogram, randomizer) before the publication of this body.
    entries = [
        e for e in operator.ledger(dataset=DATASET)["entries"] if e["kind"] != "dataset"
    ]  # fmt: skip
    assert [e["kind"] for e in entries] == ["histogram", "randomizer", "publication"]
    assert [e["message_sha256"] for e in entries] == [None, None, message["body_sha256"]]
    assert {e["release_id"] for e in entries} == {release_id}
    view = operator.dataset(DATASET)
    assert Decimal(str(view.epsilon_spent)) == Decimal("1")
    info = spark.labels("publisher").release(release_id)
    assert info.message_sha256 == message["body_sha256"]
    publisher = spark.labels("publisher")
    keys = {k["key_id"]: rc.from_b64(k["public_key"]) for k in publisher.public_keys()}
    signed = rc.verify(publisher.receipt(release_id), keys)
    assert message["body_sha256"] in json.dumps(signed)
    verified = spark.run(
        "exec", "-T", "labels", "labeldp", "ledger", "verify", "--db", "/data/labels.db"
    )
    assert "ledger OK" in verified, verified

    # The application ran on the master with one executor on each of the two workers.
    state = _master(spark)
    assert state["aliveworkers"] == 2
    new = [app for app in _apps(state) if app["id"] not in before]
    assert [app["name"] for app in new] == ["labeldp-release"], new
    assert new[0]["cores"] == 2 and new[0]["state"] == "FINISHED", new[0]
