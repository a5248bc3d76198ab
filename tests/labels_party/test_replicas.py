"""Two labels-party replicas on ONE PostgreSQL database behind a round-robin balancer.

Issue 24: the budget must hold across processes, not only across threads of one. Two REAL
``labeldp serve labels`` processes share a REAL PostgreSQL database (tests/postgres.py) and the
signing key file; a small HTTP balancer in the test alternates between them. Twenty releases of
0.1 race for a budget of 1 through the balancer: exactly ten are charged, the ledger verifies,
every release's message and receipt are served identically by both replicas.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from shared.service import receipt as rc
from tests.labels_party.conftest import ADV, OPS, PUB, TOKENS_ENV, Server

pytestmark = pytest.mark.integration


class Balancer:
    """Round-robin HTTP forwarding to ``upstreams``; counts what each one served."""

    def __init__(self, upstreams: list[str]) -> None:
        balancer = self
        self.upstreams = upstreams
        self.served = dict.fromkeys(upstreams, 0)
        self._next = itertools.cycle(upstreams)
        self._lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                return None

            def _forward(self) -> None:
                with balancer._lock:
                    upstream = next(balancer._next)
                    balancer.served[upstream] += 1
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else None
                headers = {
                    k: v
                    for k, v in self.headers.items()
                    if k.lower() not in ("host", "content-length", "connection")
                }
                answer = httpx.request(
                    self.command, upstream + self.path, headers=headers, content=body, timeout=120
                )
                self.send_response(answer.status_code)
                for key in ("content-type", "x-labeldp-body-sha256"):
                    if key in answer.headers:
                        self.send_header(key, answer.headers[key])
                self.send_header("content-length", str(len(answer.content)))
                self.end_headers()
                self.wfile.write(answer.content)

            do_GET = _forward
            do_POST = _forward

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Balancer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_two_replicas_on_one_database_hold_one_budget(postgres_url: str, tmp_path: Path) -> None:
    replicas = [
        Server(db=tmp_path / "unused.db", env={}, database_url=postgres_url) for _ in range(2)
    ]
    try:
        for replica in replicas:  # one after the other: the first creates the signing key
            replica.start()
        with (
            Balancer([r.url for r in replicas]) as balancer,
            httpx.Client(base_url=balancer.url, timeout=120) as http,
        ):
            body = {"name": "shared", "label_min": 0, "label_max": 100, "default_label": 0,
                    "epsilon_budget": "1"}  # fmt: skip
            assert http.post("/v1/datasets", json=body, headers=OPS).status_code == 201
            ids = [f"e{i:03d}" for i in range(200)]
            registered = http.post(
                "/v1/datasets/shared/examples", json={"example_ids": ids}, headers=PUB
            )
            assert registered.status_code == 200, registered.text
            labels = {"labels": [{"example_id": i, "value": float(k % 90)} for k, i in
                                 enumerate(ids)]}  # fmt: skip
            assert http.post("/v1/datasets/shared/labels", json=labels, headers=ADV).is_success

            def release(_: int) -> httpx.Response:
                return http.post(
                    "/v1/datasets/shared/releases",
                    json={"epsilon": "0.1", "mechanism": "rr_on_bins"},
                    headers=ADV,
                )

            with ThreadPoolExecutor(max_workers=8) as pool:
                answers = list(pool.map(release, range(20)))
            codes = sorted(a.status_code for a in answers)
            assert codes == [201] * 10 + [409] * 10, [
                a.text for a in answers if a.status_code >= 500
            ]
            view = http.get("/v1/datasets/shared", headers=OPS).json()
            assert (view["epsilon_spent"], view["epsilon_left"]) == ("1", "0")
            assert all(count > 0 for count in balancer.served.values()), balancer.served
            # Any replica serves any release identically: message and signed receipt.
            made = [a.json()["id"] for a in answers if a.status_code == 201]
            keys = {k["key_id"]: rc.from_b64(k["public_key"])
                    for k in http.get("/v1/keys", headers=PUB).json()["keys"]}  # fmt: skip
            assert len(keys) == 1  # one signing key, shared
            for release_id in made[:3]:
                messages = {r.client().get(f"/v1/releases/{release_id}/message",
                                           headers=PUB).content for r in replicas}  # fmt: skip
                assert len(messages) == 1
                receipts = {json.dumps(r.client().get(f"/v1/releases/{release_id}/receipt",
                                                      headers=PUB).json(), sort_keys=True)
                            for r in replicas}  # fmt: skip
                assert len(receipts) == 1
                rc.verify(json.loads(receipts.pop()), keys)
        done = subprocess.run(
            [sys.executable, "-m", "labels_party", "ledger", "verify", "--database-url",
             postgres_url],
            capture_output=True, text=True, check=False, timeout=120,
            env={"LABELDP_TOKENS": TOKENS_ENV, "PATH": "/usr/bin:/bin"},
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        assert Decimal("1") == sum(
            Decimal(e["epsilon"]) for e in _ledger(replicas[0]) if e["release_id"]
        )
    finally:
        for replica in replicas:
            replica.stop()


def _ledger(replica: Server) -> list[dict[str, Any]]:
    with replica.client() as http:
        return http.get("/v1/ledger", headers=OPS, params={"limit": 1000}).json()["entries"]
