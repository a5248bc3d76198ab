"""The compose profile "replicas" (issue 24): two labels-party containers on ONE PostgreSQL
container, behind HAProxy, all from local images (services/build_base_image.sh --infra).

Through the balancer's one published loopback port: twenty concurrent releases of 0.1 race for a
budget of 1 and exactly ten are charged, spread over both replicas; labels posted while the
releases run are either acknowledged and stored or refused as a whole (409); a release's message
and receipt are the same whichever replica serves them; the shared ledger verifies inside a
replica container. The project always comes down with its volumes. Like test_compose.py, these
tests skip only when the build script reports that Docker cannot run on this machine.
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from typing import Any

import httpx
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

PROFILE = "replicas"
REPLICAS = ("labels-a", "labels-b")
SERVICES = ("db", *REPLICAS, "balancer")
BALANCER_PORT = 8003  # inside its container
REPLICA_HEADER = "x-labeldp-replica"  # set by HAProxy (services/infra/haproxy.cfg)
DATABASE_URL = "postgresql://labeldp@db:5432/labeldp"  # the password: PGPASSWORD, env file
ROLES = ("advertiser", "publisher", "operator")

DATASET = "shared"
RELEASES = 20  # of epsilon 0.1 against a budget of 1: ten fit
FIRST = [f"e{i:03d}" for i in range(200)]  # labelled before the releases
LATE = [f"late{i:03d}" for i in range(200)]  # registered before, labelled while they run
LATE_BATCH = 10
INGESTERS = 4  # threads posting the late labels while the releases run


def _first_value(k: int) -> float:
    return float(k % 90)


def _late_value(k: int) -> float:
    return float(k % 40) + 0.5


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    """The profile's db, labels-a, labels-b and balancer on a free loopback port, under a unique
    project name, with fresh tokens and database password; always taken down with its volumes."""
    _prepare_images("--infra")
    tokens = {role: secrets.token_urlsafe(24) for role in ROLES}
    env_file = tmp_path_factory.mktemp("replicas") / "compose.env"
    env_file.write_text(
        "LABELDP_TOKENS=" + ",".join(f"{role}={tokens[role]}" for role in ROLES)
        + f"\nPGPASSWORD={secrets.token_urlsafe(24)}\n",
        encoding="utf-8",
    )  # fmt: skip
    env_file.chmod(0o600)
    port = _free_loopback_port()
    env = compose_env(env_file, LABELDP_REPLICAS_PORT=str(port))
    dep = Deployment(
        project=f"labeldpreplicas{os.getpid()}{secrets.token_hex(3)}",
        compose=[*_compose_command(), "--profile", PROFILE],
        env=env,
        labels_url=f"http://127.0.0.1:{port}",  # the balancer
        features_url="",  # no features party in this profile
        tokens=tokens,
    )
    # The balancer pulls in its dependencies: db, then labels-a, then labels-b (healthy).
    with running(dep, "balancer", healthy=SERVICES):
        yield dep


def _auth(dep: Deployment, role: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {dep.tokens[role]}"}


def _project_services(dep: Deployment) -> list[str]:
    """The compose services of the project's containers, as Docker labels them."""
    out = subprocess.run(
        ["docker", "ps", "-a", "--filter", f"label=com.docker.compose.project={dep.project}",
         "--format", '{{.Label "com.docker.compose.service"}}'],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    return sorted(out.split())


def test_only_the_balancer_is_published_and_the_replicas_share_one_key(
    replicas: Deployment,
) -> None:
    assert _project_services(replicas) == sorted(SERVICES)  # the default services stay down
    users = {"db": "postgres", "labels-a": "labeldp", "labels-b": "labeldp", "balancer": "haproxy"}
    for service in SERVICES:
        info = replicas.inspect(service)
        assert info["Config"]["User"] == users[service], (service, info["Config"]["User"])
        assert info["State"]["Health"]["Status"] == "healthy"
        assert list(info["NetworkSettings"]["Networks"]) == [f"{replicas.project}_labeldp"]
        bindings = {p: h for p, h in info["NetworkSettings"]["Ports"].items() if h}
        if service == "balancer":
            assert list(bindings) == [f"{BALANCER_PORT}/tcp"], bindings
            assert [host["HostIp"] for host in bindings[f"{BALANCER_PORT}/tcp"]] == ["127.0.0.1"]
        else:
            assert bindings == {}, (service, bindings)
    # One signing key file for both replicas: the same named volume at /data.
    keys = {
        service: {m["Destination"]: m for m in replicas.inspect(service)["Mounts"]}["/data"]
        for service in REPLICAS
    }
    assert {k["Type"] for k in keys.values()} == {"volume"}
    assert {k["Name"] for k in keys.values()} == {f"{replicas.project}_replicas-key"}
    database = {m["Destination"]: m for m in replicas.inspect("db")["Mounts"]}
    assert database["/var/lib/postgresql/data"]["Name"] == f"{replicas.project}_replicas-db"
    # The labels image talks to PostgreSQL (psycopg) but carries neither server nor balancer.
    replicas.run(
        "exec", "-T", "labels-a", "sh", "-c",
        "python -c 'import psycopg' && test ! -e /usr/lib/postgresql && ! command -v haproxy",
    )  # fmt: skip
    # Every API call needs a token, through the balancer too.
    assert httpx.get(f"{replicas.labels_url}/v1/ledger", timeout=30).status_code == 401


def _setup_dataset(http: httpx.Client, dep: Deployment) -> None:
    body = {"name": DATASET, "label_min": 0, "label_max": 100, "default_label": 0,
            "epsilon_budget": "1"}  # fmt: skip
    created = http.post("/v1/datasets", json=body, headers=_auth(dep, "operator"))
    assert created.status_code == 201, created.text
    registered = http.post(
        f"/v1/datasets/{DATASET}/examples",
        json={"example_ids": FIRST + LATE},
        headers=_auth(dep, "publisher"),
    )
    assert registered.status_code == 200, registered.text
    assert registered.json()["n_examples"] == len(FIRST) + len(LATE)
    labels = [{"example_id": i, "value": _first_value(k)} for k, i in enumerate(FIRST)]
    posted = http.post(
        f"/v1/datasets/{DATASET}/labels", json={"labels": labels}, headers=_auth(dep, "advertiser")
    )
    assert posted.status_code == 200, posted.text


def _race(
    http: httpx.Client, dep: Deployment
) -> tuple[list[httpx.Response], list[tuple[list[str], httpx.Response]]]:
    """Twenty releases at once while INGESTERS threads post the late labels in small batches,
    all let go together (a release whose snapshot an acknowledged batch made stale starts again;
    a batch that comes after the first release is refused whole)."""
    go = threading.Barrier(INGESTERS + 1, timeout=300)

    def ingest(worker: int) -> list[tuple[list[str], httpx.Response]]:
        go.wait()
        outcomes = []
        for start in range(worker * LATE_BATCH, len(LATE), INGESTERS * LATE_BATCH):
            batch = LATE[start : start + LATE_BATCH]
            body = {"labels": [{"example_id": i, "value": _late_value(start + k)}
                               for k, i in enumerate(batch)]}  # fmt: skip
            outcomes.append((batch, http.post(f"/v1/datasets/{DATASET}/labels", json=body,
                                              headers=_auth(dep, "advertiser"))))  # fmt: skip
        return outcomes

    def release(_: int) -> httpx.Response:
        return http.post(
            f"/v1/datasets/{DATASET}/releases",
            json={"epsilon": "0.1", "mechanism": "rr_on_bins"},
            headers=_auth(dep, "advertiser"),
        )

    with ThreadPoolExecutor(max_workers=INGESTERS + 8) as pool:
        ingesting = [pool.submit(ingest, worker) for worker in range(INGESTERS)]
        go.wait()
        answers = list(pool.map(release, range(RELEASES)))
        outcomes = [outcome for future in ingesting for outcome in future.result(timeout=600)]
    return answers, outcomes


def _stored_labels(dep: Deployment) -> dict[str, float]:
    """The dataset's labels read straight from PostgreSQL in the db container (as its superuser,
    over the local socket: not through the service)."""
    sql = ("SELECT e.example_id, e.value FROM entries e JOIN datasets d ON d.id = e.dataset_id "
           f"WHERE d.name = '{DATASET}' AND e.value IS NOT NULL")  # fmt: skip
    out = dep.run("exec", "-T", "db", "psql", "--no-psqlrc", "-At", "-F", ",", "-d", "labeldp",
                  "-c", sql)  # fmt: skip
    rows = re.findall(r"^([\w.-]+),([-+.\deE]+)$", out, flags=re.MULTILINE)
    return {example_id: float(value) for example_id, value in rows}


def _check_ingest(
    http: httpx.Client, dep: Deployment, outcomes: list[tuple[list[str], httpx.Response]]
) -> None:
    """Every acknowledged batch is stored with its values; every refused one (409: the dataset
    was released meanwhile) left nothing behind."""
    expected = {i: _first_value(k) for k, i in enumerate(FIRST)}
    late = {i: _late_value(k) for k, i in enumerate(LATE)}
    assert sorted(i for batch, _ in outcomes for i in batch) == sorted(LATE)
    for batch, answer in outcomes:
        assert answer.status_code in (200, 409), answer.text
        if answer.status_code == 200:
            expected.update((i, late[i]) for i in batch)
        else:
            assert "released" in answer.json()["detail"], answer.text
    acked = sum(answer.status_code == 200 for _, answer in outcomes)
    print(f"late label batches: {acked} acknowledged, {len(outcomes) - acked} refused")
    assert _stored_labels(dep) == expected
    view = http.get(f"/v1/datasets/{DATASET}", headers=_auth(dep, "advertiser")).json()
    assert view["n_labels"] == len(expected)


def _served(dep: Deployment, service: str) -> Counter[str]:
    """Status codes of the release requests in ``service``'s own access log."""
    logs = dep.run("logs", "--no-color", service, timeout=120)
    pattern = rf'"POST /v1/datasets/{DATASET}/releases HTTP/1\.[01]" (\d{{3}})'
    return Counter(re.findall(pattern, logs))


def _check_spread(dep: Deployment, answers: list[httpx.Response]) -> None:
    """Both replicas took releases: the balancer says which served each one, and each replica's
    access log shows exactly those requests."""
    by_header = Counter(a.headers.get(REPLICA_HEADER) for a in answers)
    assert set(by_header) == set(REPLICAS), by_header
    deadline = time.monotonic() + 30  # the logs may trail the responses by a moment
    while True:
        logged = {service: _served(dep, service) for service in REPLICAS}
        if sum(c.total() for c in logged.values()) == RELEASES or time.monotonic() > deadline:
            break
        time.sleep(1)
    print(f"releases served: {logged}")
    assert {s: logged[s].total() for s in REPLICAS} == {s: by_header[s] for s in REPLICAS}
    assert sum((logged[s] for s in REPLICAS), Counter()) == Counter({"201": 10, "409": 10})


def _check_same_from_both(http: httpx.Client, dep: Deployment, release_id: str, keys: Any) -> None:
    """Fetches through the balancer until both replicas have served the release (round robin
    alternates, but a replica its health check marked down on a loaded machine gets nothing for
    a few seconds, so two fetches in a row are not enough): the same bytes from each; the
    receipt verifies with the one shared key."""
    fetched = {}
    for what in ("message", "receipt"):
        by_replica: dict[str, httpx.Response] = {}
        deadline = time.monotonic() + 60
        while set(by_replica) != set(REPLICAS):
            answer = http.get(f"/v1/releases/{release_id}/{what}", headers=_auth(dep, "publisher"))
            assert answer.status_code == 200, answer.text
            by_replica.setdefault(answer.headers[REPLICA_HEADER], answer)
            assert time.monotonic() < deadline, f"{what} served only by {sorted(by_replica)}"
            if set(by_replica) != set(REPLICAS):
                time.sleep(0.5)
        first, second = (by_replica[r] for r in REPLICAS)
        assert first.content == second.content, f"{what} of {release_id} differs"
        fetched[what] = first
    rc.verify(fetched["receipt"].json(), keys)


def test_twenty_releases_over_both_replicas_spend_exactly_the_budget(replicas: Deployment) -> None:
    with httpx.Client(base_url=replicas.labels_url, timeout=300) as http:
        _setup_dataset(http, replicas)
        answers, outcomes = _race(http, replicas)

        codes = sorted(a.status_code for a in answers)
        assert codes == [201] * 10 + [409] * 10, [a.text for a in answers if a.status_code >= 500]
        view = http.get(f"/v1/datasets/{DATASET}", headers=_auth(replicas, "operator")).json()
        assert (view["epsilon_spent"], view["epsilon_left"]) == ("1", "0")
        made = [a.json() for a in answers if a.status_code == 201]
        assert {r["n"] for r in made} == {len(FIRST) + len(LATE)}  # frozen at the first release
        _check_spread(replicas, answers)
        _check_ingest(http, replicas, outcomes)

        listed = http.get("/v1/keys", headers=_auth(replicas, "publisher")).json()["keys"]
        keys = {k["key_id"]: rc.from_b64(k["public_key"]) for k in listed}
        assert len(keys) == 1, keys  # one signing key, shared through the volume
        for release in made[:3]:
            _check_same_from_both(http, replicas, release["id"], keys)

        ledger = http.get(
            "/v1/ledger", headers=_auth(replicas, "operator"), params={"limit": 1000}
        ).json()["entries"]
        assert sum(Decimal(e["epsilon"]) for e in ledger if e["release_id"]) == Decimal("1")

    # The hash chain and the totals verify inside a replica container (exit code 0), on the
    # shared database; libpq takes the password from the container's PGPASSWORD.
    out = replicas.run(
        "exec", "-T", "labels-b", "labeldp", "ledger", "verify", "--database-url", DATABASE_URL
    )
    assert "ledger OK" in out, out


def test_the_replicas_trust_forwarded_addresses_from_the_balancer_only(
    replicas: Deployment,
) -> None:
    """Failed-authentication buckets are per client address: HAProxy appends the client's
    address to X-Forwarded-For (option forwardfor) and each replica believes it from the
    balancer's address alone (LABELDP_TRUSTED_PROXIES=balancer, resolved by Docker's DNS)."""
    network = f"{replicas.project}_labeldp"

    def address(service: str) -> str:
        return str(replicas.inspect(service)["NetworkSettings"]["Networks"][network]["IPAddress"])

    for service in REPLICAS:
        env = replicas.inspect(service)["Config"]["Env"]
        assert "LABELDP_TRUSTED_PROXIES=balancer" in env, env
    check = (
        "from shared.service.http.proxies import TrustedProxies as T; "
        "p = T(['balancer']); p.refresh(); "
        f"print(p.client('{address('balancer')}', ['203.0.113.1']), "
        f"p.client('{address('labels-b')}', ['203.0.113.1']))"
    )
    out = replicas.run("exec", "-T", "labels-a", "python", "-c", check)
    assert out.split()[-2:] == ["203.0.113.1", address("labels-b")], out
