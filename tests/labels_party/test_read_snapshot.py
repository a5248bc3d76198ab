"""``Database.read()`` is one snapshot on both engines: a write committed between two of its
statements is seen by neither (PostgreSQL's default READ COMMITTED showed it to the second).

Found by an audit of concurrent requests (two replicas on one PostgreSQL database): ``ledger
verify`` reported a ledger total that disagreed with ``epsilon_spent`` while releases were being
made, and a release whose snapshot saw late example registrations failed with a 500. Each test
commits the other write at the exact point between the reader's statements (an engine event)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from sqlalchemy import event

from labels_party.budget import ledger
from labels_party.db.engine import Database
from labels_party.intake.ingest import store_examples
from labels_party.releasing.releases import ReleaseService
from shared.plan import ReleaseRequest


def _once_after(db: Database, table: str, action: Any) -> dict[str, bool]:
    """Run ``action`` (another transaction, committed) right after the next plain SELECT from
    ``table`` on this engine; returns the flag that says whether it ran."""
    state = {"armed": True, "ran": False}

    @event.listens_for(db.engine, "after_cursor_execute")
    def _after(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        text = statement.lstrip().upper()
        if state["armed"] and text.startswith("SELECT") and f"FROM {table.upper()}" in text:
            if "FOR UPDATE" not in text:
                state["armed"] = False
                action()
                state["ran"] = True

    return state


def test_ledger_verify_sees_one_state_while_a_release_commits(db: Database) -> None:
    releases = ReleaseService(db)
    with db.read() as conn:
        ledger.entries(conn)  # the snapshot starts here
        state = _once_after(
            db,
            "ledger",
            lambda: releases.create(
                dataset="x", request=ReleaseRequest(epsilon=Decimal("0.3")), actor_role="advertiser"
            ),
        )
        report = ledger.verify(conn)
    assert state["ran"]
    assert report.ok, report.problems
    with db.read() as conn:
        after = ledger.verify(conn)
        assert after.ok and len(ledger.entries(conn)) == 3  # the dataset, then the release's two


def test_a_release_snapshot_is_consistent_while_examples_are_registered(db: Database) -> None:
    state = _once_after(
        db, "datasets", lambda: store_examples(db, dataset="x", example_ids=["late-1", "late-2"])
    )
    out = ReleaseService(db).create(
        dataset="x", request=ReleaseRequest(epsilon=Decimal("0.3")), actor_role="advertiser"
    )
    assert state["ran"]
    assert out["n"] in (100, 102)
