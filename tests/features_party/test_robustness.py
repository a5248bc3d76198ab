"""Robustness review of the features party: schemathesis and hand-probe findings, kept as tests.

Every error is JSON ``{"detail", "errors": [{"field", "message"}]}`` naming a field; bad input
is a 4xx (never a 500, never silently reinterpreted) and stores nothing. No labels party is
needed here: it points at a closed port.
"""

from __future__ import annotations

import gzip
import json
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.exceptions import StarletteDeprecationWarning

from features_party.api.routes import datasets as datasets_route
from features_party.config import Settings
from features_party.main import create_app
from tests.features_party.conftest import FAST_RETRY

with warnings.catch_warnings():  # starlette prefers httpx2 (not a dependency) at import time
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from fastapi.testclient import TestClient

TOKEN = "features-token-0123"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
CSV = {"content-type": "text/csv"}
JSON = {"content-type": "application/json"}
DEEP = "[" * 100_000 + "]" * 100_000


@pytest.fixture
def make_features(tmp_path: Path) -> Iterator[Callable[..., TestClient]]:
    clients: list[TestClient] = []

    def build(*, raise_server_exceptions: bool = False, **overrides: Any) -> TestClient:
        fields: dict[str, Any] = {
            "db_path": tmp_path / "features.db",
            "labels_url": "http://127.0.0.1:9",  # nothing listens: the labels party is "down"
            "labels_token": "publisher-token",
            "features_token": TOKEN,
            "pull_retry": FAST_RETRY,
            **overrides,
        }
        client = TestClient(
            create_app(Settings(**fields)), raise_server_exceptions=raise_server_exceptions
        )
        client.headers.update(AUTH)
        clients.append(client.__enter__())
        return client

    yield build
    for client in clients:
        client.__exit__(None, None, None)


@pytest.fixture
def features(make_features: Callable[..., TestClient]) -> TestClient:
    client = make_features()
    stored = client.post("/v1/datasets/ds/features", content="example_id,x,c\na,1,u\nb,2,v\n",
                         headers=CSV)  # fmt: skip
    assert stored.status_code == 200, stored.text
    return client


def _fields(response) -> list[str]:
    payload = response.json()
    assert set(payload) >= {"detail", "errors"} and payload["detail"], payload
    assert payload["errors"], f"no field named: {payload}"
    for error in payload["errors"]:
        assert set(error) == {"field", "message"} and error["field"] and error["message"], payload
    return [error["field"] for error in payload["errors"]]


def _rows(client: TestClient, name: str = "ds") -> int | None:
    answer = client.get(f"/v1/datasets/{name}")
    return answer.json()["rows"] if answer.status_code == 200 else None


# ---- the error shape on every path -----------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "url", "headers", "body", "status", "field"),
    [
        ("GET", "/nope", {}, None, 404, "path"),
        ("DELETE", "/v1/models", {}, None, 405, "method"),
        ("PUT", "/v1/datasets/ds", {}, None, 405, "method"),
        ("GET", "/v1/datasets", {"Authorization": ""}, None, 401, "Authorization"),
        ("GET", "/v1/datasets", {"Authorization": "Bearer wrong-token-1"}, None, 401,
         "Authorization"),
        ("GET", "/v1/datasets/zz", {}, None, 404, "dataset"),
        ("POST", "/v1/datasets/zz/examples/sync", {}, None, 404, "dataset"),
        ("GET", "/v1/models/" + "0" * 32, {}, None, 404, "model_id"),
        ("POST", "/v1/models/" + "0" * 32 + "/predict", JSON, '{"example_ids": ["a"]}', 404,
         "model_id"),
        ("POST", "/v1/models", JSON, '{"dataset": "zz", "release_id": "rel_' + "0" * 24 + '"}',
         404, "dataset"),
        ("POST", "/v1/datasets/ds/features", {"content-type": "text/xml"}, "<a/>", 415,
         "Content-Type"),
        ("POST", "/v1/datasets/ds/features", {}, "example_id,x\n", 415, "Content-Type"),
    ],
)  # fmt: skip
def test_every_error_has_the_documented_shape(features, method, url, headers, body, status, field):
    response = features.request(method, url, headers=headers, content=body)
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    assert field in _fields(response), response.text


def test_405_lists_every_method_of_the_path(features):
    """Found by schemathesis: Starlette's Allow named only the first route's methods."""
    for method in ("OPTIONS", "DELETE"):
        response = features.request(method, "/v1/models")
        assert response.status_code == 405 and "method" in _fields(response)
        assert set(response.headers["allow"].split(", ")) >= {"GET", "POST"}


def test_413_names_the_body(make_features):
    client = make_features(max_body_bytes=2048)
    big = "example_id,x\n" + "".join(f"id{i},{i}\n" for i in range(400))
    response = client.post("/v1/datasets/m/features", content=big, headers=CSV)
    assert response.status_code == 413 and "body" in _fields(response)


def test_predicting_with_an_untrained_model_is_409_naming_it(features):
    job = features.post("/v1/models", json={"dataset": "ds", "release_id": "rel_" + "1" * 24})
    assert job.status_code == 202, job.text
    response = features.post(f"/v1/models/{job.json()['id']}/predict", json={"example_ids": ["a"]})
    assert response.status_code == 409 and "model_id" in _fields(response)


def test_an_unexpected_exception_is_a_json_500_that_never_escapes(make_features, monkeypatch):
    client = make_features(raise_server_exceptions=True)  # an escaping exception would raise

    def broken(*_args: Any, **_kwargs: Any) -> None:
        raise RuntimeError("secret feature value 0.987654321")

    monkeypatch.setattr(datasets_route, "store_batch", broken)
    response = client.post("/v1/datasets/x/features", content="example_id,x\na,1\n", headers=CSV)
    assert response.status_code == 500
    assert "server" in _fields(response) and "0.987654321" not in response.text


# ---- JSON bodies FastAPI parses --------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b"\xff", "body"),
        (b"\x00", "body"),
        (DEEP.encode(), "body"),
        (b'{"dataset": "ds", "release_id": "rel_' + b"0" * 24 + b'", "seed": ' + b"9" * 5000 + b"}",
         "body"),
        (b'{"dataset": "ds", "release_id": "rel_' + b"0" * 24 + b'", "seed": false}', "seed"),
        (b'{"dataset": "ds", "release_id": "rel_' + b"0" * 24 + b'", "seed": "3"}', "seed"),
        (b'{"dataset": "ds", "release_id": "../../v1/ledger?"}', "release_id"),
        (b'{"dataset": "../x", "release_id": "rel_' + b"0" * 24 + b'"}', "dataset"),
    ],
    ids=["bad utf-8", "nul", "deep", "huge seed", "seed bool", "seed string", "release id path",
         "dataset path"],
)  # fmt: skip
def test_bad_model_requests_are_422_naming_the_field(features, body, field):
    response = features.post("/v1/models", content=body, headers=JSON)
    assert response.status_code == 422, response.text
    assert field in _fields(response), response.text
    assert features.get("/v1/models").json()["models"] == []  # no job was queued


def test_an_integral_float_seed_is_an_integer_as_json_schema_says(features):
    """Found by schemathesis: 428.0 is a valid JSON Schema integer; false is not."""
    body = {"dataset": "ds", "release_id": "rel_" + "0" * 24, "seed": 428.0}
    response = features.post("/v1/models", json=body)
    assert response.status_code == 202 and response.json()["seed"] == 428


@pytest.mark.parametrize("content_type", ["text/plain", "application/xml", "text/csv"])
def test_model_requests_in_another_content_type_are_415(features, content_type):
    body = json.dumps({"dataset": "ds", "release_id": "rel_" + "0" * 24})
    response = features.post("/v1/models", content=body, headers={"content-type": content_type})
    assert response.status_code == 415 and "Content-Type" in _fields(response)
    assert features.get("/v1/models").json()["models"] == []


def test_compressed_uploads_are_refused_not_misread(features):
    plain = b"example_id,x,c\nz,1,u\n"
    for encoding, body in (("gzip", gzip.compress(plain)), ("br", plain)):
        response = features.post(
            "/v1/datasets/ds/features", content=body, headers={**CSV, "content-encoding": encoding}
        )
        assert response.status_code == 415 and "Content-Encoding" in _fields(response)
    assert _rows(features) == 2


def test_unknown_and_repeated_query_parameters_are_refused(features):
    body = "example_id,x,c\na,5,u\n"  # a conflict that overwrite=true would apply
    for query, field in (("?overwite=true", "query.overwite"),
                         ("?overwrite=true&overwrite=false", "query.overwrite")):  # fmt: skip
        response = features.post(f"/v1/datasets/ds/features{query}", content=body, headers=CSV)
        assert response.status_code == 422 and field in _fields(response), response.text
    assert features.get("/v1/models?limit=3").status_code == 422
    healthz = features.get("/healthz?zz=1")  # the endpoint without a token too
    assert healthz.status_code == 422 and "query.zz" in _fields(healthz), healthz.text


# ---- names -----------------------------------------------------------------------------------


def test_a_very_long_or_odd_dataset_name_is_422_without_being_echoed(features):
    name = "x" * 20_000
    for method, url in (("GET", f"/v1/datasets/{name}"),
                        ("POST", f"/v1/datasets/{name}/examples/sync")):  # fmt: skip
        response = features.request(method, url)
        assert response.status_code == 422 and "dataset" in _fields(response)
        assert name not in response.text
    for odd in ("%2E%2E", "%2E", "-x"):
        response = features.post(f"/v1/datasets/{odd}/features", content="example_id,x\na,1\n",
                                 headers=CSV)  # fmt: skip
        assert response.status_code in (404, 422), response.text
        assert _rows(features, "..") is None


# ---- values ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ("example_id,x\na,1\nb,nan\n", "line[3].x"),
        ("example_id,x\na,1\nb,1e309\n", "line[3].x"),
        ("example_id,x\na,-inf\nb,2\n", "line[2].x"),
        ("example_id,x\na,1\nb," + "9" * 5000 + "\n", "line[3].x"),
    ],
    ids=["nan", "1e309", "-inf", "5000 digits"],
)
def test_a_first_batch_with_non_finite_numbers_is_refused_not_made_categorical(
    make_features, body, field
):
    client = make_features()
    response = client.post("/v1/datasets/new/features", content=body, headers=CSV)
    assert response.status_code == 422, response.text
    assert field in _fields(response)
    assert _rows(client, "new") is None
    forced = client.post("/v1/datasets/new/features?categorical=x", content=body, headers=CSV)
    assert forced.status_code == 200 and forced.json()["columns"] == {"x": "categorical"}


def test_nan_is_a_category_in_a_column_of_words(make_features):
    client = make_features()
    body = "example_id,colour\na,red\nb,nan\nc,\n"
    response = client.post("/v1/datasets/w/features", content=body, headers=CSV)
    assert response.status_code == 200 and response.json()["columns"] == {"colour": "categorical"}


@pytest.mark.parametrize(
    "raw",
    ["NaN", "Infinity", "-Infinity", "1e309", "9" * 400],
    ids=["NaN", "Infinity", "-Infinity", "1e309", "400 digits"],
)
def test_json_non_finite_numbers_are_refused(make_features, raw):
    client = make_features()
    body = '{"rows": [{"example_id": "a", "features": {"x": 1}}, ' + (
        '{"example_id": "b", "features": {"x": ' + raw + "}}]}"
    )
    response = client.post("/v1/datasets/j/features", content=body, headers=JSON)
    assert response.status_code == 422, response.text
    assert any(f.startswith("rows[1]") for f in _fields(response)), response.text
    assert _rows(client, "j") is None
    forced = client.post("/v1/datasets/j/features?categorical=x", content=body, headers=JSON)
    assert forced.status_code == 422  # a JSON number is never a silent missing value


def test_predict_names_missing_ids_by_position(features, monkeypatch):
    from features_party.db.models import TrainedModel

    with features.app.state.sessions() as session:
        session.add(TrainedModel(id="f" * 32, dataset="ds", release_id="rel_" + "2" * 24,
                                 model="ridge", label_transform="raw", seed=1,
                                 status="succeeded", stage="done", progress=1.0))  # fmt: skip
        session.commit()

    class _Fitted:
        class encoder:  # noqa: N801 - a stand-in with the attribute the route reads
            columns = (("x", "numeric"), ("c", "categorical"))

        @staticmethod
        def predict_rows(rows: list[list[Any]]) -> Any:
            import numpy as np

            return np.zeros(len(rows))

    monkeypatch.setattr(type(features.app.state.runner), "fitted", lambda *_a: _Fitted())
    response = features.post(f"/v1/models/{'f' * 32}/predict", json={"example_ids": ["a", ""]})
    assert response.status_code == 422 and "example_ids[1]" in _fields(response)
    ok = features.post(f"/v1/models/{'f' * 32}/predict", json={"example_ids": ["a", "b", "a"]})
    assert ok.status_code == 200 and ok.json()["n"] == 3


def test_a_prediction_that_overflows_is_a_422_not_a_500(features, monkeypatch):
    """Hand probe: x = 1.7e308 through a model fitted on x of scale 1e-6 overflows to inf,
    which JSON cannot carry (the answer was a 500)."""
    from features_party.db.models import TrainedModel

    with features.app.state.sessions() as session:
        session.add(TrainedModel(id="e" * 32, dataset="ds", release_id="rel_" + "2" * 24,
                                 model="ridge", label_transform="raw", seed=1,
                                 status="succeeded", stage="done", progress=1.0))  # fmt: skip
        session.commit()

    class _Fitted:
        class encoder:  # noqa: N801 - a stand-in with the attribute the route reads
            columns = (("x", "numeric"), ("c", "categorical"))

        @staticmethod
        def predict_rows(rows: list[list[Any]]) -> Any:
            import numpy as np

            return np.array([1.0, np.inf, np.nan])[: len(rows)]

    monkeypatch.setattr(type(features.app.state.runner), "fitted", lambda *_a: _Fitted())
    rows = [{"features": {"x": x, "c": "u"}} for x in (1.0, 1.7e308, -1.7e308)]
    response = features.post(f"/v1/models/{'e' * 32}/predict", json={"rows": rows})
    assert response.status_code == 422, response.text
    assert _fields(response) == ["rows[1].features", "rows[2].features"]
    by_id = features.post(f"/v1/models/{'e' * 32}/predict", json={"example_ids": ["a", "b"]})
    assert by_id.status_code == 422 and _fields(by_id) == ["example_ids[1]"]


# ---- responses match their schema ------------------------------------------------------------


def test_timestamps_are_rfc3339_with_a_zone(features):
    created = features.get("/v1/datasets/ds").json()["created"]
    assert created.endswith("Z") or created.endswith("+00:00"), created
    listed = features.get("/v1/datasets").json()["datasets"][0]["created"]
    assert listed == created


def test_openapi_documents_the_error_shape_and_the_token(features):
    schema = features.get("/openapi.json").json()
    parts = schema["components"]["schemas"]
    assert "ErrorBody" in parts and "HTTPValidationError" not in parts
    assert schema["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            for status in ("4XX", "5XX"):
                ref = operation["responses"][status]["content"]["application/json"]["schema"]
                assert ref == {"$ref": "#/components/schemas/ErrorBody"}, (path, method)
            assert "422" not in operation["responses"], (path, method)
            if path != "/healthz":
                assert operation.get("security") == [{"bearer": []}], (path, method)
    name = next(p for p in schema["paths"]["/v1/datasets/{name}"]["get"]["parameters"])
    assert name["schema"]["pattern"]
    assert parts["ModelCreate"]["properties"]["release_id"]["pattern"]
    row = parts["FeatureRowIn"]["properties"]
    assert row["example_id"]["pattern"] and row["features"]["propertyNames"]["pattern"]


# ---- training and prediction edge cases against a real labels party -----------------------


def test_no_overlap_fails_the_job_clearly_and_predict_tolerates_unknowns(
    labels_party, features_factory
):
    """Hand probe: a message with no feature overlap fails its job with a clear error (nothing
    stored as a model); a trained model predicts for unknown categories and missing values."""
    features = features_factory()
    ids = [f"k{i:03d}" for i in range(60)]
    operator = labels_party.client("operator")
    for name in ("disjoint", "overlap"):
        operator.create_dataset(name, label_min=0.0, label_max=100.0, default_label=0.0,
                                epsilon_budget=5.0)  # fmt: skip
        labels_party.client("publisher").register_examples(name, ids)
        labels_party.client("advertiser").post_labels(name, ids, [float(i) for i in range(60)])
    csv = "example_id,x,c\n" + "".join(f"{i},{k},{'abc'[k % 3]}\n" for k, i in enumerate(ids))
    other = csv.replace("k0", "z0")  # every id differs from the released ones
    assert features.post("/v1/datasets/disjoint/features", content=other, headers=CSV).is_success
    assert features.post("/v1/datasets/overlap/features", content=csv, headers=CSV).is_success

    from tests.features_party.conftest import wait_job

    for name in ("disjoint", "overlap"):
        release = labels_party.client("advertiser").create_release(name, epsilon=2.0)
        job = features.post("/v1/models", json={"dataset": name, "release_id": release.id,
                                                "model": "ridge", "seed": 1})  # fmt: skip
        done = wait_job(features, job.json()["id"])
        if name == "disjoint":
            assert done["status"] == "failed" and "no example of release" in done["error"]
            refused = features.post(f"/v1/models/{done['id']}/predict",
                                    json={"example_ids": ["z000"]})  # fmt: skip
            assert refused.status_code == 409 and "model_id" in _fields(refused)
            continue
        assert done["status"] == "succeeded", done
        rows = [{"features": {"x": 1.0, "c": "never-seen"}}, {"features": {"x": None, "c": None}},
                {"features": {"x": 1e6, "c": "a"}}]  # fmt: skip
        predicted = features.post(f"/v1/models/{done['id']}/predict", json={"rows": rows})
        assert predicted.status_code == 200, predicted.text
        assert all(isinstance(p, float) for p in predicted.json()["predictions"])
        extra_row = {"rows": [{"features": {"x": 1, "c": "a", "y": 2}}]}
        extra = features.post(f"/v1/models/{done['id']}/predict", json=extra_row)
        assert extra.status_code == 422 and "rows[0].features" in _fields(extra)
