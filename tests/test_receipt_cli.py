"""shared.service.receipt_cli: ``labeldp receipt verify --message`` on a Parquet message directory.

Without Spark (tests/spark_release/test_receipts.py runs the same on the job's real output):
a directory in the job's layout and a receipt signed as the labels party signs one.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from shared.message import MessageHeader, NoisyHistogram, body_sha256
from shared.service import receipt as rc
from tests.commands import labeldp

pa = pytest.importorskip("pyarrow", reason="pyarrow comes with the spark extra")
pq = pytest.importorskip("pyarrow.parquet")


def _message(root: Path) -> MessageHeader:
    """A Parquet message as ``spark_release.job`` writes it (header.json + body/part-*)."""
    ids = [f"e{i:03d}" for i in range(40)]
    labels = np.linspace(0.0, 1.0, 40)
    header = MessageHeader(
        release_id="rel_" + "cd" * 12, dataset="ds", created=datetime.now(UTC),
        mechanism="rr_on_bins", params={"bins": 2}, epsilon1=0.25, epsilon2=0.75,
        label_min=0.0, label_max=1.0, default_label=0.0,
        histogram=NoisyHistogram(edges=[0.0, 0.5, 1.0], probs=[0.5, 0.5]), n=len(ids),
        body_sha256=body_sha256(ids, labels),
    )  # fmt: skip
    (root / "body").mkdir(parents=True)
    for k, chunk in enumerate(np.array_split(np.arange(len(ids)), 2)):
        table = pa.table({"example_id": [ids[i] for i in chunk], "noisy_label": labels[chunk]})
        pq.write_table(table, root / "body" / f"part-{k:05d}-x.snappy.parquet")
    (root / "header.json").write_bytes(header.model_dump_json().encode("utf-8"))
    return header


def test_cli_verifies_a_parquet_directory_and_names_a_changed_header_field(
    tmp_path: Path,
) -> None:
    header = _message(tmp_path / "message")
    key = Ed25519PrivateKey.generate()
    raw_header = (tmp_path / "message" / "header.json").read_bytes()
    receipt = rc.sign(
        {
            "receipt_version": rc.RECEIPT_VERSION,
            "release_id": header.release_id, "dataset": header.dataset, "n": header.n,
            "mechanism": header.mechanism, "epsilon1": "0.25", "epsilon2": "0.75",
            "epsilon": "1", "message_sha256": header.body_sha256,
            "binary_sha256": hashlib.sha256(raw_header).hexdigest(),
            "header": rc.header_json(header), "signed_at": "2025-01-01T00:00:00.000000Z",
        },
        key,
    )  # fmt: skip
    (tmp_path / "receipt.json").write_text(json.dumps(receipt))
    (tmp_path / "labels.pub").write_text(rc.public_pem(key.public_key()))
    args = ["receipt", "verify", str(tmp_path / "receipt.json")]
    args += ["--public-key", str(tmp_path / "labels.pub"), "--message"]
    ok = labeldp(*args, str(tmp_path / "message"))
    assert ok.returncode == 0, ok.stderr
    assert header.release_id in ok.stdout

    changed = json.loads(raw_header)
    changed["params"]["bins"] = 3
    (tmp_path / "message" / "header.json").write_text(json.dumps(changed))
    refused = labeldp(*args, str(tmp_path / "message"))
    assert refused.returncode == 1, refused.stdout
    assert "INVALID" in refused.stderr and "differs from the receipt's in: params" in refused.stderr

    (tmp_path / "message" / "header.json").write_bytes(raw_header)
    assert labeldp(*args, str(tmp_path / "message")).returncode == 0
    (tmp_path / "message" / "header.json").unlink()
    missing = labeldp(*args, str(tmp_path / "message"))
    assert missing.returncode == 1 and "header.json" in missing.stderr, missing.stderr
