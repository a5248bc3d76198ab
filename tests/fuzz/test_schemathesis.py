"""Schemathesis fuzzing of both services' OpenAPI schemas, through the real ASGI apps.

Every operation of each schema gets ``MAX_EXAMPLES`` generated requests (positive and negative
data) with a valid bearer token for its role; a few path parameters are steered to a dataset and
a release that exist, so fuzzing reaches past the 404s. Checks: no 5xx (``not_a_server_error``)
and, after the labels party was fuzzed, nothing half-stored: ``labels_party.budget.ledger.verify``
(hash chain, per-dataset totals, each release's entries and stored message) reports ok. Neither
schema declares OpenAPI links, so there is no stateful run. Bounded: about a minute in all.
"""

from __future__ import annotations

import json
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from starlette.exceptions import StarletteDeprecationWarning

from features_party.config import Settings as FeaturesSettings
from features_party.main import create_app as create_features_app
from labels_party.budget import ledger
from labels_party.main import create_app as create_labels_app
from tests.labels_party.conftest import (
    ADV,
    OPS,
    PUB,
    create_dataset,
    make_settings,
    put_labels,
    register,
    release,
)

with warnings.catch_warnings():  # starlette prefers httpx2 (not a dependency) at import time
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from fastapi.testclient import TestClient

MAX_EXAMPLES = 25
FUZZ = settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
FEATURES_TOKEN = "features-fuzz-0123456789"
# The role whose token each labels-party operation needs (tests/labels_party/test_auth.py).
LABELS_ROLES = {
    ("POST", "/v1/datasets"): OPS,
    ("POST", "/v1/datasets/{name}/examples"): PUB,
    ("POST", "/v1/datasets/{name}/labels"): ADV,
    ("POST", "/v1/datasets/{name}/releases"): ADV,
    ("GET", "/v1/releases/{release_id}/message"): PUB,
}


@pytest.fixture(scope="module")
def labels_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A labels-party app (lifespan running) with one dataset, labels and one release."""
    db = tmp_path_factory.mktemp("fuzz-labels") / "labels.db"
    app = create_labels_app(make_settings(db), rng_factory=lambda: np.random.default_rng(3))
    with TestClient(app, raise_server_exceptions=False) as client:
        create_dataset(client, "ds")
        ids = [f"e{i}" for i in range(40)]
        register(client, "ds", ids)
        assert (
            put_labels(client, "ds", [(i, 3.0 * k) for k, i in enumerate(ids)]).status_code == 200
        )
        answer = release(client, "ds", epsilon=0.5)
        assert answer.status_code == 201, answer.text
        yield {"app": app, "db": db, "release_id": answer.json()["id"]}


@pytest.fixture(scope="module")
def features_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A features-party app (lifespan running) with one uploaded feature table.

    Its labels party is an unreachable loopback port: pulls fail as the API documents (a 502
    is a documented upstream error, not a crash; 5xx other than 502/503/504 would be a bug).
    """
    fields = {
        "db_path": tmp_path_factory.mktemp("fuzz-features") / "features.db",
        "labels_url": "http://127.0.0.1:9",
        "labels_token": "publisher-token-0123456789",
        "features_token": FEATURES_TOKEN,
    }
    app = create_features_app(FeaturesSettings(**fields))
    headers = {"Authorization": f"Bearer {FEATURES_TOKEN}", "Content-Type": "text/csv"}
    with TestClient(app, raise_server_exceptions=False) as client:
        upload = client.post(
            "/v1/datasets/ds/features", content="example_id,x\na,1\nb,2\n", headers=headers
        )
        assert upload.status_code == 200, upload.text
        yield app


def _steer(case: Any, known: dict[str, str]) -> None:
    """Half of the generated path parameters (by a bit of their own) name what exists."""
    for key, value in known.items():
        current = case.path_parameters.get(key) if case.path_parameters else None
        if isinstance(current, str) and len(current) % 2 == 0:
            case.path_parameters[key] = value


def fuzz(schema: Any, call: Callable[[Any], int]) -> Counter[int]:
    """Run ``call`` on MAX_EXAMPLES positive and as many negative cases per operation.

    Returns how often each status class (2, 4, 5) was answered.
    """
    statuses: Counter[int] = Counter()
    operations = []
    for result in schema.get_all_operations():
        operation = result.ok()
        operations.append(f"{operation.method.upper()} {operation.path}")
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @FUZZ
            @given(case=operation.as_strategy(generation_mode=mode))
            def run(case: Any) -> None:
                statuses[call(case) // 100] += 1

            try:
                run()
            except Unsatisfiable:
                # Nothing to make invalid (no parameters, no body): positive cases cover it.
                assert mode is GenerationMode.NEGATIVE, operations[-1]
    assert len(operations) >= 5, operations
    return statuses


def test_labels_party_never_answers_5xx(labels_service: dict[str, Any]) -> None:
    schema = schemathesis.openapi.from_asgi("/openapi.json", labels_service["app"])

    def call(case: Any) -> int:
        _steer(case, {"name": "ds", "release_id": labels_service["release_id"]})
        headers = LABELS_ROLES.get((case.method.upper(), case.operation.path), OPS)
        response = case.call(headers=headers)
        case.validate_response(response, checks=[not_a_server_error])
        return response.status_code

    statuses = fuzz(schema, call)
    assert statuses[2] > 20 and statuses[4] > 20, statuses  # both accepted and refused inputs


def test_features_party_never_answers_5xx(features_app: Any) -> None:
    schema = schemathesis.openapi.from_asgi("/openapi.json", features_app)

    def call(case: Any) -> int:
        _steer(case, {"name": "ds"})
        response = case.call(headers={"Authorization": f"Bearer {FEATURES_TOKEN}"})
        if response.status_code not in (502, 503, 504):  # upstream errors: documented
            case.validate_response(response, checks=[not_a_server_error])
        return response.status_code

    statuses = fuzz(schema, call)
    assert statuses[2] > 20 and statuses[4] > 20, statuses


# Decimal edge values (issue 24): sent as JSON strings and, where JSON has a literal for them,
# as raw numbers, in every exact-decimal amount field of every operation.
EDGE_STRINGS = ("1e-10001", "1e10001", "NaN", "-0", "Infinity", "-Infinity", "sNaN", "1e100000")
EDGE_LITERALS = ("1e-10001", "1e10001", "-0", "1e100000")


PLAIN = {"epsilon_histogram": "0.01", "delta": "0.001", "delta_budget": "0.001"}
EDGE_BASES: dict[str, dict[str, Any]] = {
    "/v1/datasets": {"name": "edge-ds", "label_min": 0, "label_max": 10, "default_label": 0},
    "/v1/datasets/{name}/budget": {"reason": "edge values"},
    "/v1/datasets/{name}/releases": {"mechanism": "rr_on_bins", "dry_run": True},
    "/v1/datasets/{name}/model-releases": {
        "estimator": "ols",
        "privacy": "label",
        "dry_run": True,
    },  # fmt: skip
}


def _is_amount(prop: dict[str, Any]) -> bool:
    """An exact-decimal amount field: its schema accepts a number or a (decimal) string."""
    kinds: set[str] = set()
    stack = [prop]
    while stack:
        node = stack.pop()
        kinds.update([node["type"]] if isinstance(node.get("type"), str) else [])
        stack.extend(node.get("anyOf", []))
    return {"number", "string"} <= kinds


def _amount_fields(raw: dict[str, Any], body_schema: dict[str, Any]) -> list[str]:
    ref = body_schema.get("$ref", "")
    schema = raw["components"]["schemas"][ref.rsplit("/", 1)[-1]] if ref else body_schema
    return [name for name, prop in schema.get("properties", {}).items() if _is_amount(prop)]


def _edge_texts(base: dict[str, Any], field: str) -> list[str]:
    """``base`` with ``field`` set to each edge value: JSON strings, then raw number literals."""
    texts = [json.dumps({**base, field: edge}) for edge in EDGE_STRINGS]
    zero = json.dumps({**base, field: 0})
    return texts + [zero.replace(f'"{field}": 0', f'"{field}": {lit}') for lit in EDGE_LITERALS]


def _edge_run(operation: Any, fields: list[str], client: Any, known: dict[str, str]) -> Any:
    """A one-example test of ``operation``: its generated body with each edge in each field."""

    @settings(FUZZ, max_examples=1)
    @given(case=operation.as_strategy(generation_mode=GenerationMode.POSITIVE))
    def run(case: Any) -> None:
        if case.path_parameters:
            case.path_parameters.update({k: v for k, v in known.items() if k in
                                         case.path_parameters})  # fmt: skip
        headers = LABELS_ROLES.get((case.method.upper(), case.operation.path), OPS)
        headers = {**headers, "Content-Type": "application/json"}
        # A valid body where one is known (nothing spent: dry runs), else the generated one;
        # generated amounts are any strings, so every amount starts from a plain valid value.
        base = dict(EDGE_BASES.get(case.operation.path) or
                    (case.body if isinstance(case.body, dict) else {}))  # fmt: skip
        base.update({f: PLAIN.get(f, "1") for f in fields})
        base_ok = (
            client.request(
                case.method.upper(), case.formatted_path, content=json.dumps(base), headers=headers
            ).status_code
            != 422
        )
        for field in fields:
            for text in _edge_texts(base, field):
                answer = client.request(
                    case.method.upper(), case.formatted_path, content=text, headers=headers
                )
                assert answer.status_code < 500, (case.formatted_path, text, answer.text)
                if answer.status_code == 422 and base_ok:  # refused for this field alone
                    assert field in answer.text, (case.formatted_path, text, answer.text)

    return run


def test_every_amount_field_answers_decimal_edge_values_with_a_4xx_naming_it(
    labels_service: dict[str, Any],
) -> None:
    """Each amount field of each operation, one valid generated body per operation, with each
    edge value in it: never a 5xx; a refusal is a 4xx whose JSON names the field. Runs before
    the ledger check below (file order), which then proves nothing was half-stored."""
    schema = schemathesis.openapi.from_asgi("/openapi.json", labels_service["app"])
    raw = schema.raw_schema
    client = TestClient(labels_service["app"], raise_server_exceptions=False)
    known = {"name": "ds", "release_id": labels_service["release_id"]}
    covered: set[str] = set()
    for result in schema.get_all_operations():
        operation = result.ok()
        content = raw["paths"][operation.path][operation.method.lower()].get("requestBody", {})
        body_schema = content.get("content", {}).get("application/json", {}).get("schema")
        fields = _amount_fields(raw, body_schema) if body_schema else []
        if fields:
            _edge_run(operation, fields, client, known)()
            covered.update(fields)
    assert {"epsilon_budget", "delta_budget", "add", "epsilon", "epsilon_histogram",
            "delta"} <= covered, covered  # fmt: skip


def test_nothing_half_stored_after_fuzzing(labels_service: dict[str, Any]) -> None:
    """Runs after the labels fuzz (file order): the ledger and stored messages agree."""
    engine_app = labels_service["app"]
    with engine_app.state.services.db.read() as conn:
        report = ledger.verify(conn)
    assert report.ok, report.problems
    assert report.entries >= 3  # the dataset and the seeded release at least
