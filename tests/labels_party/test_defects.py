"""Regression tests for the defects a new user hit (issue 13), through the real app or CLI."""

from __future__ import annotations

from tests.labels_party.conftest import PUB, create_dataset


def test_crlf_example_ids_across_chunk_boundaries(client):
    """Defect 1: the ``\\r`` of a chunk's last CRLF line was kept, so that id was refused."""
    create_dataset(client)
    body = b"".join(f"ex{i}\r\n".encode() for i in range(200_000))

    def chunks():  # odd-sized pieces: every boundary cuts a different place of a line
        for start in range(0, len(body), 65_531):
            yield body[start : start + 65_531]

    for content in (body, chunks()):
        response = client.post(
            "/v1/datasets/ds/examples",
            content=content,
            headers={**PUB, "content-type": "text/plain"},
        )
        assert response.status_code == 200, response.text[:500]
        assert response.json()["n_examples"] == 200_000
