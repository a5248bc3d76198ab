"""The Parquet message (a Spark job's output): read, verified, refused when tampered, stored."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import create_engine
from sqlalchemy.orm import Session

pa = pytest.importorskip("pyarrow", reason="pyarrow comes with the spark extra")
pq = pytest.importorskip("pyarrow.parquet")

from features_party.db.models import Base  # noqa: E402
from features_party.parquet_message import read_parquet_message, store_parquet_message  # noqa: E402
from features_party.pull import load_stored  # noqa: E402
from shared.errors import IntegrityError  # noqa: E402
from shared.message import MessageHeader, NoisyHistogram, body_sha256  # noqa: E402


def _write(root: Path, ids: list[str], labels: np.ndarray, *, parts: int = 3) -> MessageHeader:
    header = MessageHeader(
        release_id="rel_" + "ab" * 12, dataset="ds", created=datetime.now(UTC),
        mechanism="rr_on_bins", params={}, epsilon1=0.1, epsilon2=0.9, label_min=0.0,
        label_max=1.0, default_label=0.0,
        histogram=NoisyHistogram(edges=[0.0, 0.5, 1.0], probs=[0.5, 0.5]), n=len(ids),
        body_sha256=body_sha256(ids, labels),
    )  # fmt: skip
    (root / "body").mkdir(parents=True)
    for k, chunk in enumerate(np.array_split(np.arange(len(ids)), parts)):
        table = pa.table({"example_id": [ids[i] for i in chunk], "noisy_label": labels[chunk]})
        pq.write_table(table, root / "body" / f"part-{k:05d}-x.snappy.parquet")
    (root / "header.json").write_text(header.model_dump_json())
    return header


def test_reads_and_verifies_a_parquet_message(tmp_path: Path) -> None:
    ids = [f"e{i:04d}" for i in range(100)]
    labels = np.random.default_rng(0).random(100)
    header = _write(tmp_path, ids, labels)
    got_header, got_ids, got = read_parquet_message(tmp_path)
    assert got_header == header and got_ids == ids and got.tobytes() == labels.tobytes()


@pytest.mark.parametrize("tamper", ["label", "order", "header_n", "no_header"])
def test_a_tampered_parquet_message_is_refused(tmp_path: Path, tamper: str) -> None:
    ids = [f"e{i:04d}" for i in range(50)]
    labels = np.random.default_rng(1).random(50)
    _write(tmp_path, ids, labels)
    if tamper == "label":
        labels = labels.copy()
        labels[3] += 1.0
        pq.write_table(pa.table({"example_id": ids[:17], "noisy_label": labels[:17]}),
                       tmp_path / "body" / "part-00000-x.snappy.parquet")  # fmt: skip
    elif tamper == "order":
        swapped = ids[:17]
        swapped[0], swapped[1] = swapped[1], swapped[0]
        pq.write_table(pa.table({"example_id": swapped, "noisy_label": labels[:17]}),
                       tmp_path / "body" / "part-00000-x.snappy.parquet")  # fmt: skip
    elif tamper == "header_n":
        raw = json.loads((tmp_path / "header.json").read_text())
        raw["n"] = 49
        (tmp_path / "header.json").write_text(json.dumps(raw))
    else:
        (tmp_path / "header.json").unlink()
    with pytest.raises(IntegrityError):
        read_parquet_message(tmp_path)


def test_stored_parquet_message_loads_like_a_pulled_one(tmp_path: Path) -> None:
    ids = [f"e{i:04d}" for i in range(30)]
    labels = np.random.default_rng(2).random(30)
    header = _write(tmp_path / "msg", ids, labels)
    engine = create_engine(f"sqlite:///{tmp_path / 'f.db'}")
    Base.metadata.create_all(engine)
    with Session(engine) as session:
        store_parquet_message(session, tmp_path / "msg")
        stored = load_stored(session, header.release_id)
    assert stored is not None
    assert stored[0] == header and stored[1] == ids and stored[2].tobytes() == labels.tobytes()
    engine.dispose()
