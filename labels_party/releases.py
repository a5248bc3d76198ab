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
import secrets
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
from sqlalchemy import insert, select, update

from labels_party import datasets as ds
from labels_party import ledger
from labels_party.db.engine import Database
from labels_party.db.models import (
    PART_HEAD,
    PART_IDS,
    PART_LABELS,
    datasets,
    message_chunks,
    releases,
)
from labels_party.db.models import ledger as ledger_table
from labels_party.errors import ConflictError, FieldError, NotFoundError
from labels_party.parsing import gc_paused
from shared.errors import BudgetExceededError
from shared.message import MessageHeader, NoisyHistogram, body_sha256, encode_binary
from shared.randomizer import (
    Release,
    default_split,
    label_randomizer,
    split_epsilon,
)
from shared.rng import Rng, SystemRandom

Randomizer = Callable[..., Release]
RngFactory = Callable[[], Rng]

CHUNK_BYTES = 1 << 20  # one stored blob of the binary message (label chunks stay 8-aligned)
_FETCH_ROWS = 65536
_MAX_ATTEMPTS = 4
_PREFIX = struct.Struct("<4sHI")
RELEASE_ID_PATTERN = r"^rel_[0-9a-f]{24}$"


@dataclass(frozen=True, kw_only=True)
class ReleaseRequest:
    """A validated release request (``params`` holds only the options the caller gave)."""

    mechanism: str
    epsilon: float
    epsilon_histogram: float | None = None
    bins: int | None = None  # None: shared.selection.adaptive_bins(n, epsilon1)
    params: dict[str, Any] | None = None


@dataclass(frozen=True, kw_only=True)
class _Snapshot:
    row: ds.DatasetRow
    ids_text: str  # the registered ids in message order, joined by "\n"
    labels: np.ndarray  # label or default_label, aligned with the ids


class _StaleSnapshot(Exception):
    """The labels changed between the snapshot and the write lock."""


def _json_safe(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple | np.ndarray):
        return [_json_safe(v) for v in (value.tolist() if isinstance(value, np.ndarray) else value)]
    if isinstance(value, np.generic):
        return value.item()
    return value


def _finite_or_none(value: float) -> float | None:
    return float(value) if value is not None and math.isfinite(value) else None


def new_release_id() -> str:
    return "rel_" + secrets.token_hex(12)


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
        self._randomizer: Randomizer = randomizer or label_randomizer
        self._slots = threading.BoundedSemaphore(concurrency)
        self._commit_delay = commit_delay

    def create(self, *, dataset: str, request: ReleaseRequest, actor_role: str) -> dict[str, Any]:
        """Randomize, then spend and store in one transaction; returns the release metadata."""
        for _attempt in range(_MAX_ATTEMPTS):
            snapshot = self._snapshot(dataset, request)
            try:
                return self._randomize_and_store(snapshot, request, actor_role)
            except _StaleSnapshot:
                continue
        raise ConflictError(
            f"dataset {dataset!r} kept changing while the release was computed; retry",
            [FieldError(field="dataset", message="labels changed during the release")],
        )

    def _snapshot(self, name: str, request: ReleaseRequest) -> _Snapshot:
        with self._db.read() as conn:
            row = ds.load(conn, name)
            _check_budget(row, request.epsilon)
            if row.n_examples == 0:
                raise ConflictError(
                    f"dataset {name!r} has no registered examples to release",
                    [FieldError(field="dataset", message="no registered examples")],
                )
            cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
            try:
                cursor.execute(
                    self._db.sql(
                        "SELECT example_id, COALESCE(value, ?) FROM entries "
                        "WHERE dataset_id = ? AND registered = 1 ORDER BY example_id"
                    ),
                    (row.default_label, row.id),
                )
                pieces: list[str] = []
                labels = np.empty(row.n_examples, dtype=np.float64)
                filled = 0
                with gc_paused():
                    while batch := cursor.fetchmany(_FETCH_ROWS):
                        ids, values = zip(*batch, strict=True)
                        if filled + len(ids) > labels.size:
                            raise RuntimeError("entries disagree with the dataset's n_examples")
                        pieces.append("\n".join(ids))
                        labels[filled : filled + len(ids)] = values
                        filled += len(ids)
            finally:
                cursor.close()
        if filled != row.n_examples:
            raise RuntimeError("entries disagree with the dataset's n_examples")
        return _Snapshot(row=row, ids_text="\n".join(pieces), labels=labels)

    def _randomize_and_store(
        self, snap: _Snapshot, request: ReleaseRequest, actor_role: str
    ) -> dict[str, Any]:
        row = snap.row
        n = snap.labels.size
        # Either way epsilon1 + epsilon2 <= request.epsilon exactly, so checking the budget for
        # request.epsilon covers what the ledger charges.
        if request.epsilon_histogram is None:
            eps1, eps2 = default_split(request.epsilon, n=n, mechanism=request.mechanism)
        else:
            eps1, eps2 = split_epsilon(request.epsilon, request.epsilon_histogram)
        with self._slots:
            release = self._randomizer(
                snap.labels,
                lo=row.label_min,
                hi=row.label_max,
                epsilon1=eps1,
                epsilon2=eps2,
                mechanism=request.mechanism,
                rng=self._rng_factory(),
                bins=request.bins,
                **(request.params or {}),
            )
        noisy = np.ascontiguousarray(release.noisy_labels, dtype=np.float64)
        if noisy.shape != (n,) or not np.isfinite(noisy).all():
            raise RuntimeError("the randomizer returned a malformed array")
        if (release.epsilon1, release.epsilon2) != (eps1, eps2):  # the budget covers these only
            raise RuntimeError("the randomizer reports other epsilons than it was given")
        release_id = new_release_id()
        created = datetime.now(UTC)
        created_text = created.isoformat(timespec="microseconds").replace("+00:00", "Z")
        params = _json_safe(release.params)
        header = MessageHeader(
            release_id=release_id,
            dataset=row.name,
            created=created,
            mechanism=release.mechanism,
            params=params,
            epsilon1=release.epsilon1,
            epsilon2=release.epsilon2,
            label_min=row.label_min,
            label_max=row.label_max,
            default_label=row.default_label,
            histogram=NoisyHistogram(**_json_safe(release.prior.to_dict())),
            n=n,
            body_sha256=body_sha256([snap.ids_text], noisy),
            model_dim=release.model_dim,
            label_mean=release.label_mean,
            label_mean_epsilon=release.label_mean_epsilon,
        )
        chunks = _chunks(header, snap.ids_text, noisy)
        digest = hashlib.sha256()
        for chunk in chunks:
            digest.update(chunk["data"])
        epsilon = release.epsilon1 + release.epsilon2
        meta = {
            "id": release_id,
            "dataset": row.name,
            "mechanism": release.mechanism,
            "requested_mechanism": request.mechanism,
            "params": params,
            "bins": release.prior.k,
            "epsilon1": release.epsilon1,
            "epsilon2": release.epsilon2,
            "epsilon": epsilon,
            "n": n,
            "created": created_text,
            "message_sha256": header.body_sha256,
            "binary_sha256": digest.hexdigest(),
            "binary_size": sum(chunk["size"] for chunk in chunks),
            "expected_label_mse": _finite_or_none(release.expected_label_mse),
        }
        with self._db.write() as conn:
            current = ds.load(conn, row.name, for_update=True)
            if current.data_version != row.data_version:
                raise _StaleSnapshot
            _check_budget(current, request.epsilon)
            conn.execute(
                insert(releases).values(
                    id=release_id,
                    dataset_id=row.id,
                    requested_mechanism=request.mechanism,
                    mechanism=release.mechanism,
                    params=ledger.canonical_json(params),
                    epsilon1=release.epsilon1,
                    epsilon2=release.epsilon2,
                    epsilon=epsilon,
                    n=n,
                    created=created_text,
                    message_sha256=meta["message_sha256"],
                    binary_sha256=meta["binary_sha256"],
                    binary_size=meta["binary_size"],
                    expected_label_mse=meta["expected_label_mse"],
                    actor_role=actor_role,
                )
            )
            for chunk in chunks:
                conn.execute(insert(message_chunks).values(release_id=release_id, **chunk))
            common = {
                "time": created_text,
                "dataset": row.name,
                "release_id": release_id,
                "actor_role": actor_role,
                "message_sha256": header.body_sha256,
            }
            ledger.append(
                conn,
                kind=ledger.KIND_HISTOGRAM,
                mechanism="private_histogram",
                epsilon=release.epsilon1,
                parameters={
                    "bins": release.prior.k,
                    "noise": "discrete_laplace",
                    "sensitivity": 2,
                    "split": "given" if request.epsilon_histogram is not None else "default",
                    # epsilon1 = the histogram's + the DP label mean's (basic composition).
                    "histogram_epsilon": release.histogram_epsilon,
                    "label_mean_epsilon": release.label_mean_epsilon,
                },
                **common,
            )
            ledger.append(
                conn,
                kind=ledger.KIND_RANDOMIZER,
                mechanism=release.mechanism,
                epsilon=release.epsilon2,
                parameters={
                    "requested_mechanism": request.mechanism,
                    "options": request.params or {},
                    "params": params,
                    "n": n,
                    "recommended_transform": release.recommended_transform,
                },
                **common,
            )
            conn.execute(
                update(datasets)
                .where(datasets.c.id == row.id)
                .values(
                    epsilon_spent=ds.add_spend(
                        current.epsilon_spent, release.epsilon1, release.epsilon2
                    ),
                    state=ds.RELEASED,
                )
            )
            if self._commit_delay:
                time.sleep(self._commit_delay)
        return meta


def _check_budget(row: ds.DatasetRow, epsilon: float) -> None:
    if not ds.fits_budget(budget=row.epsilon_budget, spent=row.epsilon_spent, requested=epsilon):
        raise BudgetExceededError(
            spent=row.epsilon_spent, requested=epsilon, budget=row.epsilon_budget
        )


def _chunks(header: MessageHeader, ids_text: str, noisy: np.ndarray) -> list[dict[str, Any]]:
    """The binary encoding as stored rows, each tagged with the section it belongs to."""
    out: list[dict[str, Any]] = []
    ids_left = -1  # unknown until the u64 length piece
    for seq, data in enumerate(encode_binary(header, [ids_text], noisy, chunk=CHUNK_BYTES)):
        if seq == 0:
            part = PART_HEAD
        elif seq == 1:
            part, ids_left = PART_IDS, struct.unpack("<Q", data)[0]
        elif ids_left > 0:
            part, ids_left = PART_IDS, ids_left - len(data)
        else:
            part = PART_LABELS
        out.append({"seq": seq, "part": part, "size": len(data), "data": data})
    return out


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
            f"release {release_id!r} not found", [FieldError(field="id", message="unknown release")]
        )
    with db.read() as conn:  # the histogram's bin count K, as POST /releases answered it
        histogram = conn.execute(
            select(ledger_table.c.parameters).where(
                ledger_table.c.release_id == release_id,
                ledger_table.c.kind == ledger.KIND_HISTOGRAM,
            )
        ).scalar_one()
    return {
        "id": row.id,
        "dataset": row.dataset_name,
        "mechanism": row.mechanism,
        "requested_mechanism": row.requested_mechanism,
        "params": json.loads(row.params),
        "bins": int(json.loads(histogram)["bins"]),
        "epsilon1": row.epsilon1,
        "epsilon2": row.epsilon2,
        "epsilon": row.epsilon,
        "n": row.n,
        "created": row.created,
        "message_sha256": row.message_sha256,
        "binary_sha256": row.binary_sha256,
        "binary_size": row.binary_size,
        "expected_label_mse": row.expected_label_mse,
    }


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
    """The same content as ``shared.message.LabelMessage`` JSON, rendered chunk by chunk.

    Deterministic (shortest round-trip floats), so every pull is byte-identical.
    """
    ids_started = labels_started = False
    carry = b""
    skip_length = True
    for seq, part, _size in message.chunks:
        data = _fetch_chunk(db, message.release_id, seq)
        if part == PART_HEAD:
            _magic, _version, header_len = _PREFIX.unpack_from(data, 0)
            header_json = data[_PREFIX.size : _PREFIX.size + header_len]
            yield b'{"header":' + header_json + b',"body":{"example_ids":['
        elif part == PART_IDS:
            if skip_length:
                data, skip_length = data[8:], False
            buffer = carry + data
            cut = buffer.rfind(b"\n")
            if cut < 0:
                carry = buffer
                continue
            complete, carry = buffer[:cut], buffer[cut + 1 :]
            yield (b"," if ids_started else b"") + b'"' + complete.replace(b"\n", b'","') + b'"'
            ids_started = True
        else:
            if not labels_started:
                if carry or not ids_started:
                    yield (b"," if ids_started else b"") + b'"' + carry + b'"'
                    carry = b""
                yield b'],"noisy_labels":['
            values = np.frombuffer(data, dtype="<f8").tolist()
            text = ",".join(map(repr, values)).encode("ascii")
            yield (b"," if labels_started else b"") + text
            labels_started = True
    if not labels_started:  # n = 0 never happens (a release needs examples); keep JSON valid
        yield b'],"noisy_labels":['
    yield b"]}}"
