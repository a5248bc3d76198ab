"""Storing a parsed batch: labels (advertiser) and example registrations (publisher).

A batch is one write transaction: all of it or none of it. On SQLite a batch is one prepared
multi-row upsert (``INSERT ... VALUES (..), (..), ... ON CONFLICT``, ``_SQLITE_ROWS`` rows per
execution) run through the raw DBAPI cursor: binding and stepping a statement once per row,
not the B-tree, is what a row-by-row ``executemany`` spends most of its time on. A row that
meets a stored, different label calls the ``labeldp_conflict`` SQL function (only then: an
unchanged row is one index probe and no Python), so a re-sent unchanged batch writes nothing
and costs no more than the first. On PostgreSQL a batch into a dataset with no rows is one
binary ``COPY`` straight into ``entries``; any other is one binary ``COPY`` into a temporary
staging table, one read that counts unchanged and conflicting rows, and one statement that
moves the rest (none when every row is unchanged). Only a refused batch (conflicts without
``overwrite``) reads the labels back row by row, to name the rows. Within a batch a repeated id
behaves like a repeat in a later batch: the same value is idempotent, a different one is a
conflict (or, with ``overwrite``, the last one wins).
"""

from __future__ import annotations

import hashlib
import time
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import Connection, update

from labels_party.catalog import datasets as ds
from labels_party.db.engine import Database
from labels_party.db.models import datasets
from labels_party.errors import BadInputError, ConflictError, FieldError
from labels_party.intake.parsing import LabelRows, gc_paused
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
_UPDATE_LABEL = "UPDATE entries SET value = ? WHERE dataset_id = ? AND example_id = ?"
# SQLite: rows per execution of the multi-row upsert (measured: 10 rows per execution already
# halve the CPU of a row-by-row executemany, more gain little; 2 * 128 parameters is far below
# SQLite's limit of 32766).
_SQLITE_ROWS = 128
_SQLITE_CONFLICT = "labeldp_conflict"
# A label for an id that has one: an empty value is filled; a different one calls the conflict
# function (which counts it and says whether to overwrite); an equal one does nothing. SQLite
# evaluates AND and OR lazily, so the function runs for conflicting rows only.
_SQLITE_ON_LABEL = (
    "ON CONFLICT (dataset_id, example_id) DO UPDATE SET value = excluded.value "
    "WHERE entries.value IS NULL OR (entries.value <> excluded.value "
    f"AND {_SQLITE_CONFLICT}(entries.value, excluded.value))"
)
# A segmented dataset's registration: the example with its segment (conflicts checked first);
# an id the advertiser labelled before the publisher registered it is registered in place.
_REGISTER_SEGMENT = (
    "INSERT INTO entries (dataset_id, example_id, registered, value, segment) "
    "VALUES (?, ?, 1, NULL, ?) ON CONFLICT (dataset_id, example_id) DO NOTHING"
)
_REGISTER_LABELLED_SEGMENT = (
    "UPDATE entries SET registered = 1, segment = ? "
    "WHERE dataset_id = ? AND example_id = ? AND registered = 0"
)
_COPY_ROWS = 65_536  # rows per binary COPY block (bounds the arrays built at once)

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
_COPY_STAGING_BINARY = "COPY labeldp_staging (example_id, value) FROM STDIN (FORMAT BINARY)"
_COPY_ENTRIES = (
    "COPY entries (dataset_id, example_id, registered, value) FROM STDIN (FORMAT BINARY)"
)
_UNIQUE_VIOLATION = "23505"
# A staged batch without repeated ids, into a dataset that has labels: (rows equal to their
# stored label, rows that contradict it), by one join (a batch at least as large as the
# dataset: reads its rows once) or an index probe per row (a correlated subquery, never
# turned into a join over the whole dataset); then the contradicting ids, for the 409.
_COUNT_JOINED = (
    "SELECT count(*) FILTER (WHERE e.value = s.value), count(*) FILTER (WHERE e.value <> s.value) "
    "FROM labeldp_staging AS s JOIN entries AS e "
    "ON e.dataset_id = %(d)s AND e.example_id = s.example_id"
)
_COUNT_PROBED = (
    "SELECT count(*) FILTER (WHERE stored = value), count(*) FILTER (WHERE stored <> value) "
    "FROM (SELECT s.value, (SELECT e.value FROM entries AS e WHERE e.dataset_id = %(d)s "
    "AND e.example_id = s.example_id) AS stored FROM labeldp_staging AS s) AS q"
)
# Whether a few of the staged ids already have a label: a batch of new ids (the usual
# incremental one) is filled first, in one statement; one that repeats stored labels is counted
# first (a re-sent batch then writes nothing). Either order stores and counts the same.
_SAMPLE_LABELLED = (
    "SELECT count(*) FROM (SELECT example_id FROM labeldp_staging LIMIT 16) AS s "
    "JOIN entries AS e ON e.dataset_id = %(d)s AND e.example_id = s.example_id "
    "WHERE e.value IS NOT NULL"
)
_CONFLICTING = (
    "SELECT s.example_id FROM labeldp_staging AS s JOIN entries AS e "
    "ON e.dataset_id = %(d)s AND e.example_id = s.example_id WHERE e.value <> s.value"
)


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


# (probe per row, join) for labels and for registrations. _LABELS_FILL writes a label where
# there is none (a batch that repeats an id); _LABELS_STAGED also replaces a different one
# (conflicts were counted first, and refused unless overwrite).
_LABELS_FILL = (_staged(0, _ON_LABEL), _joined(0, "e.value IS NULL", "value = s.value"))
_LABELS_STAGED = (
    _staged(
        0,
        "ON CONFLICT (dataset_id, example_id) DO UPDATE SET value = excluded.value "
        "WHERE entries.value IS DISTINCT FROM excluded.value",
    ),
    _joined(0, "e.value IS DISTINCT FROM s.value", "value = s.value"),
)
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
    memo = _memo(db)
    with db.write() as conn, gc_paused():
        row = ds.load(conn, dataset, for_update=True)
        _refuse_if_released(row)
        raw = rows.values
        values = np.clip(raw, row.label_min, row.label_max)
        clipped = int(np.count_nonzero(values != raw))
        digest = _digest(ids, values)
        if memo.get(row.id) == (row.name, digest, row.data_version):
            new, unchanged, overwritten = 0, len(ids), 0  # a re-sent batch: nothing to do
        elif db.is_sqlite:
            value_list = values.tolist()
            changed, conflicting = _sqlite_labels(conn, row.id, ids, value_list, overwrite)
            if conflicting and not overwrite:
                _refuse_conflicts(db, conn, row.id, rows, value_list, changed)
            overwritten = conflicting
            new, unchanged = changed - overwritten, len(ids) - changed
        else:
            new, unchanged, overwritten = _postgres_labels(db, conn, row, rows, values, overwrite)
        n_labels = row.n_labels + new
        _finish(conn, row, bool(new or overwritten), commit_delay, n_labels=n_labels)
    if not overwritten:
        # Committed, and every row now equals its id's stored label: the same batch sent again
        # while the dataset is at this version changes nothing (its counts: all unchanged).
        memo[row.id] = (row.name, digest, row.data_version + (1 if new else 0))
    return LabelsResult(
        accepted=len(ids),
        new=new,
        clipped=clipped,
        unchanged=unchanged,
        overwritten=overwritten,
        n_labels=n_labels,
    )


# Per Database: dataset id -> (name, digest of the last batch stored without overwriting,
# the data version it left). A batch with that digest at that version is all unchanged (only
# an optimisation: another process's write, or a restart, changes the version or empties it).
_MEMOS: weakref.WeakKeyDictionary[Database, dict[int, tuple[str, bytes, int]]] = (
    weakref.WeakKeyDictionary()
)


def _memo(db: Database) -> dict[int, tuple[str, bytes, int]]:
    memo = _MEMOS.get(db)
    if memo is None:
        memo = _MEMOS.setdefault(db, {})
    return memo


def _digest(ids: list[str], values: np.ndarray) -> bytes:
    """SHA-256 of a batch's ids (ASCII, no newline: ``EXAMPLE_ID_PATTERN``) and clipped values."""
    digest = hashlib.sha256("\n".join(ids).encode())
    digest.update(np.ascontiguousarray(values, dtype=np.float64).tobytes())
    return digest.digest()


def _sqlite_labels(
    conn: Connection, dataset_id: int, ids: list[str], values: list[float], overwrite: bool
) -> tuple[int, int]:
    """SQLite: the multi-row upsert of a batch; (rows changed, rows that met a different label).

    Each conflicting row calls the conflict function, in row order: with ``overwrite`` it
    replaces the label (so an id's last row wins), without it nothing is written for it and the
    caller refuses the batch.
    """
    conflicts = 0

    def conflict(_stored: float, _sent: float) -> int:
        nonlocal conflicts
        conflicts += 1
        return 1 if overwrite else 0

    driver = conn.connection.driver_connection
    driver.create_function(_SQLITE_CONFLICT, 2, conflict)  # type: ignore[union-attr]
    params: list[object] = [None] * (2 * len(ids))
    params[0::2] = ids
    params[1::2] = values
    row_sql = f"({int(dataset_id)}, ?, 0, ?)"
    changed = _sqlite_many(conn, row_sql, _SQLITE_ON_LABEL, params, 2)
    return changed, conflicts


def _sqlite_many(
    conn: Connection, row_sql: str, tail: str, params: list[object], per_row: int
) -> int:
    """SQLite: ``INSERT INTO entries ... VALUES row_sql, row_sql, ... tail`` over ``params``
    (``per_row`` parameters a row, flat), ``_SQLITE_ROWS`` rows per execution of one prepared
    statement; returns the rows changed."""
    head = "INSERT INTO entries (dataset_id, example_id, registered, value) VALUES "
    rows = len(params) // per_row
    full = rows - rows % _SQLITE_ROWS
    step = _SQLITE_ROWS * per_row
    cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
    try:
        changed = 0
        if full:
            many = head + ",".join([row_sql] * _SQLITE_ROWS) + " " + tail
            cursor.executemany(many, (params[s : s + step] for s in range(0, full * per_row, step)))
            changed += cursor.rowcount
        if full < rows:
            rest = head + ",".join([row_sql] * (rows - full)) + " " + tail
            cursor.execute(rest, params[full * per_row :])
            changed += cursor.rowcount
        return changed
    finally:
        cursor.close()


def _refuse_conflicts(
    db: Database,
    conn: Connection,
    dataset_id: int,
    rows: LabelRows,
    values: list[float],
    changed: int,
) -> None:
    """SQLite: the 409 of a batch that gives some stored labels a different value, naming the
    rows (read back row by row: only a refused batch pays for it)."""
    _, _, conflicts = _reconcile(db, conn, dataset_id, rows.example_ids, values, changed)
    _refuse_rows(rows, conflicts, len(conflicts))


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


def _use_join(batch: int, existing: int) -> bool:
    """PostgreSQL: a staged batch at least as large as its dataset is moved (and compared) by
    joins that read the dataset once, a smaller one by an index probe per row."""
    return batch >= existing


def _postgres_labels(
    db: Database,
    conn: Connection,
    row: ds.DatasetRow,
    rows: LabelRows,
    values: np.ndarray,
    overwrite: bool,
) -> tuple[int, int, int]:
    """PostgreSQL: store a batch of labels; (new, unchanged, overwritten), or the 409.

    A dataset with no rows yet takes the batch by one binary COPY straight into ``entries``
    (what the engine does fastest; a repeated id goes the staged way). Otherwise the batch is
    COPYed into the staging table; when the dataset has labels one read counts the rows that
    repeat a stored label and those that contradict one (a refused batch stops there), and
    one statement moves the rest: none when every row is unchanged.
    """
    ids = rows.example_ids
    if len(set(ids)) != len(ids):
        return _postgres_repeated(db, conn, row, rows, values.tolist(), overwrite)
    existing = max(row.n_examples, row.n_labels)
    cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
    try:
        if existing == 0:
            cursor.execute("SAVEPOINT labeldp_copy")
            try:
                _copy_binary(cursor, _COPY_ENTRIES, ids, values, prefix=_entry_prefix(row.id))
            except Exception as exc:  # rows the counts did not know of: stage instead
                if getattr(exc, "sqlstate", None) != _UNIQUE_VIOLATION:
                    raise
                cursor.execute("ROLLBACK TO SAVEPOINT labeldp_copy")
            else:
                cursor.execute("RELEASE SAVEPOINT labeldp_copy")
                return len(ids), 0, 0
        cursor.execute(_STAGING)
        _copy_binary(cursor, _COPY_STAGING_BINARY, ids, values)
        large = _use_join(len(ids), existing)
        if large:
            cursor.execute("ANALYZE labeldp_staging")  # a temporary table has no statistics
        if row.n_labels and not large and _fill_first(cursor, row.id):
            return _postgres_fill_first(cursor, row, rows, len(ids), overwrite)
        unchanged = conflicting = 0
        if row.n_labels:
            cursor.execute(_COUNT_JOINED if large else _COUNT_PROBED, {"d": row.id})
            unchanged, conflicting = (int(x or 0) for x in cursor.fetchone())
            if conflicting and not overwrite:
                cursor.execute(_CONFLICTING, {"d": row.id})
                _refuse_listed(rows, conflicting, {key for (key,) in cursor.fetchall()})
            if unchanged == len(ids):
                return 0, unchanged, 0
        probe, join = _LABELS_STAGED
        if large:
            cursor.execute(join, {"d": row.id})
            changed = int(cursor.fetchone()[0])
        else:
            cursor.execute(probe, {"d": row.id})
            changed = int(cursor.rowcount)
        return changed - conflicting, unchanged, conflicting
    finally:
        cursor.close()


def _fill_first(cursor: Any, dataset_id: int) -> bool:
    """Whether none of a few staged ids has a label yet (``_SAMPLE_LABELLED`` says why)."""
    cursor.execute(_SAMPLE_LABELLED, {"d": dataset_id})
    return not int(cursor.fetchone()[0])


def _postgres_fill_first(
    cursor: Any, row: ds.DatasetRow, rows: LabelRows, size: int, overwrite: bool
) -> tuple[int, int, int]:
    """A staged batch smaller than its dataset, which has labels: (new, unchanged, overwritten).

    First one probe per row writes every label where there was none (new ids, registered
    examples without a label); the usual incremental batch is all of that and is done in one
    statement. Only when some rows already had a label, one more read counts those equal to it
    (the fill made its own rows equal too, so they are taken off) and those contradicting it:
    refused without ``overwrite`` (the 409; the write transaction rolls the fill back), else
    replaced by one more statement.
    """
    cursor.execute(_LABELS_FILL[0], {"d": row.id})
    new = int(cursor.rowcount)
    if new == size:
        return new, 0, 0
    cursor.execute(_COUNT_PROBED, {"d": row.id})
    same, conflicting = (int(x or 0) for x in cursor.fetchone())
    if conflicting and not overwrite:
        cursor.execute(_CONFLICTING, {"d": row.id})
        _refuse_listed(rows, conflicting, {key for (key,) in cursor.fetchall()})
    if conflicting:
        cursor.execute(_LABELS_STAGED[0], {"d": row.id})
    return new, same - new, conflicting


def _postgres_repeated(
    db: Database,
    conn: Connection,
    row: ds.DatasetRow,
    rows: LabelRows,
    value_list: list[float],
    overwrite: bool,
) -> tuple[int, int, int]:
    """PostgreSQL, a batch that repeats an id (rare): each id's first row is staged and
    moved, then every row is compared with the stored labels in Python."""
    ids = rows.example_ids
    existing = max(row.n_examples, row.n_labels)
    changed = _copy_upsert(conn, _LABELS_FILL, row.id, ids, value_list, existing)
    if changed == len(ids):
        return changed, 0, 0
    unchanged, final, conflicts = _reconcile(db, conn, row.id, ids, value_list, changed)
    if conflicts and not overwrite:
        _refuse_rows(rows, conflicts, len(conflicts))
    db.executemany(conn, _UPDATE_LABEL, ((value, row.id, key) for key, value in final.items()))
    return changed, unchanged, len(conflicts)


def _refuse_rows(rows: LabelRows, conflicts: list[int], count: int) -> None:
    """The 409 of ``count`` conflicting rows, naming the first (``conflicts``: indices, in
    order)."""
    ids = rows.example_ids
    raise ConflictError(
        f"{count} row(s) give a different label to an example id that "
        "already has one; nothing was stored (send ?overwrite=true to replace)",
        [
            FieldError(field=f"{rows.where(i)}.value", message=f"example_id {ids[i]!r} "
                       "already has a different label")
            for i in conflicts[:MAX_CONFLICTS_LISTED]
        ],
    )  # fmt: skip


def _refuse_listed(rows: LabelRows, count: int, keys: set[str]) -> None:
    """The 409 of a batch without repeated ids whose ``keys`` contradict stored labels."""
    listed = [i for i, key in enumerate(rows.example_ids) if key in keys]
    _refuse_rows(rows, listed, count)


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
    ``existing`` rows of the dataset. Counts as the SQLite upsert does: a repeated id's FIRST
    row is the one written, later repeats change nothing.
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
        _copy_binary(
            cursor,
            _COPY_STAGING_BINARY,
            ids,
            None if values is None else np.asarray(values, dtype=np.float64),
        )
        if not _use_join(len(ids), existing):
            cursor.execute(probe, {"d": dataset_id})
            return int(cursor.rowcount)
        cursor.execute("ANALYZE labeldp_staging")  # a temporary table has no statistics
        cursor.execute(join, {"d": dataset_id})
        return int(cursor.fetchone()[0])
    finally:
        cursor.close()


_BINARY_HEADER = b"PGCOPY\n\xff\r\n\x00" + bytes(8)  # signature, flags, no extension
_BINARY_TRAILER = b"\xff\xff"


def _entry_prefix(dataset_id: int) -> np.ndarray:
    """The binary COPY fields before ``example_id`` of an ``entries`` row: 4 fields, then
    ``dataset_id`` (int4); the id's length follows."""
    prefix = np.zeros(1, dtype=[("fields", ">i2"), ("size", ">i4"), ("dataset", ">i4")])
    prefix[0] = (4, 4, dataset_id)
    return prefix


def _copy_binary(
    cursor: Any,
    statement: str,
    ids: list[str],
    values: np.ndarray | None,
    *,
    prefix: np.ndarray | None = None,
) -> None:
    """Binary COPY of (``prefix`` fields, example_id, value) rows, built by numpy a block at
    a time: no Python object per row and no float to text (nor back: the doubles go as they
    are). ``prefix`` None: a staging row of 2 fields; else an ``entries`` row whose
    ``registered`` (int2 0) follows the id. ``values`` None: NULL values.
    """
    with cursor.copy(statement) as copy:
        copy.write(_BINARY_HEADER)
        for start in range(0, len(ids), _COPY_ROWS):
            part = ids[start : start + _COPY_ROWS]
            chunk = None if values is None else values[start : start + _COPY_ROWS]
            copy.write(_binary_block(part, chunk, prefix))
        copy.write(_BINARY_TRAILER)


def _binary_block(ids: list[str], values: np.ndarray | None, prefix: np.ndarray | None) -> bytes:
    n = len(ids)
    lengths = np.fromiter(map(len, ids), dtype=np.int64, count=n)  # ASCII: bytes == chars
    head = np.zeros(n, dtype=(prefix.dtype.descr if prefix is not None else [("fields", ">i2")])
                    + [("id_size", ">i4")])  # fmt: skip
    if prefix is not None:
        for name in prefix.dtype.names or ():
            head[name] = prefix[0][name]
    else:
        head["fields"] = 2
    head["id_size"] = lengths
    tail_fields: list[tuple[str, str]] = []
    if prefix is not None:
        tail_fields += [("reg_size", ">i4"), ("registered", ">i2")]
    tail_fields += [("value_size", ">i4")] + ([("value", ">f8")] if values is not None else [])
    tail = np.zeros(n, dtype=tail_fields)
    if prefix is not None:
        tail["reg_size"] = 2
    if values is None:
        tail["value_size"] = -1
    else:
        tail["value_size"] = 8
        tail["value"] = values
    head_size, tail_size = head.dtype.itemsize, tail.dtype.itemsize
    ends = np.cumsum(head_size + lengths + tail_size)
    starts = ends - (head_size + lengths + tail_size)
    out = np.empty(int(ends[-1]), dtype=np.uint8)
    fixed = np.ones(out.size, dtype=bool)
    at = (starts[:, None] + np.arange(head_size)).ravel()
    out[at] = head.view(np.uint8)
    fixed[at] = False
    at = ((starts + head_size + lengths)[:, None] + np.arange(tail_size)).ravel()
    out[at] = tail.view(np.uint8)
    fixed[at] = False
    out[fixed] = np.frombuffer("".join(ids).encode("ascii"), dtype=np.uint8)
    return out.tobytes()


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
    registered: another segment for a registered example is a 409 naming ``segments[i]``. The
    answer never depends on whether the advertiser has labelled the id (that is label
    information): the publisher gives its public attribute without seeing any label, so the
    grouping of a segmented release never depends on one either (``shared.segments``).
    """
    with db.write() as conn, gc_paused():
        row = ds.load(conn, dataset, for_update=True)
        _refuse_if_released(row)
        _check_segments_given(row, example_ids, segments)
        if segments is not None:
            added = _register_segmented(db, conn, row, example_ids, segments)
        elif db.is_sqlite:
            row_sql = f"({int(row.id)}, ?, 1, NULL)"
            added = _sqlite_many(conn, row_sql, _ON_REGISTER, list(example_ids), 1)
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
        # Whether the id has a label (before[1]) is never read here: the advertiser's secret.
        if (before is not None and before[0] == 1 and before[2] != segment) or batch.get(
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
    labelled = [
        (segment, row.id, key)
        for key, segment in batch.items()
        if key in current and current[key][0] == 0
    ]
    added += db.executemany(conn, _REGISTER_LABELLED_SEGMENT, labelled) if labelled else 0
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
