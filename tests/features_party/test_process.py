"""The features party as a real process: kill -9 during training loses nothing acknowledged."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from demo.services import start_features_party
from shared.service.client import FeaturesPartyClient
from tests.features_party.conftest import synthetic_rows

pytestmark = pytest.mark.integration


def test_kill_9_during_training_then_restart(tmp_path: Path, labels_party):
    tokens = labels_party.tokens
    service = start_features_party(tmp_path, tokens, labels_url=labels_party.url)
    try:
        client = FeaturesPartyClient(service.url, token=tokens["features"])
        ids, columns, y = synthetic_rows(3000, seed=4)
        labels_party.client("operator").create_dataset(
            "crash", label_min=0.0, label_max=100.0, default_label=0.0, epsilon_budget=5.0
        )
        client.upload_features("crash", ids, columns, categorical=["colour"], batch_size=1000)
        client.sync_examples("crash")
        labels_party.client("advertiser").post_labels("crash", ids, y)
        release = labels_party.client("advertiser").create_release("crash", epsilon=3.0)
        job = client.create_model(
            dataset="crash", release_id=release.id, model="mlp", label_transform="debiased", seed=1
        )
        deadline = time.monotonic() + 60
        while client.model(job.id).status == "queued" and time.monotonic() < deadline:
            time.sleep(0.02)
        state = client.model(job.id)
        service.kill()
        assert state.status == "running", state  # killed mid-job (MLP fits take seconds)

        service = start_features_party(
            tmp_path, tokens, labels_url=labels_party.url, db_path=service.db_path
        )
        client = FeaturesPartyClient(service.url, token=tokens["features"])
        assert client.dataset("crash")["rows"] == 3000  # every acknowledged batch is there
        done = client.wait_model(job.id, timeout=120)
        assert done.result is not None and done.result["family"] == "mlp"
        predictions = client.predict(job.id, example_ids=ids[:20])
        assert np.all(np.isfinite(predictions))
    finally:
        service.stop()
