"""Feature uploads through the real app: formats, kinds, atomic batches, clear 4xx, auth."""

from __future__ import annotations

import pytest

from features_party.config import Settings
from shared.errors import InvalidParameterError
from tests.features_party.conftest import csv_body, synthetic_rows

CSV = {"Content-Type": "text/csv"}


def rows_of(features, name: str) -> int:
    return features.get(f"/v1/datasets/{name}").json()["rows"]


def test_csv_upload_infers_kinds_and_is_idempotent(features):
    ids, columns, _ = synthetic_rows(50)
    body = csv_body(ids, columns)
    first = features.post("/v1/datasets/up/features", content=body, headers=CSV)
    assert first.status_code == 200, first.text
    assert first.json() == {
        "dataset": "up",
        "received": 50,
        "inserted": 50,
        "unchanged": 0,
        "replaced": 0,
        "rows_total": 50,
        "columns": {"x1": "numeric", "colour": "categorical"},
    }
    again = features.post("/v1/datasets/up/features", content=body, headers=CSV).json()
    assert (again["inserted"], again["unchanged"], again["rows_total"]) == (0, 50, 50)
    listed = features.get("/v1/datasets").json()["datasets"]
    assert [d["name"] for d in listed] == ["up"] and listed[0]["rows"] == 50


def test_json_upload_with_missing_values_and_forced_categorical(features):
    rows = [
        {"example_id": "a", "features": {"age": 31, "zip": 75001, "tier": "gold"}},
        {"example_id": "b", "features": {"age": None, "zip": 10115, "tier": None}},
    ]
    answer = features.post("/v1/datasets/js/features?categorical=zip", json={"rows": rows})
    assert answer.status_code == 200, answer.text
    assert answer.json()["columns"] == {
        "age": "numeric",
        "zip": "categorical",
        "tier": "categorical",
    }
    # Later batches may not change a kind.
    refused = features.post("/v1/datasets/js/features?categorical=age", json={"rows": rows})
    assert refused.status_code == 422
    assert refused.json()["errors"][0]["field"] == "categorical"


def test_changed_values_conflict_unless_overwrite(features):
    features.post("/v1/datasets/ow/features", content="example_id,x\na,1\nb,2\n", headers=CSV)
    conflict = features.post(
        "/v1/datasets/ow/features", content="example_id,x\na,1\nb,3\nc,4\n", headers=CSV
    )
    assert conflict.status_code == 409
    assert conflict.json()["errors"] == [{"field": "b", "message": "stored with different values"}]
    assert rows_of(features, "ow") == 2  # c was not stored either: the batch is atomic
    replaced = features.post(
        "/v1/datasets/ow/features?overwrite=true",
        content="example_id,x\na,1\nb,3\nc,4\n",
        headers=CSV,
    ).json()
    assert (replaced["inserted"], replaced["unchanged"], replaced["replaced"]) == (1, 1, 1)


@pytest.mark.parametrize(
    ("body", "field", "status"),
    [
        ("", "body", 422),
        ("x,y\n1,2\n", "header", 422),
        ("example_id,x\n", "body", 422),
        ("example_id,x\na,1\nb,oops\nc,3\n", "line[3].x", 422),
        ("example_id,x\na,1\nb,nan\n", "line[3].x", 422),
        ("example_id,x\na,1\nb,inf\n", "line[3].x", 422),
        ("example_id,x\na,1,2\n", "line[2]", 422),
        ("example_id,x\nbad id,1\n", "line[2]", 422),
        ("example_id,x\na,1\na,2\n", "a", 422),
        ("example_id,x,x\na,1,2\n", "x", 422),
        ("example_id,y\na,1\n", "columns", 422),
    ],
)
def test_bad_csv_is_refused_naming_the_field_and_stores_nothing(features, body, field, status):
    features.post("/v1/datasets/bad/features", content="example_id,x\nz,9\n", headers=CSV)
    answer = features.post("/v1/datasets/bad/features", content=body, headers=CSV)
    assert answer.status_code == status, answer.text
    payload = answer.json()
    assert payload["detail"]
    assert field in [error["field"] for error in payload["errors"]], payload
    assert rows_of(features, "bad") == 1


@pytest.mark.parametrize(
    "payload",
    [
        {"rows": []},
        {"rows": [{"example_id": "a"}]},
        {"rows": [{"example_id": "a", "features": {"x": [1, 2]}}]},
        {"rows": [{"example_id": "a", "features": {"x": 1}}], "extra": 1},
        {"rows": [{"example_id": "a", "features": {"x": 1}}, {"example_id": "b", "features": {}}]},
    ],
)
def test_bad_json_is_refused(features, payload):
    answer = features.post("/v1/datasets/badjs/features", json=payload)
    assert answer.status_code == 422, answer.text
    assert answer.json()["errors"]
    assert features.get("/v1/datasets/badjs").status_code == 404


@pytest.mark.parametrize("value", [True, "1_0", 10**400])
def test_a_bad_json_value_is_named_where_api_md_says(features, value):
    """rows[i].features.<column>, as features_party/API.md documents (it was rows[i].<column>,
    found by a fuzzer)."""
    good = {"example_id": "a", "features": {"price": 9.5}}
    first = features.post("/v1/datasets/named/features", json={"rows": [good]})
    assert first.status_code == 200 and first.json()["columns"] == {"price": "numeric"}
    bad = {"example_id": "b", "features": {"price": value}}
    answer = features.post("/v1/datasets/named/features", json={"rows": [good, bad]})
    assert answer.status_code == 422, answer.text
    assert answer.json()["errors"][0]["field"] == "rows[1].features.price"


def test_malformed_json_unsupported_type_bad_name_and_oversized(features_factory):
    features = features_factory(max_body_bytes=2048)
    malformed = features.post(
        "/v1/datasets/m/features",
        content=b"{not json",
        headers={"Content-Type": "application/json"},
    )
    assert malformed.status_code == 422
    wrong_type = features.post(
        "/v1/datasets/m/features", content=b"x", headers={"Content-Type": "image/png"}
    )
    assert wrong_type.status_code == 415 and "text/csv" in wrong_type.json()["detail"]
    bad_name = features.post(
        "/v1/datasets/a%20b/features", content="example_id,x\na,1\n", headers=CSV
    )
    assert bad_name.status_code == 422 and bad_name.json()["errors"][0]["field"] == "dataset"
    big = "example_id,x\n" + "".join(f"id{i},{i}\n" for i in range(400))
    too_big = features.post("/v1/datasets/m/features", content=big, headers=CSV)
    assert too_big.status_code == 413 and "2048" in too_big.json()["detail"]
    assert features.get("/v1/datasets/m").status_code == 404


def test_auth_required_except_healthz(features):
    assert features.get("/healthz", headers={"Authorization": ""}).status_code == 200
    for headers in ({"Authorization": ""}, {"Authorization": "Bearer wrong-token-123"}):
        for method, path in (
            ("GET", "/v1/datasets"),
            ("GET", "/v1/models"),
            ("GET", "/metrics"),
            ("POST", "/v1/datasets/x/features"),
            ("POST", "/v1/models"),
        ):
            answer = features.request(method, path, headers=headers)
            assert answer.status_code == 401, (method, path, answer.text)
            assert answer.json()["detail"] == "missing or invalid bearer token"


@pytest.mark.parametrize("body", [b"{{", b'{"a": 1, "a": 2}', b'{"rows": 5}'])
def test_the_token_is_checked_before_the_body_is_read(features, body):
    """Without the token, what the body is (malformed, a repeated key, the wrong shape) makes no
    difference: 401 (found by a fuzzer: /v1/models and predict parsed it first, a 422)."""
    for path in ("/v1/models", f"/v1/models/mdl_{'0' * 24}/predict", "/v1/datasets/x/features"):
        for auth in ("", "Bearer wrong-token-123"):
            headers = {"Authorization": auth, "Content-Type": "application/json"}
            answer = features.post(path, content=body, headers=headers)
            assert answer.status_code == 401, (path, answer.text)


def test_settings_refuse_a_public_bind_without_a_token(tmp_path):
    base = {"db_path": tmp_path / "f.db", "labels_url": "http://127.0.0.1:1", "labels_token": "t"}
    Settings(**base, host="127.0.0.1")
    Settings(**base, host="0.0.0.0", features_token="long-enough-token")
    with pytest.raises(InvalidParameterError, match="LABELDP_FEATURES_TOKEN"):
        Settings(**base, host="0.0.0.0")
    with pytest.raises(InvalidParameterError, match="publisher token"):
        Settings(db_path=tmp_path / "f.db", labels_url="http://127.0.0.1:1", labels_token="")
    with pytest.raises(InvalidParameterError, match="labels_url"):
        Settings(db_path=tmp_path / "f.db", labels_url="ftp://x", labels_token="t")


def test_metrics_count_requests_and_rows(features):
    features.post("/v1/datasets/met/features", content="example_id,x\na,1\nb,2\n", headers=CSV)
    text = features.get("/metrics").text
    assert 'labeldp_features_rows{dataset="met"} 2' in text
    assert (
        'labeldp_features_http_requests_total{method="POST",'
        'route="/v1/datasets/{name}/features",status="200"} 1'
    ) in text
    assert 'labeldp_features_models{status="succeeded"} 0' in text


def test_serve_features_refuses_to_start_without_the_publisher_token(tmp_path, monkeypatch, capsys):
    from labeldp.cli import main as labeldp

    monkeypatch.delenv("LABELDP_PUBLISHER_TOKEN", raising=False)
    monkeypatch.delenv("LABELDP_FEATURES_TOKEN", raising=False)
    argv = ["serve", "features", "--db", str(tmp_path / "f.db")]
    assert labeldp([*argv, "--labels-url", "http://127.0.0.1:9"]) == 2
    assert "publisher token" in capsys.readouterr().err
    public = [*argv, "--labels-url", "http://127.0.0.1:9", "--token", "t", "--host", "0.0.0.0"]
    assert labeldp(public) == 2
    assert "LABELDP_FEATURES_TOKEN" in capsys.readouterr().err
