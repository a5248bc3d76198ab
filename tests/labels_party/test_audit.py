"""Refused and failed releases leave a trace for the operator (GET /v1/audit), through the app.

Also: what the caller (and the trail) is told never depends on the labels beyond the noisy prior.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from labels_party.db.engine import create_schema, make_engine
from shared.errors import InvalidParameterError
from shared.randomizer import execute
from tests.labels_party.conftest import ADV, OPS, PUB, create_dataset, put_labels, register, release

IDS = [f"e{i:03d}" for i in range(40)]


def ready(
    client: Any, name: str = "ds", *, labels: list[float] | None = None, **fields: Any
) -> None:
    create_dataset(client, name, **fields)
    register(client, name, IDS)
    values = labels if labels is not None else [float(k) for k in range(len(IDS))]
    assert put_labels(client, name, list(zip(IDS, values, strict=True))).status_code == 200


def audit(client: Any, **params: Any) -> dict[str, Any]:
    answer = client.get("/v1/audit", headers=OPS, params=params)
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_engine_refusal_at_a_tiny_epsilon_is_recorded(client: Any) -> None:
    ready(client)
    # The smallest positive float: accepted by the schema, refused by the plan after acceptance.
    answer = release(client, "ds", epsilon="5e-324")
    assert answer.status_code == 422
    (entry,) = audit(client)["entries"]
    assert entry["actor_role"] == "advertiser" and entry["dataset"] == "ds"
    assert entry["request"] == {
        "epsilon": "5E-324",
        "epsilon_histogram": None,
        "mechanism": "rpwithprior",
        "bins": None,
        "model_dim": None,
        "options": {},
    }
    assert entry["status"] == 422 and entry["error_class"] == "InvalidParameterError"
    assert entry["detail"] == answer.json()["detail"]
    assert entry["errors"] == answer.json()["errors"]
    assert entry["time"].endswith("Z") and entry["seq"] == 1
    # Nothing was spent or stored.
    assert client.get("/v1/datasets/ds", headers=OPS).json()["epsilon_spent"] == "0"


def test_budget_refusal_is_recorded(client: Any) -> None:
    ready(client, epsilon_budget=1.0)
    assert release(client, "ds", epsilon=0.6).status_code == 201
    refused = release(client, "ds", epsilon="0.5", mechanism="rr_on_bins", params={"bins": 8})
    assert refused.status_code == 409
    (entry,) = audit(client)["entries"]
    assert entry["status"] == 409 and entry["error_class"] == "BudgetExceededError"
    assert entry["request"]["epsilon"] == "0.5" and entry["request"]["mechanism"] == "rr_on_bins"
    assert entry["request"]["bins"] == 8
    assert entry["detail"] == refused.json()["detail"] and "left 0.4" in entry["detail"]
    assert entry["errors"] == refused.json()["errors"]


def test_engine_and_unexpected_failures_are_recorded_without_their_text(
    make_client: Callable[..., Any],
) -> None:
    calls = {"n": 0}

    def failing(plan: Any, labels: np.ndarray, rng: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise InvalidParameterError("epsilon2 (1e-300) is too small for any randomizer")
        raise RuntimeError(f"bug quoting a label: {labels[3]!r}")

    client = make_client(randomizer=failing)
    # A label no timestamp or sequence number can contain by chance (a short one like "3.0" can).
    secret = 7654321.125
    ready(client, labels=[secret if k == 3 else float(k) for k in range(len(IDS))])
    engine = release(client, "ds", epsilon="1e-300")
    assert engine.status_code == 422 and engine.json()["errors"][0]["field"] == "epsilon"
    crash = release(client, "ds", epsilon=1.0)
    assert crash.status_code == 500 and "7654321" not in crash.text
    first, second = audit(client)["entries"]
    assert (first["status"], first["error_class"]) == (422, "InvalidParameterError")
    assert first["detail"] == engine.json()["detail"] and first["request"]["epsilon"] == "1E-300"
    assert (second["status"], second["error_class"]) == (500, "RuntimeError")
    assert second["detail"] == crash.json()["detail"] and second["errors"] == crash.json()["errors"]
    # The exception's own text (a label) is never kept.
    assert "7654321" not in str(second) and "bug quoting" not in str(second)


def test_audit_is_operator_only_and_paginated(client: Any) -> None:
    ready(client, epsilon_budget=0.5)
    for _ in range(5):
        assert release(client, "ds", epsilon=1.0).status_code == 409
    assert release(client, "nope", epsilon=1.0).status_code == 404
    for headers in (ADV, PUB):
        assert client.get("/v1/audit", headers=headers).status_code == 403
    assert client.get("/v1/audit").status_code == 401
    seen, after = [], 0
    while True:
        page = audit(client, after=after, limit=2)
        seen += page["entries"]
        if page["next_after"] is None:
            break
        after = page["next_after"]
    assert [e["seq"] for e in seen] == [1, 2, 3, 4, 5, 6]
    assert seen[-1]["status"] == 404 and seen[-1]["dataset"] == "nope"
    assert client.get("/v1/audit", headers=OPS, params={"limit": 0}).status_code == 422
    # A dry run and a malformed body are not releases: no trace.
    dry = client.post("/v1/datasets/ds/releases", json={"epsilon": 1, "dry_run": True}, headers=ADV)
    assert dry.status_code == 200
    assert (
        client.post("/v1/datasets/ds/releases", json={"epsilon": -1}, headers=ADV).status_code
        == 422
    )
    assert len(audit(client)["entries"]) == 6


def test_the_callers_error_text_does_not_depend_on_the_labels(
    make_client: Callable[..., Any],
) -> None:
    """Refusals come from public values (plan, budget) or from the randomizer's choice, which
    reads the noisy prior only: the same request on very different labels gets the same text."""
    client = make_client()
    ready(client, "low", labels=[0.0] * len(IDS))
    ready(client, "high", labels=[100.0] * len(IDS), epsilon_budget=10.0)
    for body in ({"epsilon": "5e-324"}, {"epsilon": 11}, {"epsilon": 1, "params": {"bins": 10**9}}):
        low, high = release(client, "low", **body), release(client, "high", **body)
        assert low.status_code == high.status_code and low.status_code in (409, 422)
        assert low.json() == high.json()
    # The randomizer is chosen from (plan, noisy prior) alone: the same noisy prior on other
    # labels gives the same choice (and would give the same refusal).
    import inspect

    from shared.plan import plan_release
    from shared.randomizer import choose_randomizer, measure

    assert list(inspect.signature(choose_randomizer).parameters) == ["plan", "measured"]
    plan = plan_release(n=40, lo=0.0, hi=100.0, epsilon="1", mechanism="rpwithprior")
    assert plan.label_mean_float is None  # no DP mean: the choice reads the histogram only
    measured = measure(plan, np.zeros(40), np.random.default_rng(3))
    shared_prior = measured.prior
    choices = [
        execute(plan, labels, np.random.default_rng(5), histogram=shared_prior).params
        for labels in (np.zeros(40), np.full(40, 100.0))
    ]
    assert choices[0] == choices[1]


def test_an_older_database_gains_the_audit_table(
    db_path: Path, make_client: Callable[..., Any]
) -> None:
    """A database written by the release before these tables (the committed fixture) is
    upgraded by the migrations on start and records refusals from then on."""
    import shutil

    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "prev_release.db"
    shutil.copy(fixture, db_path)
    with contextlib.closing(sqlite3.connect(db_path)) as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    assert "release_audit" not in tables
    create_schema(make_engine(f"sqlite:///{db_path}"))
    again = make_client()
    name = again.get("/v1/ledger", headers=OPS).json()["entries"][0]["dataset"]
    assert release(again, name, epsilon=100).status_code == 409
    assert len(audit(again)["entries"]) == 1


def test_nothing_half_stored_after_a_refusal(client: Any, db_path: Path) -> None:
    ready(client, epsilon_budget=0.5)
    assert release(client, "ds", epsilon=1.0).status_code == 409
    with contextlib.closing(sqlite3.connect(db_path)) as conn:
        assert conn.execute("SELECT COUNT(*) FROM releases").fetchone()[0] == 0
        assert conn.execute("SELECT COUNT(*) FROM receipts").fetchone()[0] == 0
        assert conn.execute("SELECT COUNT(*) FROM release_audit").fetchone()[0] == 1
