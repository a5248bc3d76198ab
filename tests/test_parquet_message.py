"""shared.parquet_message: the Spark job's message layout, its hashes and its verified read."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shared import parquet_message
from shared.errors import IntegrityError
from shared.message import MessageHeader, NoisyHistogram, body_sha256, universe_digest
from shared.parquet_message import (
    BODY,
    HEADER,
    hash_body_and_universe,
    read_parquet_message,
)


def _write(root: Path, ids: list[str], labels: list[float], *, parts: int = 3) -> MessageHeader:
    (root / BODY).mkdir(parents=True)
    for k, chunk in enumerate(np.array_split(np.arange(len(ids)), parts)):
        table = pa.table(
            {"example_id": [ids[i] for i in chunk], "noisy_label": [labels[i] for i in chunk]}
        )
        pq.write_table(table, root / BODY / f"part-{k:05d}.parquet")
    header = MessageHeader(
        release_id="rel_" + "0" * 24, dataset="d", created=datetime.now(UTC),
        mechanism="rr_on_bins", params={}, epsilon1=0.1, epsilon2=0.9, label_min=0.0,
        label_max=1.0, default_label=0.0,
        histogram=NoisyHistogram(edges=[0.0, 0.5, 1.0], probs=[0.5, 0.5]), n=len(ids),
        body_sha256=body_sha256(sorted(ids), np.array(labels)),
    )  # fmt: skip
    (root / HEADER).write_text(header.model_dump_json())
    return header


def test_the_streamed_hashes_are_the_messages_and_the_read_verifies(tmp_path: Path) -> None:
    ids = [f"e{i:04d}" for i in range(100)]
    labels = list(np.linspace(0, 1, 100))
    header = _write(tmp_path, ids, labels)
    body, universe = hash_body_and_universe(tmp_path / BODY, n=100)
    assert body == header.body_sha256
    assert universe == universe_digest(["\n".join(ids).encode()])
    message = read_parquet_message(tmp_path)
    assert message.header == header and message.example_ids == ids
    np.testing.assert_array_equal(message.noisy_labels, labels)
    with pytest.raises(IntegrityError, match="rows"):
        hash_body_and_universe(tmp_path / BODY, n=99)


@pytest.mark.parametrize("batch_rows", [1, 3, 7, 1 << 18])
def test_the_digests_lag_behind_the_reads_and_still_see_every_batch_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batch_rows: int
) -> None:
    """Many batches (more than the digests may lag), across several part files, with empty
    part files between them: both digests are the message's, byte for byte."""
    monkeypatch.setattr(parquet_message, "HASH_BATCH_ROWS", batch_rows)
    ids = [f"e{i:04d}" for i in range(50)]
    labels = list(np.linspace(-2, 3, 50))
    header = _write(tmp_path, ids, labels, parts=4)
    empty = pa.table(
        {"example_id": pa.array([], pa.string()), "noisy_label": pa.array([], pa.float64())}
    )
    pq.write_table(empty, tmp_path / BODY / "part-00001a.parquet")  # between parts 1 and 2
    body, universe = hash_body_and_universe(tmp_path / BODY, n=50)
    assert body == header.body_sha256
    assert universe == universe_digest(["\n".join(ids).encode()])


def test_a_fault_in_a_late_batch_is_raised_after_the_early_ones_were_hashed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(parquet_message, "HASH_BATCH_ROWS", 2)
    ids = [f"e{i:04d}" for i in range(20)]
    _write(tmp_path, ids[:15] + ids[16:] + ids[15:16], [0.5] * 20, parts=1)  # the end unsorted
    with pytest.raises(IntegrityError, match="sorted"):
        hash_body_and_universe(tmp_path / BODY, n=20)
    _write(tmp_path / "nan", ids, [0.5] * 19 + [float("nan")], parts=2)
    with pytest.raises(IntegrityError, match="non-finite"):
        hash_body_and_universe(tmp_path / "nan" / BODY, n=20)


def test_an_unsorted_body_or_a_missing_header_is_refused(tmp_path: Path) -> None:
    ids = [f"e{i:04d}" for i in range(10)]
    _write(tmp_path / "a", ids[::-1], [0.5] * 10, parts=1)
    with pytest.raises(IntegrityError, match="sorted"):
        read_parquet_message(tmp_path / "a")
    with pytest.raises(IntegrityError, match="sorted"):
        hash_body_and_universe(tmp_path / "a" / BODY, n=10)
    (tmp_path / "b").mkdir()
    with pytest.raises(IntegrityError, match="no header.json"):
        read_parquet_message(tmp_path / "b")
