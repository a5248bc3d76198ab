"""The labels party's Prometheus metrics, served with ``prometheus_client``.

Each app owns its own ``CollectorRegistry`` (two apps in one process never share a counter).
Counters live in the process (reset on restart, as Prometheus expects); the per-dataset epsilon
gauges are read from the database at scrape time. Nothing here counts labels: how many label
rows a dataset received is label information (with a default label meaning "no conversion", it
is about the number of conversions), so no metric moves with it (issue 17). Requests are
counted per route and status, examples (the publisher's ids), releases by mechanism, model
releases by estimator and privacy, and repeats answered from their idempotency key by kind. (A
label batch's 409, an id re-sent with another value, does depend on the advertiser's own two
submissions: labels_party/API.md, "Health and metrics".)
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import TypeVar

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    disable_created_metrics,
    generate_latest,
)

M = TypeVar("M", Counter, Gauge)
CONTENT_TYPE = CONTENT_TYPE_LATEST
# No ``*_created`` series: the time a route first answered a status is no one's business, and
# counters' values are all an operator needs (process-wide setting of the client library).
disable_created_metrics()


class Metrics:
    """The service's metrics in a registry of their own (thread-safe, like the client)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._requests = self._add(
            Counter, "labeldp_http_requests", "HTTP requests by method, route and status.",
            "method", "route", "status",
        )  # fmt: skip
        self._examples = self._add(
            Counter, "labeldp_examples_registered", "New example ids registered."
        )
        self._releases = self._add(
            Counter, "labeldp_releases", "Releases committed, by mechanism.", "mechanism"
        )
        self._model_releases = self._add(
            Counter,
            "labeldp_model_releases",
            "Model releases committed, by estimator and privacy.",
            "estimator",
            "privacy",
        )
        self._replays = self._add(
            Counter,
            "labeldp_idempotent_replays",
            "Repeated requests answered from their Idempotency-Key (nothing spent or added), by "
            "kind.",
            "kind",
        )
        self._spent = self._add(
            Gauge, "labeldp_epsilon_spent", "Privacy budget spent, per dataset.", "dataset"
        )
        self._budget = self._add(
            Gauge, "labeldp_epsilon_budget", "Privacy budget allowed, per dataset.", "dataset"
        )
        self._scrape = threading.Lock()

    def _add(self, kind: type[M], name: str, documentation: str, *labels: str) -> M:
        """A ``kind`` metric (Counter, Gauge) with ``labels``, in this registry."""
        return kind(name, documentation, labels, registry=self.registry)

    def request(self, *, method: str, route: str, status: int) -> None:
        self._requests.labels(method=method, route=route, status=str(status)).inc()

    def examples_registered(self, count: int) -> None:
        self._examples.inc(count)

    def release(self, mechanism: str) -> None:
        self._releases.labels(mechanism=mechanism).inc()

    def model_release(self, *, estimator: str, privacy: str) -> None:
        self._model_releases.labels(estimator=estimator, privacy=privacy).inc()

    def replay(self, kind: str) -> None:
        """A repeat answered from its idempotency key (``release``, ``model``, ``top_up``)."""
        self._replays.labels(kind=kind).inc()

    def render(self, *, datasets: Iterable[tuple[str, float, float]]) -> str:
        """The exposition text; ``datasets`` yields (name, epsilon_spent, epsilon_budget)."""
        with self._scrape:  # one scrape at a time sets and reads the gauges
            self._spent.clear()
            self._budget.clear()
            for name, spent, budget in datasets:
                self._spent.labels(dataset=name).set(spent)
                self._budget.labels(dataset=name).set(budget)
            return generate_latest(self.registry).decode("utf-8")
