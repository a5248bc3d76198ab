"""Fixtures for the console's browser tests: a real labels-party server and headless Chromium."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.labels_party.conftest import ADV, OPS, PUB, Server
from tests.labels_party.console import browser


@pytest.fixture(scope="session")
def chromium(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One headless Chromium for the session (each test opens its own server: its own origin)."""
    reason = browser.missing()
    if reason:
        pytest.skip(f"console browser tests need Chromium: {reason}")
    downloads = tmp_path_factory.mktemp("downloads")
    driver = browser.start(tmp_path_factory.mktemp("profile"), downloads=downloads)
    driver.downloads = downloads
    yield driver
    driver.quit()


def seed(client: httpx.Client, *, datasets: dict[str, float], examples: int = 120) -> None:
    """Create ``datasets`` (name -> budget) with registered, labelled examples."""
    for name, budget in datasets.items():
        body = {"name": name, "label_min": 0, "label_max": 100, "default_label": 0,
                "epsilon_budget": budget}  # fmt: skip
        assert client.post("/v1/datasets", json=body, headers=OPS).status_code == 201
        ids = [f"{name}-{i}" for i in range(examples)]
        response = client.post(
            f"/v1/datasets/{name}/examples", json={"example_ids": ids}, headers=PUB
        )
        assert response.status_code == 200, response.text
        labels = [{"example_id": i, "value": float(k % 37)} for k, i in enumerate(ids)]
        response = client.post(f"/v1/datasets/{name}/labels", json={"labels": labels}, headers=ADV)
        assert response.status_code == 200, response.text


def make_release(client: httpx.Client, name: str, epsilon: float, mechanism: str = "rpwithprior"):
    response = client.post(
        f"/v1/datasets/{name}/releases",
        json={"mechanism": mechanism, "epsilon": epsilon},
        headers=ADV,
    )
    assert response.status_code == 201, response.text
    return response.json()


@pytest.fixture
def console_server(server_factory: Callable[..., Server], tmp_path: Path) -> Server:
    return server_factory(tmp_path / "console.db").start()


@pytest.fixture
def client(console_server: Server) -> Iterator[httpx.Client]:
    """An API client of the console's server (the tests act through the API as well)."""
    with console_server.client() as http:
        yield http


def wait_for(predicate: Callable[[], Any], *, timeout: float = 10.0, what: str = "") -> Any:
    """Poll ``predicate`` until it returns something truthy (the page updates asynchronously)."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:  # noqa: BLE001 - stale elements while the page re-renders
            last_error = exc
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what or predicate}: {last_error!r}")
