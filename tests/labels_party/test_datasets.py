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
