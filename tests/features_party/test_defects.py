"""Regression tests for the defects a new user hit (issue 13), against a REAL labels party."""

from __future__ import annotations

import json
import math

import pytest

from features_party.jobs import TRUE_MSE_MIN_Z, true_mse_estimate
from tests.features_party.conftest import wait_job
from tests.features_party.test_flow import prepare

pytestmark = pytest.mark.integration


def test_model_for_an_unknown_or_foreign_release_is_refused_at_post_time(labels_party, features):
    """Defect 4: such a job was accepted (202) and failed later in the background."""
    _, _, _, release = prepare(labels_party, features, "own", n=120)
    prepare(labels_party, features, "other", n=120)
    unknown = features.post(
        "/v1/models", json={"dataset": "own", "release_id": "rel_" + "0" * 24, "model": "ridge"}
    )
    assert unknown.status_code == 404, unknown.text
    assert unknown.json()["errors"] == [{"field": "release_id", "message": "unknown release"}]
    foreign = features.post(
        "/v1/models", json={"dataset": "other", "release_id": release.id, "model": "ridge"}
    )
    assert foreign.status_code == 409, foreign.text
    assert foreign.json()["errors"][0]["field"] == "release_id"
    assert "'own'" in foreign.json()["errors"][0]["message"]
    assert features.get("/v1/models").json()["models"] == []  # nothing was queued
    accepted = features.post(
        "/v1/models", json={"dataset": "own", "release_id": release.id, "model": "ridge"}
    )
    assert accepted.status_code == 202, accepted.text
    assert accepted.json()["id"].startswith("mdl_")


def test_unchanged_sync_after_the_release_has_nothing_to_do(labels_party, features):
    """Defect 5: an unchanged re-sync after a release answered 502 wrapping the 409."""
    ids, columns, _, _ = prepare(labels_party, features, "resync", n=100)
    again = features.post("/v1/datasets/resync/examples/sync")
    assert again.status_code == 200, again.text
    assert again.json()["registered"] == 0 and again.json()["batches"] == 0
    assert again.json()["detail"].startswith("nothing to do")
    # a NEW id after the release is a real conflict, still reported
    more = features.post(
        "/v1/datasets/resync/features",
        content="example_id,x1,colour\nlate-1,0.5,red\n",
        headers={"Content-Type": "text/csv"},
    )
    assert more.status_code == 200, more.text
    refused = features.post("/v1/datasets/resync/examples/sync")
    assert refused.status_code == 502, refused.text


def test_a_refused_publisher_token_is_the_services_credential(labels_party, features_factory):
    """Defect 6: read as if the CALLER's Authorization were wrong (field ``Authorization``)."""
    features = features_factory(labels_token="pub-wrong-token-0123456789")
    upload = features.post(
        "/v1/datasets/cred/features",
        content="example_id,x1\na,1.0\n",
        headers={"Content-Type": "text/csv"},
    )
    assert upload.status_code == 200, upload.text
    answer = features.post("/v1/datasets/cred/examples/sync")
    assert answer.status_code == 502, answer.text
    body = answer.json()
    assert "upstream credential" in body["detail"]
    assert body["errors"] == [
        {"field": "upstream.publisher_token", "message": "refused by the labels party (HTTP 401)"}
    ]


def test_true_mse_estimate_only_where_it_is_honest(labels_party, features):
    """Defect 9: 0.0 for every model of a run: the difference was clipped at 0 where the
    shared validation labels' noise swamps the model's error. Now null there, with a note.

    The release noise comes from the labels party's CSPRNG, so whether the tiny-epsilon estimate
    clears 2 standard errors is itself random (it usually does not): the test checks the rule on
    the numbers each model reports, and that the ample release reports a clearly positive one.
    """
    results = {}
    for name, n, epsilon in (("tiny", 300, 0.05), ("ample", 1200, 8.0)):
        _, _, _, release = prepare(labels_party, features, name, n=n, epsilon=epsilon)
        job = features.post(
            "/v1/models",
            json={"dataset": name, "release_id": release.id, "model": "ridge", "seed": 1},
        )
        assert job.status_code == 202, job.text
        done = wait_job(features, job.json()["id"])
        assert done["status"] == "succeeded", done
        results[name] = done["result"]
    for result in results.values():
        difference = result["validation_mse_unbiased"] - result["noise_variance_estimate"]
        se = math.hypot(result["validation_mse_unbiased_se"], result["noise_variance_estimate_se"])
        estimate = result["validation_mse_true_estimate"]
        if difference > TRUE_MSE_MIN_Z * se:
            assert estimate == difference and "validation_mse_true_estimate_note" not in result
        else:  # never clipped to 0.0: null, and a note saying why
            assert estimate is None, json.dumps(
                {k: v for k, v in result.items() if k != "candidates"}
            )
            assert result["validation_mse_true_estimate_note"].startswith("not reported")
    # y has noise sd 5 around its signal: at epsilon 8 the difference estimates a clearly
    # positive MSE (measured: 2.9 to 6 standard errors above zero in 8 runs, once below 2 in CI,
    # where it is rightly not reported); at epsilon 0.05 the noise swamps it (~0.25 se).
    ample, tiny = results["ample"], results["tiny"]
    assert ample["validation_mse_unbiased"] > ample["noise_variance_estimate"]
    assert tiny["validation_mse_true_estimate"] is None


def test_true_mse_estimate_rule():
    assert true_mse_estimate(10.0, 1.0, 7.0) == (3.0, "")
    value, note = true_mse_estimate(10.0, 1.0, 8.5)  # 1.5 < 2 standard errors
    assert value is None and "2 standard errors" in note
    assert true_mse_estimate(10.0, 1.0, 12.0)[0] is None  # negative: never clipped to 0.0
    assert true_mse_estimate(float("nan"), 1.0, 1.0)[0] is None


def test_the_features_party_on_postgresql(labels_party, features_factory, postgres_url):
    """Both services take a database URL: the whole flow with the features party on a REAL
    PostgreSQL server (upload, sync, pull once, train, predict, restart)."""
    features = features_factory(db_path=None, database_url=postgres_url)
    ids, _, _, release = prepare(labels_party, features, "pg", n=200)
    job = features.post(
        "/v1/models", json={"dataset": "pg", "release_id": release.id, "model": "ridge"}
    )
    assert job.status_code == 202, job.text
    done = wait_job(features, job.json()["id"])
    assert done["status"] == "succeeded", done
    again = features_factory(db_path=None, database_url=postgres_url)  # a restart
    predicted = again.post(f"/v1/models/{done['id']}/predict", json={"example_ids": ids[:5]})
    assert predicted.status_code == 200, predicted.text
    assert len(predicted.json()["predictions"]) == 5
    assert again.get("/v1/datasets/pg").json()["rows"] == 200
