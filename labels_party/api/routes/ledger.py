"""The privacy ledger (operator)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query

from labels_party import ledger
from labels_party.api.deps import Operator, ServicesDep
from labels_party.datasets import LOOKUP_PATTERN
from labels_party.schemas import LedgerPage

router = APIRouter(prefix="/v1", tags=["ledger"])


@router.get("/ledger", response_model=LedgerPage)
def get_ledger(
    role: Operator,
    services: ServicesDep,
    dataset: str | None = Query(default=None, pattern=LOOKUP_PATTERN),
    after: int = Query(default=0, ge=0, le=2**63 - 1, description="entries with seq > after"),
    limit: int = Query(default=1000, ge=1, le=10000),
) -> Any:
    """Ledger entries in chain order, with the chain's head hash."""
    with services.db.read() as conn:
        rows = ledger.entries(conn, dataset=dataset, after=after, limit=limit + 1)
        _, head_hash = ledger.head(conn)
    more = len(rows) > limit
    rows = rows[:limit]
    return {
        "entries": [ledger.public_entry(row) for row in rows],
        "head_hash": head_hash,
        "next_after": rows[-1]["seq"] if more else None,
    }
