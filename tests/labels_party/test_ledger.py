"""Ledger: hash chain, ``ledger verify`` (including tampered databases) and ``ledger export``."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import sqlite3
import subprocess
import sys
from decimal import Decimal

import pytest

from labels_party.budget import ledger
from tests.labels_party.conftest import cli, create_dataset, put_labels, register, release


@pytest.fixture
def populated(make_client, db_path):
    client = make_client()
    create_dataset(client, "one", epsilon_budget=3.0)
    create_dataset(client, "two", epsilon_budget=1.0)
    register(client, "one", [f"a{i}" for i in range(300)])
    register(client, "two", ["b1", "b2"])
    put_labels(client, "one", [(f"a{i}", float(i % 50)) for i in range(300)])
    for _ in range(2):
        assert release(client, "one", epsilon=1.0).status_code == 201
    assert release(client, "two", mechanism="rr_on_bins", epsilon=0.5).status_code == 201
    return db_path


def _verify(db_path) -> tuple[int, str]:
    result = cli("ledger", "verify", "--db", str(db_path))
    return result.returncode, result.stdout + result.stderr


def test_verify_passes_and_reports_totals(populated):
    code, out = _verify(populated)
    assert code == 0, out
    assert "dataset one: epsilon spent 2\n" in out and "dataset two: epsilon spent 0.5" in out
    assert "ledger OK: 8 entries" in out


def test_entry_hash_is_a_chain():
    first = {"seq": 1, "time": "t", "dataset": "d", "release_id": None, "kind": "dataset",
             "mechanism": None, "epsilon": 0.0, "actor_role": "operator", "parameters": "{}",
             "message_sha256": None, "prev_hash": ledger.GENESIS_HASH}  # fmt: skip
    digest = ledger.entry_hash(first)
    assert digest != ledger.entry_hash({**first, "epsilon": 1e-12})
    assert digest != ledger.entry_hash({**first, "prev_hash": "1" * 64})
    assert digest == ledger.entry_hash({**first, "entry_hash": "ignored"})


TAMPERING = [
    ("epsilon lowered",
     "UPDATE ledger SET epsilon = epsilon / 2, epsilon_exact = '0.0001' WHERE seq = 4",
     "entry_hash"),
    ("epsilon float column lowered", "UPDATE ledger SET epsilon = epsilon / 2 WHERE seq = 4",
     "disagrees"),
    ("entry deleted", "DELETE FROM ledger WHERE seq = (SELECT max(seq) FROM ledger)", "missing"),
    ("middle entry deleted", "DELETE FROM ledger WHERE seq = 3", "seq"),
    ("spent rewritten",
     "UPDATE datasets SET epsilon_spent = 0.5, epsilon_spent_exact = '0.5' WHERE name = 'one'",
     "total"),
    ("spent float column rewritten",
     "UPDATE datasets SET epsilon_spent = 0.5 WHERE name = 'one'", "disagrees"),
    ("budget raised",
     "UPDATE datasets SET epsilon_budget = 99, epsilon_budget_exact = '99' WHERE name = 'two'",
     "budget"),
    ("budget float column raised", "UPDATE datasets SET epsilon_budget = 99 WHERE name = 'two'",
     "budget"),
    ("bounds widened", "UPDATE datasets SET label_max = 1e9 WHERE name = 'one'", "label_max"),
    ("message altered",
     "UPDATE message_chunks SET data = zeroblob(size) WHERE part = 2 AND seq = "
     "(SELECT max(seq) FROM message_chunks)", "sha256"),
    ("message removed", "DELETE FROM message_chunks WHERE release_id = "
     "(SELECT min(id) FROM releases)", "no stored message"),
    ("release epsilon rewritten",
     "UPDATE releases SET epsilon2 = 0.1 WHERE id = (SELECT min(id) FROM releases)", "epsilon"),
    ("release charge rewritten",
     "UPDATE releases SET epsilon2_exact = '0.1' WHERE id = (SELECT min(id) FROM releases)",
     "epsilon"),
    # Rows edited into what the service never writes: named, never a crash of the audit (an
    # audit found tracebacks: JSONDecodeError, AttributeError, decimal.Overflow).
    ("parameters not JSON", "UPDATE ledger SET parameters = 'not json' WHERE seq = 4",
     "entry seq 4: parameters is not a JSON object"),
    ("parameters a list", "UPDATE ledger SET parameters = '[1]' WHERE seq = 4",
     "entry seq 4: parameters is not a JSON object"),
    ("parameters missing a field", "UPDATE ledger SET parameters = '{}' WHERE seq = 1",
     "dataset 'one'"),
    ("epsilon beyond any charge",
     "UPDATE ledger SET epsilon_exact = '1e999999999' WHERE seq = 4", "entry seq 4: epsilon"),
    ("budget not a number",
     "UPDATE datasets SET epsilon_budget_exact = 'abc' WHERE name = 'one'", "dataset 'one'"),
    ("release charge not a number",
     "UPDATE releases SET epsilon2_exact = 'abc' WHERE id = (SELECT min(id) FROM releases)",
     "release "),
]  # fmt: skip


@pytest.mark.parametrize(("statement", "expect"), [t[1:] for t in TAMPERING],
                         ids=[t[0] for t in TAMPERING])  # fmt: skip
def test_verify_detects_tampering(populated, statement, expect):
    with contextlib.closing(sqlite3.connect(populated)) as conn:
        conn.execute("PRAGMA foreign_keys = OFF")
        conn.execute(statement)
        conn.commit()
    code, out = _verify(populated)
    assert code == 1, out
    assert "PROBLEM" in out and expect in out, out


def test_verify_detects_a_consistently_rehashed_forgery(populated):
    """Rewrite one spend AND recompute the whole chain: the cross-checks still catch it."""
    with contextlib.closing(sqlite3.connect(populated)) as conn:
        conn.row_factory = sqlite3.Row
        rows = [dict(r) for r in conn.execute("SELECT * FROM ledger ORDER BY seq")]
        forged = Decimal(rows[-1]["epsilon_exact"]) / 10
        rows[-1]["epsilon"], rows[-1]["epsilon_exact"] = float(forged), str(forged)
        prev = ledger.GENESIS_HASH
        for row in rows:
            row["prev_hash"] = prev
            row["entry_hash"] = prev = ledger.entry_hash(row)
            conn.execute(
                "UPDATE ledger SET epsilon = ?, epsilon_exact = ?, prev_hash = ?, entry_hash = ? "
                "WHERE seq = ?",
                (
                    row["epsilon"],
                    row["epsilon_exact"],
                    row["prev_hash"],
                    row["entry_hash"],
                    row["seq"],
                ),  # fmt: skip
            )
        conn.commit()
    code, out = _verify(populated)
    assert code == 1 and "entry epsilon != release" in out, out


def test_export_writes_every_entry_as_csv(populated, tmp_path):
    out_file = tmp_path / "ledger.csv"
    result = cli("ledger", "export", "--db", str(populated), "--out", str(out_file))
    assert result.returncode == 0, result.stderr
    assert out_file.stat().st_mode & 0o777 == 0o600  # a ledger file is owner-only
    rows = list(csv.DictReader(out_file.open()))
    assert [r["kind"] for r in rows] == ["dataset", "dataset"] + ["histogram", "randomizer"] * 3
    assert rows[0]["prev_hash"] == ledger.GENESIS_HASH
    assert all(rows[i]["prev_hash"] == rows[i - 1]["entry_hash"] for i in range(1, len(rows)))
    spent_one = sum(float(r["epsilon"]) for r in rows if r["dataset"] == "one")
    assert spent_one == pytest.approx(2.0)
    assert json.loads(rows[0]["parameters"])["epsilon_budget"] == "3"
    to_stdout = cli("ledger", "export", "--db", str(populated))
    assert list(csv.DictReader(io.StringIO(to_stdout.stdout))) == rows
    # --out naming the database (or its WAL) is refused, the database untouched (found by an
    # audit: it was truncated, then the export failed, and every label and entry was gone).
    before = populated.read_bytes()
    for target in (populated, populated.with_name(populated.name + "-wal")):
        refused = cli("ledger", "export", "--db", str(populated), "--out", str(target))
        assert refused.returncode == 2 and "is the database itself" in refused.stderr
    assert populated.read_bytes() == before
    assert _verify(populated)[0] == 0
    # An --out that cannot be written, or a full disk behind standard output: one line (found
    # by the CLI audit: tracebacks).
    missing = populated.parent / "no" / "such" / "out.csv"
    for target, reason in (
        (missing, "No such file or directory"),
        (missing.parents[2], "Is a directory"),
    ):
        refused = cli("ledger", "export", "--db", str(populated), "--out", str(target))
        assert refused.returncode == 2, refused.stderr
        assert refused.stderr == f"labeldp ledger export: --out {target}: {reason}\n"
    with open("/dev/full", "w") as full:
        result = subprocess.run(
            [sys.executable, "-m", "labels_party", "ledger", "export", "--db", str(populated)],
            stdout=full, stderr=subprocess.PIPE, text=True, timeout=120, check=False,
        )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr == "labeldp ledger export: standard output: No space left on device\n"


def test_cli_refuses_a_missing_database(tmp_path):
    result = cli("ledger", "verify", "--db", str(tmp_path / "absent.db"))
    assert result.returncode == 2 and "no database" in result.stderr
    assert not (tmp_path / "absent.db").exists()


def test_a_database_of_another_application_is_refused_unchanged(tmp_path):
    """Found by the CLI audit: the read-only audit of another application's SQLite file (or of
    an empty file) switched it to WAL mode, or grew it, before refusing it; an admin command
    would have migrated it. Each command now refuses it and leaves its bytes as they were."""
    other = tmp_path / "other.db"
    with contextlib.closing(sqlite3.connect(other)) as conn:
        conn.execute("CREATE TABLE notes (body TEXT)")
        conn.execute("INSERT INTO notes VALUES ('kept')")
        conn.commit()
    empty = tmp_path / "empty.db"
    empty.touch()
    for path in (other, empty):
        before = path.read_bytes()
        for command in (["ledger", "verify"], ["ledger", "export"], ["tokens", "list"]):
            result = cli(*command, "--db", str(path))
            assert result.returncode == 2, result.stderr
            assert "is not a labels-party database (it has no ledger)" in result.stderr
        assert path.read_bytes() == before
        assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.db", "other.db"]


def test_an_export_that_fails_midway_keeps_the_last_good_one(populated, tmp_path, monkeypatch):
    """Found by a crash audit: --out was truncated in place, so a kill (or a full disk) midway
    left a cut-off file that reads as a complete export of a shorter ledger, and the previous
    export was lost. The export is now written beside it and renamed over it when whole."""
    from labels_party.cli import main

    out = tmp_path / "ledger.csv"
    assert main(["ledger", "export", "--db", str(populated), "--out", str(out)]) == 0
    good = out.read_bytes()
    assert out.stat().st_mode & 0o777 == 0o600

    def full_disk(conn, handle):
        handle.write("seq,time\n" * 5000)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ledger, "export_csv", full_disk)
    assert main(["ledger", "export", "--db", str(populated), "--out", str(out)]) == 2
    assert out.read_bytes() == good
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
