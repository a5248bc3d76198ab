"""Releases: randomize every registered example's label once, then spend-and-store atomically.

Implements the labels party's side of the protocol: the ONE privatized message, produced by
``shared.randomizer.label_randomizer`` (Ghazi et al. 2022 Alg. 3 / Liu & Huang Alg. 4) on the
registered universe, where unlabeled examples carry ``default_label`` BEFORE randomization (so
the message does not reveal which clicks converted).

Order of work. (1) Read a snapshot of the universe and its labels (a read transaction) and
randomize it outside any write lock, at most ``concurrency`` at a time. (2) In ONE write
transaction: re-check that the labels are unchanged since the snapshot (``data_version``; if not,
start again), check the budget, insert the release, its message chunks and the two ledger entries
(epsilon1: the histogram and the DP label mean; epsilon2: the randomizer), add the spend, mark the
dataset released (which freezes its examples and labels). A randomization that loses the race is
discarded unseen, which costs no privacy; the message is served only after its spend is committed.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from operator import itemgetter
from typing import Any

import numpy as np
from sqlalchemy import Connection, insert, select, update

from labels_party.budget import accountant, ledger
from labels_party.budget import idempotency as idem
from labels_party.catalog import datasets as ds
from labels_party.db.engine import Database
from labels_party.db.models import (
    datasets,
    message_chunks,
    releases,
)
from labels_party.db.models import ledger as ledger_table
from labels_party.errors import ConflictError, FieldError, NotFoundError
from labels_party.intake.parsing import gc_paused
from shared import epsilon as amounts
from shared.message import (
    MessageHeader,
    body_digest,
    encode_sections_of_pieces,
    header_for,
    json_from_sections,
    json_safe,
    new_release_id,
)
from shared.plan import ReleasePlan, ReleaseRequest
from shared.randomizer import Release, execute, public_randomizer
from shared.rng import Rng, SystemRandom
from shared.segments import (
    SegmentedPlan,
    SegmentedRelease,
    execute_segmented,
    plan_segmented,
    segment_counts,
)

Randomizer = Callable[[ReleasePlan, np.ndarray, Rng], Release]
RngFactory = Callable[[], Rng]

CHUNK_BYTES = 1 << 20  # one stored blob of the binary message (label chunks stay 8-aligned)
_FETCH_ROWS = 65536
_FIRST, _SECOND, _THIRD = itemgetter(0), itemgetter(1), itemgetter(2)


def plan_for(row: ds.DatasetRow, request: ReleaseRequest, *, n: int) -> ReleasePlan:
    """The plan of ``request`` on dataset ``row`` with ``n`` registered examples (public),
    refused (``InvalidParameterError``: a 422 naming the field) if no randomizer can run it:
    ``shared.randomizer.public_randomizer``'s refusal reads the plan alone, so it comes here,
    before a preview says the release fits, a label is read or an external release is charged
    (the unbiased family at epsilon2 1e-6, RPWithPrior on bounds whose cells the floats
    cannot tell apart: both charged and then never runnable before)."""
    plan = request.plan(n=n, lo=row.label_min, hi=row.label_max)
    if math.isfinite(plan.randomizer_float):  # not a non-private plan (no randomizer)
        public_randomizer(plan)
    return plan


def segmented_plan_for(
    row: ds.DatasetRow, request: ReleaseRequest, counts: dict[str, int]
) -> SegmentedPlan | None:
    """The segmented plan of ``request`` on a segmented dataset with public per-segment
    ``counts`` (``shared.segments.plan_segmented``); None: not segmented, or one group."""
    if row.segment_column is None:
        return None
    return plan_segmented(
        request, counts, column=row.segment_column, lo=row.label_min, hi=row.label_max
    )


@dataclass(frozen=True, kw_only=True)
class _Snapshot:
    row: ds.DatasetRow
    # The registered ids in message order, in consecutive pieces: each piece some ids joined
    # by "\n" (UTF-8), the pieces joined by "\n" too (``shared.message.body_digest``). Never
    # joined in memory: at 10^8 ids the joined text alone is 1 GB.
    id_pieces: list[bytes]
    labels: np.ndarray  # label or default_label, aligned with the ids
    segments: list[str] | None = None  # each id's public segment (segmented datasets)


def _finite_or_none(value: float) -> float | None:
    return float(value) if value is not None and math.isfinite(value) else None


class ReleaseService:
    """Creates releases; randomness and the randomizer are injectable for tests."""

    def __init__(
        self,
        db: Database,
        *,
        rng_factory: RngFactory | None = None,
        randomizer: Randomizer | None = None,
        concurrency: int = 2,
        commit_delay: float = 0.0,
    ) -> None:
        self._db = db
        self._rng_factory: RngFactory = rng_factory or SystemRandom
        self._randomizer: Randomizer = randomizer or execute
        self._slots = threading.BoundedSemaphore(concurrency)
        self._commit_delay = commit_delay
        self._in_flight = idem.InFlight()

    def preview(self, *, dataset: str, request: ReleaseRequest) -> dict[str, Any]:
        """What ``request`` would spend and leave: its plan; reads no label, spends nothing."""
        with self._db.read() as conn:
            row = ds.load(conn, dataset)
            counts = _segment_counts(self._db, conn, row)
        _check_releasable(row)
        plan = plan_for(row, request, n=row.n_examples)
        segmented = segmented_plan_for(row, request, counts)
        budget = accountant.budget_of(row)
        return {
            "dry_run": True,
            "dataset": row.name,
            "n": row.n_examples,
            "plan": plan.public() if segmented is None else segmented.public(),
            "budget": {
                "budget": amounts.text(budget.budget),
                "spent": amounts.text(budget.spent),
                "requested": amounts.text(plan.epsilon),
                "fits": budget.fits(plan.epsilon),
                "left_after": amounts.text(budget.after(epsilon=plan.epsilon).left),
            },
        }

    def create(
        self,
        *,
        dataset: str,
        request: ReleaseRequest,
        actor_role: str,
        actor: str | None = None,
        key: idem.IdempotencyKey | None = None,
    ) -> dict[str, Any]:
        """Randomize, then spend and store in one transaction; returns the release metadata.

        ``key``: the request's idempotency key; if it names a release already, its stored
        answer (``idem.Replayed``), nothing read or spent."""

        def attempt() -> dict[str, Any]:
            # The snapshot is passed on, not kept here: its raw labels are freed once randomized.
            return self._randomize_and_store(
                self._snapshot(dataset, request), request, actor_role, actor, key
            )

        with self._in_flight.hold(dataset, key):
            if (answer := idem.replay_first(self._db, dataset, key)) is not None:
                return answer
            return ds.retry_while_stale(attempt, dataset=dataset, what="release")

    def _snapshot(self, name: str, request: ReleaseRequest) -> _Snapshot:
        with self._db.read() as conn:
            row = ds.load(conn, name)
            accountant.budget_of(row).check(request.epsilon)
            _check_releasable(row)
            cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
            try:
                segmented = row.segment_column is not None
                cursor.execute(
                    self._db.sql(
                        "SELECT example_id, COALESCE(value, ?)"
                        + (", segment" if segmented else "")
                        + " FROM entries WHERE dataset_id = ? AND registered = 1 "
                        "ORDER BY example_id"
                    ),
                    (row.default_label, row.id),
                )
                pieces: list[bytes] = []
                segments: list[str] | None = [] if segmented else None
                labels = np.empty(row.n_examples, dtype=np.float64)
                filled = 0
                with gc_paused():
                    # Per fetched batch: its ids as one piece of bytes, its labels straight
                    # into the array (no transposed tuples: ``zip(*batch)`` alone cost as much
                    # as the rest of this loop).
                    while batch := cursor.fetchmany(_FETCH_ROWS):
                        count = len(batch)
                        if filled + count > labels.size:
                            raise RuntimeError("entries disagree with the dataset's n_examples")
                        pieces.append("\n".join(map(_FIRST, batch)).encode("utf-8"))
                        labels[filled : filled + count] = np.fromiter(
                            map(_SECOND, batch), dtype=np.float64, count=count
                        )
                        if segments is not None:
                            segments.extend(map(_THIRD, batch))
                        filled += count
            finally:
                cursor.close()
        if filled != row.n_examples:
            raise RuntimeError("entries disagree with the dataset's n_examples")
        return _Snapshot(row=row, id_pieces=pieces, labels=labels, segments=segments)

    def _randomize_and_store(
        self,
        snap: _Snapshot,
        request: ReleaseRequest,
        actor_role: str,
        actor: str | None,
        key: idem.IdempotencyKey | None,
    ) -> dict[str, Any]:
        row, id_pieces, segments = snap.row, snap.id_pieces, snap.segments
        n = snap.labels.size
        plan = plan_for(row, request, n=n)
        segmented = (
            segmented_plan_for(row, request, segment_counts(segments))
            if segments is not None
            else None
        )
        release: Release | SegmentedRelease
        with self._slots:
            if segmented is None:
                release = self._randomizer(plan, snap.labels, self._rng_factory())
            else:
                assert segments is not None
                release = execute_segmented(segmented, snap.labels, segments, self._rng_factory())
        del snap  # the raw labels: the caller keeps no reference, so they are freed here
        noisy = np.ascontiguousarray(release.noisy_labels, dtype=np.float64)
        if noisy.shape != (n,) or not np.isfinite(noisy).all():
            raise RuntimeError("the randomizer returned a malformed array")
        if segmented is not None:
            # The body lists the examples group by group (``shared.message.MessageSegments``).
            assert isinstance(release, SegmentedRelease)
            order = release.order
            ids = b"\n".join(id_pieces).split(b"\n")
            id_pieces = [b"\n".join([ids[i] for i in order])]
            noisy = np.ascontiguousarray(noisy[order])
            plan = segmented.charged()
        elif release.plan is not plan:  # the budget covers this plan's amounts only
            raise RuntimeError("the randomizer ran another plan than it was given")
        release_id = new_release_id()
        header = header_for(
            release,
            release_id=release_id,
            dataset=row.name,
            default_label=row.default_label,
            n=n,
            body_sha256=body_digest(id_pieces, [noisy]),
            created=datetime.now(UTC),
        )
        bins = _bins_of_release(release)
        # The binary message is built twice, one chunk at a time, never whole: once here for
        # its digest and size, once in the write transaction to store it.
        digest, size = hashlib.sha256(), 0
        for chunk in _chunks(header, id_pieces, noisy):
            digest.update(chunk["data"])
            size += chunk["size"]
        record = release_record(
            header,
            plan,
            requested_mechanism=request.mechanism,
            actor_role=actor_role,
            actor=actor,
            binary_sha256=digest.hexdigest(),
            binary_size=size,
            expected_label_mse=_finite_or_none(release.expected_label_mse),
        )
        charges = release_charges(
            plan,
            requested_mechanism=request.mechanism,
            header=header,
            bins=bins,
        )
        answer = _public(record, dataset=row.name, bins=bins)
        with self._db.write() as conn:
            current = ds.load(conn, row.name, for_update=True)
            if (replayed := idem.replay(conn, current.id, key)) is not None:
                return replayed  # a repeat committed first: this draw is discarded unseen
            if current.data_version != row.data_version:
                raise ds.StaleSnapshot
            store_and_spend(conn, current, record, charges, plan, time=record["created"])
            for chunk in _chunks(header, id_pieces, noisy):
                conn.execute(insert(message_chunks).values(release_id=release_id, **chunk))
            conn.execute(update(datasets).where(datasets.c.id == row.id).values(state=ds.RELEASED))
            idem.remember(conn, row.id, key, made=release_id, answer=answer, time=record["created"])
            if self._commit_delay:
                time.sleep(self._commit_delay)
        return answer


def _segment_counts(db: Database, conn: Connection, row: ds.DatasetRow) -> dict[str, int]:
    """How many registered examples each segment has (public; {} when not segmented)."""
    if row.segment_column is None:
        return {}
    found = db.fetch(
        conn,
        "SELECT segment, COUNT(*) FROM entries WHERE dataset_id = ? AND registered = 1 "
        "GROUP BY segment",
        [row.id],
    )
    return {str(segment): int(count) for segment, count in found}


def _bins_of_release(release: Release | SegmentedRelease) -> int:
    """The histogram's cells (a segmented release: its groups share one grid)."""
    if isinstance(release, SegmentedRelease):
        return max(one.prior.k for one in release.releases)
    return release.prior.k


def paid_columns(plan: ReleasePlan) -> dict[str, Any]:
    """A release row's charges: the exact amounts it paid, the floats each step ran at, n."""
    return {
        **accountant.columns("epsilon1", plan.epsilon1),
        **accountant.columns("epsilon2", plan.epsilon2),
        **accountant.columns("epsilon", plan.epsilon),
        "epsilon1": plan.epsilon1_float,
        "epsilon2": plan.randomizer_float,
        "n": plan.n,
    }


def release_record(
    header: MessageHeader,
    plan: ReleasePlan,
    *,
    requested_mechanism: str,
    actor_role: str,
    binary_sha256: str,
    binary_size: int,
    expected_label_mse: float | None = None,
    actor: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """The ``releases`` row of a release with ``header`` that ran ``plan`` (the service's or an
    external one): the floats each step ran at, and the exact amounts it paid."""
    return {
        "id": header.release_id,
        "requested_mechanism": requested_mechanism,
        "mechanism": header.mechanism,
        "params": ledger.canonical_json(json_safe(header.params)),
        **paid_columns(plan),
        "created": header.created.isoformat(timespec="microseconds").replace("+00:00", "Z"),
        "message_sha256": header.body_sha256,
        "binary_sha256": binary_sha256,
        "binary_size": binary_size,
        "expected_label_mse": expected_label_mse,
        "actor_role": actor_role,
        "actor": actor,
        **extra,
    }


def store_and_spend(
    conn: Connection,
    row: ds.DatasetRow,
    record: dict[str, Any],
    charges: list[accountant.Charge],
    plan: ReleasePlan,
    *,
    time: str,
) -> None:
    """Store the release row and spend its charges at ``time``, in the caller's write
    transaction (``row`` read for update): the spend is refused if it does not fit."""
    accountant.budget_of(row).check(plan.epsilon)
    conn.execute(insert(releases).values(dataset_id=row.id, **record))
    accountant.spend(
        conn,
        row,
        charges,
        time=time,
        release_id=record["id"],
        actor_role=record["actor_role"],
        message_sha256=record["message_sha256"] or None,  # "": charged before the message
        actor=record.get("actor"),
    )


def release_charges(
    plan: ReleasePlan,
    *,
    requested_mechanism: str,
    header: MessageHeader | None,
    bins: int,
    inputs: dict[str, Any] | None = None,
) -> list[accountant.Charge]:
    """The two ledger entries of a release of ``plan`` (the service's or an external one):
    epsilon1 (histogram + DP mean, split exactly in its parameters) and epsilon2 (the
    randomizer and its public parameters, and ``inputs``: what an external job read).

    ``header`` None: an external release charged before its noise is drawn; the randomizer
    entry names the requested mechanism, and its publication entry the chosen one and its
    parameters (``labels_party.releasing.external_releases``)."""
    if header is None:
        mechanism, params, recommended_transform = requested_mechanism, {}, None
    else:
        mechanism, params = header.mechanism, json_safe(header.params)
        recommended_transform = header.recommended_transform
    if header is not None and header.segments is not None:
        # Each group's randomizer and its public parameters (parallel composition: the
        # groups' labels are disjoint, so epsilon2 is charged once for all of them).
        params = {
            "column": header.segments.column,
            "groups": [
                {
                    "segments": group.segments,
                    "pooled": group.pooled,
                    "n": group.n,
                    "mechanism": group.mechanism,
                    "params": json_safe(group.params),
                    "bins": len(group.histogram.probs),
                }
                for group in header.segments.groups
            ],
        }
    mean = plan.label_mean_epsilon
    return [
        accountant.Charge(
            kind=ledger.KIND_HISTOGRAM,
            mechanism="private_histogram",
            epsilon=plan.epsilon1,
            parameters={
                "bins": bins,
                "noise": "discrete_laplace",
                "sensitivity": 2,
                "split": plan.split,
                # epsilon1 = the histogram's + the DP label mean's (basic composition).
                "histogram_epsilon": amounts.text(plan.histogram_epsilon),
                "label_mean_epsilon": None if mean is None else amounts.text(mean),
            },
        ),
        accountant.Charge(
            kind=ledger.KIND_RANDOMIZER,
            mechanism=mechanism,
            epsilon=plan.epsilon2,
            parameters={
                "requested_mechanism": requested_mechanism,
                "options": json_safe(dict(plan.options)),
                "model_dim": plan.model_dim,
                "params": params,
                "n": plan.n,
                "recommended_transform": recommended_transform,
                # An external release's keyed input digest (``labels_input_hmac``): ``ledger
                # verify`` names datasets charged for the same labels.
                **(inputs or {}),
            },
        ),
    ]


def _check_releasable(row: ds.DatasetRow) -> None:
    ds.refuse_archived(row)
    if row.n_examples == 0:
        raise ConflictError(
            f"dataset {row.name!r} has no registered examples to release",
            [FieldError(field="dataset", message="no registered examples")],
        )


def _public(record: Any, *, dataset: str, bins: int | None) -> dict[str, Any]:
    """A release as the API shows it: the exact charges as decimal strings."""
    get = record.get if isinstance(record, dict) else record._mapping.get
    return {
        "id": get("id"),
        "dataset": dataset,
        "mechanism": get("mechanism"),
        "requested_mechanism": get("requested_mechanism"),
        "params": json.loads(get("params")),
        "bins": bins,
        **{
            key: amounts.text(ledger.stored_amount(get(f"{key}_exact"), get(key)))
            for key in ("epsilon1", "epsilon2", "epsilon")
        },
        "n": get("n"),
        "created": get("created"),
        "message_sha256": get("message_sha256"),
        "binary_sha256": get("binary_sha256"),
        "binary_size": get("binary_size"),
        "expected_label_mse": get("expected_label_mse"),
        "state": get("state") or "released",
    }


def _chunks(
    header: MessageHeader, id_pieces: list[bytes], noisy: np.ndarray
) -> Iterator[dict[str, Any]]:
    """The binary encoding as stored rows, each tagged with the section it belongs to, one
    chunk built at a time (``shared.message.encode_sections_of_pieces``)."""
    sections = encode_sections_of_pieces(header, id_pieces, noisy, chunk=CHUNK_BYTES)
    for seq, (part, data) in enumerate(sections):
        yield {"seq": seq, "part": part, "size": len(data), "data": data}


# ---- reading -------------------------------------------------------------------------------


def release_metadata(db: Database, release_id: str) -> dict[str, Any]:
    """The release as returned by ``POST /releases`` (404 if unknown)."""
    with db.read() as conn:
        row = conn.execute(
            select(releases, datasets.c.name.label("dataset_name"))
            .join(datasets, datasets.c.id == releases.c.dataset_id)
            .where(releases.c.id == release_id)
        ).first()
    if row is None:
        raise NotFoundError(
            f"release {release_id!r} not found",
            [FieldError(field="release_id", message="unknown release")],
        )
    return _public(row, dataset=row.dataset_name, bins=_bins_of(db, release_id))


def _bins_of(db: Database, release_id: str) -> int | None:
    """The histogram size of a release, from its ledger entry (public)."""
    with db.read() as conn:
        text = conn.execute(
            select(ledger_table.c.parameters).where(
                ledger_table.c.release_id == release_id,
                ledger_table.c.kind == ledger.KIND_HISTOGRAM,
            )
        ).scalar()
    return None if text is None else json.loads(text).get("bins")


@dataclass(frozen=True, kw_only=True)
class StoredMessage:
    """Where a release's message chunks are; each chunk is fetched on demand while streaming."""

    release_id: str
    chunks: list[tuple[int, int, int]]  # (seq, part, size)
    message_sha256: str
    binary_sha256: str

    @property
    def size(self) -> int:
        return sum(size for _, _, size in self.chunks)


def stored_message(db: Database, release_id: str) -> StoredMessage:
    meta = release_metadata(db, release_id)
    with db.read() as conn:
        storage = conn.execute(
            select(releases.c.storage).where(releases.c.id == release_id)
        ).scalar()
        if storage is not None:
            raise NotFoundError(
                f"release {release_id!r} was executed outside the labels party: its message is "
                "where the job wrote it (header.json + Parquet body), not here",
                [FieldError(field="release_id", message=f"message stored {storage}ly")],
            )
        rows = conn.execute(
            select(message_chunks.c.seq, message_chunks.c.part, message_chunks.c.size)
            .where(message_chunks.c.release_id == release_id)
            .order_by(message_chunks.c.seq)
        ).all()
    return StoredMessage(
        release_id=release_id,
        chunks=[(int(a), int(b), int(c)) for a, b, c in rows],
        message_sha256=meta["message_sha256"],
        binary_sha256=meta["binary_sha256"],
    )


def _fetch_chunk(db: Database, release_id: str, seq: int) -> bytes:
    with db.read() as conn:
        data = conn.execute(
            select(message_chunks.c.data).where(
                message_chunks.c.release_id == release_id, message_chunks.c.seq == seq
            )
        ).scalar_one()
    return bytes(data)


def iter_binary(db: Database, message: StoredMessage) -> Iterator[bytes]:
    """The stored binary encoding, one chunk (about 1 MiB) at a time."""
    for seq, _part, _size in message.chunks:
        yield _fetch_chunk(db, message.release_id, seq)


def iter_json(db: Database, message: StoredMessage) -> Iterator[bytes]:
    """The same content as ``shared.message.LabelMessage`` JSON, rendered chunk by chunk."""
    return json_from_sections(
        (part, _fetch_chunk(db, message.release_id, seq)) for seq, part, _size in message.chunks
    )
