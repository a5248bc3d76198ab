"""``/metrics`` of the labels party: no count of labels, a registry per app, parseable text."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from labels_party.main import create_app
from tests.labels_party.conftest import (
    OPS,
    TestClient,
    create_dataset,
    make_settings,
    put_labels,
    register,
    release,
)

KEPT = {
    "labeldp_http_requests",
    "labeldp_examples_registered",
    "labeldp_releases",
    "labeldp_model_releases",
    "labeldp_idempotent_replays",
    "labeldp_epsilon_spent",
    "labeldp_epsilon_budget",
}


@pytest.fixture
def two_apps(tmp_path: Path) -> Iterator[tuple[Any, Any]]:
    """Two labels-party apps in this process, each on its own database."""
    with contextlib.ExitStack() as stack:
        clients = tuple(
            stack.enter_context(
                TestClient(
                    create_app(
                        make_settings(tmp_path / f"{name}.db"),
                        rng_factory=lambda: np.random.default_rng(7),
                    ),
                    raise_server_exceptions=False,
                )
            )
            for name in ("first", "second")
        )
        yield clients


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the exposition, keyed by (name, sorted labels); parsing must succeed."""
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def scenario(client: Any, n_labels: int) -> str:
    """The same requests on a fresh app; only the number of label rows differs."""
    create_dataset(client)
    ids = [f"e{i}" for i in range(64)]
    register(client, "ds", ids)
    answer = put_labels(client, "ds", [(ids[i], 5.0 + i) for i in range(n_labels)])
    assert answer.status_code == 200, answer.text
    assert release(client, "ds", epsilon=1.0).status_code == 201
    response = client.get("/metrics", headers=OPS)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return response.text


def test_metrics_carry_no_count_of_labels(two_apps: tuple[Any, Any]) -> None:
    """Two apps in one process, 1 vs 50 label rows: every metric has the same value.

    Also shows the apps share no registry (each counts only its own requests).
    """
    few, many = scenario(two_apps[0], 1), scenario(two_apps[1], 50)
    assert "labels_ingested" not in few + many
    assert samples(few) == samples(many)
    families = {family.name for family in text_string_to_metric_families(few)}
    assert families == KEPT


def test_kept_metrics_parse_with_their_values(client: Any) -> None:
    create_dataset(client, epsilon_budget=3.0)
    register(client, "ds", ["a", "b"])
    assert release(client, "ds", epsilon=1.0).status_code == 201
    values = samples(client.get("/metrics", headers=OPS).text)
    assert values[("labeldp_epsilon_spent", (("dataset", "ds"),))] == 1.0
    assert values[("labeldp_epsilon_budget", (("dataset", "ds"),))] == 3.0
    assert values[("labeldp_releases_total", (("mechanism", "rpwithprior"),))] == 1.0
    assert values[("labeldp_examples_registered_total", ())] == 2.0
    route = (("method", "POST"), ("route", "/v1/datasets/{name}/releases"), ("status", "201"))
    assert values[("labeldp_http_requests_total", route)] == 1.0


def test_a_second_app_starts_from_zero(two_apps: tuple[Any, Any]) -> None:
    first, second = two_apps
    create_dataset(first)
    register(first, "ds", ["a", "b", "c"])
    values = samples(second.get("/metrics", headers=OPS).text)
    assert values[("labeldp_examples_registered_total", ())] == 0.0
    assert (
        samples(first.get("/metrics", headers=OPS).text)[("labeldp_examples_registered_total", ())]
        == 3.0
    )
