"""labels_party.catalog.datasets: the retry of a release whose labels changed under it."""

from __future__ import annotations

from typing import Any

import pytest

from labels_party.catalog import datasets as ds
from labels_party.errors import ConflictError
from tests.labels_party.conftest import ADV, OPS, create_dataset


def test_a_stale_attempt_is_retried_and_its_result_returned() -> None:
    calls: list[int] = []

    def attempt() -> str:
        calls.append(1)
        if len(calls) < ds.STALE_ATTEMPTS:
            raise ds.StaleSnapshot
        return "stored"

    assert ds.retry_while_stale(attempt, dataset="d", what="release") == "stored"
    assert len(calls) == ds.STALE_ATTEMPTS


def test_labels_that_keep_changing_are_a_409_naming_the_dataset() -> None:
    calls: list[int] = []

    def attempt() -> str:
        calls.append(1)
        raise ds.StaleSnapshot

    with pytest.raises(ConflictError) as caught:
        ds.retry_while_stale(attempt, dataset="clicks", what="model")
    assert len(calls) == ds.STALE_ATTEMPTS
    assert "'clicks' kept changing while the model was computed" in str(caught.value)
    assert [e.field for e in caught.value.errors] == ["dataset"]


def test_the_creation_entry_records_the_spec_with_exact_budgets() -> None:
    from decimal import Decimal

    spec = ds.DatasetSpec(
        name="d", label_min=0.0, label_max=10.0, default_label=0.0, epsilon_budget=Decimal("0.1")
    )
    assert spec.ledger_parameters() == {
        "label_min": 0.0,
        "label_max": 10.0,
        "default_label": 0.0,
        "epsilon_budget": "0.1",
    }
    with_delta = ds.DatasetSpec(
        name="d",
        label_min=0.0,
        label_max=10.0,
        default_label=5.0,
        epsilon_budget=Decimal(4),
        delta_budget=Decimal("1e-6"),
    )
    assert with_delta.ledger_parameters()["delta_budget"] == "0.000001"


def test_an_out_of_range_amount_stored_before_the_range_never_fails_a_listing(
    make_client: Any, db_path: Any
) -> None:
    """Issue 24, item 4: a database written before the amount range (a budget of 1e10001 was
    stored then) is read conservatively (``shared.epsilon.budget_as_read``): the listing, the
    view, a top-up and the archive answer, the listing shows every other dataset as it is."""
    import sqlite3

    client = make_client()
    create_dataset(client, "ok")
    create_dataset(client, "bad")
    with sqlite3.connect(db_path) as conn:
        conn.execute(
            "UPDATE datasets SET epsilon_budget_exact = '1E+10001', epsilon_budget = 9e999 "
            "WHERE name = 'bad'"
        )
    client = make_client()
    listed = client.get("/v1/datasets", headers=OPS)
    assert listed.status_code == 200, listed.text
    views = {d["name"]: d for d in listed.json()["datasets"]}
    assert views["ok"]["epsilon_budget"] == "10"
    assert views["bad"]["epsilon_budget"] == "1E+300" == views["bad"]["epsilon_left"]
    assert client.get("/v1/datasets/bad", headers=ADV).status_code == 200
    top_up = client.post("/v1/datasets/bad/budget", json={"add": 1, "reason": "x"}, headers=OPS)
    assert top_up.status_code == 422 and top_up.json()["errors"][0]["field"] == "add"
    archived = client.post("/v1/datasets/bad/archive", json={"reason": "x"}, headers=OPS)
    assert archived.status_code == 200, archived.text
