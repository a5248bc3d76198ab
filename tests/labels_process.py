"""A real labels-party process for tests of its clients (the features party, the Spark job):
the process, its role tokens and typed clients, and the few calls those tests make."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from demo.services import ServiceProcess, new_tokens, start_labels_party
from shared.service.client import LabelsPartyClient, RetryPolicy

FAST_RETRY = RetryPolicy(attempts=3, base_delay=0.05, factor=2.0, max_delay=0.2)


@dataclass
class LabelsParty:
    """A running labels-party process and clients for its three roles."""

    service: ServiceProcess
    tokens: dict[str, str]

    @property
    def url(self) -> str:
        return self.service.url

    def client(self, role: str) -> LabelsPartyClient:
        return LabelsPartyClient(self.url, token=self.tokens[role], retry=FAST_RETRY)

    def create_dataset(self, name: str, *, budget: str = "10", **fields: Any) -> None:
        body = {"name": name, "label_min": 0.0, "label_max": 100.0, "default_label": 0.0,
                "epsilon_budget": budget, **fields}  # fmt: skip
        with self.client("operator") as client:
            client.request("POST", "/v1/datasets", idempotent=False, json_body=body)

    def dataset(self, name: str) -> dict[str, Any]:
        with self.client("advertiser") as client:
            return dict(client.request("GET", f"/v1/datasets/{name}", idempotent=True).json())

    def ledger(self, name: str) -> list[dict[str, Any]]:
        with self.client("operator") as client:
            page = client.request(
                "GET", "/v1/ledger", idempotent=True, params={"dataset": name}
            ).json()
        return list(page["entries"])


@contextmanager
def running_labels_party(workdir: Path) -> Iterator[LabelsParty]:
    """A real ``labeldp serve labels`` process in ``workdir``, stopped on exit."""
    tokens = new_tokens()
    service = start_labels_party(workdir, tokens)
    try:
        yield LabelsParty(service=service, tokens=tokens)
    finally:
        service.stop()
