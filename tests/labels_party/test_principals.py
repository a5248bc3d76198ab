"""Named principals (issue 24): several tokens per role, each naming who acted, through the app,
the ledger and ``labeldp tokens``."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from labeldp.cli import main as labeldp
from labels_party.access import principals
from labels_party.budget import ledger
from labels_party.db.engine import Database, create_schema, make_engine
from shared.errors import InvalidParameterError
from tests.labels_party.conftest import ADV, OPS, create_dataset, put_labels, register, release


def database(db_path: Path) -> Database:
    engine = make_engine(f"sqlite:///{db_path}")
    create_schema(engine)
    return Database(engine)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def ready(client: Any, name: str = "ds") -> None:
    create_dataset(client, name)
    ids = [f"e{i:03d}" for i in range(60)]
    register(client, name, ids)
    assert put_labels(client, name, [(i, float(k)) for k, i in enumerate(ids)]).status_code == 200


def ledger_rows(db_path: Path) -> list[dict[str, Any]]:
    with sqlite3.connect(db_path) as conn:
        conn.row_factory = sqlite3.Row
        return [dict(row) for row in conn.execute("SELECT * FROM ledger ORDER BY seq")]


def test_two_advertisers_spend_under_their_own_names(client, db_path) -> None:
    """Every ledger entry, release and download names the principal whose token acted; the
    role-only tokens keep working and name nobody but their role."""
    ready(client)
    db = database(db_path)
    _, alice = principals.issue(db, name="alice", role="advertiser")
    _, bidder = principals.issue(db, name="bidder-service", role="advertiser")
    _, ops = principals.issue(db, name="ops@example.org", role="operator")
    assert alice.startswith(principals.TOKEN_PREFIX) and alice != bidder
    first = client.post("/v1/datasets/ds/releases", json={"epsilon": "0.5"}, headers=bearer(alice))
    assert first.status_code == 201, first.text
    second = client.post(
        "/v1/datasets/ds/releases", json={"epsilon": "0.5"}, headers=bearer(bidder)
    )
    assert second.status_code == 201, second.text
    assert release(client, "ds", epsilon=0.5).status_code == 201  # the role-only token
    top_up = client.post(
        "/v1/datasets/ds/budget", json={"add": "1", "reason": "q4"}, headers=bearer(ops)
    )
    assert top_up.status_code == 200, top_up.text
    by_release: dict[str, set[Any]] = {}
    for entry in client.get("/v1/ledger", headers=OPS).json()["entries"]:
        by_release.setdefault(entry["release_id"] or entry["kind"], set()).add(
            (entry["actor_role"], entry["actor"])
        )
    assert by_release[first.json()["id"]] == {("advertiser", "alice")}
    assert by_release[second.json()["id"]] == {("advertiser", "bidder-service")}
    assert by_release["topup"] == {("operator", "ops@example.org")}
    assert by_release["dataset"] == {("operator", None)}
    listed = client.get("/v1/datasets/ds/releases", headers=OPS).json()["releases"]
    assert {r["id"]: r["actor"] for r in listed} == {
        first.json()["id"]: "alice",
        second.json()["id"]: "bidder-service",
        next(r["id"] for r in listed if r["actor"] is None): None,
    }
    # The chain commits to the principal: it verifies, and renaming the actor breaks it.
    with db.read() as conn:
        assert ledger.verify(conn).ok
    rows = ledger_rows(db_path)
    named = next(row for row in rows if row["actor"] == "alice")
    assert ledger.entry_hash(named) == named["entry_hash"]
    assert ledger.entry_hash({**named, "actor": "mallory"}) != named["entry_hash"]
    with sqlite3.connect(db_path) as conn:
        conn.execute("UPDATE ledger SET actor = 'mallory' WHERE seq = ?", (named["seq"],))
    with db.read() as conn:
        report = ledger.verify(conn)
    assert not report.ok and any(str(named["seq"]) in p for p in report.problems)


def test_an_entry_without_a_principal_hashes_as_it_always_did() -> None:
    """Entries written before principals (and by role-only tokens) keep their hashes."""
    entry = {
        "seq": 1, "time": "t", "dataset": "d", "release_id": None, "kind": "dataset",
        "mechanism": None, "epsilon": 0.0, "epsilon_exact": "0", "delta_exact": None,
        "actor_role": "operator", "parameters": "{}", "message_sha256": None,
        "prev_hash": ledger.GENESIS_HASH,
    }  # fmt: skip
    before = ledger.entry_hash(entry)
    assert ledger.entry_hash({**entry, "actor": None}) == before
    assert ledger.entry_hash({**entry, "actor": "alice"}) != before


def test_downloads_and_refusals_name_the_principal(client, db_path) -> None:
    ready(client)
    db = database(db_path)
    _, reader = principals.issue(db, name="publisher-etl", role="publisher")
    _, alice = principals.issue(db, name="alice", role="advertiser")
    made = client.post("/v1/datasets/ds/releases", json={"epsilon": "1"}, headers=bearer(alice))
    assert made.status_code == 201, made.text
    pulled = client.get(f"/v1/releases/{made.json()['id']}/message", headers=bearer(reader))
    assert pulled.status_code == 200
    access = client.get("/v1/access-log", headers=OPS).json()
    rows = access.get("entries") or access.get("items") or access.get("rows")
    assert [(r["actor_role"], r["actor"]) for r in rows] == [("publisher", "publisher-etl")]
    refused = client.post(
        "/v1/datasets/ds/releases", json={"epsilon": "100"}, headers=bearer(alice)
    )
    assert refused.status_code == 409
    trail = client.get("/v1/audit", headers=OPS).json()
    refusals = trail.get("entries") or trail.get("items") or trail.get("rows")
    assert [(r["actor_role"], r["actor"], r["status"]) for r in refusals] == [
        ("advertiser", "alice", 409)
    ]


def test_a_principal_has_its_roles_rights_only_and_revocation_ends_them(
    client, db_path, monkeypatch
) -> None:
    monkeypatch.setattr(principals, "CACHE_SECONDS", 0.0)
    ready(client)
    db = database(db_path)
    _, reader = principals.issue(db, name="etl", role="publisher")
    assert client.get("/v1/datasets/ds", headers=bearer(reader)).status_code == 200
    denied = client.post("/v1/datasets/ds/releases", json={"epsilon": "1"}, headers=bearer(reader))
    assert denied.status_code == 403 and "publisher" in denied.json()["detail"]
    principals.revoke(db, "etl")
    gone = client.get("/v1/datasets/ds", headers=bearer(reader))
    assert gone.status_code == 401 and gone.json()["errors"][0]["field"] == "Authorization"
    assert client.get("/v1/datasets/ds", headers=bearer(reader + "x")).status_code == 401
    # Listed with its revocation, never with a token or a digest.
    (listed,) = principals.listing(db)
    assert listed.public() == {
        "name": "etl", "role": "publisher", "created": listed.created, "revoked": listed.revoked,
    }  # fmt: skip
    assert listed.revoked is not None


def test_revocation_takes_effect_within_the_cache_time() -> None:
    """A looked-up token is trusted for CACHE_SECONDS, then looked up again."""
    now = [0.0]

    class Fake:
        calls = 0

        def read(self) -> Any:
            Fake.calls += 1
            raise AssertionError("looked up")

    auth = principals.Authenticator(Fake(), (), clock=lambda: now[0])  # type: ignore[arg-type]
    digest = principals.token_digest("ldp_x")
    auth._cache[digest] = (0.0, principals.Caller(role="publisher", actor="etl"))
    assert auth("Bearer ldp_x") == principals.Caller(role="publisher", actor="etl")
    now[0] = principals.CACHE_SECONDS + 0.01
    with pytest.raises(AssertionError, match="looked up"):
        auth("Bearer ldp_x")


@pytest.mark.parametrize(
    ("name", "role", "match"),
    [
        ("advertiser", "advertiser", "role's name"),
        ("operator", "publisher", "role's name"),
        ("", "advertiser", "1-64"),
        ("-lead", "advertiser", "1-64"),
        ("a b", "advertiser", "1-64"),
        ("x" * 65, "advertiser", "1-64"),
        ("ok", "root", "role"),
    ],
)
def test_bad_names_and_roles_are_refused(db_path, name: str, role: str, match: str) -> None:
    with pytest.raises(InvalidParameterError, match=match):
        principals.issue(database(db_path), name=name, role=role)


def test_labeldp_tokens_add_list_revoke(client, db_path, capsys) -> None:
    """The token is printed once; the list never shows one; a duplicate or unknown name is
    refused with exit status 2."""
    create_dataset(client, "ds")
    db = ["--db", str(db_path)]
    assert labeldp(["tokens", "add", "alice", "--role", "advertiser", *db]) == 0
    printed = capsys.readouterr().out.strip().splitlines()
    token = printed[-1]
    assert token.startswith(principals.TOKEN_PREFIX) and "alice (advertiser)" in printed[0]
    assert client.get("/v1/datasets/ds", headers=bearer(token)).status_code == 200
    assert labeldp(["tokens", "add", "alice", "--role", "operator", *db]) == 2
    assert "exists already" in capsys.readouterr().err
    assert labeldp(["tokens", "list", "--json", *db]) == 0
    out = capsys.readouterr().out
    assert token not in out and principals.token_digest(token) not in out
    (entry,) = json.loads(out)["principals"]
    assert (entry["name"], entry["role"], entry["revoked"]) == ("alice", "advertiser", None)
    assert labeldp(["tokens", "revoke", "alice", *db]) == 0
    assert "revoked" in capsys.readouterr().out
    assert labeldp(["tokens", "revoke", "alice", *db]) == 2
    assert labeldp(["tokens", "revoke", "nobody", *db]) == 2
    assert labeldp(["tokens", "list", "--json", "--db", str(db_path.with_name("none.db"))]) == 2
    with sqlite3.connect(db_path) as conn:
        stored = conn.execute("SELECT token_sha256 FROM principals").fetchall()
    assert stored == [(principals.token_digest(token),)]  # only the digest is kept


def test_the_rate_limiter_counts_a_principal_as_a_valid_token(make_client, db_path) -> None:
    """A named token gets its own bucket (not the shared one of failed authentications)."""
    client = make_client(rate_limit=1.0, rate_burst=2)
    create_dataset(client, "ds")
    _, token = principals.issue(database(db_path), name="alice", role="advertiser")
    for _ in range(2):  # exhaust the bucket of bad tokens from this address
        client.get("/v1/datasets", headers=bearer("wrong-token"))
    assert client.get("/v1/datasets/ds", headers=bearer(token)).status_code == 200
    assert client.get("/v1/datasets", headers=ADV).status_code == 200


@pytest.mark.parametrize(
    "where",
    [
        ["--db", "GARBAGE"],
        ["--database-url", "abc"],
        ["--database-url", "postgresql://u@127.0.0.1:1/x"],
    ],
    ids=["not a database", "not a URL", "refused connection"],
)
@pytest.mark.parametrize(
    "command",
    [
        ["tokens", "add", "bob", "--role", "operator"],
        ["tokens", "list"],
        ["tokens", "revoke", "bob"],
        ["keys", "public", "--signing-key", "KEY"],
        ["keys", "rotate", "--signing-key", "KEY"],
    ],  # fmt: skip
    ids=lambda c: " ".join(c[:2]),
)
def test_a_database_that_cannot_be_opened_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: list[str], command: list[str]
) -> None:
    """Found by the CLI audit: these five commands caught only a missing file; a file that is
    not a database, a URL that does not parse and a refused connection were tracebacks."""
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"\x00not sqlite" * 500)
    where = [str(garbage) if arg == "GARBAGE" else arg for arg in where]
    command = [str(tmp_path / "k.pem") if arg == "KEY" else arg for arg in command]
    assert labeldp([*command, *where]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"labeldp {' '.join(command[:2])}: cannot open the database"), err
    assert err.count("\n") == 1
    assert not (tmp_path / "k.pem").exists()  # nothing written
