"""model: "released": the features party pulls a model release, verifies it and predicts with it.

A REAL labels-party process (conftest) releases the models; the features party runs in-process.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from sqlalchemy import update

from features_party.db.models import ReleasedModelMessage
from shared.errors import IntegrityError
from shared.estimators.kernel import interpolate, smooth_interpolate
from shared.model_message import verify_model
from tests.features_party.conftest import LabelsParty

N = 200
GRID = [[a, b] for a in (-1.0, 0.0, 1.0) for b in (-1.0, 0.0, 1.0)]


def _labels_party_model(labels_party: LabelsParty, name: str, **release: Any) -> dict[str, Any]:
    """Create ``name`` upstream with N labelled examples and features x1, x2; release a model."""
    rng = np.random.default_rng(3)
    x = np.round(rng.normal(size=(N, 2)), 6)
    y = np.clip(50 + 10 * x[:, 0] - 5 * x[:, 1] + rng.normal(0, 1, N), 0, 100)
    ids = [f"ex-{i:04d}" for i in range(N)]
    dataset = {"name": name, "label_min": 0, "label_max": 100, "default_label": 0}
    with (
        labels_party.client("operator") as ops,
        labels_party.client("publisher") as pub,
        labels_party.client("advertiser") as adv,
    ):
        body = {**dataset, "epsilon_budget": "10", "delta_budget": "0.001"}
        ops.request("POST", "/v1/datasets", idempotent=False, json_body=body)
        pub.register_examples(name, ids)
        labels = [{"example_id": i, "value": float(v)} for i, v in zip(ids, y, strict=True)]
        adv.request(
            "POST", f"/v1/datasets/{name}/labels", idempotent=True, json_body={"labels": labels}
        )
        csv = "example_id,x1,x2\n" + "".join(
            f"{i},{a!r},{b!r}\n" for i, (a, b) in zip(ids, x.tolist(), strict=True)
        )
        pub.request(
            "POST",
            f"/v1/datasets/{name}/public-features",
            idempotent=True,
            content=csv,
            headers={"Content-Type": "text/csv"},
        )
        answer = adv.request(
            "POST", f"/v1/datasets/{name}/model-releases", idempotent=False, json_body=release
        )
    return answer.json()


@pytest.fixture(scope="module")
def ols_release(labels_party: LabelsParty) -> dict[str, Any]:
    return _labels_party_model(
        labels_party, "fp-ols", estimator="ols", privacy="label", epsilon="2"
    )


@pytest.fixture(scope="module")
def nw_release(labels_party: LabelsParty) -> dict[str, Any]:
    return _labels_party_model(
        labels_party, "fp-nw", estimator="nw", privacy="eptr", epsilon="4", delta="0.0001",
        params={"bandwidth": 0.5, "queries": GRID, "r_f": 100.0, "c0": 0.01},
    )  # fmt: skip


def _released(features: Any, release: dict[str, Any], dataset: str | None = None) -> Any:
    body = {
        "dataset": dataset or release["dataset"],
        "model": "released",
        "model_release_id": release["id"],
    }
    return features.post("/v1/models", json=body)


def test_ols_predicts_by_the_released_coefficients(
    features: Any, ols_release: dict[str, Any]
) -> None:
    answer = _released(features, ols_release)
    assert answer.status_code == 201, answer.text
    model = answer.json()
    assert (model["status"], model["model"], model["release_id"]) == (
        "succeeded",
        "released",
        ols_release["id"],
    )
    assert re.fullmatch(r"mdl_[0-9a-f]{24}", model["id"])  # the one id style (it was bare hex)
    assert model["result"]["epsilon"] == "2" and model["result"]["columns"] == ["x1", "x2"]
    coef = verify_model(ols_release["message"]).body.coef
    points = [[0.0, 0.0], [1.5, -2.0], [-3.0, 0.25]]
    rows = [{"features": {"x1": a, "x2": b}} for a, b in points]
    predicted = features.post(f"/v1/models/{model['id']}/predict", json={"rows": rows})
    assert predicted.status_code == 200, predicted.text
    expected = np.array(points) @ np.array(coef[:2]) + coef[2]
    assert predicted.json()["predictions"] == expected.tolist()
    # The model is served from the stored, re-verified copy (listing and reading it work too).
    assert features.get(f"/v1/models/{model['id']}").json()["status"] == "succeeded"


def test_nw_predicts_by_interpolating_the_released_grid(
    features: Any, nw_release: dict[str, Any]
) -> None:
    model = _released(features, nw_release).json()
    message = verify_model(nw_release["message"])
    points = [[0.0, 0.0], [0.3, -0.4], [2.0, 2.0]]
    rows = [{"features": {"x1": a, "x2": b}} for a, b in points]
    predicted = features.post(f"/v1/models/{model['id']}/predict", json={"rows": rows}).json()
    expected = interpolate(
        np.array(message.body.queries), np.array(message.body.values), np.array(points)
    )
    assert predicted["predictions"] == expected.tolist()
    assert predicted["predictions"][0] == message.body.values[GRID.index([0.0, 0.0])]
    assert model["result"]["delta"] == "0.0001" and model["result"]["privacy"] == "eptr"


@pytest.fixture(scope="module")
def nw_reference_release(labels_party: LabelsParty) -> dict[str, Any]:
    """ePTR-NW at epsilon 4 with c0 omitted and a public ``reference`` (the points the caller
    will predict at): c0 per query point and the smoother."""
    dense = [[a, b] for a in (-0.5, 0.0, 0.5) for b in (-0.5, 0.0, 0.5)]
    reference = np.round(np.random.default_rng(5).normal(size=(200, 2)), 6).tolist()
    return _labels_party_model(
        labels_party, "fp-nw-reference", estimator="nw", privacy="eptr", epsilon="4",
        delta="0.0001", params={"bandwidth": 0.5, "queries": dense, "reference": reference},
    )  # fmt: skip


def test_nw_with_a_reference_predicts_with_the_released_interpolation(
    features: Any, nw_reference_release: dict[str, Any]
) -> None:
    answer = _released(features, nw_reference_release)
    assert answer.status_code == 201, answer.text
    model = answer.json()
    message = verify_model(nw_reference_release["message"])
    params = message.header.params
    assert (params["interpolation"], params["smooth_bandwidth"]) == ("smooth", 0.25)
    assert len(params["c0_per_query"].split(",")) == len(message.body.queries)
    assert params["reference_rows"] == 200 and str(params["reference"]).startswith("sha256:")
    points = [[0.0, 0.0], [0.3, -0.4], [2.0, 2.0]]
    rows = [{"features": {"x1": a, "x2": b}} for a, b in points]
    predicted = features.post(f"/v1/models/{model['id']}/predict", json={"rows": rows})
    assert predicted.status_code == 200, predicted.text
    expected = smooth_interpolate(
        np.array(message.body.queries), np.array(message.body.values), np.array(points),
        bandwidth=0.25,
    )  # fmt: skip
    assert predicted.json()["predictions"] == expected.tolist()
    # Not the inverse-distance interpolation of the same values (a released value at a query).
    assert predicted.json()["predictions"][0] != message.body.values[4]


def test_predict_by_stored_example_ids(features: Any, ols_release: dict[str, Any]) -> None:
    csv = "example_id,x1,x2,colour\nex-0000,0.5,1.0,red\nex-0001,-1.0,2.0,blue\n"
    answer = features.post(
        "/v1/datasets/fp-ols/features", content=csv, headers={"Content-Type": "text/csv"}
    )
    assert answer.status_code == 200, answer.text
    model = _released(features, ols_release).json()
    coef = verify_model(ols_release["message"]).body.coef
    by_id = features.post(
        f"/v1/models/{model['id']}/predict", json={"example_ids": ["ex-0000", "ex-0001"]}
    )
    assert by_id.status_code == 200, by_id.text
    expected = np.array([[0.5, 1.0], [-1.0, 2.0]]) @ np.array(coef[:2]) + coef[2]
    assert by_id.json()["predictions"] == expected.tolist()
    missing = features.post(f"/v1/models/{model['id']}/predict", json={"example_ids": ["nope"]})
    assert missing.status_code == 422 and missing.json()["errors"][0]["field"] == "example_ids[0]"


@pytest.mark.parametrize(
    ("features_row", "field"),
    [
        ({"x1": 1.0}, "rows[0].features"),
        ({"x1": 1.0, "x2": 2.0, "x3": 0.0}, "rows[0].features"),
        ({"x1": "1", "x2": 2.0}, "rows[0].features.x1"),
        ({"x1": True, "x2": 2.0}, "rows[0].features.x1"),
        ({"x1": None, "x2": 2.0}, "rows[0].features.x1"),
        ({"x1": 10**400, "x2": 2.0}, "rows[0].features.x1"),  # a 500 before (a fuzzer)
    ],
)
def test_bad_rows_name_the_field(
    features: Any, ols_release: dict[str, Any], features_row: dict[str, Any], field: str
) -> None:
    model = _released(features, ols_release).json()
    answer = features.post(
        f"/v1/models/{model['id']}/predict", json={"rows": [{"features": features_row}]}
    )
    assert answer.status_code == 422, answer.text
    assert answer.json()["errors"][0]["field"] == field


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        ({"dataset": "fp-ols", "model": "released"}, 422, "model_release_id"),
        ({"dataset": "fp-ols", "model": "released", "release_id": "rel_x",
          "model_release_id": f"mrel_{'0' * 24}"}, 422, "release_id"),
        ({"dataset": "fp-ols", "model": "released", "model_release_id": "mrel_x"}, 422,
         "model_release_id"),
        ({"dataset": "fp-ols", "model": "gbm", "release_id": "rel_x",
          "model_release_id": f"mrel_{'0' * 24}"}, 422, "model_release_id"),
    ],
)  # fmt: skip
def test_bad_create_is_refused(
    features: Any, body: dict[str, Any], status: int, field: str
) -> None:
    answer = features.post("/v1/models", json=body)
    assert answer.status_code == status, answer.text
    assert field in {e["field"] for e in answer.json()["errors"]}, answer.json()


def test_unknown_or_foreign_model_release(features: Any, ols_release: dict[str, Any]) -> None:
    unknown = features.post(
        "/v1/models",
        json={"dataset": "fp-ols", "model": "released", "model_release_id": f"mrel_{'0' * 24}"},
    )
    # Issue 24.7: this was a 502 quoting the labels party's URL; it is the caller's bad input.
    assert unknown.status_code == 422, unknown.text
    assert unknown.json()["errors"] == [
        {"field": "model_release_id", "message": "unknown model release"}
    ]
    assert "http" not in unknown.text  # no upstream URL in the answer
    foreign = _released(features, ols_release, dataset="another")
    assert foreign.status_code == 422 and foreign.json()["errors"][0]["field"] == "dataset"
    assert features.get("/v1/models").json()["models"] == []


def test_a_corrupted_stored_message_is_not_trusted(
    features_factory: Callable[..., Any], ols_release: dict[str, Any]
) -> None:
    features = features_factory()
    model = _released(features, ols_release).json()
    sessions = features.app.state.sessions
    with sessions() as session:
        stored = session.get(ReleasedModelMessage, ols_release["id"])
        tampered = json.loads(stored.message)
        tampered["body"]["coef"][0] += 1.0
        session.execute(
            update(ReleasedModelMessage).values(message=json.dumps(tampered, separators=(",", ":")))
        )
        session.commit()
    answer = features.post(
        f"/v1/models/{model['id']}/predict", json={"rows": [{"features": {"x1": 0, "x2": 0}}]}
    )
    assert answer.status_code >= 400 and "sha256" in answer.json()["detail"], answer.text
    with pytest.raises(IntegrityError, match="sha256"):
        verify_model(tampered)


def test_a_released_model_is_not_finished_before_it_is_created(
    features: Any, ols_release: dict[str, Any]
) -> None:
    """Issue 24.7: its finished time was taken before its created time."""
    model = _released(features, ols_release).json()
    shown = features.get(f"/v1/models/{model['id']}").json()
    assert shown["created"] <= shown["finished"], shown


def test_a_pinned_key_checks_the_model_releases_receipt(
    labels_party: LabelsParty, features_factory: Callable[..., Any], tmp_path: Any
) -> None:
    """Model releases carry signed receipts too (issue 22, item 2): with the labels party's key
    pinned the pull verifies the receipt and its whole header; pinned to another key it fails."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from shared.service import receipt as rc
    from tests.features_party.test_receipts import pin

    release = _labels_party_model(
        labels_party, "fp-rcpt", estimator="ols", privacy="label", epsilon="1"
    )
    pinned = features_factory(labels_public_key=pin(labels_party, tmp_path / "labels.pub"))
    answer = _released(pinned, release)
    assert answer.status_code == 201, answer.text
    other = tmp_path / "other.pub"  # dated: an undated pin would not start (test_pin_dates.py)
    other_key = Ed25519PrivateKey.generate().public_key()
    other.write_text(rc.pem_with_validity(other_key, "2000-01-01T00:00:00Z", None))
    wrong = features_factory(labels_public_key=other, db_path=tmp_path / "wrong.db")
    refused = _released(wrong, release)
    assert refused.status_code >= 400 and "not a pinned key" in refused.text, refused.text


def _rewrite_stored(features: Any, model_release_id: str, **columns: Any) -> None:
    """Change the stored row of a pulled model release (as someone with the database could)."""
    with features.app.state.sessions() as session:
        session.execute(
            update(ReleasedModelMessage)
            .where(ReleasedModelMessage.model_release_id == model_release_id)
            .values(**columns)
        )
        session.commit()


@pytest.mark.parametrize(
    ("field", "value"), [("epsilon", "20"), ("label_max", 1000.0), ("noise_scale", 0.0)]
)
def test_a_stored_model_message_changed_after_its_pull_is_refused_at_every_use(
    labels_party: LabelsParty,
    features_factory: Callable[..., Any],
    tmp_path: Any,
    field: str,
    value: Any,
) -> None:
    """Issue 24, item 1: with a pinned key the model release's receipt is kept with the stored
    message and checked on every load, not only at the first pull. A header field of the stored
    message changed afterwards (its body, hence its sha256, intact) makes the next prediction and
    the next pull fail, naming the field; a changed stored receipt fails its signature."""
    from tests.features_party.test_receipts import pin

    release = _labels_party_model(
        labels_party, f"fp-kept-{field}", estimator="ols", privacy="label", epsilon="1"
    )
    features = features_factory(labels_public_key=pin(labels_party, tmp_path / "labels.pub"))
    model = _released(features, release)
    assert model.status_code == 201, model.text
    predict = f"/v1/models/{model.json()['id']}/predict"
    rows = {"rows": [{"features": {"x1": 0, "x2": 0}}]}
    assert features.post(predict, json=rows).status_code == 200
    with features.app.state.sessions() as session:
        stored = session.get(ReleasedModelMessage, release["id"])
        original, kept = stored.message, stored.receipt
    assert kept is not None and json.loads(kept)["model_release_id"] == release["id"]

    changed = json.loads(original)
    changed["header"][field] = value
    verify_model(changed)  # still a valid, self-consistent model message
    _rewrite_stored(features, release["id"], message=json.dumps(changed))
    for answer in (features.post(predict, json=rows), _released(features, release)):
        assert answer.status_code == 502, answer.text
        assert f"differs from the receipt's in: {field}" in answer.json()["detail"], answer.text

    receipt = json.loads(kept)
    _rewrite_stored(
        features, release["id"], message=original, receipt=json.dumps({**receipt, "epsilon": "9"})
    )
    refused = features.post(predict, json=rows)
    assert refused.status_code == 502 and "signature" in refused.json()["detail"], refused.text
    _rewrite_stored(features, release["id"], receipt=kept)
    assert features.post(predict, json=rows).status_code == 200


def test_a_model_pulled_before_the_key_was_pinned_gets_its_receipt_checked_and_kept(
    labels_party: LabelsParty, features_factory: Callable[..., Any], tmp_path: Any
) -> None:
    """A row kept without a receipt (no pin at its pull): the first use with a pinned key fetches
    the receipt, checks the stored header against it and keeps it."""
    from tests.features_party.test_receipts import pin

    release = _labels_party_model(
        labels_party, "fp-late-pin", estimator="ols", privacy="label", epsilon="1"
    )
    unpinned = features_factory()
    model = _released(unpinned, release).json()
    with unpinned.app.state.sessions() as session:
        stored = session.get(ReleasedModelMessage, release["id"])
        assert stored.receipt is None
        original = stored.message
    changed = json.loads(original)
    changed["header"]["epsilon"] = "20"
    _rewrite_stored(unpinned, release["id"], message=json.dumps(changed))
    pinned = features_factory(labels_public_key=pin(labels_party, tmp_path / "labels.pub"))
    predict = f"/v1/models/{model['id']}/predict"
    rows = {"rows": [{"features": {"x1": 0, "x2": 0}}]}
    refused = pinned.post(predict, json=rows)
    assert refused.status_code == 502 and "in: epsilon" in refused.json()["detail"], refused.text
    _rewrite_stored(pinned, release["id"], message=original)
    assert pinned.post(predict, json=rows).status_code == 200
    with pinned.app.state.sessions() as session:
        assert session.get(ReleasedModelMessage, release["id"]).receipt is not None


def test_predict_refuses_a_malformed_id_and_a_point_beyond_the_doubles(
    features: Any, nw_release: dict[str, Any]
) -> None:
    """Found by a fuzzer (500s before): a lone surrogate among the example ids (the database
    driver could not encode it) is a 422 naming it; an NW point at 1e308, whose distances to
    the grid overflow (no neighbour found: an IndexError), is a prediction that is no number."""
    model = _released(features, nw_release).json()
    path = f"/v1/models/{model['id']}/predict"
    body = b'{"example_ids": ["ex-0000", "\\ud800"]}'  # JSON's escape of a lone surrogate
    answer = features.post(path, content=body, headers={"Content-Type": "application/json"})
    assert answer.status_code == 422, answer.text  # no Unicode text: the body, as JSON
    assert answer.json()["errors"][0]["field"] == "body"
    spaced = features.post(path, json={"example_ids": ["ex-0000", "ex 0001"]})
    assert spaced.status_code == 422, spaced.text
    assert spaced.json()["errors"][0]["field"] == "example_ids[1]"
    far = features.post(path, json={"rows": [{"features": {"x1": 1e308, "x2": 0.0}}]})
    assert far.status_code == 422, far.text
    assert far.json()["errors"][0]["field"] == "rows[0].features"
