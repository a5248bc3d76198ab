"""One convention across both services (issue 13): numbers in text, repeated JSON keys."""

from __future__ import annotations

import pytest

CSV = {"Content-Type": "text/csv"}


@pytest.mark.parametrize("value", ["1_000", "１２"])
def test_csv_numbers_that_only_python_reads_are_refused_in_a_numeric_column(features, value):
    answer = features.post(
        "/v1/datasets/conv/features",
        content=f"example_id,x1\na,1.5\nb,{value}\nc,2\n",
        headers=CSV,
    )
    assert answer.status_code == 422, answer.text
    (error,) = answer.json()["errors"]
    assert error["field"] == "line[3].x1"
    assert "plain decimal number" in error["message"]
    assert features.get("/v1/datasets/conv").status_code == 404  # nothing stored


@pytest.mark.parametrize(
    ("url", "body", "field"),
    [
        ("/v1/datasets/conv/features",
         b'{"rows": [{"example_id": "a", "features": {"x": 1, "x": 2}}]}', "rows[0].features.x"),
        ("/v1/models", b'{"dataset": "conv", "release_id": "rel_1", "dataset": "other"}',
         "dataset"),
    ],
)  # fmt: skip
def test_repeated_json_keys_are_refused_naming_the_place(features, url, body, field):
    answer = features.post(url, content=body, headers={"Content-Type": "application/json"})
    assert answer.status_code == 422, answer.text
    assert answer.json()["errors"] == [
        {"field": field, "message": "key given more than once in one JSON object"}
    ]
