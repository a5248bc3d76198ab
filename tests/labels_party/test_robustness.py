"""Robustness review: what a schema fuzzer (schemathesis) and hand probes found, kept as tests.

Every error, whatever its source (a route, the router itself, a middleware, the engine, an
unexpected exception), is a JSON ``{"detail", "errors": [{"field", "message"}]}`` naming a field,
and a refused request stores nothing and spends nothing.
"""

from __future__ import annotations

import gzip
import itertools
import json
import threading
import warnings
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.exceptions import StarletteDeprecationWarning

from labels_party.main import create_app
from tests.labels_party.conftest import (
    ADV,
    OPS,
    PUB,
    create_dataset,
    ledger_rows,
    make_settings,
    put_labels,
    register,
    release,
)

with warnings.catch_warnings():  # starlette prefers httpx2 (not a dependency) at import time
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from fastapi.testclient import TestClient

JSON = {"content-type": "application/json"}
CSV = {"content-type": "text/csv"}
NDJSON = {"content-type": "application/x-ndjson"}
PLAIN = {"content-type": "text/plain"}
LABELS = "/v1/datasets/ds/labels"
EXAMPLES = "/v1/datasets/ds/examples"
RELEASES = "/v1/datasets/ds/releases"
DEEP = "[" * 100_000 + "]" * 100_000
HUGE_INT = "9" * 5000  # beyond Python's int-to-str digit limit: json.loads raises ValueError


def _fields(response) -> list[str]:
    payload = response.json()
    assert set(payload) >= {"detail", "errors"} and payload["detail"], payload
    assert payload["errors"], f"no field named: {payload}"
    for error in payload["errors"]:
        assert set(error) == {"field", "message"} and error["field"] and error["message"]
    return [error["field"] for error in payload["errors"]]


def _state(client, db_path) -> tuple:
    view = client.get("/v1/datasets/ds", headers=ADV).json()
    return (view["n_examples"], view["n_labels"], view["epsilon_spent"], len(ledger_rows(db_path)))


@pytest.fixture
def prepared(client):
    create_dataset(client)
    register(client, "ds", [f"e{i}" for i in range(30)])
    assert put_labels(client, "ds", [("e1", 3.0)]).status_code == 200
    return client


# ---- found by the fuzzer ---------------------------------------------------------------------

# (id, (method, url, auth, headers, body), status, field the error must name)
FUZZ_CASES = [
    ("ledger after beyond int64", ("GET", "/v1/ledger?after=" + "9" * 28, OPS, {}, ""), 422,
     "query.after"),
    ("dataset bounds overflow",
     ("POST", "/v1/datasets", OPS, JSON, '{"name": "n", "label_min": 0, "label_max": 1e200, '
      '"default_label": 0, "epsilon_budget": 1}'), 422, "label_max"),
    ("dataset bounds too narrow for the grid",
     ("POST", "/v1/datasets", OPS, JSON, '{"name": "n", "label_min": 1e15, '
      '"label_max": 1.000000000000001e15, "default_label": 1e15, "epsilon_budget": 1}'), 422,
     "label_max"),
    ("dataset bound below the floor",
     ("POST", "/v1/datasets", OPS, JSON, '{"name": "n", "label_min": -1e300, "label_max": 0, '
      '"default_label": 0, "epsilon_budget": 1}'), 422, "label_min"),
    ("release zeta denormal",
     ("POST", RELEASES, ADV, JSON, '{"mechanism": "rpwithprior", "epsilon": 1, '
      '"params": {"zeta": 5e-324}}'), 422, "params.zeta"),
    ("release zeta astronomical",
     ("POST", RELEASES, ADV, JSON, '{"mechanism": "rpwithprior", "epsilon": 1, '
      '"params": {"zeta": 1e300, "select": "paper"}}'), 422, "params.zeta"),
    ("release histogram share not below epsilon",
     ("POST", RELEASES, ADV, JSON, '{"mechanism": "auto", "epsilon": 1, "epsilon_histogram": 1}'),
     422, "epsilon_histogram"),
    ("release empty body", ("POST", RELEASES, ADV, JSON, ""), 422, "body"),
]  # fmt: skip


@pytest.mark.parametrize(("request_", "status", "field"), [c[1:] for c in FUZZ_CASES],
                         ids=[c[0] for c in FUZZ_CASES])  # fmt: skip
def test_fuzzer_findings_are_clear_4xx(prepared, db_path, request_, status, field):
    method, url, auth, headers, body = request_
    before = _state(prepared, db_path)
    response = prepared.request(method, url, headers={**auth, **headers}, content=body or None)
    assert response.status_code == status, response.text
    assert field in _fields(response)
    assert _state(prepared, db_path) == before


@pytest.mark.parametrize("epsilon", [5e-324, 6.2247129963050425e-254, 1e-17])
def test_denormal_and_tiny_epsilons_are_charged_or_refused_naming_epsilon(
    prepared, db_path, epsilon
):
    """Found by schemathesis: 5e-324 and 6e-254 were 500s (overflow deep in the engine)."""
    for mechanism in ("auto", "rpwithprior", "rr_on_bins"):
        before = _state(prepared, db_path)
        response = release(prepared, "ds", mechanism=mechanism, epsilon=epsilon)
        if response.status_code == 201:  # realisable: then it is charged like any release
            assert Decimal(_state(prepared, db_path)[2]) > Decimal(before[2])
            continue
        assert response.status_code == 422, response.text
        # epsilon_histogram was not given: the field at fault is epsilon (the default split)
        assert _fields(response) == ["epsilon"], response.text
        assert _state(prepared, db_path) == before


def test_documented_bodies_match_what_the_parsers_accept(client):
    """Found by schemathesis: the OpenAPI schema allowed what the handlers refuse."""
    schema = client.get("/openapi.json").json()
    parts = schema["components"]["schemas"]
    assert parts["LabelsBatch"].get("additionalProperties") is False
    label_row = parts["LabelRow"]
    assert label_row.get("additionalProperties") is False
    assert label_row["properties"]["example_id"]["pattern"]
    id_items = parts["ExamplesBatch"]["properties"]["example_ids"]["items"]
    assert id_items["pattern"] and id_items["maxLength"] == 128
    release_props = parts["ReleaseCreate"]["properties"]
    # epsilon: a positive JSON number or a decimal string (an exact amount)
    assert any("exclusiveMinimum" in option for option in release_props["epsilon"]["anyOf"])
    dataset_props = parts["DatasetCreate"]["properties"]
    assert dataset_props["label_min"]["minimum"] == -dataset_props["label_max"]["maximum"]
    after = next(
        p for p in schema["paths"]["/v1/ledger"]["get"]["parameters"] if p["name"] == "after"
    )
    assert after["schema"]["maximum"] == 2**63 - 1
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            for status in ("4XX", "5XX"):
                ref = operation["responses"][status]["content"]["application/json"]["schema"]
                assert ref == {"$ref": "#/components/schemas/ErrorBody"}, (path, method, status)


# ---- JSON the parsers cannot digest ----------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "auth", "headers", "body", "field"),
    [
        (LABELS, ADV, JSON, '{"labels": ' + DEEP + "}", "body"),
        (LABELS, ADV, JSON, '{"labels": [{"example_id": "a", "value": ' + HUGE_INT + "}]}",
         "body"),
        (LABELS, ADV, NDJSON, '{"example_id": "a", "value": ' + DEEP + "}\n", "line[1]"),
        (LABELS, ADV, NDJSON, '{"example_id": "a", "value": 1}\n{"example_id": "b", "value": '
         + HUGE_INT + "}\n", "line[2]"),
        (EXAMPLES, PUB, JSON, '{"example_ids": ' + DEEP + "}", "body"),
        (RELEASES, ADV, JSON, '{"mechanism": "auto", "epsilon": ' + DEEP + "}", "body"),
        ("/v1/datasets", OPS, JSON, '{"name": ' + DEEP + "}", "body"),
    ],
    ids=["json deep", "json huge int", "ndjson deep", "ndjson huge int", "examples deep",
         "release deep", "dataset deep"],
)  # fmt: skip
def test_pathological_json_is_a_422_not_a_500(prepared, db_path, url, auth, headers, body, field):
    before = _state(prepared, db_path)
    response = prepared.post(url, content=body, headers={**auth, **headers})
    assert response.status_code == 422, response.text
    assert any(f.startswith(field) for f in _fields(response)), response.text
    assert _state(prepared, db_path) == before


# ---- transport: content types, encodings, query strings ------------------------------------


@pytest.mark.parametrize(
    ("url", "auth", "content_type", "body"),
    [
        ("/v1/datasets", OPS, "text/plain",
         '{"name": "n2", "label_min": 0, "label_max": 1, "default_label": 0, "epsilon_budget": 1}'),
        (RELEASES, ADV, "application/xml", '{"mechanism": "auto", "epsilon": 1}'),
        (RELEASES, ADV, "application/x-www-form-urlencoded", '{"mechanism": "auto", "epsilon": 1}'),
        (LABELS, ADV, "application/vnd.api+json", '{"labels": [{"example_id": "a", "value": 1}]}'),
    ],
    ids=["dataset as text", "release as xml", "release as form", "labels as vnd json"],
)  # fmt: skip
def test_a_body_in_the_wrong_content_type_is_415(prepared, db_path, url, auth, content_type, body):
    before = _state(prepared, db_path)
    response = prepared.post(url, content=body, headers={**auth, "content-type": content_type})
    assert response.status_code == 415, response.text
    assert "Content-Type" in _fields(response)
    assert _state(prepared, db_path) == before
    assert prepared.get("/v1/datasets/n2", headers=OPS).status_code == 404


def test_a_missing_content_type_is_json_only_where_json_is_the_only_format(prepared):
    body = json.dumps({"labels": [{"example_id": "nc", "value": 2.0}]})
    response = prepared.post(LABELS, content=body, headers=ADV)  # no Content-Type header at all
    assert response.status_code == 415 and "Content-Type" in _fields(response)
    body = json.dumps({"mechanism": "auto", "epsilon": 0.5})
    assert prepared.post(RELEASES, content=body, headers=ADV).status_code == 201


@pytest.mark.parametrize("encoding", ["gzip", "br", "deflate"])
def test_compressed_bodies_are_refused_not_misread(prepared, db_path, encoding):
    """gzip used to be a confusing 'not UTF-8' error and br was silently read as plain text."""
    before = _state(prepared, db_path)
    plain = b"example_id,value\ngz1,1\n"
    body = gzip.compress(plain) if encoding == "gzip" else plain
    response = prepared.post(
        LABELS, content=body, headers={**ADV, **CSV, "content-encoding": encoding}
    )
    assert response.status_code == 415, response.text
    assert "Content-Encoding" in _fields(response)
    assert _state(prepared, db_path) == before
    identity = prepared.post(
        LABELS, content=plain, headers={**ADV, **CSV, "content-encoding": "identity"}
    )
    assert identity.status_code == 200


@pytest.mark.parametrize(
    ("query", "field"),
    [("?overwite=true", "query.overwite"), ("?overwrite=true&overwrite=false", "query.overwrite"),
     ("?overwrite=maybe", "query.overwrite")],
    ids=["typo", "repeated", "not a boolean"],
)  # fmt: skip
def test_query_string_junk_is_refused_naming_the_parameter(prepared, db_path, query, field):
    before = _state(prepared, db_path)
    body = "example_id,value\ne1,50\n"  # a conflict that overwrite=true would apply
    response = prepared.post(LABELS + query, content=body, headers={**ADV, **CSV})
    assert response.status_code == 422, response.text
    assert field in _fields(response)
    assert _state(prepared, db_path) == before


def test_unknown_query_parameters_are_refused_everywhere(prepared):
    response = prepared.get("/v1/ledger?datset=ds", headers=OPS)  # a typo of a filter
    assert response.status_code == 422 and "query.datset" in _fields(response)
    response = prepared.get("/v1/datasets/ds?verbose=1", headers=ADV)
    assert response.status_code == 422 and "query.verbose" in _fields(response)
    # The one endpoint without a token too (found by a fuzzer: it answered 200).
    response = prepared.get("/healthz?zz=1")
    assert response.status_code == 422 and "query.zz" in _fields(response)
    assert prepared.get("/healthz").json() == {"status": "ok"}
    assert prepared.get("/v1/ledger?dataset=ds&limit=5", headers=OPS).status_code == 200


# ---- bulk formats: BOM, quoting, line endings ------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "body", "ids"),
    [
        (CSV, "\ufeffexample_id,value\nb1,1\n", ["b1"]),
        (CSV, '"example_id","value"\r\n"q1","1.5"\r\nq2,"2"\r\n', ["q1", "q2"]),
        (CSV, "\ufeff\"example_id\",value\n\"q3\",3\n", ["q3"]),
        (NDJSON, '\ufeff{"example_id": "n1", "value": 1}\n', ["n1"]),
    ],
    ids=["csv with BOM", "csv quoted + CRLF", "csv BOM + quoted header", "ndjson with BOM"],
)  # fmt: skip
def test_spreadsheet_exports_are_accepted(prepared, headers, body, ids):
    response = prepared.post(LABELS, content=body.encode(), headers={**ADV, **headers})
    assert response.status_code == 200, response.text
    assert response.json()["new"] == len(ids)


def test_examples_with_bom_are_accepted(prepared):
    response = prepared.post(
        EXAMPLES, content="\ufeffp1\r\np2\n".encode(), headers={**PUB, **PLAIN}
    )
    assert response.status_code == 200, response.text
    assert response.json()["registered_new"] == 2


@pytest.mark.parametrize(
    ("body", "field"),
    [('example_id,value\n"q1,1\n', "line[2]"), ('example_id,value\n"a,b",1\n', "line[2]"),
     ('example_id,value\nq1,"1"x\n', "line[2]"),
     ("\ufeff\ufeffexample_id,value\nq,1\n", "line[1]")],
    ids=["unterminated quote", "quoted comma in id", "text after quote", "double BOM"],
)  # fmt: skip
def test_malformed_quoting_is_a_clear_422(prepared, db_path, body, field):
    before = _state(prepared, db_path)
    response = prepared.post(LABELS, content=body.encode(), headers={**ADV, **CSV})
    assert response.status_code == 422, response.text
    assert any(f.startswith(field) for f in _fields(response))
    assert _state(prepared, db_path) == before


def test_negative_zero_is_the_same_label_as_zero(prepared):
    assert put_labels(prepared, "ds", [("z", 0.0)]).json()["new"] == 1
    again = prepared.post(LABELS, content="example_id,value\nz,-0\n", headers={**ADV, **CSV})
    assert again.status_code == 200 and again.json()["unchanged"] == 1


# ---- names -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [".", "..", "...", "-x", ".hidden"])
def test_dataset_names_that_urls_cannot_carry_are_refused(client, name):
    body = {"name": name, "label_min": 0, "label_max": 1, "default_label": 0, "epsilon_budget": 1}
    response = client.post("/v1/datasets", json=body, headers=OPS)
    assert response.status_code == 422, response.text
    assert "name" in _fields(response)


def test_a_very_long_path_name_is_refused_without_echoing_it(client):
    name = "x" * 20_000
    response = client.get(f"/v1/datasets/{name}", headers=OPS)
    assert response.status_code == 422 and "dataset" in _fields(response)
    assert name not in response.text


# ---- the error shape on every path -----------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "url", "headers", "status", "field"),
    [
        ("GET", "/nope", OPS, 404, "path"),
        ("GET", "/v1/datasets/ds/nope", OPS, 404, "path"),
        ("DELETE", "/v1/ledger", OPS, 405, "method"),
        ("PUT", "/v1/datasets/ds", OPS, 405, "method"),
        ("GET", "/v1/datasets/ds/labels", ADV, 405, "method"),
        ("GET", "/v1/datasets/ds", {}, 401, "Authorization"),
        ("GET", "/v1/ledger", PUB, 403, "Authorization"),
        ("POST", LABELS, {**ADV, "content-type": "text/xml"}, 415, "Content-Type"),
        ("GET", "/v1/datasets/nope", OPS, 404, "dataset"),
    ],
)  # fmt: skip
def test_every_error_has_the_documented_shape(prepared, method, url, headers, status, field):
    response = prepared.request(method, url, headers=headers)
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    assert field in _fields(response)


def test_405_lists_the_allowed_methods(prepared):
    response = prepared.request("DELETE", "/v1/ledger", headers=OPS)
    assert response.status_code == 405 and response.headers["allow"] == "GET"


def test_406_and_413_name_the_field(make_client, db_path):
    client = make_client(max_body_bytes=2000, max_json_bytes=1000)
    create_dataset(client)
    register(client, "ds", ["a", "b"])
    created = release(client, "ds")
    rid = created.json()["id"]
    response = client.get(f"/v1/releases/{rid}/message", headers={**PUB, "accept": "text/html"})
    assert response.status_code == 406 and "Accept" in _fields(response)

    def chunked():  # no Content-Length: refused while streaming, after the route started
        for _ in range(10):
            yield b"e1,1\n" * 100

    create_dataset(client, "open")
    response = client.post("/v1/datasets/open/labels", content=chunked(), headers={**ADV, **CSV})
    assert response.status_code == 413 and "body" in _fields(response)


class _Boom(RuntimeError):
    pass


def test_an_unexpected_exception_is_a_json_500_that_never_escapes_the_app(db_path, caplog):
    """Starlette re-raises after its catch-all handler: uvicorn then logged the full message."""
    secret = "label 123.456789012345"

    def broken(*_args, **_kwargs):
        raise _Boom(secret)

    app = create_app(make_settings(db_path), randomizer=broken)
    with TestClient(app, raise_server_exceptions=True) as client:  # would re-raise _Boom
        create_dataset(client)
        register(client, "ds", ["a"])
        response = release(client, "ds")
        assert response.status_code == 500
        assert response.json()["detail"] and _fields(response)
        assert secret not in response.text
        assert client.get("/v1/datasets/ds", headers=OPS).json()["epsilon_spent"] == "0"
    assert secret not in caplog.text


# ---- concurrency -----------------------------------------------------------------------------


def test_ingest_racing_a_release_loses_nothing_acknowledged(client, db_path):
    """Threads register ids and post labels while releases run: every 200 is stored, every
    refusal is a 409, and each message covers exactly the examples registered before it."""
    create_dataset(client)
    register(client, "ds", [f"s{i}" for i in range(50)])
    outcomes: list[tuple[str, list[str], int]] = []
    lock = threading.Lock()

    def ingest(worker: int) -> None:
        for batch in range(12):
            ids = [f"w{worker}-{batch}-{i}" for i in range(40)] + ["s1", "s2"]
            if worker % 2:
                body = "example_id,value\n" + "".join(f"{i},{len(i)}\n" for i in ids)
                response = client.post(LABELS, content=body, headers={**ADV, **CSV})
                kind = "labels"
            else:
                response = client.post(EXAMPLES, content="\n".join(ids), headers={**PUB, **PLAIN})
                kind = "examples"
            with lock:
                outcomes.append((kind, ids, response.status_code))

    releases: list = []

    def release_twice() -> None:
        for _ in range(2):
            releases.append(release(client, "ds", epsilon=0.5))

    threads = [threading.Thread(target=ingest, args=(w,)) for w in range(4)]
    threads.append(threading.Thread(target=release_twice))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert {status for _, _, status in outcomes} <= {200, 409}
    assert {r.status_code for r in releases} <= {201, 409}
    import sqlite3

    with sqlite3.connect(db_path) as conn:
        registered = {r[0] for r in conn.execute("SELECT example_id FROM entries WHERE registered")}
        labels = dict(conn.execute("SELECT example_id, value FROM entries WHERE value IS NOT NULL"))
    for kind, ids, status in outcomes:
        if status == 200 and kind == "examples":
            assert set(ids) <= registered
        if status == 200 and kind == "labels":
            assert all(labels[i] == float(len(i)) for i in ids)
    for response in releases:
        if response.status_code == 201:
            assert response.json()["n"] == len(registered)  # frozen at the first release


def test_concurrent_batches_giving_one_id_different_values_store_exactly_the_acked_one(client):
    create_dataset(client)
    ids = [f"c{i}" for i in range(20)]
    answers: dict[float, int] = {}

    def post(value: float) -> None:
        body = "example_id,value\n" + "".join(f"{i},{value}\n" for i in ids)
        answers[value] = client.post(LABELS, content=body, headers={**ADV, **CSV}).status_code

    threads = [threading.Thread(target=post, args=(v,)) for v in (1.0, 2.0, 3.0)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = [value for value, status in answers.items() if status == 200]
    assert len(winners) == 1 and sorted(answers.values()) == [200, 409, 409], answers
    again = client.post(
        LABELS, content=f"example_id,value\nc7,{winners[0]}\n", headers={**ADV, **CSV}
    )
    assert again.status_code == 200 and again.json()["unchanged"] == 1  # the acked value is kept


# ---- amounts outside the documented range (issue 24.4) ----------------------------------------

OUT_OF_RANGE = ("1e10001", "1e-10001", "1e301", "1e-401")


@pytest.mark.parametrize("value", OUT_OF_RANGE)
def test_a_dataset_budget_out_of_range_is_refused_and_not_stored(client, value):
    """``"epsilon_budget": "1e10001"`` answered 500 'not applied' but stored the dataset, and
    every listing answered 500 from then on."""
    for field, extra in (("epsilon_budget", {}), ("delta_budget", {"epsilon_budget": "1"})):
        body = {"name": "n", "label_min": 0, "label_max": 1, "default_label": 0}
        body |= {"epsilon_budget": value} | extra | ({field: value} if extra else {})
        answer = client.post("/v1/datasets", headers=OPS, json=body)
        assert answer.status_code == 422, (field, value, answer.text)
        assert _fields(answer) == [field]
    assert client.get("/v1/datasets", headers=OPS).json()["datasets"] == []


@pytest.mark.parametrize("value", OUT_OF_RANGE)
def test_release_and_top_up_amounts_out_of_range_are_422_naming_the_field(prepared, db_path, value):
    before = _state(prepared, db_path)
    for field, body in (
        ("epsilon", {"epsilon": value}),
        ("epsilon_histogram", {"epsilon": "1", "epsilon_histogram": value}),
    ):
        answer = prepared.post(RELEASES, headers=ADV, json=body)
        assert answer.status_code == 422, (field, answer.text)
        assert _fields(answer) == [field]
    top_up = prepared.post(
        "/v1/datasets/ds/budget", headers=OPS, json={"add": value, "reason": "test"}
    )
    assert top_up.status_code == 422 and _fields(top_up) == ["add"], top_up.text
    model = prepared.post(
        "/v1/datasets/ds/model-releases",
        headers=ADV,
        json={"estimator": "ols", "privacy": "label", "epsilon": value},
    )
    assert model.status_code == 422 and _fields(model) == ["epsilon"], model.text
    assert _state(prepared, db_path) == before
    assert prepared.get("/v1/datasets", headers=OPS).status_code == 200


def _amount_doors(value: object) -> list[tuple[str, dict, dict, str]]:
    """Every request that takes an amount: (path, role, body with ``value``, its field)."""
    return [
        ("/v1/datasets", OPS, {"name": "n", "label_min": 0, "label_max": 1, "default_label": 0,
                               "epsilon_budget": value}, "epsilon_budget"),
        (RELEASES, ADV, {"epsilon": value}, "epsilon"),
        ("/v1/datasets/ds/budget", OPS, {"add": value, "reason": "test"}, "add"),
        ("/v1/datasets/ds/model-releases", ADV,
         {"estimator": "ols", "privacy": "label", "epsilon": value}, "epsilon"),
    ]  # fmt: skip


@pytest.mark.parametrize("value", ["1_0", "0_1", "\uff15", "\u0661", " 2\n", "sNaN"])
def test_an_amount_only_python_reads_is_refused_naming_the_field(prepared, db_path, value):
    """``Decimal`` reads "1_0" as 10 and full-width or Arabic-Indic digits: a release of
    epsilon "1_0" spent 10. Amounts follow the services' one number rule (strict_input), as CSV
    cells do: a 422 naming the field, nothing stored or spent."""
    before = _state(prepared, db_path)
    for path, role, payload, field in _amount_doors(value):
        answer = prepared.post(path, headers=role, json=payload)
        assert answer.status_code == 422 and _fields(answer) == [field], (path, answer.text)
    assert _state(prepared, db_path) == before
    for plain in ("2", " 2 ", 2, 0.5, "5E-1"):
        answer = prepared.post(RELEASES, headers=ADV, json={"epsilon": plain, "dry_run": True})
        assert answer.status_code == 200, (plain, answer.text)


@pytest.mark.parametrize("digits", [1_300, 20_001])
def test_an_amount_of_more_than_1200_characters_is_a_422_and_spends_nothing(
    prepared, db_path, digits
):
    """A 1,303-character epsilon (12.33...) was accepted, stored as text that reads back as NaN:
    the dataset showed spent 1E+300 and refused every later release, a top-up could not repair
    it; 20,001 digits answered 500. Now a 422 naming the field, nothing stored or spent."""
    value = "1." + "3" * digits
    before = _state(prepared, db_path)
    for path, role, payload, field in _amount_doors(value):
        answer = prepared.post(path, headers=role, json=payload)
        assert answer.status_code == 422 and _fields(answer) == [field], (path, answer.text[:300])
    assert _state(prepared, db_path) == before


def test_a_stored_amount_of_any_sum_of_accepted_amounts_reads_back_exactly() -> None:
    """The longest sum of accepted amounts (1,200 characters at 10^-400, plus 10^300) is read
    back as itself, not as NaN (which the service takes for a spent budget)."""
    from decimal import Decimal

    from shared import epsilon as amounts

    tiny = Decimal("1." + "7" * 1190 + "e-400")
    total = amounts.add(Decimal("1e300"), tiny)
    assert amounts.stored(amounts.text(total), None) == total


def test_a_plan_no_randomizer_can_run_is_refused_before_the_preview_release_or_charge(
    prepared, db_path
):
    """The unbiased family at epsilon2 1e-6 (below its 1e-4): the preview said it fits, the
    release read the labels and drew the epsilon1 noise before refusing, and an external
    release was CHARGED though no job could ever build its randomizer. The refusal reads the
    plan alone (``public_randomizer``), so it now comes first: a 422 naming epsilon on all three,
    nothing spent."""
    from decimal import Decimal

    from shared.message import json_safe, new_release_id
    from shared.plan import ReleaseRequest

    before = _state(prepared, db_path)
    request = {"epsilon": "0.00001", "mechanism": "unbiased"}
    plan = ReleaseRequest(epsilon=Decimal("0.00001"), mechanism="unbiased").plan(
        n=30, lo=0.0, hi=100.0
    )
    external = {**request, "release_id": new_release_id(), "n": 30,
                "plan": json_safe(plan.public())}  # fmt: skip
    for path, body in (
        (RELEASES, {**request, "dry_run": True}),
        (RELEASES, request),
        ("/v1/datasets/ds/external-releases", external),
    ):
        answer = prepared.post(path, headers=ADV, json=body)
        assert answer.status_code == 422 and _fields(answer) == ["epsilon"], (path, answer.text)
        assert "too small for the unbiased randomizer" in answer.json()["detail"]
    assert _state(prepared, db_path) == before


def test_a_top_up_past_the_largest_budget_is_refused_naming_add(client, db_path):
    create_dataset(client, name="big", epsilon_budget="1e300")
    answer = client.post("/v1/datasets/big/budget", headers=OPS, json={"add": 1, "reason": "x"})
    assert answer.status_code == 422 and _fields(answer) == ["add"], answer.text
    assert client.get("/v1/datasets/big", headers=OPS).json()["epsilon_budget"] == "1E+300"


_EXPONENTS = st.integers(min_value=-100_000, max_value=100_000)
_AMOUNT_TEXT = st.one_of(
    st.builds(lambda m, e: f"{m}e{e}", st.integers(min_value=-9, max_value=9), _EXPONENTS),
    st.sampled_from(["NaN", "-NaN", "Infinity", "-Infinity", "sNaN", "-0", "0", "1e-400", "1e300"]),
    st.decimals(allow_nan=False, allow_infinity=False).map(str),
)
_NAMES = (f"d{i}" for i in itertools.count())


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(value=_AMOUNT_TEXT)
def test_any_decimal_amount_is_accepted_or_a_422_naming_it_never_a_500(client, value):
    """Issue 24, item 4 (the Decimal edges a schema fuzzer reaches): any decimal text as an
    amount of a dataset, a release or a top-up is either accepted or a 422 naming the field,
    and the listing keeps answering."""
    name = next(_NAMES)
    body = {"name": name, "label_min": 0, "label_max": 1, "default_label": 0}
    created = client.post("/v1/datasets", headers=OPS, json={**body, "epsilon_budget": value})
    assert created.status_code in (201, 422), created.text
    if created.status_code == 422:
        assert _fields(created) == ["epsilon_budget"]
        client.post("/v1/datasets", headers=OPS, json={**body, "epsilon_budget": "10"})
    for path, payload, field in (
        (f"/v1/datasets/{name}/budget", {"add": value, "reason": "fuzz"}, "add"),
        (f"/v1/datasets/{name}/releases", {"epsilon": value, "dry_run": True}, "epsilon"),
    ):
        answer = client.post(path, headers=ADV if "releases" in path else OPS, json=payload)
        assert answer.status_code < 500, (path, value, answer.text)
        if answer.status_code == 422:
            assert field in _fields(answer), (path, value, answer.text)
    assert client.get("/v1/datasets", headers=OPS).status_code == 200
