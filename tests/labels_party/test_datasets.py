"""labels_party.datasets: the retry of a release whose labels changed under it."""

from __future__ import annotations

import pytest

from labels_party import datasets as ds
from labels_party.errors import ConflictError


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
