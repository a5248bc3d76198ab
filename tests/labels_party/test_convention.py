"""One convention across both services (issue 13): numbers in text, repeated JSON keys."""

from __future__ import annotations

import pytest

from tests.labels_party.conftest import ADV, OPS, create_dataset

CSV = {**ADV, "content-type": "text/csv"}
NDJSON = {**ADV, "content-type": "application/x-ndjson"}


@pytest.mark.parametrize("value", ["1_000", "１２", "٣", "1_0.5"])
def test_csv_values_that_only_python_reads_as_numbers_are_refused(client, value):
    """``float()`` reads ``1_000`` and full-width digits; a JSON number never is one."""
    create_dataset(client)
    body = f"example_id,value\na,1.5\nb,{value}\n".encode()
    answer = client.post("/v1/datasets/ds/labels", content=body, headers=CSV)
    assert answer.status_code == 422, answer.text
    assert answer.json()["errors"] == [
        {
            "field": "line[3].value",
            "message": "must be a finite number, written as a plain decimal (ASCII digits, no '_')",
        }
    ]
    assert client.get("/v1/datasets/ds", headers=ADV).json()["n_labels"] == 0
    plain = client.post(
        "/v1/datasets/ds/labels", content=b"example_id,value\na,1.5\nb, -2e1 \n", headers=CSV
    )
    assert plain.status_code == 200, plain.text


@pytest.mark.parametrize(
    ("url", "headers", "body", "field"),
    [
        ("/v1/datasets/ds/labels", ADV,
         b'{"labels": [{"example_id": "a", "value": 1}, '
         b'{"example_id": "b", "value": 1, "value": 2}]}', "labels[1].value"),
        ("/v1/datasets/ds/labels", ADV, b'{"labels": [], "labels": [{"example_id": "a", '
         b'"value": 1}]}', "labels"),
        ("/v1/datasets/ds/labels", NDJSON,
         b'{"example_id": "a", "value": 1}\n{"example_id": "b", "value": 1, "value": 5}\n',
         "line[2].value"),
        ("/v1/datasets", OPS, b'{"name": "x", "label_min": 0, "label_max": 1, '
         b'"default_label": 0, "epsilon_budget": 1, "epsilon_budget": 100}', "epsilon_budget"),
        ("/v1/datasets/ds/releases", ADV,
         b'{"epsilon": 1, "params": {"bins": 4, "bins": 8}}', "params.bins"),
    ],
)  # fmt: skip
def test_repeated_json_keys_are_refused_naming_the_place(client, url, headers, body, field):
    """json and pydantic keep the last of repeated keys silently; both services refuse them."""
    create_dataset(client)
    kind = headers.get("content-type", "application/json")
    answer = client.post(url, content=body, headers={**headers, "content-type": kind})
    assert answer.status_code == 422, answer.text
    assert answer.json()["errors"] == [
        {"field": field, "message": "key given more than once in one JSON object"}
    ]
    view = client.get("/v1/datasets/ds", headers=ADV).json()
    assert view["n_labels"] == 0 and float(view["epsilon_spent"]) == 0
