"""Bad input: a clear 4xx JSON error naming the field, and nothing stored."""

from __future__ import annotations

import pytest

from tests.labels_party.conftest import (
    ADV,
    OPS,
    PUB,
    create_dataset,
    ledger_rows,
    put_labels,
    register,
)

JSON = {"content-type": "application/json"}
CSV = {"content-type": "text/csv"}
NDJSON = {"content-type": "application/x-ndjson"}
PLAIN = {"content-type": "text/plain"}
LABELS = "/v1/datasets/ds/labels"
EXAMPLES = "/v1/datasets/ds/examples"
RELEASES = "/v1/datasets/ds/releases"


def _release(body: str) -> tuple:
    return ("POST", RELEASES, ADV, JSON, body)


# (id, (method, url, auth, content-type, body), status, field the error must name)
CASES = [
    ("labels malformed json", ("POST", LABELS, ADV, JSON, '{"labels": ['), 422, "body"),
    ("labels not an object", ("POST", LABELS, ADV, JSON, "[1, 2]"), 422, "body"),
    ("labels missing list", ("POST", LABELS, ADV, JSON, '{"label": []}'), 422, "label"),
    ("labels empty batch", ("POST", LABELS, ADV, JSON, '{"labels": []}'), 422, "labels"),
    ("labels value string",
     ("POST", LABELS, ADV, JSON, '{"labels": [{"example_id": "a", "value": 1}, '
      '{"example_id": "b", "value": "2.5"}]}'), 422, "labels[1].value"),
    ("labels value NaN",
     ("POST", LABELS, ADV, JSON, '{"labels": [{"example_id": "a", "value": NaN}]}'),
     422, "labels[0].value"),
    ("labels value Infinity",
     ("POST", LABELS, ADV, JSON, '{"labels": [{"example_id": "a", "value": -Infinity}]}'),
     422, "labels[0].value"),
    ("labels value overflow",
     ("POST", LABELS, ADV, JSON, '{"labels": [{"example_id": "a", "value": 1e999}]}'),
     422, "labels[0].value"),
    ("labels value bool",
     ("POST", LABELS, ADV, JSON, '{"labels": [{"example_id": "a", "value": true}]}'),
     422, "labels[0].value"),
    ("labels value null",
     ("POST", LABELS, ADV, JSON, '{"labels": [{"example_id": "a", "value": null}]}'),
     422, "labels[0].value"),
    ("labels id number",
     ("POST", LABELS, ADV, JSON, '{"labels": [{"example_id": 7, "value": 1}]}'),
     422, "labels[0].example_id"),
    ("labels id with comma",
     ("POST", LABELS, ADV, JSON, '{"labels": [{"example_id": "a,b", "value": 1}]}'),
     422, "labels[0].example_id"),
    ("labels extra key",
     ("POST", LABELS, ADV, JSON, '{"labels": [{"example_id": "a", "value": 1, "x": 2}]}'),
     422, "labels[0]"),
    ("csv bad number", ("POST", LABELS, ADV, CSV, "example_id,value\na,1\nb,x1\n"), 422,
     "line[3].value"),
    ("csv nan", ("POST", LABELS, ADV, CSV, "example_id,value\na,nan\n"), 422, "line[2].value"),
    ("csv inf", ("POST", LABELS, ADV, CSV, "example_id,value\na,-inf\n"), 422, "line[2].value"),
    ("csv empty value", ("POST", LABELS, ADV, CSV, "example_id,value\na,\n"), 422,
     "line[2].value"),
    ("csv three fields", ("POST", LABELS, ADV, CSV, "example_id,value\na,1,2\n"), 422, "line[2]"),
    ("csv bad id", ("POST", LABELS, ADV, CSV, "example_id,value\na b,1\n"), 422,
     "line[2].example_id"),
    ("csv no header", ("POST", LABELS, ADV, CSV, "a,1\nb,2\n"), 422, "line[1]"),
    ("csv header only", ("POST", LABELS, ADV, CSV, "example_id,value\n"), 422, "body"),
    ("csv empty", ("POST", LABELS, ADV, CSV, ""), 422, "line[1]"),
    ("csv not utf8", ("POST", LABELS, ADV, CSV, b"example_id,value\n\xff\xfe,1\n"), 422,
     "line[2]"),
    ("ndjson malformed", ("POST", LABELS, ADV, NDJSON, '{"example_id": "a", "value": 1}\n{oops\n'),
     422, "line[2]"),
    ("ndjson value string", ("POST", LABELS, ADV, NDJSON, '{"example_id": "a", "value": "1"}\n'),
     422, "line[1].value"),
    ("ndjson missing value", ("POST", LABELS, ADV, NDJSON, '{"example_id": "a"}\n'), 422,
     "line[1].value"),
    ("labels unsupported type", ("POST", LABELS, ADV, {"content-type": "text/xml"}, "<a/>"), 415,
     ""),
    ("labels unknown dataset",
     ("POST", "/v1/datasets/nope/labels", ADV, JSON,
      '{"labels": [{"example_id": "a", "value": 1}]}'),
     404, "dataset"),
    ("labels bad dataset name",
     ("POST", "/v1/datasets/bad%20name/labels", ADV, JSON, '{"labels": []}'), 422, "dataset"),
    ("examples empty", ("POST", EXAMPLES, PUB, JSON, '{"example_ids": []}'), 422, "example_ids"),
    ("examples bad id", ("POST", EXAMPLES, PUB, JSON, '{"example_ids": ["ok", "no way"]}'), 422,
     "example_ids[1]"),
    ("examples not strings", ("POST", EXAMPLES, PUB, JSON, '{"example_ids": [1]}'), 422,
     "example_ids[0]"),
    ("examples plain bad line", ("POST", EXAMPLES, PUB, PLAIN, "a\nb c\nd\n"), 422, "line[2]"),
    ("examples plain empty", ("POST", EXAMPLES, PUB, PLAIN, "\n\n"), 422, "body"),
    ("examples too long id", ("POST", EXAMPLES, PUB, PLAIN, "x" * 129), 422, "line[1]"),
    ("release malformed", _release("{"), 422, "body"),
    ("release empty body", _release(""), 422, ""),
    ("release epsilon zero", _release('{"mechanism": "rpwithprior", "epsilon": 0}'), 422,
     "epsilon"),
    ("release epsilon negative", _release('{"mechanism": "rpwithprior", "epsilon": -1}'), 422,
     "epsilon"),
    ("release epsilon NaN", _release('{"mechanism": "rpwithprior", "epsilon": NaN}'), 422,
     "epsilon"),
    ("release epsilon inf", _release('{"mechanism": "rpwithprior", "epsilon": 1e999}'), 422,
     "epsilon"),
    ("release epsilon not a decimal", _release('{"epsilon": "1x"}'), 422,
     "epsilon"),
    ("release epsilon missing", _release('{"mechanism": "rpwithprior"}'), 422, "epsilon"),
    ("release unknown mechanism", _release('{"mechanism": "laplace", "epsilon": 1}'), 422,
     "mechanism"),
    ("release histogram share too big",
     _release('{"mechanism": "auto", "epsilon": 1, "epsilon_histogram": 1}'), 422, ""),
    ("release histogram epsilon zero",
     _release('{"mechanism": "auto", "epsilon": 1, "epsilon_histogram": 0}'), 422,
     "epsilon_histogram"),
    ("release unknown param",
     _release('{"mechanism": "auto", "epsilon": 1, "params": {"delta": 1}}'), 422, "params.delta"),
    ("release bins zero",
     _release('{"mechanism": "auto", "epsilon": 1, "params": {"bins": 0}}'), 422, "params.bins"),
    ("release bins float",
     _release('{"mechanism": "auto", "epsilon": 1, "params": {"bins": 2.5}}'), 422, "params.bins"),
    ("release model_dim zero",
     _release('{"mechanism": "auto", "epsilon": 1, "params": {"model_dim": 0}}'), 422,
     "params.model_dim"),
    ("release model_dim float",
     _release('{"mechanism": "auto", "epsilon": 1, "params": {"model_dim": 8.5}}'), 422,
     "params.model_dim"),
    ("release zeta negative",
     _release('{"mechanism": "rpwithprior", "epsilon": 1, "params": {"zeta": -1}}'), 422,
     "params.zeta"),
    ("release bad loss",
     _release('{"mechanism": "rr_on_bins", "epsilon": 1, "params": {"loss": "huber"}}'), 422,
     "params.loss"),
    ("release unknown dataset",
     ("POST", "/v1/datasets/nope/releases", ADV, JSON, '{"mechanism": "auto", "epsilon": 1}'), 404,
     "dataset"),
    ("dataset bounds reversed",
     ("POST", "/v1/datasets", OPS, JSON, '{"name": "n", "label_min": 1, "label_max": 0, '
      '"default_label": 0, "epsilon_budget": 1}'), 422, "label_max"),
    ("dataset default outside",
     ("POST", "/v1/datasets", OPS, JSON, '{"name": "n", "label_min": 0, "label_max": 1, '
      '"default_label": 5, "epsilon_budget": 1}'), 422, "default_label"),
    ("dataset budget zero",
     ("POST", "/v1/datasets", OPS, JSON, '{"name": "n", "label_min": 0, "label_max": 1, '
      '"default_label": 0, "epsilon_budget": 0}'), 422, "epsilon_budget"),
    ("dataset bad name",
     ("POST", "/v1/datasets", OPS, JSON, '{"name": "a/b", "label_min": 0, "label_max": 1, '
      '"default_label": 0, "epsilon_budget": 1}'), 422, "name"),
    ("dataset extra key",
     ("POST", "/v1/datasets", OPS, JSON, '{"name": "n", "label_min": 0, "label_max": 1, '
      '"default_label": 0, "epsilon_budget": 1, "owner": "x"}'), 422, "owner"),
    ("dataset bound NaN",
     ("POST", "/v1/datasets", OPS, JSON, '{"name": "n", "label_min": NaN, "label_max": 1, '
      '"default_label": 0, "epsilon_budget": 1}'), 422, "label_min"),
    ("release id malformed", ("GET", "/v1/releases/../x", PUB, {}, ""), 404, ""),
    ("release id unknown", ("GET", "/v1/releases/rel_" + "0" * 24, PUB, {}, ""), 404, "release_id"),
    ("ledger bad limit", ("GET", "/v1/ledger?limit=0", OPS, {}, ""), 422, "query.limit"),
]  # fmt: skip


def _state(client, db_path):
    view = client.get("/v1/datasets/ds", headers=ADV).json()
    return (view["n_examples"], view["n_labels"], view["epsilon_spent"], len(ledger_rows(db_path)))


@pytest.fixture
def prepared(client, db_path):
    create_dataset(client)
    register(client, "ds", ["a", "b"])
    put_labels(client, "ds", [("a", 3.0)])
    return client


@pytest.mark.parametrize(("request_", "status", "field"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])  # fmt: skip
def test_bad_input_is_refused_naming_the_field(prepared, db_path, request_, status, field):
    method, url, auth, content_type, body = request_
    before = _state(prepared, db_path)
    response = prepared.request(
        method, url, headers={**auth, **content_type}, content=body if body else None
    )
    assert response.status_code == status, response.text
    payload = response.json()
    assert set(payload) >= {"detail", "errors"} and payload["detail"]
    if field:
        fields = [e["field"] for e in payload["errors"]]
        assert field in fields, payload
    assert _state(prepared, db_path) == before  # nothing stored, nothing spent


def test_a_bad_row_anywhere_rejects_the_whole_batch(prepared):
    good = "".join(f"g{i},{i}\n" for i in range(20000))
    body = f"example_id,value\n{good}zz,oops\n"
    response = prepared.post(LABELS, content=body, headers={**ADV, **CSV})
    assert response.status_code == 422
    assert response.json()["errors"][0]["field"] == "line[20002].value"
    assert prepared.get("/v1/datasets/ds", headers=ADV).json()["n_labels"] == 1


def test_error_list_is_bounded(prepared):
    body = "example_id,value\n" + "".join(f"g{i},bad\n" for i in range(100))
    response = prepared.post(LABELS, content=body, headers={**ADV, **CSV})
    assert response.status_code == 422
    assert len(response.json()["errors"]) == 10


def test_oversized_bodies_are_refused(make_client, db_path):
    client = make_client(max_body_bytes=2000, max_json_bytes=1000)
    create_dataset(client)
    big_json = {"labels": [{"example_id": f"e{i}", "value": 1.0} for i in range(100)]}
    response = client.post(LABELS, json=big_json, headers=ADV)
    assert response.status_code == 413 and response.json()["errors"][0]["field"] == "body"
    big_csv = "example_id,value\n" + "".join(f"e{i},1\n" for i in range(400))
    response = client.post(LABELS, content=big_csv, headers={**ADV, **CSV})
    assert response.status_code == 413

    def chunked():  # no Content-Length: the limit applies while streaming
        for _ in range(10):
            yield b"e1,1\n" * 100

    response = client.post(LABELS, content=chunked(), headers={**ADV, **CSV})
    assert response.status_code == 413
    small = client.post(LABELS, content="example_id,value\ne1,1\n", headers={**ADV, **CSV})
    assert small.status_code == 200
    assert client.get("/v1/datasets/ds", headers=ADV).json()["n_labels"] == 1
