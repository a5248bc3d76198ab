"""Stored messages: chunked storage equals ``encode_binary``; JSON rendering across chunks."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from labels_party.releasing import releases
from shared.message import BINARY_MEDIA_TYPE, decode_binary, encode_binary, from_json_message
from tests.labels_party.conftest import ADV, PUB, create_dataset, put_labels, register, release


@pytest.mark.parametrize("chunk_bytes", [8, 64, 1000, 1 << 20])
def test_tiny_chunks_round_trip_in_both_encodings(make_client, monkeypatch, chunk_bytes):
    monkeypatch.setattr(releases, "CHUNK_BYTES", chunk_bytes)
    client = make_client()
    create_dataset(client)
    ids = [f"id-{i}" * (1 + i % 3) for i in range(257)]
    register(client, "ds", ids)
    put_labels(client, "ds", [(i, float(k)) for k, i in enumerate(ids)])
    meta = release(client, "ds").json()
    url = f"/v1/releases/{meta['id']}/message"
    binary = client.get(url, headers={**PUB, "accept": BINARY_MEDIA_TYPE}).content
    header, got_ids, labels = decode_binary(binary)
    assert got_ids == sorted(ids)
    assert binary == b"".join(encode_binary(header, got_ids, labels))
    j_header, j_ids, j_labels = from_json_message(client.get(url, headers=ADV).content)
    assert j_header == header and j_ids == got_ids
    np.testing.assert_array_equal(j_labels, labels)


def test_a_snapshot_read_in_many_pieces_stores_the_message_of_the_joined_ids(
    make_client, monkeypatch
):
    """The release reads its universe a few rows at a time and encodes it piece by piece: the
    stored message is still ``encode_binary`` of the sorted ids, unlabelled ones at default."""
    monkeypatch.setattr(releases, "_FETCH_ROWS", 7)
    monkeypatch.setattr(releases, "CHUNK_BYTES", 40)
    seen: list[np.ndarray] = []

    def capture(plan, labels, rng):
        seen.append(np.array(labels, copy=True))
        return releases.execute(plan, labels, rng)

    client = make_client(randomizer=capture)
    create_dataset(client, default_label=3.5)
    ids = [f"e{i:03d}" for i in range(100)]
    register(client, "ds", ids)
    put_labels(client, "ds", [(i, float(k)) for k, i in enumerate(ids) if k % 3 == 0])
    meta = release(client, "ds").json()
    url = f"/v1/releases/{meta['id']}/message"
    binary = client.get(url, headers={**PUB, "accept": BINARY_MEDIA_TYPE}).content
    header, got_ids, labels = decode_binary(binary)
    assert got_ids == ids and len(binary) == meta["binary_size"]
    assert hashlib.sha256(binary).hexdigest() == meta["binary_sha256"]
    assert binary == b"".join(encode_binary(header, got_ids, labels))
    expected = [float(k) if k % 3 == 0 else 3.5 for k in range(100)]
    np.testing.assert_array_equal(seen[0], expected)


def test_single_example_release(client):
    create_dataset(client)
    register(client, "ds", ["only"])
    meta = release(client, "ds").json()
    header, ids, labels = from_json_message(
        client.get(f"/v1/releases/{meta['id']}/message", headers=PUB).content
    )
    assert ids == ["only"] and labels.shape == (1,) and header.n == 1
