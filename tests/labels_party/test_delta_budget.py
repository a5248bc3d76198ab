"""The budget holds epsilon AND delta exactly (basic composition); the ledger verifies both."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import update

from labels_party.budget import accountant, ledger
from labels_party.catalog import datasets as ds
from labels_party.db.models import datasets
from shared.budget import Budget, DeltaBudgetExceededError
from shared.errors import BudgetExceededError, InvalidParameterError
from tests.labels_party.conftest import ADV, OPS, create_dataset


def _spend(client: Any, name: str, *, epsilon: str, delta: str | None) -> Budget:
    """One model-kind charge through the accountant, in a write transaction."""
    db = client.app.state.services.db
    with db.write() as conn:
        row = ds.load(conn, name, for_update=True)
        return accountant.spend(
            conn,
            row,
            [
                accountant.Charge(
                    kind=ledger.KIND_MODEL,
                    mechanism="test",
                    epsilon=Decimal(epsilon),
                    delta=None if delta is None else Decimal(delta),
                    parameters={"model_release_id": f"mrel_{'0' * 24}"},
                )
            ],
            time=ds.utc_now(),
            release_id=None,
            actor_role="advertiser",
            message_sha256="0" * 64,
        )


def _verify(client: Any) -> ledger.VerifyReport:
    with client.app.state.services.db.read() as conn:
        return ledger.verify(conn)


def _total_problems(client: Any) -> list[str]:
    """Verify's findings apart from the missing model releases (these spends store none)."""
    report = _verify(client)
    model = [p for p in report.problems if "model release" in p]
    assert model, "a model spend with no stored model release is reported"
    return [p for p in report.problems if "model release" not in p]


def test_dataset_delta_budget_is_exact_and_public(client: Any) -> None:
    body = create_dataset(client, "d1", epsilon_budget="1", delta_budget="0.000001")
    assert (body["delta_budget"], body["delta_spent"], body["delta_left"]) == (
        "0.000001",
        "0",
        "0.000001",
    )
    plain = create_dataset(client, "d0")
    assert (plain["delta_budget"], plain["delta_left"]) == ("0", "0")
    assert client.get("/v1/datasets/d1", headers=ADV).json()["delta_budget"] == "0.000001"
    report = _verify(client)
    assert report.ok, report.problems


@pytest.mark.parametrize("bad", [1, "1", 1.5, -0.1, "abc", True])
def test_bad_delta_budget_names_the_field(client: Any, bad: object) -> None:
    body = {"name": "bad", "label_min": 0, "label_max": 1, "default_label": 0}
    response = client.post(
        "/v1/datasets", json={**body, "epsilon_budget": 1, "delta_budget": bad}, headers=OPS
    )
    assert response.status_code == 422, response.text
    assert {e["field"] for e in response.json()["errors"]} == {"delta_budget"}
    assert client.get("/v1/datasets/bad", headers=OPS).status_code == 404


def test_delta_spends_add_up_exactly_and_verify(client: Any) -> None:
    create_dataset(client, "d", epsilon_budget="1", delta_budget="0.3")
    for _ in range(3):
        after = _spend(client, "d", epsilon="0.1", delta="0.1")
    assert (after.spent, after.delta_spent, after.delta_left) == (
        Decimal("0.3"),
        Decimal("0.3"),
        Decimal(0),
    )
    view = client.get("/v1/datasets/d", headers=ADV).json()
    assert (view["epsilon_spent"], view["delta_spent"], view["delta_left"]) == ("0.3", "0.3", "0")
    # Three spends of 0.1 fill 0.3 exactly: one more of any delta is refused, nothing written.
    before = ledger_rows(client)
    with pytest.raises(DeltaBudgetExceededError) as info:
        _spend(client, "d", epsilon="0.1", delta="0.000000001")
    assert info.value.field == "delta" and "delta budget exceeded" in str(info.value)
    assert ledger_rows(client) == before
    # A spend without a delta still fits (epsilon only).
    _spend(client, "d", epsilon="0.1", delta=None)
    assert not _total_problems(client)
    assert _verify(client).spent["d"] == Decimal("0.4")


def test_no_delta_budget_refuses_any_delta(client: Any) -> None:
    create_dataset(client, "d")
    with pytest.raises(DeltaBudgetExceededError):
        _spend(client, "d", epsilon="0.1", delta="0.01")
    assert _verify(client).ok, "nothing was written"


def test_verify_finds_a_tampered_delta_total(client: Any) -> None:
    create_dataset(client, "d", epsilon_budget="1", delta_budget="0.5")
    _spend(client, "d", epsilon="0.1", delta="0.25")
    with client.app.state.services.db.write() as conn:
        conn.execute(update(datasets).values(delta_spent_exact="0.2"))
    problems = _total_problems(client)
    assert any("delta total 0.25 != recorded delta_spent 0.2" in p for p in problems), problems


def ledger_rows(client: Any) -> int:
    with client.app.state.services.db.read() as conn:
        return len(ledger.entries(conn))


@pytest.mark.parametrize("bad", ["0", "1", "-0.1", "2", "nan"])
def test_a_charge_delta_must_be_in_the_open_unit_interval(bad: str) -> None:
    with pytest.raises(InvalidParameterError, match="delta"):
        accountant.Charge(
            kind="model", mechanism="m", epsilon=Decimal(1), parameters={}, delta=Decimal(bad)
        )


_amount = st.decimals(min_value="0", max_value="1", places=6, allow_nan=False)


@settings(max_examples=200, deadline=None)
@given(
    budget=_amount, spent=_amount, delta_budget=_amount, delta_spent=_amount, eps=_amount, d=_amount
)
def test_budget_fits_exactly_on_both_axes(
    budget: Decimal,
    spent: Decimal,
    delta_budget: Decimal,
    delta_spent: Decimal,
    eps: Decimal,
    d: Decimal,
) -> None:
    b = Budget(budget=budget, spent=spent, delta_budget=delta_budget, delta_spent=delta_spent)
    expected = spent + eps <= budget and delta_spent + d <= delta_budget
    assert b.fits(eps, delta=d) is expected
    if expected:
        b.check(eps, delta=d)
    else:
        with pytest.raises(BudgetExceededError) as info:
            b.check(eps, delta=d)
        epsilon_fits = spent + eps <= budget
        assert isinstance(info.value, DeltaBudgetExceededError) is epsilon_fits
    # The old API: epsilon only, delta 0.
    assert b.fits(eps) is (spent + eps <= budget and delta_spent <= delta_budget)
