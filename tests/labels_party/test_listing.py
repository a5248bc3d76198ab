"""Listings and audit views through the real app: datasets, releases, the filtered ledger and its
CSV, ``GET /v1/ledger/verify``, the message's ETag / HEAD and the header endpoint."""

from __future__ import annotations

import contextlib
import csv
import io
import sqlite3
from decimal import Decimal
from typing import Any

import pytest

from labels_party.budget import ledger
from shared.message import BINARY_MEDIA_TYPE, decode_binary
from tests.labels_party.conftest import (
    ADV,
    OPS,
    PUB,
    create_dataset,
    ledger_rows,
    put_labels,
    register,
    release,
)


@pytest.fixture
def populated(make_client: Any) -> Any:
    """Three datasets: "one" released twice, "two" once, "empty" never (and no examples)."""
    client = make_client()
    create_dataset(client, "one", epsilon_budget=3.0)
    create_dataset(client, "two", epsilon_budget=1.0)
    create_dataset(client, "empty", epsilon_budget=2.0)
    register(client, "one", [f"a{i}" for i in range(200)])
    register(client, "two", ["b1", "b2", "b3"])
    put_labels(client, "one", [(f"a{i}", float(i % 50)) for i in range(200)])
    ids = []
    for name, epsilon in (("one", 1.0), ("two", 0.5), ("one", 0.25)):
        response = release(client, name, epsilon=epsilon)
        assert response.status_code == 201, response.text
        ids.append(response.json()["id"])
    client.release_ids = ids  # type: ignore[attr-defined]
    return client


# ---- GET /v1/datasets ------------------------------------------------------------------------


def test_operator_and_advertiser_list_every_dataset(populated: Any) -> None:
    for headers in (OPS, ADV):
        response = populated.get("/v1/datasets", headers=headers)
        assert response.status_code == 200, response.text
        items = {item["name"]: item for item in response.json()["datasets"]}
        assert list(items) == ["empty", "one", "two"]
        one = items["one"]
        assert one["n_releases"] == 2
        assert one["releases"] == populated.release_ids[0::2]
        assert (
            one["last_release"]
            == populated.get(f"/v1/releases/{populated.release_ids[2]}", headers=OPS).json()[
                "created"
            ]
        )
        assert Decimal(str(one["epsilon_spent"])) == Decimal("1.25")
        assert Decimal(str(one["epsilon_left"])) == Decimal("1.75")
        assert Decimal(str(one["epsilon_budget"])) == Decimal(3)
        assert (one["label_min"], one["label_max"], one["state"]) == (0.0, 100.0, "released")
        assert items["empty"]["n_releases"] == 0 and items["empty"]["last_release"] is None
        assert ("n_labels" in one) == (headers is ADV)  # label information: the owner only


def test_list_matches_each_dataset_view(populated: Any) -> None:
    for item in populated.get("/v1/datasets", headers=OPS).json()["datasets"]:
        single = populated.get(f"/v1/datasets/{item['name']}", headers=OPS).json()
        assert {key: item[key] for key in single} == single


def test_publisher_sees_only_datasets_it_registered_examples_in(populated: Any) -> None:
    response = populated.get("/v1/datasets", headers=PUB)
    assert response.status_code == 200
    assert [item["name"] for item in response.json()["datasets"]] == ["one", "two"]


def test_listing_needs_a_token_and_refuses_unknown_query(populated: Any) -> None:
    assert populated.get("/v1/datasets").status_code == 401
    response = populated.get("/v1/datasets?nam=one", headers=OPS)
    assert response.status_code == 422
    assert response.json()["errors"][0]["field"] == "query.nam"


# ---- GET /v1/datasets/{name}/releases --------------------------------------------------------


def test_releases_newest_first_with_their_costs(populated: Any) -> None:
    response = populated.get("/v1/datasets/one/releases", headers=PUB)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["dataset"] == "one"
    assert [r["id"] for r in body["releases"]] == populated.release_ids[2::-2]
    for item in body["releases"]:
        meta = populated.get(f"/v1/releases/{item['id']}", headers=OPS).json()
        for key in ("created", "mechanism", "epsilon1", "epsilon2", "epsilon", "n"):
            assert item[key] == meta[key]
        assert item["message_sha256"] == meta["message_sha256"]
        assert item["actor_role"] == "advertiser"
        assert Decimal(str(item["epsilon1"])) + Decimal(str(item["epsilon2"])) <= Decimal(
            str(item["epsilon"])
        ) * (1 + Decimal("1e-12"))
    assert [Decimal(str(r["epsilon"])) for r in body["releases"]] == [Decimal("0.25"), 1]


def test_releases_of_a_dataset_without_any_and_of_an_unknown_one(populated: Any) -> None:
    assert populated.get("/v1/datasets/empty/releases", headers=ADV).json()["releases"] == []
    response = populated.get("/v1/datasets/nope/releases", headers=ADV)
    assert response.status_code == 404
    assert response.json()["errors"][0]["field"] == "dataset"  # as in the features party


# ---- GET /v1/ledger: filters, pages, CSV -----------------------------------------------------


def _ledger(client: Any, **params: Any) -> dict[str, Any]:
    response = client.get("/v1/ledger", params=params, headers=OPS)
    assert response.status_code == 200, response.text
    return response.json()


def test_ledger_filters(populated: Any) -> None:
    everything = _ledger(populated)["entries"]
    assert [e["seq"] for e in everything] == list(range(1, 10))
    by_dataset = _ledger(populated, dataset="one")["entries"]
    assert [e["seq"] for e in by_dataset] == [e["seq"] for e in everything if e["dataset"] == "one"]
    rel = populated.release_ids[1]
    by_release = _ledger(populated, release_id=rel)["entries"]
    assert [e["kind"] for e in by_release] == ["histogram", "randomizer"]
    assert {e["release_id"] for e in by_release} == {rel}
    spends = _ledger(populated, kind="randomizer", dataset="one")["entries"]
    assert [e["release_id"] for e in spends] == populated.release_ids[0::2]
    assert _ledger(populated, kind="nosuchkind")["entries"] == []
    assert _ledger(populated, dataset="one", release_id=rel)["entries"] == []


def test_ledger_time_range(populated: Any) -> None:
    everything = _ledger(populated)["entries"]
    cut = everything[5]["time"]  # since is inclusive, until exclusive
    later = _ledger(populated, since=cut)["entries"]
    earlier = _ledger(populated, until=cut)["entries"]
    assert [e["seq"] for e in earlier + later] == [e["seq"] for e in everything]
    assert later[0]["time"] == cut and all(e["time"] < cut for e in earlier)
    # Any ISO-8601 spelling of the same instant selects the same entries.
    offset = cut.replace("Z", "+00:00")
    assert _ledger(populated, since=offset)["entries"] == later
    assert _ledger(populated, since="2999-01-01T00:00:00+05:00")["entries"] == []
    assert _ledger(populated, until="2000-01-01")["entries"] == []


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"since": "yesterday"}, "query.since"),
        ({"until": "2026-13-01"}, "query.until"),
        ({"since": "0001-01-01T00:00:00+05:00"}, "query.since"),  # before year 1 in UTC
        ({"release_id": "rel_x"}, "query.release_id"),
        ({"kind": "Dataset;"}, "query.kind"),
        ({"limit": 0}, "query.limit"),
        ({"format": "xml"}, "query.format"),
        ({"dataset": "one", "datset": "one"}, "query.datset"),
    ],
)
def test_ledger_refuses_bad_filters_naming_them(populated: Any, params: Any, field: str) -> None:
    response = populated.get("/v1/ledger", params=params, headers=OPS)
    assert response.status_code == 422, response.text
    assert [e["field"] for e in response.json()["errors"]] == [field]


def test_ledger_pages_follow_next_with_the_same_filters(populated: Any) -> None:
    expected = [e["seq"] for e in _ledger(populated, dataset="one")["entries"]]
    seen, url, pages = [], "/v1/ledger?dataset=one&limit=2", 0
    while url:
        page = populated.get(url, headers=OPS).json()
        assert len(page["entries"]) <= 2
        seen += [e["seq"] for e in page["entries"]]
        url = page["next"]
        if url:
            assert "dataset=one" in url and f"after={page['next_after']}" in url
        pages += 1
    assert seen == expected and pages == 3  # 5 entries: 2 + 2 + 1


def _csv(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def test_ledger_csv_is_the_same_filtered_view(populated: Any, monkeypatch: Any) -> None:
    from labels_party.api.routes import ledger as route

    monkeypatch.setattr(route, "_CSV_BATCH", 2)  # several read batches, one header
    for params in ({}, {"dataset": "one"}, {"kind": "histogram"}, {"dataset": "one", "after": 3}):
        entries = _ledger(populated, **params)["entries"]
        by_param = populated.get("/v1/ledger", params={**params, "format": "csv"}, headers=OPS)
        by_accept = populated.get(
            "/v1/ledger", params=params, headers={**OPS, "Accept": "text/csv"}
        )
        for response in (by_param, by_accept):
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/csv")
            assert "attachment" in response.headers["content-disposition"]
        assert by_param.text == by_accept.text
        rows = _csv(by_param.text)
        assert by_param.text.splitlines()[0] == ",".join(ledger.CSV_COLUMNS)
        assert [int(r["seq"]) for r in rows] == [e["seq"] for e in entries]
        for row, entry in zip(rows, entries, strict=True):
            assert row["epsilon"] == str(entry["epsilon"])
            assert row["entry_hash"] == entry["entry_hash"]
            assert row["release_id"] == (entry["release_id"] or "")
            assert ledger.canonical_json(entry["parameters"]) == row["parameters"]
    limited = _csv(populated.get("/v1/ledger?format=csv&limit=3", headers=OPS).text)
    assert [int(r["seq"]) for r in limited] == [1, 2, 3]


def test_ledger_csv_rows_hash_like_the_database(populated: Any, db_path: Any) -> None:
    """Every exported row is the stored entry: the CSV re-hashes to the chain."""
    rows = _csv(populated.get("/v1/ledger?format=csv", headers=OPS).text)
    stored = ledger_rows(db_path)
    assert len(rows) == len(stored)
    for row, entry in zip(rows, stored, strict=True):
        assert row["entry_hash"] == entry["entry_hash"] == ledger.entry_hash(entry)
        assert row["prev_hash"] == entry["prev_hash"]


def test_ledger_is_for_the_operator_only(populated: Any) -> None:
    for headers in (ADV, PUB):
        for path in ("/v1/ledger", "/v1/ledger?format=csv", "/v1/ledger/verify"):
            assert populated.get(path, headers=headers).status_code == 403


# ---- GET /v1/ledger/verify -------------------------------------------------------------------


def test_verify_reports_ok_and_the_head(populated: Any) -> None:
    body = populated.get("/v1/ledger/verify", headers=OPS).json()
    assert body == {
        "ok": True,
        "entries": 9,
        "head_hash": _ledger(populated)["head_hash"],
        "problems": [],
        "first_break": None,
    }


def _tamper(db_path: Any, statement: str) -> None:
    with contextlib.closing(sqlite3.connect(db_path)) as conn, conn:
        conn.execute(statement)


@pytest.mark.parametrize(
    ("statement", "seq", "reason"),
    [
        (
            "UPDATE ledger SET epsilon = epsilon / 2, epsilon_exact = '0.001' WHERE seq = 5",
            5,
            "entry_hash",
        ),
        ("DELETE FROM ledger WHERE seq = 3", 4, "seq"),
        ("UPDATE ledger SET prev_hash = entry_hash WHERE seq = 7", 7, "prev_hash"),
    ],
)
def test_verify_names_the_first_entry_that_breaks_the_chain(
    populated: Any, db_path: Any, statement: str, seq: int, reason: str
) -> None:
    _tamper(db_path, statement)
    body = populated.get("/v1/ledger/verify", headers=OPS).json()
    assert body["ok"] is False and body["problems"]
    assert body["first_break"]["seq"] == seq
    assert reason in body["first_break"]["reason"]
    assert any(f"entry seq {seq}:" in problem for problem in body["problems"])


def test_verify_without_a_chain_break_still_fails_other_checks(
    populated: Any, db_path: Any
) -> None:
    _tamper(db_path, "UPDATE datasets SET epsilon_spent = 0.5 WHERE name = 'one'")
    body = populated.get("/v1/ledger/verify", headers=OPS).json()
    assert body["ok"] is False and body["first_break"] is None
    assert any("total" in problem for problem in body["problems"])


# ---- messages: ETag, If-None-Match, HEAD; the header ------------------------------------------


@pytest.mark.parametrize("accept", [None, BINARY_MEDIA_TYPE])
def test_message_etag_if_none_match_and_head(populated: Any, accept: str | None) -> None:
    url = f"/v1/releases/{populated.release_ids[0]}/message"
    headers = {**PUB, **({"Accept": accept} if accept else {})}
    full = populated.get(url, headers=headers)
    assert full.status_code == 200
    meta = populated.get(f"/v1/releases/{populated.release_ids[0]}", headers=PUB).json()
    digest = meta["binary_sha256"] if accept else meta["message_sha256"]
    assert full.headers["etag"] == f'"{digest}"'
    head = populated.head(url, headers=headers)
    assert head.status_code == 200 and head.content == b""
    for key in ("etag", "content-type", "x-labeldp-body-sha256"):
        assert head.headers[key] == full.headers[key]
    if accept:
        assert int(head.headers["content-length"]) == len(full.content)
    for tag in (full.headers["etag"], f"W/{full.headers['etag']}", f'"x", {full.headers["etag"]}'):
        again = populated.get(url, headers={**headers, "If-None-Match": tag})
        assert again.status_code == 304 and again.content == b""
        assert again.headers["etag"] == full.headers["etag"]
    assert populated.get(url, headers={**headers, "If-None-Match": "*"}).status_code == 304
    stale = populated.get(url, headers={**headers, "If-None-Match": '"0000"'})
    assert stale.status_code == 200 and stale.content == full.content


def test_message_head_keeps_roles_and_404(populated: Any) -> None:
    url = f"/v1/releases/{populated.release_ids[0]}/message"
    assert populated.head(url).status_code == 401
    assert populated.head(url, headers=OPS).status_code == 403
    assert (
        populated.head("/v1/releases/rel_" + "0" * 24 + "/message", headers=PUB).status_code == 404
    )


def test_header_endpoint_is_the_message_header_for_every_role(populated: Any) -> None:
    release_id = populated.release_ids[1]
    binary = populated.get(
        f"/v1/releases/{release_id}/message", headers={**ADV, "Accept": BINARY_MEDIA_TYPE}
    ).content
    header, _ids, _labels = decode_binary(binary)
    for headers in (OPS, ADV, PUB):
        response = populated.get(f"/v1/releases/{release_id}/header", headers=headers)
        assert response.status_code == 200, response.text
        assert response.json() == header.model_dump(mode="json")
    body = response.json()
    assert len(body["histogram"]["edges"]) == len(body["histogram"]["probs"]) + 1
    assert "example_ids" not in response.text and "noisy_labels" not in response.text
    missing = populated.get("/v1/releases/rel_" + "0" * 24 + "/header", headers=OPS)
    assert missing.status_code == 404
    assert populated.get(f"/v1/releases/{release_id}/header").status_code == 401


# ---- GET /v1/whoami and the console's files ----------------------------------------------------


def test_whoami_names_the_role_of_the_token(client: Any) -> None:
    for role, headers in (("advertiser", ADV), ("publisher", PUB), ("operator", OPS)):
        assert client.get("/v1/whoami", headers=headers).json() == {"role": role, "actor": None}
    response = client.get("/v1/whoami", headers={"Authorization": "Bearer wrong"})
    assert response.status_code == 401
    assert response.json()["errors"][0]["field"] == "Authorization"


def test_console_files_are_served_without_a_token(client: Any) -> None:
    page = client.get("/console")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert 'name="token"' in page.text
    assert (
        client.get("/console/static/console.js")
        .headers["content-type"]
        .startswith("text/javascript")
    )
    slash = client.get("/console/", follow_redirects=False)
    assert slash.status_code == 308 and slash.headers["location"] == "../console"
    for name in ("index.html", "nope.css", "..%2Fmain.py"):
        assert client.get(f"/console/static/{name}").status_code == 404
