"""Schemathesis fuzzing of both services' OpenAPI schemas, through the real ASGI apps.

Every operation of each schema gets ``MAX_EXAMPLES`` generated requests (positive and negative
data) with a valid bearer token for its role; a few path parameters are steered to a dataset and
a release that exist, so fuzzing reaches past the 404s. Checks: no 5xx (``not_a_server_error``)
and, after the labels party was fuzzed, nothing half-stored: ``labels_party.ledger.verify``
(hash chain, per-dataset totals, each release's entries and stored message) reports ok. Neither
schema declares OpenAPI links, so there is no stateful run. Bounded: about a minute in all.
"""

from __future__ import annotations

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
from labels_party import ledger
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


def test_nothing_half_stored_after_fuzzing(labels_service: dict[str, Any]) -> None:
    """Runs after the labels fuzz (file order): the ledger and stored messages agree."""
    engine_app = labels_service["app"]
    with engine_app.state.services.db.read() as conn:
        report = ledger.verify(conn)
    assert report.ok, report.problems
    assert report.entries >= 3  # the dataset and the seeded release at least
