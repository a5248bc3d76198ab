"""Prometheus text exposition, written by hand (no client library needed for a few counters).

Counters live in the process (reset on restart, as Prometheus expects); the per-dataset
epsilon gauges are read from the database at scrape time. ``labeldp_labels_ingested_total`` is
one process-wide count of label rows received: it is not broken down by dataset, because how
many labels a dataset has is label information (see ``datasets``).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(pairs: Iterable[tuple[str, str]]) -> str:
    inner = ",".join(f'{key}="{_escape(value)}"' for key, value in pairs)
    return "{" + inner + "}" if inner else ""


class Metrics:
    """Thread-safe counters of the service."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: Counter[tuple[str, str, str]] = Counter()
        self._labels_ingested = 0
        self._examples_registered = 0
        self._releases: Counter[str] = Counter()

    def request(self, *, method: str, route: str, status: int) -> None:
        with self._lock:
            self._requests[(method, route, str(status))] += 1

    def labels_ingested(self, count: int) -> None:
        with self._lock:
            self._labels_ingested += count

    def examples_registered(self, count: int) -> None:
        with self._lock:
            self._examples_registered += count

    def release(self, mechanism: str) -> None:
        with self._lock:
            self._releases[mechanism] += 1

    def render(self, *, datasets: Iterable[tuple[str, float, float]]) -> str:
        """The exposition text; ``datasets`` yields (name, epsilon_spent, epsilon_budget)."""
        with self._lock:
            requests = sorted(self._requests.items())
            labels_ingested = self._labels_ingested
            examples = self._examples_registered
            releases = sorted(self._releases.items())
        lines = [
            "# HELP labeldp_http_requests_total HTTP requests by method, route and status.",
            "# TYPE labeldp_http_requests_total counter",
        ]
        for (method, route, status), count in requests:
            labels = _labels([("method", method), ("route", route), ("status", status)])
            lines.append(f"labeldp_http_requests_total{labels} {count}")
        lines += [
            "# HELP labeldp_labels_ingested_total Label rows accepted (all datasets).",
            "# TYPE labeldp_labels_ingested_total counter",
            f"labeldp_labels_ingested_total {labels_ingested}",
            "# HELP labeldp_examples_registered_total New example ids registered.",
            "# TYPE labeldp_examples_registered_total counter",
            f"labeldp_examples_registered_total {examples}",
            "# HELP labeldp_releases_total Releases committed, by mechanism.",
            "# TYPE labeldp_releases_total counter",
        ]
        for mechanism, count in releases:
            lines.append(f"labeldp_releases_total{_labels([('mechanism', mechanism)])} {count}")
        spent_lines = [
            "# HELP labeldp_epsilon_spent Privacy budget spent, per dataset.",
            "# TYPE labeldp_epsilon_spent gauge",
        ]
        budget_lines = [
            "# HELP labeldp_epsilon_budget Privacy budget allowed, per dataset.",
            "# TYPE labeldp_epsilon_budget gauge",
        ]
        for name, spent, budget in datasets:
            label = _labels([("dataset", name)])
            spent_lines.append(f"labeldp_epsilon_spent{label} {spent!r}")
            budget_lines.append(f"labeldp_epsilon_budget{label} {budget!r}")
        return "\n".join(lines + spent_lines + budget_lines) + "\n"
