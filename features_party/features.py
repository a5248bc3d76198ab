"""Feature uploads: parse CSV / JSON batches, fix the column schema, store a batch atomically.

A dataset's columns and their kinds (``numeric`` or ``categorical``) are fixed by its first
batch: a CSV column is numeric when every non-empty cell is a finite number (``?categorical=``
forces a column to categorical), a JSON column when every non-null value is a number. Later
batches must carry exactly the same columns. Missing values are an empty CSV cell or JSON null.
Re-sending an example with the same values is a no-op; different values are a conflict unless
``overwrite`` is set. Nothing of a batch is stored unless all of it is valid.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from sqlalchemy import bindparam, insert, select, update
from sqlalchemy.orm import Session

from features_party.db.models import FeatureDataset, FeatureRow
from shared.message import check_example_id
from shared.segments import SEGMENT_PATTERN
from shared.service.client import FeatureUploadResult
from shared.service.strict_input import NUMBER_RULE, parse_decimal

Kind = Literal["numeric", "categorical"]
Cell = float | str | None

DATASET_NAME_RE = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
# A new dataset's name starts with a letter or digit: "." and ".." are URL dot segments (the
# dataset could be created through %2E%2E but never addressed); same rule as the labels party.
NEW_DATASET_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")
COLUMN_NAME_RE = re.compile(r"^[A-Za-z0-9_.\- ]{1,64}$")
ID_COLUMN = "example_id"
MAX_COLUMNS = 1000
MAX_REPORTED = 10


@dataclass
class FeatureInputError(ValueError):
    """Invalid upload: ``errors`` is a list of (field, message); maps to HTTP 422."""

    detail: str
    errors: list[tuple[str, str]] = field(default_factory=list)

    def __str__(self) -> str:
        return self.detail


class FeatureConflictError(FeatureInputError):
    """Example ids already stored with different values (and no ``overwrite``); HTTP 409."""


@dataclass(frozen=True, kw_only=True)
class RawBatch:
    """A parsed upload before typing: column names and one list of cells per example."""

    columns: list[str]
    example_ids: list[str]
    cells: list[list[Any]]
    source: Literal["csv", "json"]


def check_dataset_name(name: str, *, new: bool = False) -> str:
    """A valid dataset name (``new``: the stricter rule for creating one); never echoed back."""
    pattern = NEW_DATASET_NAME_RE if new else DATASET_NAME_RE
    if not pattern.fullmatch(name):
        rule = "1-64 characters of letters, digits, '_.-'"
        if new:
            rule += ", starting with a letter or digit"
        raise FeatureInputError(f"invalid dataset name: {rule}", [("dataset", "invalid name")])
    return name


def _check_columns(columns: Sequence[str]) -> None:
    errors = []
    seen: set[str] = set()
    for name in columns:
        if not COLUMN_NAME_RE.fullmatch(name) or name.strip() != name:
            errors.append((name, "column names are 1-64 characters of letters, digits, '_.- '"))
        elif name in seen:
            errors.append((name, "duplicate column"))
        elif name == ID_COLUMN:
            errors.append((name, "example_id is the key, not a feature"))
        seen.add(name)
    if not columns:
        errors.append(("columns", "at least one feature column is required"))
    if len(columns) > MAX_COLUMNS:
        errors.append(("columns", f"at most {MAX_COLUMNS} feature columns"))
    if errors:
        raise FeatureInputError("invalid feature columns", errors[:MAX_REPORTED])


def _check_ids(example_ids: Sequence[str], where: Sequence[str]) -> None:
    errors = []
    for eid, place in zip(example_ids, where, strict=True):
        try:
            check_example_id(eid)
        except ValueError as exc:
            errors.append((place, str(exc)))
            if len(errors) >= MAX_REPORTED:
                break
    if errors:
        raise FeatureInputError("invalid example ids", errors)


def parse_csv(text: str, *, id_column: str = ID_COLUMN) -> RawBatch:
    """CSV with a header row; ``id_column`` holds the example id, every other column a feature."""
    reader = csv.reader(io.StringIO(text))
    try:
        header = next(reader)
    except StopIteration:
        raise FeatureInputError("empty CSV body", [("body", "no header row")]) from None
    except csv.Error as exc:
        raise FeatureInputError(f"malformed CSV: {exc}", [("body", str(exc))]) from None
    header = [name.strip() for name in header]
    if id_column not in header:
        raise FeatureInputError(
            f"CSV header has no {id_column!r} column", [("header", f"missing {id_column!r}")]
        )
    key = header.index(id_column)
    columns = [name for i, name in enumerate(header) if i != key]
    _check_columns(columns)
    ids: list[str] = []
    cells: list[list[Any]] = []
    errors: list[tuple[str, str]] = []
    try:
        for line_no, record in enumerate(reader, start=2):
            if not record or (len(record) == 1 and not record[0].strip()):
                continue  # blank line
            if len(record) != len(header):
                errors.append(
                    (f"line[{line_no}]", f"has {len(record)} cells, header has {len(header)}")
                )
                if len(errors) >= MAX_REPORTED:
                    break
                continue
            ids.append(record[key].strip())
            cells.append([cell for i, cell in enumerate(record) if i != key])
    except csv.Error as exc:
        raise FeatureInputError(f"malformed CSV: {exc}", [("body", str(exc))]) from None
    if errors:
        raise FeatureInputError("CSV rows do not match the header", errors)
    if not ids:
        raise FeatureInputError("empty batch: the CSV has no data rows", [("body", "no rows")])
    _check_ids(ids, [f"line[{i + 2}]" for i in range(len(ids))])
    return RawBatch(columns=columns, example_ids=ids, cells=cells, source="csv")


def parse_json_rows(rows: Sequence[Mapping[str, Any]]) -> RawBatch:
    """``[{"example_id": .., "features": {name: value}}]``; every row has the same keys."""
    if not rows:
        raise FeatureInputError("empty batch: no rows", [("rows", "must not be empty")])
    columns = list(rows[0]["features"])
    _check_columns(columns)
    wanted = set(columns)
    errors = []
    for i, row in enumerate(rows):
        keys = set(row["features"])
        if keys != wanted:
            missing = sorted(wanted - keys)
            extra = sorted(keys - wanted)
            errors.append(
                (
                    f"rows[{i}].features",
                    f"columns differ from rows[0]: missing {missing}, extra {extra}",
                )
            )
            if len(errors) >= MAX_REPORTED:
                break
    if errors:
        raise FeatureInputError("rows do not all have the same feature columns", errors)
    ids = [str(row["example_id"]) for row in rows]
    _check_ids(ids, [f"rows[{i}].example_id" for i in range(len(ids))])
    cells = [[row["features"][name] for name in columns] for row in rows]
    # A JSON number must be a finite float: NaN / Infinity / 1e309 / a 400-digit integer would
    # otherwise turn a numeric column categorical or become a silent missing value.
    for i, row in enumerate(cells):
        for name, cell in zip(columns, row, strict=True):
            if isinstance(cell, int | float) and not isinstance(cell, bool) and not _finite(cell):
                errors.append(
                    (f"rows[{i}].features.{name}", "must be a finite number (null if missing)")
                )
                if len(errors) >= MAX_REPORTED:
                    break
    if errors:
        raise FeatureInputError("invalid feature values", errors[:MAX_REPORTED])
    return RawBatch(columns=columns, example_ids=ids, cells=cells, source="json")


def _finite(number: float) -> bool:
    try:
        return math.isfinite(float(number))
    except OverflowError:  # an int beyond float range
        return False


def _as_number(cell: Any) -> float | None:
    """A finite float, None for missing, or raise ValueError."""
    if cell is None:
        return None
    if isinstance(cell, bool):
        raise ValueError("a boolean is not a number")
    if isinstance(cell, int | float):
        try:
            value = float(cell)
        except OverflowError:
            raise ValueError("too large for a float") from None
    elif isinstance(cell, str):
        text = cell.strip()
        if not text:
            return None
        value = parse_decimal(text)  # ValueError for non-numbers, 1_000, full-width digits
    else:
        raise ValueError(f"{type(cell).__name__} is not a number")
    if not math.isfinite(value):
        raise ValueError("must be finite (leave the cell empty for a missing value)")
    return value


def _as_category(cell: Any) -> str | None:
    """A category label (numbers are normalised: 3 and 3.0 are the same category)."""
    if cell is None:
        return None
    if isinstance(cell, bool):
        return "true" if cell else "false"
    if isinstance(cell, int):
        return str(cell)
    if isinstance(cell, float):
        if not math.isfinite(cell):
            return None
        return str(int(cell)) if cell.is_integer() else repr(cell)
    if isinstance(cell, str):
        text = cell.strip()
        return text or None
    raise ValueError(f"{type(cell).__name__} cannot be a category")


def infer_kinds(batch: RawBatch, *, categorical: Iterable[str] = ()) -> dict[str, Kind]:
    """Numeric if every non-missing value is a finite number (and not forced categorical)."""
    forced = set(categorical)
    unknown = forced - set(batch.columns)
    if unknown:
        raise FeatureInputError(
            "categorical names columns that are not in the upload",
            [("categorical", f"unknown column {name!r}") for name in sorted(unknown)],
        )
    kinds: dict[str, Kind] = {}
    errors: list[tuple[str, str]] = []
    for j, name in enumerate(batch.columns):
        if name in forced:
            kinds[name] = "categorical"
            continue
        numeric = True
        non_finite: list[int] = []  # rows whose cell reads as a number but not a finite one
        loose: list[int] = []  # rows float() reads as a number but the rule does not (1_000)
        for i, row in enumerate(batch.cells):
            cell = row[j]
            if batch.source == "json" and isinstance(cell, str | bool):
                numeric = False
                break
            try:
                _as_number(cell)
            except ValueError:
                if _reads_as_number(cell):
                    non_finite.append(i)
                    continue
                if _loosely_a_number(cell):
                    loose.append(i)
                    continue
                numeric = False
                break
        if numeric:
            # A numeric column with nan / inf / 1e309 cells, or with 1_000 or full-width digits
            # (float() reads them, a JSON number never is one): refused as documented, instead
            # of silently read or made categorical (where "nan" would be a category).
            where = "line[{}]" if batch.source == "csv" else "rows[{}].features"
            offset = 2 if batch.source == "csv" else 0
            refused = (
                (non_finite, "numeric column: must be a finite number (leave the cell empty if "
                 "missing, or send ?categorical= for a category)"),
                (loose, f"numeric column: {NUMBER_RULE} (or send ?categorical= for a category)"),
            )  # fmt: skip
            for cells, message in refused:
                errors.extend(
                    (f"{where.format(i + offset)}.{name}", message) for i in cells[:MAX_REPORTED]
                )
        kinds[name] = "numeric" if numeric else "categorical"
    if errors:
        raise FeatureInputError("invalid feature values", errors[:MAX_REPORTED])
    return kinds


def _reads_as_number(cell: Any) -> bool:
    """A cell that parses as a float but is not finite (nan, inf, 1e309, 400 digits)."""
    if isinstance(cell, bool):
        return False
    if isinstance(cell, int | float):
        return True
    if isinstance(cell, str):
        try:
            parse_decimal(cell.strip())
        except ValueError:
            return False
        return True
    return False


def _loosely_a_number(cell: Any) -> bool:
    """A text cell Python's float() reads but the number rule refuses (1_000, full-width)."""
    if not isinstance(cell, str):
        return False
    try:
        float(cell.strip())
    except ValueError:
        return False
    return True


def type_rows(batch: RawBatch, schema: Sequence[tuple[str, Kind]]) -> list[list[Cell]]:
    """Cells converted to the schema's kinds, in the schema's column order."""
    expected = [name for name, _ in schema]
    if set(batch.columns) != set(expected):
        missing = sorted(set(expected) - set(batch.columns))
        extra = sorted(set(batch.columns) - set(expected))
        raise FeatureInputError(
            "the upload's columns differ from the dataset's columns",
            [("columns", f"missing {missing}, unexpected {extra}; dataset has {expected}")],
        )
    position = {name: j for j, name in enumerate(batch.columns)}
    order = [(position[name], name, kind) for name, kind in schema]
    typed: list[list[Cell]] = []
    errors: list[tuple[str, str]] = []
    for i, row in enumerate(batch.cells):
        out: list[Cell] = []
        for j, name, kind in order:
            try:
                out.append(_as_number(row[j]) if kind == "numeric" else _as_category(row[j]))
            except ValueError as exc:
                where = f"line[{i + 2}]" if batch.source == "csv" else f"rows[{i}].features"
                errors.append((f"{where}.{name}", f"{kind} column: {row[j]!r}: {exc}"))
                out.append(None)
        if len(errors) >= MAX_REPORTED:
            break
        typed.append(out)
    if errors:
        raise FeatureInputError("invalid feature values", errors)
    return typed


def load_schema(session: Session, name: str) -> list[tuple[str, Kind]] | None:
    dataset = session.get(FeatureDataset, name)
    if dataset is None:
        return None
    return [(column, kind) for column, kind in json.loads(dataset.columns_json)]


def _dumps(values: Sequence[Cell]) -> str:
    return json.dumps(list(values), separators=(",", ":"), allow_nan=False)


def store_batch(
    session: Session,
    name: str,
    batch: RawBatch,
    *,
    categorical: Sequence[str] = (),
    overwrite: bool = False,
) -> FeatureUploadResult:
    """Validate and store one batch in the caller's transaction (all or nothing)."""
    check_dataset_name(name)
    dataset = session.get(FeatureDataset, name)
    if dataset is None:
        check_dataset_name(name, new=True)
        kinds = infer_kinds(batch, categorical=categorical)
        schema: list[tuple[str, Kind]] = [(column, kinds[column]) for column in batch.columns]
        dataset = FeatureDataset(name=name, columns_json=json.dumps(schema))
        session.add(dataset)
    else:
        schema = [(column, kind) for column, kind in json.loads(dataset.columns_json)]
        forced = set(categorical) - {c for c, k in schema if k == "categorical"}
        if forced:
            raise FeatureInputError(
                "column kinds are fixed by the dataset's first upload",
                [("categorical", f"{c!r} is numeric in this dataset") for c in sorted(forced)],
            )
    typed = type_rows(batch, schema)

    # Repeated ids inside one batch: identical rows collapse, different ones are an error.
    rows: dict[str, str] = {}
    errors = []
    for eid, values in zip(batch.example_ids, typed, strict=True):
        encoded = _dumps(values)
        previous = rows.setdefault(eid, encoded)
        if previous != encoded:
            errors.append((eid, "appears twice in the batch with different values"))
    if errors:
        raise FeatureInputError("duplicate example ids in the batch", errors[:MAX_REPORTED])

    existing: dict[str, str] = {}
    ids = list(rows)
    table = FeatureRow.__table__
    for start in range(0, len(ids), 900):  # SQLite allows 999 bound parameters per statement
        chunk = ids[start : start + 900]
        found = session.execute(
            select(FeatureRow.example_id, FeatureRow.values_json).where(
                FeatureRow.dataset == name, FeatureRow.example_id.in_(chunk)
            )
        )
        existing.update((eid, values) for eid, values in found)
    changed = [eid for eid, values in existing.items() if values != rows[eid]]
    if changed and not overwrite:
        raise FeatureConflictError(
            f"{len(changed)} example id(s) already have different feature values; "
            "send ?overwrite=true to replace them",
            [(eid, "stored with different values") for eid in sorted(changed)[:MAX_REPORTED]],
        )
    session.flush()  # the dataset row, before rows that reference it
    if changed:
        session.execute(
            update(table)
            .where(table.c.dataset == name, table.c.example_id == bindparam("eid"))
            .values(values_json=bindparam("values")),
            [{"eid": eid, "values": rows[eid]} for eid in changed],
        )
    new = [eid for eid in ids if eid not in existing]
    if new:
        # Core executemany: ~20x faster than ORM objects for large batches.
        session.execute(
            insert(table),
            [{"dataset": name, "example_id": eid, "values_json": rows[eid]} for eid in new],
        )
    total = count_rows(session, name)
    return FeatureUploadResult(
        dataset=name,
        received=len(batch.example_ids),
        inserted=len(new),
        unchanged=len(existing) - len(changed),
        replaced=len(changed),
        rows_total=total,
        columns=dict(schema),
    )


def count_rows(session: Session, name: str) -> int:
    from sqlalchemy import func

    return int(
        session.scalar(
            select(func.count()).select_from(FeatureRow).where(FeatureRow.dataset == name)
        )
        or 0
    )


def iter_example_ids(session: Session, name: str) -> list[str]:
    """Every example id stored for ``name`` (sorted, so sync batches are reproducible)."""
    return list(
        session.scalars(
            select(FeatureRow.example_id)
            .where(FeatureRow.dataset == name)
            .order_by(FeatureRow.example_id)
        )
    )


def load_rows(session: Session, name: str) -> tuple[list[str], list[list[Cell]]]:
    """Every stored example id of ``name`` with its typed values (schema order)."""
    result = session.execute(
        select(FeatureRow.example_id, FeatureRow.values_json).where(FeatureRow.dataset == name)
    )
    ids: list[str] = []
    values: list[list[Cell]] = []
    for eid, encoded in result:
        ids.append(eid)
        values.append(json.loads(encoded))
    return ids, values


SEGMENT_RE = re.compile(SEGMENT_PATTERN)


def segment_values(session: Session, name: str, column: str, ids: Sequence[str]) -> list[str]:
    """Each id's value in the feature ``column`` as a segment (``shared.segments``), in order.

    For the sync of a dataset the labels party segments by ``column``: the column must exist
    and every row needs a value that is a valid segment (a number is written as the upload
    normalises it, 3.0 as "3"); otherwise a 422 naming the column or the first rows.
    """
    schema = load_schema(session, name) or []
    names = [col for col, _ in schema]
    if column not in names:
        raise FeatureInputError(
            f"the labels party segments dataset {name!r} by {column!r}: upload that column",
            [(column, "missing column: the segment of every example")],
        )
    at = names.index(column)
    stored_ids, rows = load_rows(session, name)
    value_of = {eid: row[at] for eid, row in zip(stored_ids, rows, strict=True)}
    out: list[str] = []
    errors: list[tuple[str, str]] = []
    for eid in ids:
        text = _as_category(value_of.get(eid)) or ""
        if not SEGMENT_RE.fullmatch(text):
            errors.append((f"{column}[{eid}]", "not a segment (1-64 of letters, digits, ' _.:-')"))
        out.append(text)
    if errors:
        raise FeatureInputError(
            f"{len(errors)} example(s) have no valid segment in {column!r}", errors[:MAX_REPORTED]
        )
    return out
