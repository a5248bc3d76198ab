"""The docker-compose deployment: build the images, run the whole protocol through the published
loopback ports, re-create the labels-party container and check that nothing it stored was lost.

services/build_base_image.sh prepares the engine, the base image and the wheelhouse (installing
Debian's docker.io / docker-compose and starting dockerd where none runs); these tests skip only
when it reports (exit 77) that Docker cannot run on this machine at all.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import secrets
import shutil
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import pytest

from shared.service.client import FeaturesPartyClient, LabelsPartyClient, ServiceError

pytestmark = [pytest.mark.compose, pytest.mark.timeout(1500)]

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO_ROOT / "services" / "build_base_image.sh"
COMPOSE_FILE = REPO_ROOT / "docker-compose.yml"
EXIT_NO_DOCKER = 77
BASE_IMAGE = os.environ.get("LABELDP_BASE_IMAGE", "labeldp-base:bookworm")
SERVICES = ("labels", "features")
CONTAINER_PORTS = {"labels": 8001, "features": 8002}

BUILD_TIMEOUT_S = 900
UP_TIMEOUT_S = 900
HEALTHY_TIMEOUT_S = 240


def _free_loopback_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _compose_command() -> list[str]:
    """Compose v2 (``docker compose``) if the plugin exists, else v1 ``docker-compose``."""
    if shutil.which("docker"):
        probe = subprocess.run(
            ["docker", "compose", "version"], capture_output=True, text=True, timeout=30
        )
        if probe.returncode == 0:
            return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    pytest.fail("the build script succeeded but neither `docker compose` nor docker-compose runs")


@dataclass(frozen=True, kw_only=True)
class Deployment:
    """A running compose project and how to reach it."""

    project: str
    compose: list[str]
    env: dict[str, str]
    labels_url: str
    features_url: str
    tokens: dict[str, str]

    def run(self, *args: str, timeout: float = 300, check: bool = True) -> str:
        """Run one compose subcommand of this project; return its combined output.

        With ``check`` a non-zero exit fails the test and shows the services' recent logs.
        """
        cmd = [*self.compose, "-f", str(COMPOSE_FILE), "-p", self.project, *args]
        proc = subprocess.run(
            cmd,
            cwd=REPO_ROOT,
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        output = proc.stdout + proc.stderr
        if check and proc.returncode != 0:
            logs = self.run("logs", "--no-color", "--tail", "60", timeout=120, check=False)
            pytest.fail(
                f"{' '.join(cmd)} exited {proc.returncode}:\n{output[-6000:]}\n"
                f"--- service logs ---\n{logs[-6000:]}"
            )
        return output

    def container_id(self, service: str) -> str:
        ids = self.run("ps", "-q", service).split()
        assert len(ids) == 1, f"expected one {service} container, got {ids}"
        return ids[0]

    def inspect(self, service: str) -> dict:
        out = subprocess.run(
            ["docker", "inspect", self.container_id(service)],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
        return json.loads(out)[0]

    def wait_healthy(self, service: str, timeout: float = HEALTHY_TIMEOUT_S) -> None:
        """Wait until Docker's own HEALTHCHECK (not just our probe) reports the service healthy."""
        deadline = time.monotonic() + timeout
        status = "?"
        while time.monotonic() < deadline:
            state = self.inspect(service)["State"]
            status = state.get("Health", {}).get("Status", "no healthcheck")
            if status == "healthy":
                return
            if not state.get("Running", False):
                break
            time.sleep(1)
        logs = self.run("logs", "--no-color", "--tail", "80", service, check=False)
        pytest.fail(f"{service} not healthy (status {status!r}) after {timeout:g} s:\n{logs}")

    def labels(self, role: str) -> LabelsPartyClient:
        return LabelsPartyClient(self.labels_url, token=self.tokens[role], timeout=120)

    def features(self) -> FeaturesPartyClient:
        return FeaturesPartyClient(self.features_url, token=self.tokens["features"], timeout=120)


def _prepare_images(*script_args: str) -> None:
    """Run the build script (with ``script_args``, e.g. ``--infra``); skip only if it says Docker
    cannot run here."""
    env = {**os.environ, "PYTHON": sys.executable, "LABELDP_BASE_IMAGE": BASE_IMAGE}
    proc = subprocess.run(
        ["bash", str(BUILD_SCRIPT), *script_args],
        cwd=REPO_ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
    )
    if proc.returncode == EXIT_NO_DOCKER:
        reason = [line for line in proc.stderr.splitlines() if "DOCKER UNAVAILABLE" in line]
        pytest.skip(f"Docker cannot run on this machine: {(reason or [proc.stderr])[-1].strip()}")
    if proc.returncode != 0:
        pytest.fail(f"{BUILD_SCRIPT} exited {proc.returncode}:\n{proc.stderr[-6000:]}")


def compose_env(env_file: Path, **variables: str) -> dict[str, str]:
    """The environment of a test's compose commands: its env file, the local base image and
    ``variables`` (ports); no project, file or profile inherited from the caller's shell."""
    env = {
        **os.environ,
        "LABELDP_ENV_FILE": str(env_file),
        "LABELDP_BASE_IMAGE": BASE_IMAGE,
        # Compose v1: build with the engine's classic builder, which uses the local base image.
        "COMPOSE_DOCKER_CLI_BUILD": "0",
        "DOCKER_BUILDKIT": "0",
        **variables,
    }
    for name in ("COMPOSE_PROJECT_NAME", "COMPOSE_FILE", "COMPOSE_PROFILES"):
        env.pop(name, None)
    return env


@contextlib.contextmanager
def running(dep: Deployment, *services: str, healthy: Sequence[str]) -> Iterator[Deployment]:
    """``up -d --build`` of ``services`` (default: the default ones), wait until ``healthy`` are
    healthy, yield; always take the project down with its volumes (logs shown on failure)."""
    try:
        dep.run("up", "-d", "--build", *services, timeout=UP_TIMEOUT_S)
        for service in healthy:
            dep.wait_healthy(service)
        yield dep
    finally:
        # Shown by pytest only when something failed.
        print(dep.run("logs", "--no-color", "--tail", "100", timeout=120, check=False))
        dep.run("down", "-v", "--remove-orphans", "--timeout", "20", timeout=300, check=False)


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    """Build and start the compose project on fresh loopback ports; always take it down."""
    _prepare_images()
    compose = _compose_command()
    tokens = {
        role: secrets.token_urlsafe(24)
        for role in ("advertiser", "publisher", "operator", "features")
    }
    env_file = tmp_path_factory.mktemp("compose") / "compose.env"
    env_file.write_text(
        "LABELDP_TOKENS="
        + ",".join(f"{role}={tokens[role]}" for role in ("advertiser", "publisher", "operator"))
        + f"\nLABELDP_PUBLISHER_TOKEN={tokens['publisher']}"
        + f"\nLABELDP_FEATURES_TOKEN={tokens['features']}\n",
        encoding="utf-8",
    )
    env_file.chmod(0o600)
    labels_port, features_port = _free_loopback_port(), _free_loopback_port()
    while features_port == labels_port:
        features_port = _free_loopback_port()
    project = f"labeldptest{os.getpid()}{secrets.token_hex(3)}"
    env = compose_env(
        env_file,
        LABELDP_LABELS_PORT=str(labels_port),
        LABELDP_FEATURES_PORT=str(features_port),
    )
    dep = Deployment(
        project=project,
        compose=compose,
        env=env,
        labels_url=f"http://127.0.0.1:{labels_port}",
        features_url=f"http://127.0.0.1:{features_port}",
        tokens=tokens,
    )
    with running(dep, healthy=SERVICES):
        yield dep


def test_containers_are_healthy_non_root_and_only_on_loopback(deployment: Deployment) -> None:
    for service in SERVICES:
        info = deployment.inspect(service)
        assert info["Config"]["User"] == "labeldp", f"{service} runs as {info['Config']['User']!r}"
        assert info["State"]["Health"]["Status"] == "healthy"
        # Exactly one published port, the service's API, and only on the loopback address.
        bindings = {
            port: hosts for port, hosts in info["NetworkSettings"]["Ports"].items() if hosts
        }
        assert list(bindings) == [f"{CONTAINER_PORTS[service]}/tcp"], bindings
        assert all(host["HostIp"] == "127.0.0.1" for host in bindings[list(bindings)[0]])
        # Only the project's own network.
        assert list(info["NetworkSettings"]["Networks"]) == [f"{deployment.project}_labeldp"]
        # The SQLite database lives on the project's named volume, not in the container layer.
        volumes = {m["Destination"]: m for m in info["Mounts"]}
        assert volumes["/data"]["Type"] == "volume"
        assert volumes["/data"]["Name"] == f"{deployment.project}_{service}-data"
    # Every API call needs a token: the published port answers 401 without one.
    assert httpx.get(f"{deployment.labels_url}/v1/ledger", timeout=30).status_code == 401
    assert httpx.get(f"{deployment.features_url}/v1/models", timeout=30).status_code == 401


def _recreate(deployment: Deployment, service: str) -> None:
    """Stop and remove the container, start a new one: only the named volume carries state."""
    old = deployment.container_id(service)
    deployment.run("stop", "--timeout", "20", service)
    deployment.run("rm", "-f", "-v", service)  # -v: anonymous volumes only; named ones stay
    deployment.run("up", "-d", "--no-deps", service, timeout=300)
    assert deployment.container_id(service) != old
    deployment.wait_healthy(service)


def test_full_protocol_then_labels_survive_a_new_container(deployment: Deployment) -> None:
    rng = np.random.default_rng(20261122)
    operator = deployment.labels("operator")
    advertiser = deployment.labels("advertiser")
    publisher = deployment.labels("publisher")
    features = deployment.features()

    # Operator: a dataset with public bounds and a budget; and a second one that stays open.
    operator.create_dataset(
        "clicks", label_min=0.0, label_max=100.0, default_label=0.0, epsilon_budget=4.0
    )
    operator.create_dataset(
        "open", label_min=0.0, label_max=10.0, default_label=0.0, epsilon_budget=1.0
    )

    # Publisher: features for 600 clicks, registered upstream through the features service,
    # which reaches the labels service by its compose service name.
    n = 600
    ids = [f"click-{i:04d}" for i in range(n)]
    x1 = rng.normal(size=n)
    x2 = rng.uniform(-1, 1, size=n)
    colour = rng.choice(np.array(["red", "green", "blue"]), size=n)
    upload = features.upload_features("clicks", ids, {"x1": x1, "x2": x2, "colour": colour})
    assert sum(answer.received for answer in upload) == n
    features.sync_examples("clicks")
    assert getattr(publisher.dataset("clicks"), "n_examples", None) == n

    # Advertiser: conversion values for 80 % of the clicks (the rest keep the default label).
    labelled = n * 4 // 5
    values = np.clip(40.0 + 25.0 * x1[:labelled] + 10.0 * (colour[:labelled] == "red"), 0, 100)
    advertiser.post_labels("clicks", ids[:labelled], values)
    advertiser.post_labels("open", ["a", "b", "c"], [1.0, 2.5, 9.0])

    # Advertiser: the one release.
    release = advertiser.create_release("clicks", epsilon=2.0, mechanism="auto")
    assert release.epsilon == 2  # an exact decimal
    assert release.n == n

    # Publisher: pull the message directly (verified by the client) ...
    message = publisher.download_message(release.id)
    assert sorted(message.example_ids) == ids
    assert np.all(np.isfinite(message.noisy_labels))
    assert message.header.release_id == release.id

    # ... and train through the features service, which pulls it itself.
    job = features.create_model(dataset="clicks", release_id=release.id, model="ridge")
    model = features.wait_model(job.id, timeout=600)
    assert model.status == "succeeded"
    assert model.result is not None
    predictions = features.predict(model.id, example_ids=ids[:10])
    assert predictions.shape == (10,)
    assert np.all(np.isfinite(predictions))

    before = advertiser.dataset("clicks")
    assert before.epsilon_spent == 2
    assert getattr(before, "n_labels", None) == labelled
    ledger_before = operator.ledger()

    # The labels party's container is replaced; its SQLite file lives on the named volume.
    _recreate(deployment, "labels")

    after = advertiser.dataset("clicks")
    assert after.model_dump() == before.model_dump(), "dataset state changed across the restart"
    assert operator.ledger() == ledger_before
    again = publisher.download_message(release.id)
    assert again.raw == message.raw, "a stored message must come back byte-identical"
    # The labels of the open dataset survived: the same values are idempotent, a different
    # value for a stored id is a conflict.
    advertiser.post_labels("open", ["a", "b", "c"], [1.0, 2.5, 9.0])
    with pytest.raises(ServiceError) as conflict:
        advertiser.post_labels("open", ["b"], [3.0])
    assert conflict.value.status == 409
    # The ledger's hash chain and totals still verify inside the new container (exit code 0).
    deployment.run("exec", "-T", "labels", "labeldp", "ledger", "verify", "--db", "/data/labels.db")

    # The budget still binds after the restart: 2 spent of 4, so 3 more is refused.
    with pytest.raises(ServiceError) as refused:
        advertiser.create_release("clicks", epsilon=3.0, mechanism="auto")
    assert 400 <= (refused.value.status or 0) < 500
    assert "budget" in refused.value.detail and "left 2" in refused.value.detail, refused.value
    assert advertiser.dataset("clicks").epsilon_spent == 2

    # The features party still reaches the new labels container by name, and kept its model.
    _recreate(deployment, "features")
    assert deployment.features().model(model.id).status == "succeeded"
    assert np.allclose(deployment.features().predict(model.id, example_ids=ids[:10]), predictions)


def test_the_tls_profile_serves_both_parties_over_https_with_a_private_ca(
    deployment: Deployment, tmp_path: Path
) -> None:
    """`--profile tls`: certificates from the one-shot container, both services on https, the
    features party reaching the labels party over https with the pinned CA."""
    labels_port, features_port = _free_loopback_port(), _free_loopback_port()
    while features_port == labels_port:
        features_port = _free_loopback_port()
    tls = dataclasses.replace(
        deployment,
        env={
            **deployment.env,
            "LABELDP_LABELS_TLS_PORT": str(labels_port),
            "LABELDP_FEATURES_TLS_PORT": str(features_port),
        },
        compose=[*deployment.compose, "--profile", "tls"],
    )
    try:
        tls.run("up", "-d", "labels-tls", "features-tls", timeout=UP_TIMEOUT_S)
        for service in ("labels-tls", "features-tls"):
            tls.wait_healthy(service)
        ca = tmp_path / "ca.pem"
        ca.write_text(tls.run("exec", "-T", "labels-tls", "cat", "/tls/ca.pem"))
        pinned = ssl.create_default_context(cafile=str(ca))
        for port in (labels_port, features_port):
            assert httpx.get(f"https://127.0.0.1:{port}/healthz", verify=pinned).status_code == 200
            with pytest.raises(httpx.ConnectError):  # the system CAs do not know this CA
                httpx.get(f"https://127.0.0.1:{port}/healthz")
        operator = LabelsPartyClient(
            f"https://127.0.0.1:{labels_port}", token=deployment.tokens["operator"], ca_file=ca
        )
        operator.create_dataset(
            "tls", label_min=0.0, label_max=1.0, default_label=0.0, epsilon_budget=1
        )
        features = httpx.Client(
            base_url=f"https://127.0.0.1:{features_port}",
            verify=pinned,
            headers={"Authorization": f"Bearer {deployment.tokens['features']}"},
            timeout=120,
        )
        upload = features.post(
            "/v1/datasets/tls/features",
            content="example_id,x\na,1\nb,2\n",
            headers={"Content-Type": "text/csv"},
        )
        assert upload.status_code == 200, upload.text
        synced = features.post("/v1/datasets/tls/examples/sync")  # features -> labels, https
        assert synced.status_code == 200, synced.text
        assert getattr(operator.dataset("tls"), "n_examples", None) == 2
    finally:
        tls.run("rm", "-s", "-f", "-v", "labels-tls", "features-tls", "tls-certs", check=False)
