"""Operator trails: releases refused or failed after acceptance, and message downloads.

Each row says who (the role), when, on which dataset, what was asked (the request's public
fields: epsilon, the histogram's share, mechanism, bins, model_dim, options) and why it failed:
the error class and exactly the status, text and field errors the caller got. Nothing else is
stored: an unexpected exception's own message (which could quote data) is never kept, only its
class; the caller got the generic internal-error text, and so does the trail.

What the caller's text can depend on: a refusal by the plan (``shared.plan``) or the budget uses
only public values (n, bounds, the request, the ledger); a refusal inside the randomizer too:
its choice builds the plan's randomizer from a uniform prior first and falls back on it when the
noisy prior's is refused (``shared.randomizer.choose_randomizer``), so no refusal reads labels.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any, TypeVar

from sqlalchemy import Table, insert, select, update

from labels_party.budget.ledger import canonical_json
from labels_party.db.engine import Database
from labels_party.db.models import access_log, release_audit

log = logging.getLogger("labels_party")
T = TypeVar("T")


def now_text() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def record_refusal(
    db: Database,
    *,
    actor_role: str,
    actor: str | None = None,
    dataset: str,
    request: dict[str, Any],
    status: int,
    error_class: str,
    body: dict[str, Any],
) -> None:
    """Append one row (its own write transaction); a failure to record is logged, not raised."""
    try:
        with db.write() as conn:
            conn.execute(
                insert(release_audit).values(
                    time=now_text(),
                    actor_role=actor_role,
                    actor=actor,
                    dataset=dataset,
                    request=canonical_json(request),
                    status=status,
                    error_class=error_class,
                    detail=str(body.get("detail", "")),
                    errors=canonical_json(body.get("errors", [])),
                )
            )
    except Exception as exc:  # noqa: BLE001 - the caller still gets its own error
        log.error("could not record a refused release: %s", type(exc).__name__)


def audited(
    run: Callable[[], T],
    on_error: Callable[[BaseException], None],
) -> T:
    """``run()``; on any exception call ``on_error(exc)`` first, then re-raise it."""
    try:
        return run()
    except Exception as exc:
        on_error(exc)
        raise


def page(db: Database, table: Table, *, after: int, limit: int) -> dict[str, Any]:
    """Rows with ``seq > after`` in order, at most ``limit``, and the cursor of the next page."""
    with db.read() as conn:
        rows = [
            dict(row._mapping)
            for row in conn.execute(
                select(table).where(table.c.seq > after).order_by(table.c.seq).limit(limit + 1)
            )
        ]
    more = len(rows) > limit
    rows = rows[:limit]
    return {"entries": rows, "next_after": rows[-1]["seq"] if more else None}


def public_refusal(row: dict[str, Any]) -> dict[str, Any]:
    """A ``release_audit`` row as ``GET /v1/audit`` shows it."""
    return {
        **row,
        "request": json.loads(row["request"]),
        "errors": json.loads(row["errors"]),
    }


def logged_download(
    db: Database,
    chunks: Iterator[bytes],
    *,
    actor_role: str,
    release_id: str,
    encoding: str,
    actor: str | None = None,
) -> Iterator[bytes]:
    """Record a message download now (who, which release, when, encoding), stream ``chunks``,
    then record the bytes sent and whether the download completed (also when cut short)."""
    with db.write() as conn:
        seq = conn.execute(
            insert(access_log).values(
                time=now_text(),
                actor_role=actor_role,
                actor=actor,
                release_id=release_id,
                encoding=encoding,
                bytes=None,
                completed=0,
            )
        ).inserted_primary_key[0]

    def stream() -> Iterator[bytes]:
        sent, completed = 0, False
        try:
            for chunk in chunks:
                yield chunk
                sent += len(chunk)
            completed = True
        finally:
            try:
                with db.write() as conn:
                    conn.execute(
                        update(access_log)
                        .where(access_log.c.seq == seq)
                        .values(bytes=sent, completed=int(completed))
                    )
            except Exception as exc:  # noqa: BLE001 - the download itself already happened
                log.error("could not finish access-log row %s: %s", seq, type(exc).__name__)

    return stream()


def public_access(row: dict[str, Any]) -> dict[str, Any]:
    """An ``access_log`` row as ``GET /v1/access-log`` shows it."""
    return {**row, "completed": bool(row["completed"])}
