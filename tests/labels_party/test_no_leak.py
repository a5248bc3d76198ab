"""No response and no log line ever contains a raw label (sentinel values searched everywhere)."""

from __future__ import annotations

import logging
import struct

import pytest

from labels_party.budget import ledger
from labels_party.db.engine import Database, make_engine
from shared.message import BINARY_MEDIA_TYPE
from tests.labels_party.conftest import ADV, OPS, PUB, create_dataset, register, release

SENTINELS = [123.456789012345, 654.321098765432, 98765.4321012345, 0.000123456789]


def _forms(value: float) -> list[bytes]:
    texts = {repr(value), f"{value:.6g}", f"{value:.4f}", f"{value:.10g}", str(value)}
    return [t.encode() for t in texts] + [struct.pack("<d", value), struct.pack(">d", value)]


def _assert_clean(blob: bytes, where: str) -> None:
    for value in SENTINELS:
        for form in _forms(value):
            assert form not in blob, f"sentinel {value!r} found in {where} as {form!r}"


def test_sentinel_labels_never_leave_through_responses_or_logs(client, db_path, caplog):
    caplog.set_level(logging.DEBUG)
    seen: list[tuple[str, bytes]] = []

    def call(method: str, url: str, **kwargs):
        response = client.request(method, url, **kwargs)
        seen.append((f"{method} {url} -> {response.status_code}", response.content))
        seen.append((f"headers of {method} {url}", repr(response.headers).encode()))
        return response

    create_dataset(client, "ds", label_min=0.0, label_max=1000.0, epsilon_budget=5.0)
    ids = [f"s{i:03d}" for i in range(400)]
    register(client, "ds", ids)
    rows = [(ids[i], SENTINELS[i % len(SENTINELS)]) for i in range(200)]
    body = {"labels": [{"example_id": i, "value": v} for i, v in rows]}
    assert call("POST", "/v1/datasets/ds/labels", json=body, headers=ADV).status_code == 200
    csv = "example_id,value\n" + "".join(f"t{i},{SENTINELS[i % 4]!r}\n" for i in range(50))
    call("POST", "/v1/datasets/ds/labels", content=csv, headers={**ADV, "content-type": "text/csv"})
    # error paths that involve sentinel values: a conflict, a malformed number, a wrong type
    conflict = {"labels": [{"example_id": ids[0], "value": SENTINELS[1]}]}
    assert call("POST", "/v1/datasets/ds/labels", json=conflict, headers=ADV).status_code == 409
    bad_csv = f"example_id,value\nq1,{SENTINELS[0]!r}x\nq2,{SENTINELS[1]!r}\n"
    response = call(
        "POST",
        "/v1/datasets/ds/labels",
        content=bad_csv,
        headers={**ADV, "content-type": "text/csv"},
    )
    assert response.status_code == 422
    wrong_type = {"labels": [{"example_id": "w", "value": str(SENTINELS[2])}]}
    assert call("POST", "/v1/datasets/ds/labels", json=wrong_type, headers=ADV).status_code == 422
    ndjson = f'{{"example_id": "n1", "value": "{SENTINELS[3]!r}"}}\n'
    response = call(
        "POST",
        "/v1/datasets/ds/labels",
        content=ndjson,
        headers={**ADV, "content-type": "application/x-ndjson"},
    )
    assert response.status_code == 422

    for mechanism in ("rpwithprior", "rr_on_bins"):
        created = release(client, "ds", mechanism=mechanism, epsilon=1.0)
        assert created.status_code == 201, created.text
        seen.append(("release", created.content))
        rid = created.json()["id"]
        for headers in (ADV, PUB, OPS):
            call("GET", f"/v1/releases/{rid}", headers=headers)
        call("GET", f"/v1/releases/{rid}/message", headers=PUB)
        call("GET", f"/v1/releases/{rid}/message", headers={**PUB, "accept": BINARY_MEDIA_TYPE})
    for headers in (ADV, PUB, OPS):
        call("GET", "/v1/datasets/ds", headers=headers)
    call("GET", "/v1/ledger", headers=OPS)
    call("GET", "/metrics", headers=OPS)
    call("GET", "/healthz")

    db = Database(make_engine(f"sqlite:///{db_path}"))
    with db.read() as conn:
        seen.append(("ledger export", ledger.export_csv_text(conn).encode()))
    db.dispose()

    for where, blob in seen:
        _assert_clean(blob, where)
    logged = "\n".join(
        f"{record.name} {record.levelname} {record.getMessage()} {record.exc_text or ''}"
        for record in caplog.records
    ).encode()
    assert b"labels batch stored" in logged  # the logs were captured at all
    _assert_clean(logged, "logs")


def test_sentinel_check_would_catch_a_leak():
    """The search itself works: a response quoting a label is caught."""
    leaked = f'{{"detail": "bad value {SENTINELS[0]:.6g}"}}'.encode()
    with pytest.raises(AssertionError, match="sentinel"):
        _assert_clean(leaked, "synthetic")
