"""Real server processes on a real database: concurrency, kill -9 crashes, start-up refusal.

Marked ``integration``: each test starts ``python -m labels_party serve labels`` on a free
loopback port and always stops it. The concurrency and crash tests run twice (``store``): on a
SQLite file and on a REAL PostgreSQL server (tests/postgres.py).
"""

from __future__ import annotations

import json
import threading
import time
from decimal import Decimal

import httpx
import pytest

from shared.message import BINARY_MEDIA_TYPE, decode_binary
from tests.labels_party.conftest import (
    ADV,
    OPS,
    PUB,
    TOKENS_ENV,
    cli,
    csv_body,
    parse_params,
)

pytestmark = pytest.mark.integration


def _setup(http: httpx.Client, *, budget: float, n_examples: int) -> None:
    body = {"name": "ds", "label_min": 0, "label_max": 100, "default_label": 0,
            "epsilon_budget": budget}  # fmt: skip
    assert http.post("/v1/datasets", json=body, headers=OPS).status_code == 201
    ids = "\n".join(f"e{i:07d}" for i in range(n_examples))
    response = http.post(
        "/v1/datasets/ds/examples", content=ids, headers={**PUB, "content-type": "text/plain"}
    )
    assert response.status_code == 200, response.text
    pairs = [(f"e{i:07d}", float(i % 97)) for i in range(0, n_examples, 2)]
    response = http.post(
        "/v1/datasets/ds/labels",
        content=csv_body(pairs),
        headers={**ADV, "content-type": "text/csv"},
    )
    assert response.status_code == 200, response.text


def test_fifty_concurrent_releases_against_a_budget_for_three(server_factory, store):
    server = server_factory(store=store).start()
    with server.client() as http:
        _setup(http, budget=3.0, n_examples=2000)
    barrier = threading.Barrier(50)
    results: list[httpx.Response] = []
    lock = threading.Lock()

    def attempt() -> None:
        with server.client() as http:
            barrier.wait()
            response = http.post(
                "/v1/datasets/ds/releases",
                json={"mechanism": "rpwithprior", "epsilon": 1.0},
                headers=ADV,
            )
        with lock:
            results.append(response)

    threads = [threading.Thread(target=attempt) for _ in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    codes = sorted(r.status_code for r in results)
    assert codes == [201] * 3 + [409] * 47, codes
    for refused in (r for r in results if r.status_code == 409):
        body = refused.json()
        assert (body["requested"], body["budget"]) == ("1", "3")
        assert Decimal(body["spent"]) + Decimal(body["left"]) == 3
    with server.client() as http:
        view = http.get("/v1/datasets/ds", headers=OPS).json()
    assert view["epsilon_spent"] == "3" and len(view["releases"]) == 3
    spends = [Decimal(e["epsilon_exact"]) for e in store.ledger_rows() if e["kind"] != "dataset"]
    assert len(spends) == 6 and sum(spends) == 3  # exactly the budget, not a hair more
    server.stop()
    verify = cli("ledger", "verify", *store.cli_args)
    assert verify.returncode == 0, verify.stdout + verify.stderr


def _post_in_background(server, url: str, **kwargs) -> tuple[threading.Thread, list]:
    outcome: list = []

    def run() -> None:
        try:
            with server.client(timeout=60) as http:
                outcome.append(http.post(url, **kwargs))
        except httpx.HTTPError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def test_kill_during_bulk_ingest_loses_no_acknowledged_batch(server_factory, store):
    server = server_factory(store=store).start()
    acked = 0
    with server.client() as http:
        body = {"name": "ds", "label_min": 0, "label_max": 100, "default_label": 0,
                "epsilon_budget": 1}  # fmt: skip
        assert http.post("/v1/datasets", json=body, headers=OPS).status_code == 201
        for batch in range(3):
            pairs = [(f"b{batch}_{i}", float(i % 100)) for i in range(20000)]
            response = http.post(
                "/v1/datasets/ds/labels",
                content=csv_body(pairs),
                headers={**ADV, "content-type": "text/csv"},
            )
            assert response.status_code == 200
            acked += 20000
    server.kill()

    # 1) killed while the batch's transaction is open (rows written, COMMIT not yet done)
    server.start(LABELDP_DEBUG_COMMIT_DELAY="30")
    big = [(f"big_{i}", 1.0) for i in range(100000)]
    thread, outcome = _post_in_background(
        server, "/v1/datasets/ds/labels", content=csv_body(big),
        headers={**ADV, "content-type": "text/csv"},
    )  # fmt: skip
    store.wait_for_write_lock()
    time.sleep(1.0)  # the insert runs, then the server sleeps before COMMIT
    server.kill()
    thread.join(timeout=60)
    assert outcome and not isinstance(outcome[0], httpx.Response)  # never acknowledged

    # 2) killed at arbitrary moments of a streaming upload / insert, no injected delay
    for delay in (0.3, 0.8):
        server.start()
        rows = [(f"r{delay}_{i}", 2.0) for i in range(100000)]
        thread, outcome = _post_in_background(
            server, "/v1/datasets/ds/labels", content=csv_body(rows),
            headers={**ADV, "content-type": "text/csv"},
        )  # fmt: skip
        time.sleep(delay)
        server.kill()
        thread.join(timeout=60)
        if outcome and isinstance(outcome[0], httpx.Response) and outcome[0].status_code == 200:
            acked += 100000

    server.start()
    with server.client() as http:
        view = http.get("/v1/datasets/ds", headers=ADV).json()
    stored = store.count("SELECT count(*) FROM entries WHERE value IS NOT NULL")
    # every acknowledged row is there; any unacknowledged batch is all there or not at all
    assert view["n_labels"] == stored
    assert stored >= acked
    assert (stored - acked) % 100000 == 0
    for batch in range(3):
        assert (
            store.count("SELECT count(*) FROM entries WHERE example_id LIKE ?", f"b{batch}_%")
            == 20000
        )
    assert store.count("SELECT count(*) FROM entries WHERE example_id LIKE 'big_%'") == 0
    for delay in (0.3, 0.8):
        present = store.count("SELECT count(*) FROM entries WHERE example_id LIKE ?", f"r{delay}_%")
        assert present in (0, 100000)
    server.stop()
    assert cli("ledger", "verify", *store.cli_args).returncode == 0


def test_kill_during_release_spends_iff_message_stored(server_factory, store):
    server = server_factory(store=store).start()
    with server.client() as http:
        _setup(http, budget=5.0, n_examples=50000)
    server.kill()

    # killed inside the release transaction (ledger rows and chunks written, not committed)
    server.start(LABELDP_DEBUG_COMMIT_DELAY="30")
    thread, outcome = _post_in_background(
        server, "/v1/datasets/ds/releases", json={"mechanism": "rpwithprior", "epsilon": 1.0},
        headers=ADV,
    )  # fmt: skip
    store.wait_for_write_lock()
    time.sleep(0.5)
    server.kill()
    thread.join(timeout=60)
    assert outcome and not isinstance(outcome[0], httpx.Response)
    assert store.count("SELECT count(*) FROM releases") == 0
    assert store.count("SELECT count(*) FROM ledger WHERE kind != 'dataset'") == 0
    assert store.count("SELECT count(*) FROM message_chunks") == 0

    # killed at arbitrary moments with no injected delay
    acked: list[str] = []
    for delay in (0.05, 0.3, 0.6):
        server.start()
        thread, outcome = _post_in_background(
            server, "/v1/datasets/ds/releases", json={"mechanism": "rpwithprior", "epsilon": 1.0},
            headers=ADV,
        )  # fmt: skip
        time.sleep(delay)
        server.kill()
        thread.join(timeout=60)
        if outcome and isinstance(outcome[0], httpx.Response) and outcome[0].status_code == 201:
            acked.append(outcome[0].json()["id"])

    server.start()
    with server.client() as http:
        view = http.get("/v1/datasets/ds", headers=OPS).json()
        stored_ids = set(view["releases"])
        assert set(acked) <= stored_ids
        entries = store.ledger_rows()
        spend_ids = {e["release_id"] for e in entries if e["kind"] != "dataset"}
        assert spend_ids == stored_ids  # a ledger entry iff a stored release
        assert Decimal(view["epsilon_spent"]) == len(stored_ids)
        assert view["state"] == ("released" if stored_ids else "open")
        for release_id in stored_ids:  # and every stored release's message is complete
            message = http.get(
                f"/v1/releases/{release_id}/message", headers={**PUB, "accept": BINARY_MEDIA_TYPE}
            )
            header, ids, _labels = decode_binary(message.content)
            assert header.n == len(ids) == 50000
        # the service still works after the crashes
        final = http.post(
            "/v1/datasets/ds/releases", json={"mechanism": "auto", "epsilon": 0.5}, headers=ADV
        )
        assert final.status_code == 201, final.text
    server.kill()  # right after an acknowledged release: it must survive
    assert final.json()["id"] in {e["release_id"] for e in store.ledger_rows()}
    assert all(parse_params(e) is not None for e in store.ledger_rows())
    verify = cli("ledger", "verify", *store.cli_args)
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_server_refuses_to_start_without_tokens(tmp_path):
    env = {"LABELDP_TOKENS": ""}
    result = cli("serve", "labels", "--db", str(tmp_path / "x.db"), "--port", "1", env=env)
    assert result.returncode == 2 and "no tokens" in result.stderr
    partial = {"LABELDP_TOKENS": "advertiser=a,publisher=b"}
    result = cli("serve", "labels", "--db", str(tmp_path / "x.db"), "--port", "1", env=partial)
    assert result.returncode == 2 and "operator" in result.stderr


def test_tokens_file_is_accepted(server_factory, tmp_path):
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps(dict(part.split("=") for part in TOKENS_ENV.split(","))))
    server = server_factory(tmp_path / "tf.db", "--tokens-file", str(tokens), LABELDP_TOKENS="")
    server.start()
    with server.client() as http:
        assert http.get("/v1/ledger", headers=OPS).status_code == 200
        assert http.get("/v1/ledger", headers=PUB).status_code == 403
