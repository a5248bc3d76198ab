"""``/metrics`` of the features party: prometheus_client text, one registry per app."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

CSV = {"Content-Type": "text/csv"}


def values(client: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = client.get("/metrics")
    assert response.status_code == 200
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def test_metrics_parse_and_apps_share_no_counter(
    features_factory: Callable[..., Any], tmp_path: Path
) -> None:
    first = features_factory()
    second = features_factory(db_path=tmp_path / "second.db")
    upload = first.post("/v1/datasets/m/features", content="example_id,x\na,1\nb,2\n", headers=CSV)
    assert upload.status_code == 200, upload.text
    one = values(first)
    assert one[("labeldp_features_rows", (("dataset", "m"),))] == 2.0
    assert one[("labeldp_features_feature_rows_received_total", ())] == 2.0
    assert one[("labeldp_features_models", (("status", "failed"),))] == 0.0
    route = (("method", "POST"), ("route", "/v1/datasets/{name}/features"), ("status", "200"))
    assert one[("labeldp_features_http_requests_total", route)] == 1.0
    two = values(second)
    assert two[("labeldp_features_feature_rows_received_total", ())] == 0.0
    assert ("labeldp_features_http_requests_total", route) not in two
    assert ("labeldp_features_rows", (("dataset", "m"),)) not in two
