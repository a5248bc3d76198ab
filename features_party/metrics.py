"""The features party's Prometheus metrics, served with ``prometheus_client``.

One ``CollectorRegistry`` per app, with one collector that reads the app's state at scrape time:
requests by route and status, stored feature rows per dataset and training jobs by status (from
the database), and the process counters (feature rows received, messages pulled, jobs).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import func, select

from features_party.db.models import FeatureRow, TrainedModel

CONTENT_TYPE = CONTENT_TYPE_LATEST
JOB_STATUSES = ("queued", "running", "succeeded", "failed")
COUNTER_HELP = {
    "feature_rows_received": "Feature rows received.",
    "jobs_succeeded": "Training jobs that succeeded.",
    "jobs_failed": "Training jobs that failed.",
    "messages_pulled": "Label-DP messages pulled from the labels party.",
}


class _AppStateCollector(Collector):
    """Every metric of one app, read from its ``app.state`` when scraped."""

    def __init__(self, state: Any) -> None:
        self._state = state

    def collect(self) -> Iterator[Metric]:
        state = self._state
        requests = CounterMetricFamily(
            "labeldp_features_http_requests",
            "HTTP requests by route and status.",
            labels=["method", "route", "status"],
        )
        for (method, route, status), count in sorted(state.requests.items()):
            requests.add_metric([method, route, str(status)], count)
        yield requests
        rows = GaugeMetricFamily(
            "labeldp_features_rows", "Stored feature rows per dataset.", labels=["dataset"]
        )
        models = GaugeMetricFamily(
            "labeldp_features_models", "Training jobs by status.", labels=["status"]
        )
        with state.sessions() as session:
            query = select(FeatureRow.dataset, func.count()).group_by(FeatureRow.dataset)
            for dataset, count in session.execute(query):
                rows.add_metric([dataset], count)
            query = select(TrainedModel.status, func.count()).group_by(TrainedModel.status)
            by_status = {row[0]: row[1] for row in session.execute(query)}
        for status in JOB_STATUSES:
            models.add_metric([status], by_status.get(status, 0))
        yield rows
        yield models
        counters = {**state.counters, **state.runner.counters}
        for name, value in sorted(counters.items()):
            help_text = COUNTER_HELP.get(name, name.replace("_", " ") + ".")
            yield CounterMetricFamily(f"labeldp_features_{name}", help_text, value=value)


def make_registry(state: Any) -> CollectorRegistry:
    """A registry of this app's own (two apps in one process share nothing)."""
    registry = CollectorRegistry()
    registry.register(_AppStateCollector(state))
    return registry


def render(registry: CollectorRegistry) -> bytes:
    """The exposition text of ``registry``."""
    return generate_latest(registry)
