"""Segmented datasets through the real app: declaration, registration, preview, release, ledger."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from shared.message import BINARY_MEDIA_TYPE, SEGMENTED, decode_binary, from_json_message
from tests.labels_party.conftest import ADV, OPS, PUB, create_dataset, put_labels

SEGMENTS = {"big-a": 3000, "big-b": 2500, "small-c": 30, "small-d": 20}


def _ids() -> tuple[list[str], list[str]]:
    ids, segments = [], []
    for segment, count in SEGMENTS.items():
        for i in range(count):
            ids.append(f"{segment}-{i:05d}")
            segments.append(segment)
    return ids, segments


def _register(client: Any, name: str, ids: list[str], segments: list[str] | None) -> Any:
    body: dict[str, Any] = {"example_ids": ids}
    if segments is not None:
        body["segments"] = segments
    return client.post(f"/v1/datasets/{name}/examples", json=body, headers=PUB)


@pytest.fixture
def segmented(client: Any) -> Any:
    """A dataset segmented by ``campaign``, its examples registered, then labelled."""
    create_dataset(client, "seg", segment_column="campaign", label_max=400.0)
    ids, segments = _ids()
    assert _register(client, "seg", ids, segments).status_code == 200
    rng = np.random.default_rng(3)
    means = {"big-a": 200.0, "big-b": 20.0, "small-c": 100.0, "small-d": 100.0}
    pairs = [
        (i, float(np.clip(means[s] + rng.normal(0, 10), 0, 400)))
        for i, s in zip(ids, segments, strict=True)
    ]
    assert put_labels(client, "seg", pairs).status_code == 200
    return client


def test_dataset_shows_its_segment_column(client: Any) -> None:
    created = create_dataset(client, "seg", segment_column="campaign")
    assert created["segment_column"] == "campaign"
    plain = create_dataset(client, "plain")
    assert "segment_column" not in plain
    entry = client.get("/v1/ledger", headers=OPS).json()["entries"][0]
    assert entry["parameters"]["segment_column"] == "campaign"


@pytest.mark.parametrize("column", ["", "1abc", "a b", "x" * 65, "camp-aign"])
def test_bad_segment_column_is_422_naming_it(client: Any, column: str) -> None:
    body = {"name": "d", "label_min": 0, "label_max": 1, "default_label": 0, "epsilon_budget": 1}
    response = client.post("/v1/datasets", json={**body, "segment_column": column}, headers=OPS)
    assert response.status_code == 422
    assert [e["field"] for e in response.json()["errors"]] == ["segment_column"]


def test_segments_on_some_examples_and_not_others_is_422(client: Any) -> None:
    create_dataset(client, "seg", segment_column="campaign")
    missing = _register(client, "seg", ["a", "b"], None)
    assert missing.status_code == 422
    assert missing.json()["errors"][0]["field"] == "segments"
    short = _register(client, "seg", ["a", "b"], ["x"])
    assert short.status_code == 422
    assert short.json()["errors"][0]["field"] == "segments"
    bad = _register(client, "seg", ["a", "b"], ["x", "no/slash"])
    assert bad.status_code == 422
    assert bad.json()["errors"][0]["field"] == "segments[1]"
    create_dataset(client, "plain")
    refused = _register(client, "plain", ["a"], ["x"])
    assert refused.status_code == 422
    assert refused.json()["errors"][0]["field"] == "segments"
    # Nothing was stored by any refused batch.
    assert client.get("/v1/datasets/seg", headers=OPS).json()["n_examples"] == 0
    assert client.get("/v1/datasets/plain", headers=OPS).json()["n_examples"] == 0


def test_text_plain_ids_need_json_with_segments(client: Any) -> None:
    create_dataset(client, "seg", segment_column="campaign")
    response = client.post(
        "/v1/datasets/seg/examples",
        content=b"a\nb\n",
        headers={**PUB, "Content-Type": "text/plain"},
    )
    assert response.status_code == 422
    assert response.json()["errors"][0]["field"] == "segments"


def test_a_segment_is_fixed_before_the_label(client: Any) -> None:
    create_dataset(client, "seg", segment_column="campaign")
    assert _register(client, "seg", ["a", "b"], ["x", "y"]).status_code == 200
    # Idempotent with the same segment, 409 with another one (the batch stores nothing).
    assert _register(client, "seg", ["a", "c"], ["x", "y"]).status_code == 200
    moved = _register(client, "seg", ["c", "a", "d"], ["y", "z", "y"])
    assert moved.status_code == 409
    assert [e["field"] for e in moved.json()["errors"]] == ["segments[1]"]
    twice = _register(client, "seg", ["e", "e"], ["x", "y"])
    assert twice.status_code == 409
    assert [e["field"] for e in twice.json()["errors"]] == ["segments[1]"]
    assert client.get("/v1/datasets/seg", headers=OPS).json()["n_examples"] == 3


def test_registering_never_tells_the_publisher_which_ids_have_a_label(client: Any) -> None:
    """Whether the advertiser has posted a label for an id (a conversion, when default_label
    means none) is label information: the publisher's registration of that id with its segment
    answers exactly as for an id without a label (it was a 409 'already has a label', free and
    repeatable). The segment is the publisher's own public attribute, given without seeing any
    label, so the grouping still never depends on one; it is stored, and the release uses it."""
    create_dataset(client, "seg", segment_column="campaign")
    assert put_labels(client, "seg", [("labelled", 1.0)]).status_code == 200
    labelled = _register(client, "seg", ["labelled"], ["x"])
    unlabelled = _register(client, "seg", ["unlabelled"], ["x"])
    assert labelled.status_code == unlabelled.status_code == 200
    assert labelled.json() == {"accepted": 1, "registered_new": 1, "n_examples": 1}
    assert unlabelled.json() == {"accepted": 1, "registered_new": 1, "n_examples": 2}
    # Idempotent, and fixed: another segment for it is refused as for any registered example.
    assert _register(client, "seg", ["labelled"], ["x"]).json()["registered_new"] == 0
    assert _register(client, "seg", ["labelled"], ["y"]).status_code == 409
    preview = client.post(
        "/v1/datasets/seg/releases", json={"epsilon": 1, "dry_run": True}, headers=ADV
    ).json()
    assert preview["n"] == 2


def test_preview_shows_the_groups_and_spends_nothing(segmented: Any) -> None:
    response = segmented.post(
        "/v1/datasets/seg/releases", json={"epsilon": 1, "dry_run": True}, headers=ADV
    )
    assert response.status_code == 200, response.text
    plan = response.json()["plan"]
    assert plan["split"] == "segmented"
    # The ordinary default epsilon1 for the typical segment (the example-weighted median size,
    # 3,000: sqrt(64 / 3000) = 0.14606), 4/5 of it on the group means.
    assert (plan["epsilon1"], plan["epsilon2"]) == ("0.14606", "0.85394")
    assert (plan["label_mean_epsilon"], plan["histogram_epsilon"]) == ("0.116848", "0.029212")
    groups = plan["segments"]["groups"]
    assert [g["segments"] for g in groups] == [["big-a"], ["big-b"], ["small-c", "small-d"]]
    assert [g["pooled"] for g in groups] == [False, False, True]
    assert sum(g["n"] for g in groups) == plan["n"] == sum(SEGMENTS.values())
    assert segmented.get("/v1/datasets/seg", headers=OPS).json()["epsilon_spent"] == "0"


def test_release_charges_once_and_the_message_carries_every_group(segmented: Any) -> None:
    preview = segmented.post(
        "/v1/datasets/seg/releases", json={"epsilon": 1, "dry_run": True}, headers=ADV
    ).json()["plan"]
    plan_epsilon1, plan_epsilon2 = preview["epsilon1"], preview["epsilon2"]
    response = segmented.post("/v1/datasets/seg/releases", json={"epsilon": 1}, headers=ADV)
    assert response.status_code == 201, response.text
    meta = response.json()
    assert meta["mechanism"] == SEGMENTED and meta["epsilon"] == "1"
    dataset = segmented.get("/v1/datasets/seg", headers=OPS).json()
    assert dataset["epsilon_spent"] == "1"
    binary = segmented.get(
        f"/v1/releases/{meta['id']}/message", headers={**PUB, "Accept": BINARY_MEDIA_TYPE}
    ).content
    header, ids, noisy = decode_binary(binary)
    assert header.format_version == 5 and header.segments is not None
    parts = header.parts()
    assert [p.n for p in parts] == [3000, 2500, 50]
    # Body group by group: the first 3000 ids are big-a's, and so on.
    assert all(i.startswith("big-a") for i in ids[:3000])
    assert all(i.startswith("small") for i in ids[-50:])
    # Each group's DP mean sits near its own labels (eps_mean = 0.4 on thousands of labels).
    assert abs(parts[0].label_mean - 200.0) < 5.0
    assert abs(parts[1].label_mean - 20.0) < 5.0
    json_header, json_ids, json_noisy = from_json_message(
        segmented.get(
            f"/v1/releases/{meta['id']}/message", headers={**PUB, "Accept": "application/json"}
        ).content
    )
    assert json_header == header and json_ids == ids and np.array_equal(json_noisy, noisy)
    entries = [
        e for e in segmented.get("/v1/ledger", headers=OPS).json()["entries"] if e["release_id"]
    ]
    charged = [(e["kind"], e["epsilon"]) for e in entries]
    assert charged == [("histogram", plan_epsilon1), ("randomizer", plan_epsilon2)]
    groups = entries[1]["parameters"]["params"]["groups"]
    assert [g["n"] for g in groups] == [3000, 2500, 50]
    verify = segmented.get("/v1/ledger/verify", headers=OPS).json()
    assert verify["ok"] is True, verify
    receipt = segmented.get(f"/v1/releases/{meta['id']}/receipt", headers=PUB)
    assert receipt.status_code == 200
    assert json.loads(receipt.text)


def test_one_group_left_is_an_ordinary_release(client: Any) -> None:
    create_dataset(client, "seg", segment_column="campaign")
    ids = [f"e{i}" for i in range(40)]
    assert _register(client, "seg", ids, ["a"] * 20 + ["b"] * 20).status_code == 200
    response = client.post("/v1/datasets/seg/releases", json={"epsilon": 1}, headers=ADV)
    assert response.status_code == 201, response.text
    assert response.json()["mechanism"] != SEGMENTED
    header, _, _ = decode_binary(
        client.get(
            f"/v1/releases/{response.json()['id']}/message",
            headers={**PUB, "Accept": BINARY_MEDIA_TYPE},
        ).content
    )
    assert header.segments is None and header.format_version == 4
