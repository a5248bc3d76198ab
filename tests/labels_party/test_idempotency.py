"""Idempotency-Key on releases, model releases and top-ups: a repeat spends or adds nothing."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from labels_party.access import principals
from labels_party.budget import idempotency as idem
from labels_party.budget import ledger
from labels_party.catalog import datasets as ds
from labels_party.db.engine import Database
from labels_party.releasing.releases import ReleaseService
from shared.plan import ReleaseRequest
from shared.randomizer import execute
from shared.service.client import LabelsPartyClient, RetryPolicy
from tests.labels_party.conftest import ADV, OPS, TOKENS, create_dataset, put_labels, register
from tests.labels_party.test_model_releases import model_release, setup_dataset, state

IDS = [f"e{i:03d}" for i in range(40)]
BODY = {"mechanism": "rr_on_bins", "epsilon": "1"}


def _dataset(client: Any, name: str = "ds", budget: str = "10") -> None:
    create_dataset(client, name, epsilon_budget=budget)
    register(client, name, IDS)
    assert put_labels(client, name, [(i, float(k % 9)) for k, i in enumerate(IDS)]).status_code
    assert client.get(f"/v1/datasets/{name}", headers=ADV).json()["n_labels"] == len(IDS)


def _release(client: Any, key: str | None, name: str = "ds", **body: Any) -> httpx.Response:
    headers = {**ADV, **({} if key is None else {"Idempotency-Key": key})}
    return client.post(f"/v1/datasets/{name}/releases", json={**BODY, **body}, headers=headers)


def _spent(client: Any, name: str = "ds") -> str:
    return str(client.get(f"/v1/datasets/{name}", headers=ADV).json()["epsilon_spent"])


def _count(client: Any, table: str) -> int:
    with client.app.state.services.db.read() as conn:
        return int(client.app.state.services.db.fetch(conn, f"SELECT COUNT(*) FROM {table}")[0][0])


def test_a_repeated_key_gets_the_first_release_and_spends_nothing(client: Any) -> None:
    _dataset(client)
    first = _release(client, "job-7/run-1")
    assert first.status_code == 201, first.text
    assert "Idempotent-Replayed" not in first.headers
    ledger_before, spent = _count(client, "ledger"), _spent(client)
    again = _release(client, "job-7/run-1")
    assert again.status_code == 201 and again.headers["Idempotent-Replayed"] == "true"
    assert again.json() == first.json()
    assert (_count(client, "ledger"), _spent(client)) == (ledger_before, spent)
    assert _count(client, "releases") == 1
    # Without a key (or with a new one) the same request is a new release, spent again.
    assert _release(client, None).json()["id"] != first.json()["id"]
    assert _release(client, "job-7/run-2").json()["id"] != first.json()["id"]
    assert _count(client, "releases") == 3 and Decimal(_spent(client)) == 3
    metrics = client.get("/metrics", headers=OPS).text
    assert 'labeldp_idempotent_replays_total{kind="release"} 1.0' in metrics
    assert 'labeldp_releases_total{mechanism="rr_on_bins"} 3.0' in metrics  # replays not counted


def test_the_same_key_for_another_request_is_refused_naming_the_header(client: Any) -> None:
    _dataset(client)
    first = _release(client, "k1")
    before = (_count(client, "ledger"), _spent(client))
    for other in ({"epsilon": "2"}, {"mechanism": "rpwithprior"}, {"params": {"bins": 4}}):
        refused = _release(client, "k1", **other)
        assert refused.status_code == 422, refused.text
        [error] = refused.json()["errors"]
        assert error["field"] == "Idempotency-Key" and first.json()["id"] in error["message"]
    # The same amount written another way is the same request.
    assert _release(client, "k1", epsilon=1.0).headers["Idempotent-Replayed"] == "true"
    assert (_count(client, "ledger"), _spent(client)) == before


@pytest.mark.parametrize("key", ["", "x" * 256, "with space", "caf\u00e9", "tab\there"])
def test_a_malformed_key_is_refused_before_anything_is_spent(client: Any, key: str) -> None:
    """An empty key, too long, a space, UTF-8 (sent as its bytes), a control character."""
    _dataset(client)
    refused = client.post(
        "/v1/datasets/ds/releases",
        json=BODY,
        headers={**ADV, "Idempotency-Key": key.encode("utf-8")},
    )
    assert refused.status_code == 422, refused.text
    assert [e["field"] for e in refused.json()["errors"]] == ["Idempotency-Key"]
    assert _count(client, "releases") == 0 and Decimal(_spent(client)) == 0


def test_another_principal_reusing_a_key_is_refused_not_given_the_release(
    client: Any, db_path: Path
) -> None:
    """Found by an audit: keys are names a job picks ("nightly-2026-11-30"); bob reusing
    alice's got her release replayed, nothing charged, and the ledger named only alice."""
    _dataset(client)
    db = client.app.state.services.db
    _, alice = principals.issue(db, name="alice", role="advertiser")
    _, bob = principals.issue(db, name="bob", role="advertiser")

    def as_(token: str) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": "nightly-2026-11-30"}
        return client.post("/v1/datasets/ds/releases", json=BODY, headers=headers)

    first = as_(alice)
    assert first.status_code == 201 and as_(alice).headers["Idempotent-Replayed"] == "true"
    refused = as_(bob)
    assert refused.status_code == 422, refused.text
    assert [e["field"] for e in refused.json()["errors"]] == ["Idempotency-Key"]
    assert _count(client, "releases") == 1 and Decimal(_spent(client)) == 1
    assert _release(client, "nightly-2026-11-30").status_code == 422  # the role token: another


def test_a_key_sent_twice_is_refused(client: Any) -> None:
    """Starlette reads the first of two headers: which key counted was silent (an audit)."""
    _dataset(client)
    answer = client.post(
        "/v1/datasets/ds/releases",
        json=BODY,
        headers=[*ADV.items(), ("Idempotency-Key", "d1"), ("Idempotency-Key", "d2")],
    )
    assert answer.status_code == 422, answer.text
    assert [e["field"] for e in answer.json()["errors"]] == ["Idempotency-Key"]
    assert _count(client, "releases") == 0


def test_keys_are_per_dataset_and_a_dry_run_keeps_none(client: Any) -> None:
    _dataset(client, "a")
    _dataset(client, "b")
    preview = _release(client, "shared-key", name="a", dry_run=True)
    assert preview.status_code == 200 and "Idempotent-Replayed" not in preview.headers
    assert _count(client, "idempotency_keys") == 0
    a = _release(client, "shared-key", name="a")
    b = _release(client, "shared-key", name="b", epsilon="2")
    assert a.status_code == b.status_code == 201 and a.json()["id"] != b.json()["id"]
    assert "Idempotent-Replayed" not in b.headers
    assert (Decimal(_spent(client, "a")), Decimal(_spent(client, "b"))) == (1, 2)


def test_a_repeat_is_answered_after_the_budget_is_spent_and_the_dataset_archived(
    client: Any,
) -> None:
    _dataset(client, budget="1")
    first = _release(client, "last-one")
    assert _release(client, "new").status_code == 409  # nothing left
    assert (
        client.post(
            "/v1/datasets/ds/archive",
            json={"reason": "done"},
            headers=ADV | {"Authorization": f"Bearer {TOKENS.operator}"},
        ).status_code
        == 200
    )
    again = _release(client, "last-one")
    assert again.status_code == 201 and again.json() == first.json()
    assert again.headers["Idempotent-Replayed"] == "true"


def test_a_repeat_racing_the_first_commits_one_release(client: Any) -> None:
    """The first attempt is still randomizing when its repeat, on another replica, commits: at
    its own commit the first finds the key, discards its draw unseen and answers the repeat's
    release."""
    _dataset(client)
    request = ReleaseRequest(epsilon=Decimal(1), mechanism="rr_on_bins")
    key = idem.IdempotencyKey.of(
        "race", kind=idem.RELEASE, request=request.public(), role="advertiser", actor=None
    )
    inner: list[dict[str, Any]] = []
    calls: list[int] = []

    def randomizer(plan: Any, labels: np.ndarray, rng: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:  # the first attempt: its repeat runs and commits meanwhile
            inner.append(
                replica.create(dataset="ds", request=request, actor_role="advertiser", key=key)
            )
        return execute(plan, labels, rng)

    db = client.app.state.services.db
    service = ReleaseService(
        db, randomizer=randomizer, rng_factory=lambda: np.random.default_rng(1)
    )
    replica = ReleaseService(
        db, randomizer=randomizer, rng_factory=lambda: np.random.default_rng(2)
    )
    outer = service.create(dataset="ds", request=request, actor_role="advertiser", key=key)
    assert isinstance(outer, idem.Replayed) and not isinstance(inner[0], idem.Replayed)
    assert dict(outer) == inner[0]
    assert _count(client, "releases") == 1 and Decimal(_spent(client)) == 1


def test_two_concurrent_repeats_commit_one_release_on_both_engines(db: Database) -> None:
    """Two replicas (two services) randomize before either commits (a barrier): the dataset row
    read for update serializes the commits, and the second finds the key (SQLite and
    PostgreSQL)."""
    request = ReleaseRequest(epsilon=Decimal("0.5"), mechanism="rr_on_bins")
    key = idem.IdempotencyKey.of(
        "twice", kind=idem.RELEASE, request=request.public(), role="advertiser", actor=None
    )
    barrier = threading.Barrier(2, timeout=30)

    def randomizer(plan: Any, labels: np.ndarray, rng: Any) -> Any:
        barrier.wait()
        return execute(plan, labels, rng)

    replicas = [ReleaseService(db, randomizer=randomizer) for _ in range(2)]
    with ThreadPoolExecutor(2) as pool:
        answers = list(
            pool.map(
                lambda service: service.create(
                    dataset="x", request=request, actor_role="advertiser", key=key
                ),
                replicas,
            )
        )
    assert sorted(isinstance(a, idem.Replayed) for a in answers) == [False, True]
    assert dict(answers[0]) == dict(answers[1])
    with db.read() as conn:
        assert db.fetch(conn, "SELECT COUNT(*) FROM releases")[0][0] == 1
        assert ds.load(conn, "x").epsilon_spent == 0.5
        assert ledger.verify(conn).ok


def test_a_repeat_to_the_same_process_waits_for_the_first_and_draws_nothing(
    db: Database,
) -> None:
    """A client retrying a long release after its timeout: the repeat waits for the first
    instead of reading every label and drawing again beside it (at 10^8 ids, twice the
    memory)."""
    request = ReleaseRequest(epsilon=Decimal("0.5"), mechanism="rr_on_bins")
    key = idem.IdempotencyKey.of(
        "slow", kind=idem.RELEASE, request=request.public(), role="advertiser", actor=None
    )
    draws: list[int] = []
    started = threading.Event()
    failing: list[bool] = []

    def randomizer(plan: Any, labels: np.ndarray, rng: Any) -> Any:
        draws.append(1)
        if failing:
            failing.pop()
            raise RuntimeError("the first attempt failed")
        started.set()
        time.sleep(0.5)  # the repeat arrives meanwhile
        return execute(plan, labels, rng)

    service = ReleaseService(db, randomizer=randomizer)

    def create(key: idem.IdempotencyKey | None = key) -> dict[str, Any]:
        return service.create(dataset="x", request=request, actor_role="advertiser", key=key)

    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(create)
        assert started.wait(30)
        repeat = pool.submit(create)
        answers = [first.result(), repeat.result()]
    assert len(draws) == 1 and isinstance(answers[1], idem.Replayed)
    assert dict(answers[1]) == answers[0]
    # A repeat of a first attempt that failed (nothing stored) computes for itself.
    other = idem.IdempotencyKey.of(
        "retry", kind=idem.RELEASE, request=request.public(), role="advertiser", actor=None
    )
    failing.append(True)
    with pytest.raises(RuntimeError):
        create(other)
    assert not isinstance(create(other), idem.Replayed) and len(draws) == 3


class _LostAnswers(httpx.BaseTransport):
    """Delivers every request to the app, but loses the first ``lose`` answers (a timeout)."""

    def __init__(self, inner: httpx.BaseTransport, lose: int) -> None:
        self.inner, self.lose, self.keys = inner, lose, []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.keys.append(request.headers.get("idempotency-key"))
        response = self.inner.handle_request(request)
        if self.lose:
            self.lose -= 1
            response.read()
            raise httpx.ReadTimeout("the answer was lost", request=request)
        return response


def test_the_client_retries_a_release_whose_answer_was_lost_and_is_charged_once(
    client: Any,
) -> None:
    _dataset(client)
    transport = _LostAnswers(client._transport, lose=2)
    with LabelsPartyClient(
        "http://testserver",
        token=TOKENS.advertiser,
        transport=transport,
        retry=RetryPolicy(attempts=4, base_delay=0.01),
        sleep=lambda _s: None,
    ) as advertiser:
        info = advertiser.create_release("ds", epsilon="1", mechanism="rr_on_bins")
    assert len(transport.keys) == 3 and len(set(transport.keys)) == 1 and transport.keys[0]
    assert _count(client, "releases") == 1 and Decimal(_spent(client)) == 1
    with client.app.state.services.db.read() as conn:
        [(stored,)] = client.app.state.services.db.fetch(conn, "SELECT id FROM releases")
    assert info.id == stored


# ---- model releases ------------------------------------------------------------------------


def _model(client: Any, key: str | None, **body: Any) -> httpx.Response:
    headers = {**ADV, **({} if key is None else {"Idempotency-Key": key})}
    payload = {"estimator": "ols", "privacy": "label", "epsilon": "1", **body}
    return client.post("/v1/datasets/ds/model-releases", json=payload, headers=headers)


def test_a_repeated_model_release_gets_the_first_model_and_spends_nothing(client: Any) -> None:
    setup_dataset(client)
    first = _model(client, "fit-1")
    assert first.status_code == 201, first.text
    before = state(client)
    again = _model(client, "fit-1")
    assert again.status_code == 201 and again.headers["Idempotent-Replayed"] == "true"
    assert again.json() == first.json()  # the message, and the budget as it was left then
    assert state(client) == before and _count(client, "model_releases") == 1
    metrics = client.get("/metrics", headers=OPS).text
    assert 'labeldp_model_releases_total{estimator="ols",privacy="label"} 1.0' in metrics
    assert 'labeldp_idempotent_replays_total{kind="model"} 1.0' in metrics
    refused = _model(client, "fit-1", epsilon="2")
    assert refused.status_code == 422
    assert [e["field"] for e in refused.json()["errors"]] == ["Idempotency-Key"]
    assert state(client) == before
    # A label release may not reuse a model release's key either.
    assert _release(client, "fit-1").status_code == 422 and state(client) == before
    assert model_release(client, estimator="ols", privacy="label", epsilon="1").status_code == 201


# ---- top-ups -------------------------------------------------------------------------------


def _top_up(client: Any, key: str | None, add: str = "2", reason: str = "Q4") -> httpx.Response:
    headers = {**OPS, **({} if key is None else {"Idempotency-Key": key})}
    return client.post(
        "/v1/datasets/ds/budget", json={"add": add, "reason": reason}, headers=headers
    )


def _budget(client: Any) -> Decimal:
    return Decimal(client.get("/v1/datasets/ds", headers=OPS).json()["epsilon_budget"])


def test_a_repeated_top_up_adds_nothing_again(client: Any) -> None:
    """Without a key, an operator repeating a top-up whose answer was lost added it twice."""
    _dataset(client, budget="1")
    first = _top_up(client, "topup-2026-q4")
    assert first.status_code == 200 and "Idempotent-Replayed" not in first.headers
    entries = _count(client, "ledger")
    again = _top_up(client, "topup-2026-q4")
    assert again.status_code == 200 and again.headers["Idempotent-Replayed"] == "true"
    assert again.json()["epsilon_budget"] == first.json()["epsilon_budget"]
    assert _budget(client) == 3 and _count(client, "ledger") == entries
    for other in ({"add": "3"}, {"reason": "another"}):
        refused = _top_up(client, "topup-2026-q4", **other)
        assert refused.status_code == 422
        [error] = refused.json()["errors"]
        assert error["field"] == "Idempotency-Key" and "ledger entry" in error["message"]
    assert _top_up(client, "\x01").status_code == 422
    # A key is per kind of request: a release may not reuse it, a repeat after archive is answered.
    assert _release(client, "topup-2026-q4").status_code == 422
    archived = client.post("/v1/datasets/ds/archive", json={"reason": "done"}, headers=OPS)
    assert archived.status_code == 200
    assert _top_up(client, "topup-2026-q4").headers["Idempotent-Replayed"] == "true"
    assert _top_up(client, "new-key").status_code == 409  # archived: a new top-up is refused
    assert _budget(client) == 3 and _count(client, "ledger") == entries + 1  # the archive entry
    with client.app.state.services.db.read() as conn:
        assert ledger.verify(conn).ok
