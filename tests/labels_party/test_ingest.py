"""labels_party.intake.ingest against the databases themselves: every path stores the same rows.

On PostgreSQL a batch into an empty dataset is COPYed straight into ``entries``; any other is
staged and moved by an index probe per row (a batch smaller than the dataset) or by joins (a
larger one). SQLite runs a multi-row upsert whose conflicting rows call a SQL function. A
re-sent batch is recognised by its digest while the dataset is at the version it left. Every
path must store the same rows and report the same counts and conflicts, whatever the batch.
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from labels_party.catalog import datasets as ds
from labels_party.db.engine import Database, create_schema, make_engine
from labels_party.errors import ConflictError
from labels_party.intake import ingest
from labels_party.intake.parsing import LabelRows

# (kind, ids, values or None, overwrite): new ids, repeats inside a batch (same and different
# values), registered ids labelled later, unchanged repeats, a conflict, then overwrite.
SCENARIO: list[tuple[str, list[str], list[float] | None, bool]] = [
    ("examples", ["r1", "r2", "r3", "a"], None, False),
    ("labels", ["a", "b", "c", "b", "d"], [1.0, 2.0, 3.0, 2.0, 4.0], False),
    ("labels", ["r1", "r2", "e", "e", "a"], [5.0, 6.0, 7.0, 7.0, 1.0], False),
    ("examples", ["a", "b", "r3", "z1", "z2", "z1"], None, False),
    ("labels", ["f", "a", "g", "c"], [8.0, 9.0, 1.5, 3.5], False),  # a, c conflict
    ("labels", ["c", "c", "h"], [3.0, 3.0, 2.5], False),  # unchanged and new
    ("labels", ["f", "a", "c", "a"], [8.0, 9.0, 3.5, 9.5], True),  # overwrite, last one wins
    ("labels", ["b", "q", "q"], [2.0, 1.0, 2.0], False),  # a conflict inside the batch
]
# Labels first, into an empty dataset (PostgreSQL: COPY straight into entries), then re-sent
# as they were, with one row changed (409 naming it), after another batch, with overwrite,
# partly new, and a repeated id in a batch that overwrites (the last one wins).
FRESH: list[tuple[str, list[str], list[float] | None, bool]] = [
    ("labels", ["a", "b", "c", "d"], [1.0, 2.0, 3.0, 0.1 + 0.2], False),
    ("labels", ["a", "b", "c", "d"], [1.0, 2.0, 3.0, 0.1 + 0.2], False),
    ("labels", ["a", "b", "c", "d"], [1.0, 2.5, 3.0, 0.3], False),  # b, d conflict
    ("examples", ["a", "e"], None, False),
    ("labels", ["a", "b", "c", "d"], [1.0, 2.0, 3.0, 0.1 + 0.2], False),  # unchanged, new version
    ("labels", ["d", "c", "x"], [0.3, 3.0, 9.0], True),  # overwrite d, c unchanged, x new
    ("labels", ["d", "c", "x"], [0.3, 3.0, 9.0], True),  # the same again: all unchanged
    ("labels", ["e", "a", "a"], [4.0, 5.0, 1.0], True),  # e fills, a overwritten twice
    ("labels", ["e", "a", "a"], [4.0, 5.0, 1.0], True),  # again: a overwritten twice again
    ("labels", ["y", "z", "e"], [12.0, -1.0, 4.0], False),  # clipped, e unchanged
]


def _run(
    db: Database, name: str, scenario: list[tuple[str, list[str], list[float] | None, bool]]
) -> list[Any]:
    ds.create_dataset(
        db,
        ds.DatasetSpec(
            name=name, label_min=0, label_max=10, default_label=0, epsilon_budget=Decimal(1)
        ),
        actor_role="operator",
    )
    outcomes: list[Any] = []
    for kind, ids, values, overwrite in scenario:
        try:
            if kind == "examples":
                outcomes.append(ingest.store_examples(db, dataset=name, example_ids=ids))
            else:
                rows = LabelRows(example_ids=ids, values=np.array(values, dtype=np.float64))
                outcomes.append(
                    ingest.store_labels(db, dataset=name, rows=rows, overwrite=overwrite)
                )
        except ConflictError as exc:
            outcomes.append(("409", [(e.field, e.message) for e in exc.errors]))
    with db.read() as conn:
        stored = conn.exec_driver_sql(
            "SELECT e.example_id, e.registered, e.value FROM entries AS e JOIN datasets AS d "
            f"ON d.id = e.dataset_id WHERE d.name = '{name}' ORDER BY e.example_id"
        ).all()
    return [outcomes, [tuple(row) for row in stored]]


def _database(url: str) -> Iterator[Database]:
    engine = make_engine(url)
    create_schema(engine)
    yield Database(engine)
    engine.dispose()


@pytest.fixture
def sqlite_db(tmp_path: Path) -> Iterator[Database]:
    yield from _database(f"sqlite:///{tmp_path / 'ingest.db'}")


@pytest.fixture
def postgres_db(postgres_url: str) -> Iterator[Database]:
    yield from _database(postgres_url)


@pytest.mark.parametrize("scenario", [SCENARIO, FRESH], ids=["registered-first", "fresh"])
@pytest.mark.parametrize("statement", ["probe", "probe-fill-first", "probe-count-first", "join"])
def test_both_postgresql_statements_match_sqlite(
    sqlite_db: Database,
    postgres_db: Database,
    statement: str,
    scenario: Any,
    monkeypatch: Any,
) -> None:
    """Every PostgreSQL path, and both orders of the probe path (fill the new labels first, or
    count the stored ones first; ``probe`` lets a sample of the batch choose), stores and
    reports what SQLite does."""
    expected = _run(sqlite_db, "ds", scenario)
    chosen: list[str] = []

    def use_join(batch: int, existing: int) -> bool:
        chosen.append(statement)
        return statement == "join"

    monkeypatch.setattr(ingest, "_use_join", use_join)
    if statement != "probe" and statement.startswith("probe"):
        fill = statement == "probe-fill-first"
        monkeypatch.setattr(ingest, "_fill_first", lambda cursor, dataset_id: fill)
    assert _run(postgres_db, "ds", scenario) == expected
    assert set(chosen) == {statement}


@pytest.mark.parametrize("engine", ["sqlite", "postgres"])
def test_a_re_sent_batch_reports_what_comparing_every_row_reports(
    engine: str, request: Any, monkeypatch: Any
) -> None:
    """The digest of the last batch is an optimisation only: without it every row is
    compared, with the same counts and the same stored rows."""
    db: Database = request.getfixturevalue(f"{engine}_db")
    remembered = _run(db, "with_memo", FRESH)
    monkeypatch.setattr(ingest, "_memo", lambda db: {})
    assert _run(db, "without_memo", FRESH) == remembered


def test_a_re_sent_batch_is_not_compared_row_by_row(sqlite_db: Database, monkeypatch: Any) -> None:
    """SQLite: an unchanged row calls no Python (the conflict function runs for conflicting
    rows only) and a batch re-sent at the version it left writes nothing at all."""
    _run(sqlite_db, "ds", [])
    rows = LabelRows(example_ids=[f"id{i}" for i in range(1000)], values=np.arange(1000.0) / 100)
    first = ingest.store_labels(sqlite_db, dataset="ds", rows=rows, overwrite=False)
    assert (first.new, first.unchanged) == (1000, 0)
    calls: list[tuple[int, int]] = []
    original = ingest._sqlite_labels

    def sqlite_labels(*args: Any) -> tuple[int, int]:
        calls.append(result := original(*args))
        return result

    monkeypatch.setattr(ingest, "_sqlite_labels", sqlite_labels)
    again = ingest.store_labels(sqlite_db, dataset="ds", rows=rows, overwrite=False)
    assert (again.new, again.unchanged, calls) == (0, 1000, [])  # the digest: no statement
    monkeypatch.setattr(ingest, "_memo", lambda db: {})
    with sqlite_db.read() as conn:
        version = ds.load(conn, "ds").data_version
    again = ingest.store_labels(sqlite_db, dataset="ds", rows=rows, overwrite=False)
    assert (again.new, again.unchanged, calls) == (0, 1000, [(0, 0)])  # compared, no conflict
    with sqlite_db.read() as conn:
        assert ds.load(conn, "ds").data_version == version


def test_a_batch_after_a_failed_one_is_compared(sqlite_db: Database) -> None:
    """A refused batch leaves no digest behind: sending it again is refused again."""
    _run(sqlite_db, "ds", FRESH[:1])
    bad = LabelRows(example_ids=["a", "b"], values=np.array([1.0, 7.0]))
    for _ in range(2):
        with pytest.raises(ConflictError) as refused:
            ingest.store_labels(sqlite_db, dataset="ds", rows=bad, overwrite=False)
        assert [e.field for e in refused.value.errors] == ["labels[1].value"]


def test_postgresql_copies_into_an_empty_dataset_and_keeps_doubles_exact(
    postgres_db: Database,
) -> None:
    """Binary COPY sends the doubles themselves: every value reads back bit for bit (from
    5e-324 to the bounds, +-1e15, the widest any dataset may have)."""
    ds.create_dataset(
        postgres_db,
        ds.DatasetSpec(
            name="wide", label_min=-1e15, label_max=1e15, default_label=0,
            epsilon_budget=Decimal(1),
        ),
        actor_role="operator",
    )  # fmt: skip
    rng = np.random.default_rng(3)
    values = np.concatenate(
        [rng.standard_normal(70_000) * 10.0 ** rng.integers(-300, 14, 70_000), [5e-324, -0.0]]
    )
    ids = [f"k:{i}.{'x' * (i % 120)}" for i in range(values.size)]  # ids of many lengths
    rows = LabelRows(example_ids=ids, values=values)
    result = ingest.store_labels(postgres_db, dataset="wide", rows=rows, overwrite=False)
    assert (result.new, result.n_labels) == (values.size, values.size)
    with postgres_db.read() as conn:
        stored = dict(conn.exec_driver_sql("SELECT example_id, value FROM entries").all())
    assert [stored[k] for k in ids] == values.tolist()


def test_postgresql_stages_when_an_empty_dataset_has_rows_after_all(
    postgres_db: Database,
) -> None:
    """Counts that missed a row make the direct COPY fail on the key: the batch is staged."""
    _run(postgres_db, "ds", [])
    with postgres_db.write() as conn:
        conn.exec_driver_sql(
            "INSERT INTO entries (dataset_id, example_id, registered, value) "
            "SELECT id, 'b', 1, NULL FROM datasets WHERE name = 'ds'"
        )
    rows = LabelRows(example_ids=["a", "b"], values=np.array([1.0, 2.0]))
    result = ingest.store_labels(postgres_db, dataset="ds", rows=rows, overwrite=False)
    assert (result.new, result.unchanged) == (2, 0)
    with postgres_db.read() as conn:
        stored = conn.exec_driver_sql(
            "SELECT example_id, registered, value FROM entries ORDER BY example_id"
        ).all()
    assert [tuple(r) for r in stored] == [("a", 0, 1.0), ("b", 1, 2.0)]
