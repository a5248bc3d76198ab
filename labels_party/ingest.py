"""Storing a parsed batch: labels (advertiser) and example registrations (publisher).

A batch is one write transaction: all of it or none of it. The common case, new ids, is one
``executemany`` upsert through the raw DBAPI cursor (SQLite), or on PostgreSQL one ``COPY`` into
a temporary staging table and one statement from it (PostgreSQL's bulk path: row-by-row
``executemany`` is several times slower there); only when some ids already carry a label does
a second pass read those labels back to tell "unchanged" from "different" (a 409 unless
``overwrite``). Within a batch a repeated id behaves like a repeat in
a later batch: the same value is idempotent, a different one is a conflict (or, with
``overwrite``, the last one wins).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from itertools import repeat

import numpy as np
from sqlalchemy import Connection, update

from labels_party import datasets as ds
from labels_party.db.engine import Database
from labels_party.db.models import datasets
from labels_party.errors import BadInputError, ConflictError, FieldError
from labels_party.parsing import LabelRows, gc_paused
from shared.segments import MAX_SEGMENTS

_LOOKUP_CHUNK = 500
MAX_CONFLICTS_LISTED = 10

# What a row does to an id already present: a label fills an empty value (a different one is a
# conflict, found afterwards); a registration marks it registered. Shared by both databases.
_ON_LABEL = (
    "ON CONFLICT (dataset_id, example_id) DO UPDATE SET value = excluded.value "
    "WHERE entries.value IS NULL"
)
_ON_REGISTER = (
    "ON CONFLICT (dataset_id, example_id) DO UPDATE SET registered = 1 WHERE entries.registered = 0"
)
_INSERT_LABELS = (
    "INSERT INTO entries (dataset_id, example_id, registered, value) VALUES (?, ?, 0, ?) "
    f"{_ON_LABEL}"
)
_UPDATE_LABEL = "UPDATE entries SET value = ? WHERE dataset_id = ? AND example_id = ?"
_REGISTER = (
    "INSERT INTO entries (dataset_id, example_id, registered, value) VALUES (?, ?, 1, NULL) "
    f"{_ON_REGISTER}"
)
# A segmented dataset's registration: the example with its segment (conflicts checked first).
_REGISTER_SEGMENT = (
    "INSERT INTO entries (dataset_id, example_id, registered, value, segment) "
    "VALUES (?, ?, 1, NULL, ?) ON CONFLICT (dataset_id, example_id) DO NOTHING"
)
_COPY_ROWS = 65_536  # rows per COPY write (bounds the text built at once)

# PostgreSQL: the batch (first row of each id) is COPYed into a staging table, then moved by one
# statement, of two kinds (measured in bench/results/labels_service.md):
# - a batch smaller than the dataset: ``INSERT ... SELECT ... ON CONFLICT``, one index probe
#   per row, so its cost does not grow with the dataset (a hash join would read all its rows);
# - a larger batch (a first bulk load): one update-join and one anti-join, which read the
#   dataset's rows once and beat a probe per row there. No race is possible: every write
#   transaction holds the ledger table lock (``Database.write``), so nothing inserts in between.
_STAGING = (
    "CREATE TEMPORARY TABLE IF NOT EXISTS labeldp_staging (example_id text NOT NULL, "
    "value double precision) ON COMMIT DELETE ROWS"
)
_COPY_STAGING = "COPY labeldp_staging (example_id, value) FROM STDIN"


def _staged(registered: int, on_conflict: str) -> str:
    value = "NULL" if registered else "s.value"
    return (
        "INSERT INTO entries (dataset_id, example_id, registered, value) "
        f"SELECT %(d)s, s.example_id, {registered}, {value} FROM labeldp_staging AS s {on_conflict}"
    )


def _joined(registered: int, condition: str, assignment: str) -> str:
    value = "NULL" if registered else "s.value"
    return (
        f"WITH upd AS (UPDATE entries AS e SET {assignment} FROM labeldp_staging AS s "
        f"WHERE e.dataset_id = %(d)s AND e.example_id = s.example_id AND {condition} "
        "RETURNING 1), "
        "ins AS (INSERT INTO entries (dataset_id, example_id, registered, value) "
        f"SELECT %(d)s, s.example_id, {registered}, {value} FROM labeldp_staging AS s "
        "WHERE NOT EXISTS (SELECT 1 FROM entries AS e WHERE e.dataset_id = %(d)s "
        "AND e.example_id = s.example_id) RETURNING 1) "
        "SELECT (SELECT count(*) FROM upd) + (SELECT count(*) FROM ins)"
    )


# (probe per row, join) for labels and for registrations.
_LABELS_STAGED = (_staged(0, _ON_LABEL), _joined(0, "e.value IS NULL", "value = s.value"))
_REGISTER_STAGED = (_staged(1, _ON_REGISTER), _joined(1, "e.registered = 0", "registered = 1"))


@dataclass(frozen=True, kw_only=True)
class LabelsResult:
    """Counts reported to the advertiser (never values)."""

    accepted: int  # rows in the batch
    new: int  # ids that got their first label
    clipped: int  # values moved into [label_min, label_max]
    unchanged: int  # repeats of the stored value
    overwritten: int  # different values replacing stored ones (overwrite=true)
    n_labels: int  # ids of the dataset that now have a label


@dataclass(frozen=True, kw_only=True)
class ExamplesResult:
    """Counts reported to the publisher."""

    accepted: int
    registered_new: int
    n_examples: int


def _refuse_if_released(row: ds.DatasetRow) -> None:
    ds.refuse_archived(row)
    if row.state != ds.OPEN:
        raise ConflictError(
            f"dataset {row.name!r} has been released: its examples and labels are frozen",
            [FieldError(field="dataset", message="already released")],
        )


def open_dataset(db: Database, name: str) -> ds.DatasetRow:
    """The dataset if it exists and still accepts ingest (checked again under the lock)."""
    with db.read() as conn:
        row = ds.load(conn, name)
    _refuse_if_released(row)
    return row


def _finish(
    conn: Connection, row: ds.DatasetRow, changed: bool, commit_delay: float, **counts: int
) -> None:
    """End a batch's write: the dataset's new ``counts`` and a new data version if it
    ``changed`` anything (a release's snapshot is then stale), then the test hook's delay."""
    if changed:
        conn.execute(
            update(datasets)
            .where(datasets.c.id == row.id)
            .values(**counts, data_version=row.data_version + 1)
        )
    if commit_delay:
        time.sleep(commit_delay)


def store_labels(
    db: Database,
    *,
    dataset: str,
    rows: LabelRows,
    overwrite: bool,
    commit_delay: float = 0.0,
) -> LabelsResult:
    """Clip and store one batch of labels atomically (409 on a conflict without overwrite)."""
    ids = rows.example_ids
    with db.write() as conn, gc_paused():
        row = ds.load(conn, dataset, for_update=True)
        _refuse_if_released(row)
        raw = rows.values
        values = np.clip(raw, row.label_min, row.label_max)
        clipped = int(np.count_nonzero(values != raw))
        value_list = values.tolist()
        if db.is_sqlite:
            changed = db.executemany(conn, _INSERT_LABELS, zip(repeat(row.id), ids, value_list))
        else:
            existing = max(row.n_examples, row.n_labels)
            changed = _copy_upsert(conn, _LABELS_STAGED, row.id, ids, value_list, existing)
        new, unchanged, overwritten = changed, 0, 0
        if changed < len(ids):
            unchanged, final, conflicts = _reconcile(db, conn, row.id, ids, value_list, changed)
            if conflicts and not overwrite:
                listed = conflicts[:MAX_CONFLICTS_LISTED]
                raise ConflictError(
                    f"{len(conflicts)} row(s) give a different label to an example id that "
                    "already has one; nothing was stored (send ?overwrite=true to replace)",
                    [
                        FieldError(field=f"{rows.where(i)}.value", message=f"example_id {ids[i]!r} "
                                   "already has a different label")
                        for i in listed
                    ],
                )  # fmt: skip
            overwritten = len(conflicts)
            db.executemany(
                conn, _UPDATE_LABEL, ((value, row.id, key) for key, value in final.items())
            )
        n_labels = row.n_labels + new
        _finish(conn, row, bool(new or overwritten), commit_delay, n_labels=n_labels)
    return LabelsResult(
        accepted=len(ids),
        new=new,
        clipped=clipped,
        unchanged=unchanged,
        overwritten=overwritten,
        n_labels=n_labels,
    )


def _reconcile(
    db: Database,
    conn: object,
    dataset_id: int,
    ids: list[str],
    values: list[float],
    inserted: int,
) -> tuple[int, dict[str, float], list[int]]:
    """Compare every row with the label stored after the first pass.

    Rows the first pass wrote compare equal (each was its id's first row), so the rows that
    are truly unchanged number ``equal - inserted``. Returns (unchanged, final values of the
    ids whose label changes, indices of the conflicting rows).
    """
    distinct = list(dict.fromkeys(ids))
    current: dict[str, float] = {}
    for start in range(0, len(distinct), _LOOKUP_CHUNK):
        chunk = distinct[start : start + _LOOKUP_CHUNK]
        marks = ",".join("?" * len(chunk))
        current.update(
            db.fetch(
                conn,  # type: ignore[arg-type]
                f"SELECT example_id, value FROM entries WHERE dataset_id = ? "
                f"AND example_id IN ({marks})",
                [dataset_id, *chunk],
            )
        )
    equal = 0
    final: dict[str, float] = {}
    conflicts: list[int] = []
    for index, (key, value) in enumerate(zip(ids, values, strict=True)):
        if current[key] == value:
            equal += 1
        else:
            conflicts.append(index)
            current[key] = value
            final[key] = value
    return equal - inserted, final, conflicts


def _copy_upsert(
    conn: Connection,
    statements: tuple[str, str],
    dataset_id: int,
    ids: list[str],
    values: list[float] | None,
    existing: int,
) -> int:
    """PostgreSQL: COPY the batch into the staging table, then one statement; rows changed.

    ``statements``: (probe per row, join); the join when the batch is at least as large as the
    ``existing`` rows of the dataset. Counts as the SQLite ``executemany`` upsert does: a
    repeated id's FIRST row is the one written, later repeats change nothing. Text COPY needs
    no escaping: example ids match ``EXAMPLE_ID_PATTERN`` (no tab, newline or backslash) and
    ``repr`` of a finite float is a valid ``double precision``.
    """
    if len(set(ids)) != len(ids):  # rare: keep each id's first row
        if values is None:
            ids = list(dict.fromkeys(ids))
        else:
            first: dict[str, float] = {}
            for key, value in zip(ids, values, strict=True):
                first.setdefault(key, value)
            ids, values = list(first), list(first.values())
    probe, join = statements
    cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
    try:
        cursor.execute(_STAGING)
        with cursor.copy(_COPY_STAGING) as copy:
            for start in range(0, len(ids), _COPY_ROWS):
                part = ids[start : start + _COPY_ROWS]
                if values is None:
                    copy.write("\t\\N\n".join(part) + "\t\\N\n")
                else:
                    chunk = values[start : start + _COPY_ROWS]
                    copy.write("".join(f"{k}\t{v!r}\n" for k, v in zip(part, chunk, strict=True)))
        if len(ids) < existing:
            cursor.execute(probe, {"d": dataset_id})
            return int(cursor.rowcount)
        cursor.execute("ANALYZE labeldp_staging")  # a temporary table has no statistics
        cursor.execute(join, {"d": dataset_id})
        return int(cursor.fetchone()[0])
    finally:
        cursor.close()


def store_examples(
    db: Database,
    *,
    dataset: str,
    example_ids: list[str],
    segments: list[str] | None = None,
    commit_delay: float = 0.0,
) -> ExamplesResult:
    """Register example ids atomically (repeats are idempotent); 409 once released.

    ``segments``: each example's public segment, required by a dataset with a segment column
    and refused by any other (422 ``segments``). A segment is fixed when its example is first
    registered, before its label: another segment for a registered example, or a segment for
    an example that already has a label, is a 409 naming ``segments[i]`` (the grouping of a
    segmented release must not depend on any label; ``shared.segments``).
    """
    with db.write() as conn, gc_paused():
        row = ds.load(conn, dataset, for_update=True)
        _refuse_if_released(row)
        _check_segments_given(row, example_ids, segments)
        if segments is not None:
            added = _register_segmented(db, conn, row, example_ids, segments)
        elif db.is_sqlite:
            added = db.executemany(conn, _REGISTER, zip(repeat(row.id), example_ids))
        else:
            existing = max(row.n_examples, row.n_labels)
            added = _copy_upsert(conn, _REGISTER_STAGED, row.id, example_ids, None, existing)
        n_examples = row.n_examples + added
        _finish(conn, row, bool(added), commit_delay, n_examples=n_examples)
    return ExamplesResult(accepted=len(example_ids), registered_new=added, n_examples=n_examples)


def _check_segments_given(
    row: ds.DatasetRow, example_ids: list[str], segments: list[str] | None
) -> None:
    """422 ``segments`` unless they are given exactly when the dataset is segmented."""
    if row.segment_column is None and segments is not None:
        raise BadInputError(
            f"dataset {row.name!r} has no segment_column: its examples take no segments",
            [FieldError(field="segments", message="the dataset declares no segment_column")],
        )
    if row.segment_column is not None and segments is None:
        raise BadInputError(
            f"dataset {row.name!r} is segmented by {row.segment_column!r}: every example "
            "needs its segment",
            [FieldError(field="segments", message="required: one segment per example id")],
        )
    if segments is not None and len(segments) != len(example_ids):
        raise BadInputError(
            f"{len(segments)} segments for {len(example_ids)} example ids",
            [FieldError(field="segments", message="must align with example_ids")],
        )


def _register_segmented(
    db: Database, conn: Connection, row: ds.DatasetRow, ids: list[str], segments: list[str]
) -> int:
    """Register ``ids`` with their ``segments`` after checking that none changes (409)."""
    current: dict[str, tuple[int, float | None, str | None]] = {}
    distinct = list(dict.fromkeys(ids))
    for start in range(0, len(distinct), _LOOKUP_CHUNK):
        chunk = distinct[start : start + _LOOKUP_CHUNK]
        marks = ",".join("?" * len(chunk))
        for example_id, registered, value, segment in db.fetch(
            conn,
            "SELECT example_id, registered, value, segment FROM entries WHERE dataset_id = ? "
            f"AND example_id IN ({marks})",
            [row.id, *chunk],
        ):
            current[example_id] = (registered, value, segment)
    errors: list[FieldError] = []
    batch: dict[str, str] = {}
    for index, (example_id, segment) in enumerate(zip(ids, segments, strict=True)):
        before = current.get(example_id)
        if before is not None and before[1] is not None:
            problem = "the example already has a label: its segment comes before its label"
        elif (before is not None and before[0] == 1 and before[2] != segment) or batch.get(
            example_id, segment
        ) != segment:
            problem = "the example is registered with another segment"
        else:
            batch[example_id] = segment
            continue
        errors.append(FieldError(field=f"segments[{index}]", message=problem))
        if len(errors) >= MAX_CONFLICTS_LISTED:
            break
    if errors:
        raise ConflictError("segments are fixed when examples are registered", errors)
    new = [(row.id, key, segment) for key, segment in batch.items() if key not in current]
    added = db.executemany(conn, _REGISTER_SEGMENT, new) if new else 0
    count = db.fetch(
        conn,
        "SELECT COUNT(DISTINCT segment) FROM entries WHERE dataset_id = ? AND registered = 1",
        [row.id],
    )[0][0]
    if count > MAX_SEGMENTS:
        raise BadInputError(
            f"dataset {row.name!r} would have {count} segments (at most {MAX_SEGMENTS})",
            [FieldError(field="segments", message=f"at most {MAX_SEGMENTS} distinct segments")],
        )
    return added
