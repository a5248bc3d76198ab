"""Receipts of Spark releases: a real Parquet message, its header tampered, refused by name.

Issue 24, item 1 (the Parquet format of "change any one header field of a real message, in each
format") and the CLI's ``labeldp receipt verify --message DIR`` on the directory the job wrote.
"""

from __future__ import annotations

import json
import shutil
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from shared.parquet_message import BODY, HEADER, body_files
from shared.service import receipt as rc
from shared.service.receipt_cli import check_message_file
from spark_release.job import JobConfig, run
from tests.commands import labeldp
from tests.labels_party.test_receipts import HEADER_TAMPERING
from tests.spark_release.conftest import LabelsParty, write_inputs


@pytest.fixture(scope="module")
def published(
    spark: Any, labels_party: LabelsParty, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """One rr_on_bins release run by the Spark job: its message directory, its receipt (as
    served and verified) and the labels party's public key pinned in a PEM file."""
    root = tmp_path_factory.mktemp("spark_receipt")
    ids = [f"click-{i:05d}" for i in range(600)]
    labelled = {i: float(k % 90) for k, i in enumerate(ids) if k % 3}
    examples, labels = write_inputs(root / "in", ids, labelled)
    labels_party.create_dataset("rcpt_spark")
    config = JobConfig(
        dataset="rcpt_spark", labels_url=labels_party.url, token=labels_party.tokens["advertiser"],
        examples=str(examples), labels=str(labels), epsilon=Decimal("1"), out=root / "message",
        seed=3, mechanism="rr_on_bins",
    )  # fmt: skip
    result = run(config, spark=spark)
    with labels_party.client("publisher") as client:
        receipt = client.receipt(result.header.release_id)
        (current,) = [k for k in client.public_keys() if k["status"] == "current"]
    pin = root / "labels.pub"
    pin.write_text(current["public_key_pem"])
    (root / "receipt.json").write_text(json.dumps(receipt))
    body = rc.verify(receipt, rc.load_public_keys(pin))
    return {"out": result.out, "receipt": body, "pin": pin, "receipt_file": root / "receipt.json"}


def _tampered_copy(published: dict[str, Any], where: Path, field: str) -> Path:
    """A copy of the real message directory with one header field changed (body intact)."""
    copy = where / f"tampered_{field}"
    shutil.copytree(published["out"], copy)
    header = json.loads((copy / HEADER).read_text())
    header |= HEADER_TAMPERING[field](header)
    (copy / HEADER).write_text(json.dumps(header))
    return copy


def test_the_real_parquet_message_verifies_against_its_receipt(published: dict[str, Any]) -> None:
    assert published["receipt"]["receipt_version"] == 2
    check_message_file(published["receipt"], published["out"])


@pytest.mark.parametrize("field", sorted(HEADER_TAMPERING))
def test_any_changed_header_field_of_a_parquet_message_fails_and_is_named(
    published: dict[str, Any], tmp_path: Path, field: str
) -> None:
    """The Parquet format of ``test_any_changed_header_field_fails_and_is_named_in_every_format``
    (tests/labels_party/test_receipts.py): header.json of the job's real output changed in one
    field, its body intact, fails verification against the release's receipt, naming it."""
    tampered = _tampered_copy(published, tmp_path, field)
    with pytest.raises(rc.ReceiptError, match=f"differs from the receipt's in: {field}$"):
        check_message_file(published["receipt"], tampered)


def test_cli_verifies_a_parquet_message_directory(
    published: dict[str, Any], tmp_path: Path
) -> None:
    """``labeldp receipt verify --message DIR``: 0 for the job's directory; 1 naming the field
    for a changed header, 1 for a changed body; the same header re-serialized (the whole header
    equal) still fails, since the receipt binds the bytes of header.json too."""
    args = ["receipt", "verify", str(published["receipt_file"]), "--public-key"]
    args.append(str(published["pin"]))
    ok = labeldp(*args, "--message", str(published["out"]))
    assert ok.returncode == 0, ok.stderr
    assert published["receipt"]["release_id"] in ok.stdout

    tampered = _tampered_copy(published, tmp_path, "default_label")
    refused = labeldp(*args, "--message", str(tampered))
    assert refused.returncode == 1, refused.stdout
    assert "INVALID" in refused.stderr and "default_label" in refused.stderr, refused.stderr

    respaced = tmp_path / "respaced"
    shutil.copytree(published["out"], respaced)
    header = json.loads((respaced / HEADER).read_text())
    (respaced / HEADER).write_text(json.dumps(header, indent=2))
    refused = labeldp(*args, "--message", str(respaced))
    assert refused.returncode == 1 and "binary_sha256" in refused.stderr, refused.stderr

    import pyarrow as pa
    import pyarrow.parquet as pq

    changed = tmp_path / "changed_body"
    shutil.copytree(published["out"], changed)
    part = next(p for p in body_files(changed / BODY) if pq.read_table(p).num_rows)
    table = pq.read_table(part)
    labels = table.column("noisy_label").to_pylist()
    labels[0] += 1.0
    pq.write_table(table.set_column(1, "noisy_label", pa.array(labels, pa.float64())), part)
    refused = labeldp(*args, "--message", str(changed))
    assert refused.returncode == 1 and "sha256" in refused.stderr, refused.stderr


def test_the_features_party_names_a_changed_header_of_a_stored_parquet_message(
    published: dict[str, Any], labels_party: LabelsParty, tmp_path: Path
) -> None:
    """The features party with the labels party's key pinned: a Parquet message kept with a
    changed header (its body intact) is refused at the next pull, naming the field."""
    from sqlalchemy import create_engine
    from sqlalchemy.orm import Session

    from features_party.config import Settings
    from features_party.db.models import Base
    from features_party.parquet_message import store_parquet_message
    from features_party.pull import pull_message

    tampered = _tampered_copy(published, tmp_path, "histogram")
    settings = Settings(
        labels_url=labels_party.url, labels_token=labels_party.tokens["publisher"],
        db_path=tmp_path / "f.db", labels_public_key=published["pin"],
    )  # fmt: skip
    engine = create_engine(settings.database_url)
    Base.metadata.create_all(engine)
    release_id = published["receipt"]["release_id"]
    try:
        with Session(engine) as session:
            store_parquet_message(session, tampered)  # body and body sha256 agree: kept
            with pytest.raises(rc.ReceiptError, match="differs from the receipt's in: histogram"):
                pull_message(session, settings, release_id=release_id, dataset="rcpt_spark")
    finally:
        engine.dispose()
