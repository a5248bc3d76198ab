"""Alembic: a database written by the previous release upgrades, and its ledger still verifies.

``tests/fixtures/prev_release.db`` was written by the code at commit e1a89f1 (floats only, no
``alembic_version``; ``tests/fixtures/make_prev_release_db.py`` says how): two datasets, 300
labelled examples, two releases of epsilon 0.1 and 0.2.
"""

from __future__ import annotations

import shutil
import sqlite3
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Column, Integer, Table, create_engine

from features_party.db import engine as features_engine
from features_party.db.models import Base
from labels_party import ledger
from labels_party.db.engine import MIGRATIONS, Database, create_schema, make_engine
from labels_party.db.models import metadata
from shared import epsilon as amounts
from shared import migrations
from tests.labels_party.conftest import ADV, OPS, cli, create_dataset

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _copy(tmp_path: Path, name: str = "prev_release.db") -> Path:
    target = tmp_path / name
    shutil.copy(FIXTURES / name, target)
    return target


def _hashes(path: Path) -> list[tuple[int, str]]:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT seq, entry_hash FROM ledger ORDER BY seq").fetchall()


def test_migrations_alone_build_exactly_the_declared_schema(tmp_path: Path) -> None:
    """A table or column declared in labels_party/db/models.py without its revision fails here."""
    engine = make_engine(f"sqlite:///{tmp_path / 'fresh.db'}")
    create_schema(engine)
    with engine.connect() as conn:
        assert migrations.current(conn) == migrations.head(MIGRATIONS)
        assert migrations.schema_drift(conn, metadata) == []
    engine.dispose()


def test_a_table_declared_without_its_revision_stops_the_start(tmp_path: Path) -> None:
    extra = Table("someone_elses", metadata, Column("id", Integer, primary_key=True))
    try:
        engine = make_engine(f"sqlite:///{tmp_path / 'fresh.db'}")
        with pytest.raises(RuntimeError, match="table someone_elses.*add a revision"):
            create_schema(engine)
        engine.dispose()
    finally:
        metadata.remove(extra)


def test_the_fixture_is_the_previous_release(tmp_path: Path) -> None:
    path = _copy(tmp_path)
    with sqlite3.connect(path) as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        columns = {row[1] for row in conn.execute("PRAGMA table_info(ledger)")}
    assert "alembic_version" not in tables and "epsilon_exact" not in columns
    engine = create_engine(f"sqlite:///{path}")
    with engine.connect() as conn:
        assert migrations.current(conn) is None
        assert migrations.schema_drift(conn, metadata) != []
    engine.dispose()


def test_verify_refuses_a_database_not_yet_upgraded(tmp_path: Path) -> None:
    """labeldp ledger verify never migrates: it says to start the service first (exit 2)."""
    path = _copy(tmp_path)
    before = path.read_bytes()
    done = cli("ledger", "verify", "--db", str(path))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "written before Alembic" in done.stderr and "start the service" in done.stderr
    assert path.read_bytes() == before


def test_previous_release_upgrades_and_its_ledger_still_verifies(
    tmp_path: Path, make_client: Any, db_path: Path
) -> None:
    shutil.copy(FIXTURES / "prev_release.db", db_path)
    before = _hashes(db_path)
    with sqlite3.connect(db_path) as conn:  # the spends as the previous release wrote them
        old_spends = [r[0] for r in conn.execute("SELECT epsilon FROM ledger WHERE seq > 2")]
    assert len(old_spends) == 4 and all(isinstance(value, float) for value in old_spends)
    client = make_client()  # the app upgrades to head on start
    engine = create_engine(f"sqlite:///{db_path}")
    with engine.connect() as conn:
        assert migrations.current(conn) == migrations.head(MIGRATIONS)
        assert migrations.schema_drift(conn, metadata) == []
    engine.dispose()
    assert _hashes(db_path) == before, "the chain is not rewritten"

    done = cli("ledger", "verify", "--db", str(db_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"ledger OK: 6 entries, head {before[-1][1]}" in done.stdout
    # The totals are exact: the sum of the old entries' floats at their exact binary values.
    exact = amounts.add(*(Decimal(value) for value in old_spends))
    assert exact != Decimal("0.3")
    db = Database(make_engine(f"sqlite:///{db_path}"))
    with db.read() as conn:
        report = ledger.verify(conn)
    db.dispose()
    assert report.ok, report.problems
    assert report.spent == {"clicks": exact, "spare": Decimal(0)}
    view = client.get("/v1/datasets/clicks", headers=ADV).json()
    # Backfilled: the exact ledger sum, not the old float total (that sum rounded up).
    assert Decimal(view["epsilon_spent"]) == exact != Decimal(0.30000000000000004)
    assert (view["epsilon_budget"], view["delta_budget"], view["delta_left"]) == ("10", "0", "0")
    assert view["n_examples"] == 300 and len(view["releases"]) == 2

    # The upgraded database keeps working: a new release and a dataset with a delta budget.
    answer = client.post(
        "/v1/datasets/clicks/releases", json={"epsilon": "0.1", "mechanism": "auto"}, headers=ADV
    )
    assert answer.status_code == 201, answer.text
    created = create_dataset(client, "new", epsilon_budget="1", delta_budget="0.001")
    assert created["delta_budget"] == "0.001"
    done = cli("ledger", "verify", "--db", str(db_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ledger OK: 9 entries" in done.stdout
    total = amounts.text(amounts.add(exact, Decimal("0.1")))
    assert f"dataset clicks: epsilon spent {total}" in done.stdout


def test_a_tampered_old_total_is_not_backfilled(tmp_path: Path) -> None:
    """An old total that is not the ledger's sum rounded up stays for verify to report."""
    path = _copy(tmp_path)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE datasets SET epsilon_spent = 0.25 WHERE name = 'clicks'")
    engine = make_engine(f"sqlite:///{path}")
    create_schema(engine)
    with Database(engine).read() as conn:
        problems = ledger.verify(conn).problems
    engine.dispose()
    assert len(problems) == 1 and "recorded epsilon_spent 0.25" in problems[0], problems


def test_a_database_the_stop_gap_extended_is_upgraded_too(tmp_path: Path) -> None:
    """The pre-Alembic stop-gap added the exact columns itself: 0002 adds only what is missing."""
    path = _copy(tmp_path)
    with sqlite3.connect(path) as conn:
        conn.execute("ALTER TABLE datasets ADD COLUMN epsilon_budget_exact TEXT")
        conn.execute("ALTER TABLE ledger ADD COLUMN epsilon_exact TEXT")
    engine = make_engine(f"sqlite:///{path}")
    create_schema(engine)
    create_schema(engine)  # idempotent
    with engine.connect() as conn:
        assert migrations.current(conn) == migrations.head(MIGRATIONS)
        assert migrations.schema_drift(conn, metadata) == []
    with Database(engine).read() as conn:
        assert ledger.verify(conn).ok
    engine.dispose()


def _fail_after_upgrading(monkeypatch: Any) -> None:
    real = migrations.command.upgrade

    def upgrade_then_fail(cfg: Any, revision: str) -> None:
        real(cfg, revision)
        raise RuntimeError("disk full")

    monkeypatch.setattr(migrations.command, "upgrade", upgrade_then_fail)


def _tables_and_columns(path: Path) -> set[tuple[str, str]]:
    with sqlite3.connect(path) as conn:
        tables = [
            row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
        ]
        return {
            (table, row[1])
            for table in tables
            for row in conn.execute(f"PRAGMA table_info({table})")
        }


def test_a_failed_migration_changes_nothing(tmp_path: Path, monkeypatch: Any) -> None:
    """The upgrade is one transaction: a revision that fails midway leaves the old schema."""
    path = _copy(tmp_path)
    before = _tables_and_columns(path)
    _fail_after_upgrading(monkeypatch)
    engine = make_engine(f"sqlite:///{path}")
    with pytest.raises(RuntimeError, match="disk full"):
        create_schema(engine)
    engine.dispose()
    assert _tables_and_columns(path) == before
    assert ("datasets", "delta_budget_exact") not in before


def test_a_failed_features_migration_changes_nothing(tmp_path: Path, monkeypatch: Any) -> None:
    path = _copy(tmp_path, "prev_release_features.db")
    before = _tables_and_columns(path)
    _fail_after_upgrading(monkeypatch)
    with pytest.raises(RuntimeError, match="disk full"):
        features_engine.make_engine(f"sqlite:///{path}")
    assert _tables_and_columns(path) == before
    assert not any(table == "model_release_messages" for table, _ in before)


def test_features_party_previous_release_upgrades(tmp_path: Path) -> None:
    path = _copy(tmp_path, "prev_release_features.db")
    engine = features_engine.make_engine(f"sqlite:///{path}")
    with engine.connect() as conn:
        assert migrations.current(conn) == migrations.head(features_engine.MIGRATIONS)
        assert migrations.schema_drift(conn, Base.metadata) == []
        rows = conn.exec_driver_sql("SELECT example_id, values_json FROM feature_rows").all()
    assert [row[0] for row in rows] == ["ex-0000", "ex-0001", "ex-0002"]
    engine.dispose()
    fresh = features_engine.make_engine(f"sqlite:///{tmp_path / 'fresh.db'}")
    with fresh.connect() as conn:
        assert migrations.schema_drift(conn, Base.metadata) == []
    fresh.dispose()


def test_operator_sees_the_budget_of_an_upgraded_dataset(make_client: Any, db_path: Path) -> None:
    shutil.copy(FIXTURES / "prev_release.db", db_path)
    view = make_client().get("/v1/datasets/spare", headers=OPS).json()
    assert (view["epsilon_budget"], view["epsilon_spent"], view["delta_spent"]) == (
        "2.5",
        "0",
        "0",
    )
