"""A segmented release through both services: sync with segments, pull, train, predict."""

from __future__ import annotations

import numpy as np
import pytest

from shared.message import SEGMENTED
from tests.features_party.conftest import csv_body, wait_job

pytestmark = pytest.mark.integration

CSV = {"Content-Type": "text/csv"}
MEANS = {"north": 80.0, "south": 20.0, "east": 50.0}


def _rows(n: int, seed: int = 0) -> tuple[list[str], dict[str, np.ndarray], np.ndarray]:
    """y = the region's mean + 10 x1 + noise, in [0, 100]; the region is public."""
    rng = np.random.default_rng(seed)
    region = rng.choice(np.array(list(MEANS)), size=n, p=[0.45, 0.45, 0.1])
    x1 = rng.normal(size=n)
    y = np.clip(np.array([MEANS[r] for r in region]) + 10 * x1 + rng.normal(0, 3, n), 0, 100)
    return [f"seg-{i:05d}" for i in range(n)], {"x1": np.round(x1, 6), "region": region}, y


def test_segmented_release_trains_with_each_regions_dp_mean(labels_party, features_factory):
    features = features_factory()
    ids, columns, y = _rows(6000)
    labels_party.client("operator").create_dataset(
        "regions",
        label_min=0.0,
        label_max=100.0,
        default_label=0.0,
        epsilon_budget=5.0,
        segment_column="region",
    )
    assert labels_party.client("publisher").dataset("regions").segment_column == "region"
    upload = features.post(
        "/v1/datasets/regions/features", content=csv_body(ids, columns), headers=CSV
    )
    assert upload.status_code == 200, upload.text
    synced = features.post("/v1/datasets/regions/examples/sync")
    assert synced.status_code == 200, synced.text
    labels_party.client("advertiser").post_labels("regions", ids, y)
    release = labels_party.client("advertiser").create_release("regions", epsilon=1.0)
    assert release.mechanism == SEGMENTED

    created = features.post(
        "/v1/models", json={"dataset": "regions", "release_id": release.id, "model": "auto"}
    )
    assert created.status_code == 202, created.text
    job = wait_job(features, created.json()["id"])
    assert job["status"] == "succeeded", job["error"]
    segments = job["result"]["segments"]
    assert segments["column"] == "region" and segments["groups"] == 3
    baselines = segments["baselines"]
    # Each group's DP mean (epsilon 0.04+ on 600-2,700 labels of range 100) is within a few
    # units of its region's mean; the shrinkage keeps them apart.
    for region, mean in MEANS.items():
        assert abs(baselines[region] - mean) < 8, (region, baselines)
    predict = features.post(
        f"/v1/models/{job['id']}/predict",
        json={"rows": [{"features": {"x1": 0.0, "region": r}} for r in ("north", "south")]},
    ).json()["predictions"]
    assert predict[0] > predict[1] + 40


def test_sync_needs_the_segment_column(labels_party, features_factory):
    features = features_factory()
    ids, columns, _ = _rows(50)
    labels_party.client("operator").create_dataset(
        "nocol",
        label_min=0.0,
        label_max=100.0,
        default_label=0.0,
        epsilon_budget=5.0,
        segment_column="campaign",
    )
    upload = features.post(
        "/v1/datasets/nocol/features", content=csv_body(ids, columns), headers=CSV
    )
    assert upload.status_code == 200, upload.text
    synced = features.post("/v1/datasets/nocol/examples/sync")
    assert synced.status_code == 422, synced.text
    assert synced.json()["errors"][0]["field"] == "campaign"
    assert labels_party.client("publisher").dataset("nocol").n_examples == 0
