"""Fixtures: a REAL labels-party process, the features party in-process, a tampering proxy."""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from starlette.exceptions import StarletteDeprecationWarning

from features_party.config import Settings
from features_party.main import create_app
from tests.labels_process import FAST_RETRY, LabelsParty, running_labels_party

with warnings.catch_warnings():  # starlette prefers httpx2 (not a dependency) at import time
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from fastapi.testclient import TestClient


@pytest.fixture(scope="module")
def labels_party(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabelsParty]:
    """A real ``labeldp serve labels`` process for the whole module."""
    with running_labels_party(tmp_path_factory.mktemp("labels")) as party:
        yield party


def auth(tokens: dict[str, str]) -> dict[str, str]:
    return {"Authorization": f"Bearer {tokens['features']}"}


@pytest.fixture
def features_factory(
    tmp_path: Path, labels_party: LabelsParty
) -> Iterator[Callable[..., TestClient]]:
    """Build features-party apps (TestClient, lifespan run) on the test's database."""
    stack = contextlib.ExitStack()

    def build(**overrides: Any) -> TestClient:
        fields: dict[str, Any] = {
            "db_path": tmp_path / "features.db",
            "labels_url": labels_party.url,
            "labels_token": labels_party.tokens["publisher"],
            "features_token": labels_party.tokens["features"],
            "pull_retry": FAST_RETRY,
        }
        fields.update(overrides)
        client = TestClient(create_app(Settings(**fields)), raise_server_exceptions=False)
        client.headers.update(auth(labels_party.tokens))
        return stack.enter_context(client)

    with stack:
        yield build


@pytest.fixture
def features(features_factory: Callable[..., TestClient]) -> TestClient:
    return features_factory()


def wait_job(client: TestClient, model_id: str, *, timeout: float = 120.0) -> dict[str, Any]:
    """Poll GET /v1/models/{id} until the job finished; return its last state."""
    import time

    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        body = client.get(f"/v1/models/{model_id}").json()
        seen.append((body["status"], body["progress"]))
        if body["status"] in ("succeeded", "failed"):
            body["_seen"] = seen
            return body
        time.sleep(0.05)
    raise AssertionError(f"job {model_id} still running after {timeout} s: {seen[-3:]}")


def synthetic_rows(n: int, seed: int = 0) -> tuple[list[str], dict[str, np.ndarray], np.ndarray]:
    """Small data with signal: y = 40 + 25 x1 + 30 [colour == red] + noise, in [0, 100]."""
    rng = np.random.default_rng(seed)
    x1 = rng.normal(size=n)
    colour = rng.choice(np.array(["red", "green", "blue"]), size=n)
    y = np.clip(40 + 25 * x1 + 30 * (colour == "red") + rng.normal(0, 5, n), 0, 100)
    ids = [f"ex-{i:05d}" for i in range(n)]
    return ids, {"x1": np.round(x1, 6), "colour": colour}, y


def csv_body(ids: list[str], columns: dict[str, np.ndarray]) -> str:
    from shared.service.client import columns_to_csv

    return columns_to_csv(ids, columns)


class TamperingProxy:
    """Forwards to an upstream URL; flips one byte of every release message it relays."""

    def __init__(self, upstream: str) -> None:
        proxy = self
        self.upstream = upstream
        self.tampered = 0

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # keep test output clean
                return None

            def _forward(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else None
                headers = {
                    key: value
                    for key, value in self.headers.items()
                    if key.lower() not in ("host", "content-length", "connection")
                }
                answer = httpx.request(
                    self.command, proxy.upstream + self.path, headers=headers, content=body
                )
                content = answer.content
                if self.path.endswith("/message") and answer.status_code == 200:
                    mutable = bytearray(content)
                    mutable[-5] ^= 0x01  # inside the last noisy label (binary) / last digits
                    content = bytes(mutable)
                    proxy.tampered += 1
                self.send_response(answer.status_code)
                self.send_header("content-type", answer.headers.get("content-type", ""))
                self.send_header("content-length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)

            do_GET = _forward
            do_POST = _forward

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> TamperingProxy:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
