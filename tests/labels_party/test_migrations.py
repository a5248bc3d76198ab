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
from sqlalchemy import Column, Integer, Table, create_engine, select

from features_party.db import engine as features_engine
from features_party.db.models import Base
from labels_party.budget import ledger
from labels_party.db.engine import MIGRATIONS, Database, create_schema, make_engine
from labels_party.db.models import datasets, metadata
from shared import epsilon as amounts
from shared.service import migrations
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


# ---- migration 0012: budgets stored outside the amount range --------------------------------


def _database_at_0011(url: str) -> Database:
    """A database built by the migrations up to 0011: the schema of the code before 0012."""
    from alembic import command

    engine = make_engine(url)
    with engine.connect() as conn, conn.begin():
        command.upgrade(migrations.config(MIGRATIONS, conn), "0011")
    return Database(engine)


def _old_dataset(db: Database, name: str, budget: str, delta: str = "0") -> None:
    """A dataset created as the code before the amount range did: any amount > 0 stored as it
    was given, its creation ledgered with it (``DatasetSpec`` checks no range: the API does)."""
    from labels_party.catalog import datasets as ds

    spec = ds.DatasetSpec(
        name=name,
        label_min=0.0,
        label_max=10.0,
        default_label=0.0,
        epsilon_budget=Decimal(budget),
        delta_budget=Decimal(delta),
    )
    ds.create_dataset(db, spec, actor_role="operator")


def _app_client(url: str, tmp_path: Path) -> Any:
    from fastapi.testclient import TestClient

    from labels_party.main import create_app
    from tests.labels_party.conftest import make_settings

    settings = make_settings(tmp_path / "unused.db", signing_key_path=tmp_path / "key.pem")
    settings = type(settings)(**{**settings.__dict__, "database_url": url})
    return TestClient(create_app(settings), raise_server_exceptions=False)


def _ledger_entries(db: Database) -> list[dict[str, Any]]:
    with db.read() as conn:
        return ledger.entries(conn)


@pytest.fixture(params=["sqlite", "postgresql"])
def any_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'labels.db'}"
    return str(request.getfixturevalue("postgres_url"))


def test_0012_repairs_out_of_range_budgets_and_the_ledger_still_verifies(
    any_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 24, item 4: a database that holds an out-of-range budget (``1e10001`` was stored
    by the code before the range) is repaired by the migration: the budget above 1e300 becomes
    1e300, one below 1e-400 (epsilon or delta) 0; each repair is a ledger entry of kind
    ``repair`` (the recorded entries untouched) and a log line; the listing and the datasets
    answer 200 with the repaired values; the ledger verifies."""
    db = _database_at_0011(any_url)
    _old_dataset(db, "huge", "1e10001")
    _old_dataset(db, "tiny", "1e-10001", delta="1e-10001")
    _old_dataset(db, "fine", "2.5", delta="0.001")
    before = _ledger_entries(db)
    with db.read() as conn:
        assert ledger.verify(conn).ok  # the old database was consistent: only out of range
    with caplog.at_level("WARNING", logger="labels_party"):
        create_schema(db.engine)
    after = _ledger_entries(db)
    assert after[: len(before)] == before, "the recorded entries are not rewritten"
    repairs = after[len(before) :]
    assert [(e["kind"], e["dataset"], e["actor_role"], e["epsilon"]) for e in repairs] == [
        ("repair", "huge", "migration", 0.0),
        ("repair", "tiny", "migration", 0.0),
        ("repair", "tiny", "migration", 0.0),
    ]
    import json

    assert [json.loads(e["parameters"]) for e in repairs] == [
        {"field": "epsilon_budget", "stored": "1E+10001", "epsilon_budget": "1E+300",
         "reason": "outside the amount range [1E-400, 1E+300]", "migration": "0012"},
        {"field": "epsilon_budget", "stored": "1E-10001", "epsilon_budget": "0",
         "reason": "outside the amount range [1E-400, 1E+300]", "migration": "0012"},
        {"field": "delta_budget", "stored": "1E-10001", "delta_budget": "0",
         "reason": "outside the amount range [1E-400, 1E+300]", "migration": "0012"},
    ]  # fmt: skip
    logged = [r.getMessage() for r in caplog.records if "migration 0012" in r.getMessage()]
    assert len(logged) == 3 and "'huge': epsilon_budget was 1E+10001" in logged[0]
    with db.read() as conn:
        report = ledger.verify(conn)
        stored = {
            row.name: (row.epsilon_budget, row.epsilon_budget_exact, row.delta_budget_exact)
            for row in conn.execute(select(datasets))
        }
    assert report.ok, report.problems
    assert stored == {
        "huge": (1e300, "1E+300", None),
        "tiny": (0.0, "0", "0"),
        "fine": (2.5, "2.5", "0.001"),
    }
    create_schema(db.engine)  # at head: nothing more to repair
    assert len(_ledger_entries(db)) == len(after)
    db.dispose()

    with _app_client(any_url, tmp_path) as client:
        listed = client.get("/v1/datasets", headers=OPS)
        assert listed.status_code == 200, listed.text
        views = {d["name"]: d for d in listed.json()["datasets"]}
        assert (views["huge"]["epsilon_budget"], views["huge"]["epsilon_left"]) == ("1E+300",) * 2
        assert (views["tiny"]["epsilon_budget"], views["tiny"]["delta_budget"]) == ("0", "0")
        assert (views["fine"]["epsilon_budget"], views["fine"]["delta_budget"]) == ("2.5", "0.001")
        for name in views:
            view = client.get(f"/v1/datasets/{name}", headers=ADV)
            assert view.status_code == 200, view.text
            assert view.json()["epsilon_budget"] == views[name]["epsilon_budget"]
        shown = client.get("/v1/ledger", params={"kind": "repair"}, headers=OPS)
        assert shown.status_code == 200, shown.text
        assert [e["parameters"]["field"] for e in shown.json()["entries"]] == [
            "epsilon_budget", "epsilon_budget", "delta_budget",
        ]  # fmt: skip
        checked = client.get("/v1/ledger/verify", headers=OPS)
        assert checked.status_code == 200 and checked.json()["ok"] is True, checked.text
    done = cli("ledger", "verify", "--database-url", any_url)
    assert done.returncode == 0, done.stdout + done.stderr


def test_0012_repairs_hand_edited_budgets_to_zero_and_verify_names_them(
    tmp_path: Path,
) -> None:
    """A NaN, negative or unparseable budget (only a hand-edited database holds one) becomes 0:
    nothing spendable. The ledger had recorded another budget, so verify names each one."""
    path = tmp_path / "labels.db"
    db = _database_at_0011(f"sqlite:///{path}")
    for name in ("nan", "negative", "junk", "fine"):
        _old_dataset(db, name, "5")
    db.dispose()
    with sqlite3.connect(path) as conn:
        for name, text, value in (("nan", "NaN", 5.0), ("negative", "-3", -3.0),
                                  ("junk", "five", 5.0)):  # fmt: skip
            conn.execute(
                "UPDATE datasets SET epsilon_budget_exact = ?, epsilon_budget = ? WHERE name = ?",
                (text, value, name),
            )
    db = Database(make_engine(f"sqlite:///{path}"))
    create_schema(db.engine)
    with db.read() as conn:
        budgets = dict(conn.execute(select(datasets.c.name, datasets.c.epsilon_budget_exact)).all())
        problems = ledger.verify(conn).problems
    db.dispose()
    assert budgets == {"nan": "0", "negative": "0", "junk": "0", "fine": "5"}
    assert sorted(p.split(": ", 1)[1] for p in problems) == [
        "epsilon_budget of 'junk' was five when repaired; the ledger had recorded 5",
        "epsilon_budget of 'nan' was NaN when repaired; the ledger had recorded 5",
        "epsilon_budget of 'negative' was -3 when repaired; the ledger had recorded 5",
    ]
    with _app_client(f"sqlite:///{path}", tmp_path) as client:
        listed = client.get("/v1/datasets", headers=OPS)
        assert listed.status_code == 200, listed.text
        assert {d["name"]: d["epsilon_left"] for d in listed.json()["datasets"]} == {
            "fine": "5", "junk": "0", "nan": "0", "negative": "0",
        }  # fmt: skip


def test_a_nan_or_unparseable_budget_reads_as_nothing_spendable(
    make_client: Any, db_path: Path
) -> None:
    """Read before any repair (a row edited after the migrations ran): NaN or text that is not
    a number is a budget of 0 (it read as 1e300, or failed the listing), never the widest."""
    client = make_client()
    for name in ("nan", "junk"):
        create_dataset(client, name)
    with sqlite3.connect(db_path) as conn:
        conn.execute("UPDATE datasets SET epsilon_budget_exact = 'NaN' WHERE name = 'nan'")
        conn.execute("UPDATE datasets SET epsilon_budget_exact = 'x1' WHERE name = 'junk'")
    listed = client.get("/v1/datasets", headers=OPS)
    assert listed.status_code == 200, listed.text
    assert {d["name"]: d["epsilon_left"] for d in listed.json()["datasets"]} == {
        "junk": "0",
        "nan": "0",
    }
    assert client.get("/v1/datasets/nan", headers=ADV).json()["epsilon_budget"] == "0"


def _first_start(url: str, start: float, results: Any) -> None:
    """One replica's schema step (a process of its own, as replicas are), started at ``start``."""
    import time

    engine = make_engine(url)
    while time.time() < start:
        time.sleep(0.001)
    try:
        create_schema(engine)
        results.put("ok")
    except Exception as exc:  # noqa: BLE001 - reported to the test
        results.put(f"{type(exc).__name__}: {exc}"[:300])
    finally:
        engine.dispose()


def test_two_replicas_starting_at_once_on_a_new_postgresql_database(postgres_url: str) -> None:
    """Found by an audit: both first starts created alembic_version and one crashed
    (UniqueViolation); the migrations now take a transaction-scoped advisory lock first (SQLite's
    BEGIN IMMEDIATE already made them take turns). Two processes, released at the same instant."""
    import multiprocessing
    import time

    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    start = time.time() + 4.0  # after both have imported and connected
    replicas = [
        context.Process(target=_first_start, args=(postgres_url, start, results)) for _ in range(2)
    ]
    for replica in replicas:
        replica.start()
    for replica in replicas:
        replica.join(120)
    assert sorted(results.get(timeout=10) for _ in replicas) == ["ok", "ok"]
    engine = make_engine(postgres_url)
    with engine.connect() as conn:
        assert migrations.current(conn) is not None
    engine.dispose()
