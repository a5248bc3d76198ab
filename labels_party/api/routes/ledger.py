"""The privacy ledger (operator): filtered pages, CSV export, and the chain's verification."""

from __future__ import annotations

import io
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse

from labels_party.api.deps import Operator, ServicesDep
from labels_party.api.routes import BodyDocumentedRoute
from labels_party.budget import ledger
from labels_party.catalog.datasets import LOOKUP_PATTERN
from labels_party.db.engine import Database
from labels_party.errors import BadInputError, FieldError
from labels_party.schemas import LedgerPage, LedgerVerifyReport
from shared.message import RELEASE_ID_PATTERN

router = APIRouter(prefix="/v1", tags=["ledger"], route_class=BodyDocumentedRoute)
CSV_MEDIA_TYPE = "text/csv"
_CSV_BATCH = 1000


def _stored_time(value: datetime | None, field: str) -> str | None:
    """An ISO-8601 time in the ledger's stored format (UTC, microseconds); naive means UTC."""
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    try:
        utc = value.astimezone(UTC)
    except OverflowError:  # e.g. 0001-01-01T00:00-01:00 has no UTC counterpart
        raise BadInputError(
            f"{field} is out of range", [FieldError(field=f"query.{field}", message="out of range")]
        ) from None
    return utc.isoformat(timespec="microseconds").replace("+00:00", "Z")


def _wants_csv(request: Request, format_: str | None) -> bool:
    if format_ is not None:
        return format_ == "csv"
    accept = request.headers.get("accept", "")
    return any(item.split(";")[0].strip().lower() == CSV_MEDIA_TYPE for item in accept.split(","))


@router.get(
    "/ledger",
    response_model=LedgerPage,
    responses={200: {"content": {CSV_MEDIA_TYPE: {"schema": {"type": "string"}}}}},
)
def get_ledger(
    request: Request,
    role: Operator,
    services: ServicesDep,
    dataset: str | None = Query(default=None, pattern=LOOKUP_PATTERN),
    release_id: str | None = Query(default=None, pattern=RELEASE_ID_PATTERN),
    kind: str | None = Query(default=None, pattern=r"^[a-z_]{1,16}$", description="entry kind"),
    since: Annotated[datetime | None, Query(description="ISO-8601; entries at or after")] = None,
    until: Annotated[datetime | None, Query(description="ISO-8601; entries before")] = None,
    after: int = Query(default=0, ge=0, le=2**63 - 1, description="entries with seq > after"),
    limit: int | None = Query(default=None, ge=1, le=10000, description="JSON default: 1000"),
    format_: str | None = Query(
        default=None, alias="format", pattern="^(json|csv)$", description="or Accept: text/csv"
    ),
) -> Any:
    """Ledger entries in chain order matching every filter, as JSON pages or as CSV.

    JSON: at most ``limit`` entries, the chain's head hash, and ``next`` (the URL of the next page
    with the same filters) / ``next_after`` while more entries match. CSV: every matching entry
    (``after`` and ``limit`` apply when given), streamed.
    """
    filters: dict[str, Any] = {
        "dataset": dataset,
        "release_id": release_id,
        "kind": kind,
        "since": _stored_time(since, "since"),
        "until": _stored_time(until, "until"),
    }
    if _wants_csv(request, format_):
        return StreamingResponse(
            _csv_pages(services.db, filters, after=after, limit=limit),
            media_type=f"{CSV_MEDIA_TYPE}; charset=utf-8",
            headers={"Content-Disposition": 'attachment; filename="ledger.csv"'},
        )
    page = limit or 1000
    with services.db.read() as conn:
        rows = list(ledger.select_entries(conn, **filters, after=after, limit=page + 1))
        _, head_hash = ledger.head(conn)
    more = len(rows) > page
    rows = rows[:page]
    next_after = rows[-1]["seq"] if more else None
    next_url = None
    if next_after is not None:
        query = {key: value for key, value in request.query_params.items() if key != "after"}
        next_url = f"{request.url.path}?{urlencode({**query, 'after': next_after})}"
    return {
        "entries": [ledger.public_entry(row) for row in rows],
        "head_hash": head_hash,
        "next_after": next_after,
        "next": next_url,
    }


def _csv_pages(
    db: Database, filters: dict[str, Any], *, after: int, limit: int | None
) -> Iterator[bytes]:
    """The CSV, a batch of entries per read transaction (a long export holds no lock)."""
    first, left = True, limit
    while left is None or left > 0:
        batch = _CSV_BATCH if left is None else min(_CSV_BATCH, left)
        with db.read() as conn:
            rows = list(ledger.select_entries(conn, **filters, after=after, limit=batch))
        buffer = io.StringIO()
        ledger.write_csv((ledger.public_entry(r) for r in rows), buffer, header=first)
        yield buffer.getvalue().encode("utf-8")
        first = False
        if len(rows) < batch:
            return
        after = rows[-1]["seq"]
        if left is not None:
            left -= len(rows)


@router.get("/ledger/verify", response_model=LedgerVerifyReport)
async def verify_ledger(role: Operator, services: ServicesDep) -> Any:
    """The check ``labeldp ledger verify`` makes, and the first entry that breaks the chain."""
    return await run_in_threadpool(_verify, services.db)


def _verify(db: Database) -> dict[str, Any]:
    with db.read() as conn:
        report = ledger.verify(conn)
        broken = ledger.first_break(conn) if not report.ok else None
    return {
        "ok": report.ok,
        "entries": report.entries,
        "head_hash": report.head_hash,
        "problems": report.problems,
        "first_break": None if broken is None else {"seq": broken.seq, "reason": broken.reason},
    }
