"""The shared typed client (``shared.service.client.LabelsPartyClient``) against a real labels
server."""

from __future__ import annotations

import numpy as np
import pytest

from shared.service.client import LabelsPartyClient
from tests.labels_party.conftest import TOKENS

pytestmark = pytest.mark.integration


def test_shared_client_round_trip(server_factory):
    server = server_factory().start()
    url = server.url
    with (
        LabelsPartyClient(url, token=TOKENS.operator) as operator,
        LabelsPartyClient(url, token=TOKENS.publisher) as publisher,
        LabelsPartyClient(url, token=TOKENS.advertiser) as advertiser,
    ):
        operator.create_dataset(
            "contract", label_min=0.0, label_max=10.0, default_label=0.0, epsilon_budget=2.0
        )
        ids = [f"c{i:04d}" for i in range(1000)]
        publisher.register_examples("contract", ids)
        values = np.arange(500, dtype=float) % 10
        advertiser.post_labels("contract", ids[:500], values, batch_size=200)
        info = advertiser.create_release("contract", epsilon=1.0, mechanism="auto")
        assert info.n == 1000 and info.epsilon == pytest.approx(1.0)
        pulled = publisher.download_message(info.id)
        assert pulled.example_ids == ids and pulled.header.body_sha256 == info.message_sha256
        again = publisher.download_message(info.id, binary=False)
        np.testing.assert_array_equal(again.noisy_labels, pulled.noisy_labels)
        dataset = operator.dataset("contract")
        assert dataset.epsilon_spent == pytest.approx(1.0) and dataset.epsilon_left == 1.0
        assert len(operator.ledger()["entries"]) == 3
