"""Idempotency keys for requests that spend or add budget: a repeat changes nothing again.

The ``Idempotency-Key`` request header (IETF draft-ietf-httpapi-idempotency-key-header) on
``POST /v1/datasets/{name}/releases``, ``.../model-releases`` and ``.../budget`` (a top-up). The
key is stored in the SAME write transaction as the spend or the top-up (read for update on the
dataset row, so two requests with one key are serialized): either both or neither are committed.
A repeat with the key gets the stored answer (``Idempotent-Replayed: true``) before any budget
or state check, and reads no label. A repeat sent to the same process while the first is still
computing waits for it (:class:`InFlight`); one sent to another process (a replica) computes
too: whichever commits first is the release, the other finds the key at its commit and discards
its draw unseen (never stored or answered: no privacy cost) and answers the stored one.
The same key with another request, or from another caller, on that dataset is a 422 naming the
header. Keys are kept for good: a key names at most one spend (or top-up), ever.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, insert, select

from labels_party.budget.ledger import canonical_json
from labels_party.db.engine import Database
from labels_party.db.models import datasets, idempotency_keys, model_releases
from labels_party.errors import BadInputError, FieldError

HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
# Visible ASCII (a UUID, a ULID, a job name and attempt counter...), as Stripe's 255.
KEY_PATTERN = r"[\x21-\x7e]{1,255}"
_KEY_RE = re.compile(KEY_PATTERN)
RELEASE, MODEL, TOP_UP = "release", "model", "top_up"
# A model release's answer carries its message, which ``model_releases`` stores already: the
# key keeps the rest, and a replay takes the message from there.
_MESSAGE = "message"


@dataclass(frozen=True, kw_only=True)
class IdempotencyKey:
    """A request's key, what kind of request it is, and a digest of what it asks and who asks."""

    key: str
    kind: str
    request_sha256: str

    @classmethod
    def of(
        cls,
        header: str | None,
        *,
        kind: str,
        request: dict[str, Any],
        role: str,
        actor: str | None,
    ) -> IdempotencyKey | None:
        """The key a request header gives (None: no header), refused (422) unless 1 to 255
        visible ASCII characters; ``request`` is the request's canonical public form. The caller
        (role and principal) is part of the digest: two principals who pick the same key (a job
        name) are two requests, and the second is refused rather than given the first's answer
        with its spend recorded under the first's name (found by an audit)."""
        if header is None:
            return None
        if not _KEY_RE.fullmatch(header):
            raise BadInputError(
                f"invalid {HEADER} header",
                [FieldError(field=HEADER, message="must be 1 to 255 visible ASCII characters")],
            )
        asked = {"request": request, "role": role, "actor": actor}
        digest = hashlib.sha256(canonical_json(asked).encode()).hexdigest()
        return cls(key=header, kind=kind, request_sha256=digest)


class InFlight:
    """The keys this process is computing a request for: a repeat of one waits for it, then
    gets its answer, instead of reading every label and drawing again beside it (a client
    retrying a long release after its timeout; at 10^8 ids one more release in memory). Other
    processes (replicas) may still compute a repeat: the key's row decides at commit."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[tuple[str, str], threading.Event] = {}

    @contextmanager
    def hold(self, dataset: str, key: IdempotencyKey | None) -> Iterator[None]:
        """Run the body as the only holder of (``dataset``, ``key``) in this process."""
        if key is None:
            yield
            return
        ident = (dataset, key.key)
        while True:
            with self._lock:
                running = self._running.get(ident)
                if running is None:
                    mine = self._running[ident] = threading.Event()
                    break
            running.wait()
        try:
            yield
        finally:
            with self._lock:
                del self._running[ident]
            mine.set()


class Replayed(dict[str, Any]):
    """The stored answer to a repeated key (the route marks it ``Idempotent-Replayed``)."""


def replay(conn: Connection, dataset_id: int, key: IdempotencyKey | None) -> Replayed | None:
    """The answer stored for ``key`` on the dataset (None: not used yet), refused (422 naming
    the header) if the key was used for another request."""
    if key is None:
        return None
    row = _row(conn, dataset_id, key.key)
    if row is None:
        return None
    if row.kind != key.kind or row.request_sha256 != key.request_sha256:
        raise BadInputError(
            f"this {HEADER} was used for another request (or by another caller) on this dataset",
            [
                FieldError(
                    field=HEADER,
                    message=f"already names {_made(row)}, another request: use a new key",
                )
            ],
        )
    answer = json.loads(row.answer)
    if row.kind == MODEL:
        message = conn.execute(
            select(model_releases.c.message).where(model_releases.c.id == row.made)
        ).scalar_one()
        answer[_MESSAGE] = json.loads(message)
    return Replayed(answer)


def replay_first(db: Database, dataset: str, key: IdempotencyKey | None) -> Replayed | None:
    """:func:`replay` in a read transaction of its own, before a release checks or reads
    anything: a repeat gets its answer even once the budget is spent or the dataset archived
    (None also for an unknown dataset: the release itself then says so)."""
    if key is None:
        return None
    with db.read() as conn:
        found = conn.execute(select(datasets.c.id).where(datasets.c.name == dataset)).scalar()
        return None if found is None else replay(conn, int(found), key)


def remember(
    conn: Connection,
    dataset_id: int,
    key: IdempotencyKey | None,
    *,
    made: str,
    answer: dict[str, Any],
    time: str,
) -> None:
    """Store ``key`` with what the request ``made`` (a release or model release id, a top-up's
    ledger entry as ``ledger:<seq>``) and its ``answer``, in the caller's write transaction (the
    one that spends): the primary key (dataset, key) refuses a second one."""
    if key is None:
        return
    kept = {name: value for name, value in answer.items() if name != _MESSAGE}
    conn.execute(
        insert(idempotency_keys).values(
            dataset_id=dataset_id,
            key=key.key,
            kind=key.kind,
            request_sha256=key.request_sha256,
            made=made,
            answer=canonical_json(kept),
            created=time,
        )
    )


def _made(row: Any) -> str:
    """What a stored key names, as a refusal says it."""
    made = str(row.made)
    return f"ledger entry {made.removeprefix('ledger:')}" if made.startswith("ledger:") else made


def _row(conn: Connection, dataset_id: int, key: str) -> Any:
    return conn.execute(
        select(idempotency_keys).where(
            idempotency_keys.c.dataset_id == dataset_id, idempotency_keys.c.key == key
        )
    ).first()
