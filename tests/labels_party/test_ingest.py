"""labels_party.ingest against the databases themselves: both PostgreSQL statements agree.

On PostgreSQL a staged batch is moved by an index probe per row (a batch smaller than the
dataset) or by one update-join and anti-join (a larger one). Both must store the same rows and
report the same counts and conflicts as SQLite's ``executemany`` upsert, whatever the batch.
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from labels_party import datasets as ds
from labels_party import ingest
from labels_party.db.engine import Database, create_schema, make_engine
from labels_party.errors import ConflictError
from labels_party.parsing import LabelRows

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


def _run(db: Database, name: str) -> list[Any]:
    ds.create_dataset(
        db,
        ds.DatasetSpec(
            name=name, label_min=0, label_max=10, default_label=0, epsilon_budget=Decimal(1)
        ),
        actor_role="operator",
    )
    outcomes: list[Any] = []
    for kind, ids, values, overwrite in SCENARIO:
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


@pytest.mark.parametrize("statement", ["probe", "join"])
def test_both_postgresql_statements_match_sqlite(
    sqlite_db: Database, postgres_db: Database, statement: str, monkeypatch: Any
) -> None:
    expected = _run(sqlite_db, "ds")
    original = ingest._copy_upsert
    forced = {"probe": 10**9, "join": 0}[statement]  # the dataset's size decides which one
    chosen: list[str] = []

    def copy_upsert(conn: Any, statements: Any, d: int, ids: Any, v: Any, existing: int) -> int:
        chosen.append("probe" if len(ids) < forced else "join")
        return original(conn, statements, d, ids, v, forced)

    monkeypatch.setattr(ingest, "_copy_upsert", copy_upsert)
    assert _run(postgres_db, "ds") == expected
    assert set(chosen) == {statement}


def test_postgresql_picks_the_probe_for_a_batch_smaller_than_the_dataset(
    postgres_db: Database, monkeypatch: Any
) -> None:
    original = ingest._copy_upsert
    seen: list[tuple[int, int]] = []

    def copy_upsert(conn: Any, statements: Any, d: int, ids: Any, v: Any, existing: int) -> int:
        seen.append((len(ids), existing))
        return original(conn, statements, d, ids, v, existing)

    monkeypatch.setattr(ingest, "_copy_upsert", copy_upsert)
    outcomes, stored = _run(postgres_db, "ds")
    # the first batch meets an empty dataset (join); later ones see its size grow
    assert seen[0] == (4, 0) and seen[1] == (5, 4)
    assert len(stored) == 12
