"""shared.service.receipt_cli: ``labeldp receipt verify`` on a Parquet message directory, and
the receipt's date checked whatever the key file (issue 24, item 4).

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
    (tmp_path / "labels.pub").write_text(
        rc.pem_with_validity(key.public_key(), "2024-12-01T00:00:00Z", None)
    )
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


def _signed(tmp_path: Path, signed_at: str) -> tuple[Path, Ed25519PrivateKey]:
    """A receipt file signed at ``signed_at`` by a new key."""
    key = Ed25519PrivateKey.generate()
    receipt = rc.sign(
        {"receipt_version": rc.RECEIPT_VERSION, "release_id": "rel_" + "ef" * 12,
         "dataset": "ds", "epsilon": "1", "signed_at": signed_at},
        key,
    )  # fmt: skip
    path = tmp_path / "receipt.json"
    path.write_text(json.dumps(receipt))
    return path, key


def test_cli_checks_the_date_even_with_a_pin_that_states_none(tmp_path: Path) -> None:
    """Issue 24, item 4: a key file that gives the signing key no dates (a bare PEM block, base64
    lines) no longer verifies a receipt silently at any date. Exit 1 ``UNCHECKED`` naming the key
    and the ways out; ``--valid-from`` / ``--valid-until`` state the window (0 inside, 1 outside);
    ``--no-date-check`` accepts it with a WARNING line; bad or contradictory options exit 2."""
    receipt, key = _signed(tmp_path, "2025-03-01T00:00:00.000000Z")
    kid = rc.key_id(key.public_key())
    bare, base64_lines = tmp_path / "bare.pem", tmp_path / "key.b64"
    bare.write_text(rc.public_pem(key.public_key()))
    base64_lines.write_text(rc.public_b64(key.public_key()) + "\n")
    for pin in (bare, base64_lines):
        args = ["receipt", "verify", str(receipt), "--public-key", str(pin)]
        unchecked = labeldp(*args)
        assert unchecked.returncode == 1, unchecked.stdout
        assert unchecked.stderr.startswith("UNCHECKED:") and kid in unchecked.stderr
        for hint in ("labeldp keys public", "--valid-from", "--no-date-check"):
            assert hint in unchecked.stderr, unchecked.stderr
        assert "OK" not in unchecked.stdout

        waived = labeldp(*args, "--no-date-check")
        assert waived.returncode == 0, waived.stderr
        assert waived.stderr.startswith("WARNING:") and "was not checked" in waived.stderr
        assert "date not checked" in waived.stdout

        inside = labeldp(*args, "--valid-from", "2025-01-01T00:00:00Z")
        assert inside.returncode == 0 and "inside its validity" in inside.stdout, inside.stderr
        window = ["--valid-from", "2025-01-01T00:00:00Z", "--valid-until", "2025-04-01T00:00:00Z"]
        assert labeldp(*args, *window).returncode == 0
        for outside in (
            ["--valid-from", "2025-03-01T00:00:00.000001Z"],
            ["--valid-until", "2025-03-01T00:00:00Z"],  # the end is exclusive, like a retirement
        ):
            refused = labeldp(*args, *outside)
            assert refused.returncode == 1, refused.stdout
            assert "INVALID" in refused.stderr and f"outside key {kid}" in refused.stderr

        for bad, said in (
            (["--valid-from", "March 2025"], "--valid-from must be a UTC time"),
            (["--valid-until", "2025-01-01T00:00:00Z", "--valid-from", "2025-02-01T00:00:00Z"],
             "is not before"),
            (["--no-date-check", "--valid-until", "2025-04-01T00:00:00Z"], "contradicts"),
        ):  # fmt: skip
            unusable = labeldp(*args, *bad)
            assert unusable.returncode == 2 and said in unusable.stderr, unusable.stderr


def test_cli_a_window_narrows_the_dates_a_pin_states(tmp_path: Path) -> None:
    """A key file's own dates always hold (``--no-date-check`` waives nothing it states); a
    stated window can only narrow them."""
    receipt, key = _signed(tmp_path, "2025-03-01T00:00:00.000000Z")
    pin = tmp_path / "labels.pub"
    pin.write_text(rc.pem_with_validity(key.public_key(), "2025-01-01T00:00:00Z", None))
    args = ["receipt", "verify", str(receipt), "--public-key", str(pin)]
    ok = labeldp(*args)
    assert ok.returncode == 0 and ok.stderr == "", ok.stderr
    assert "signed at 2025-03-01T00:00:00.000000Z, inside its validity" in ok.stdout
    assert labeldp(*args, "--valid-from", "2024-01-01T00:00:00Z").returncode == 0
    assert labeldp(*args, "--valid-until", "2025-02-01T00:00:00Z").returncode == 1
    pin.write_text(rc.pem_with_validity(key.public_key(), "2025-04-01T00:00:00Z", None))
    for extra in ([], ["--no-date-check"], ["--valid-from", "2024-01-01T00:00:00Z"]):
        refused = labeldp(*args, *extra)
        assert refused.returncode == 1 and "outside key" in refused.stderr, refused.stderr


# ---- pins and receipt files written adversarially (found by a review of the receipt door) ---


def _pin_json(path: Path, key: Ed25519PrivateKey, created: object, retired: object) -> Path:
    entry = {"public_key": rc.public_b64(key.public_key()), "created": created, "retired": retired}
    path.write_text(json.dumps({"keys": [entry]}))
    return path


def _receipt_at(key: Ed25519PrivateKey, signed_at: str) -> dict[str, object]:
    return rc.sign({"receipt_version": 2, "release_id": "rel_" + "ab" * 12, "dataset": "ds",
                    "epsilon": "1", "signed_at": signed_at}, key)  # fmt: skip


@pytest.mark.parametrize(
    "retired",
    ["2025-06-01T02:00:00+02:00", "2025-2-1T00:00:00Z", "2025-06-01", 20250601, ["2025"]],
)
def test_a_json_pins_dates_are_read_as_utc_times_or_refused(tmp_path: Path, retired) -> None:
    """A JSON pin's dates were compared as written: retired "2025-06-01T02:00:00+02:00" (the
    same instant as 00:00Z) accepted a receipt signed at 01:30Z, an unpadded month a whole year
    more, and a number crashed the command. They are now normalized as a PEM pin's are, or the
    pin is refused (exit 2) naming the key."""
    key = Ed25519PrivateKey.generate()
    pin = _pin_json(tmp_path / "keys.json", key, "2025-01-01T00:00:00.000000Z", retired)
    receipt = tmp_path / "receipt.json"
    receipt.write_text(json.dumps(_receipt_at(key, "2025-06-01T01:30:00.000000Z")))
    done = labeldp("receipt", "verify", str(receipt), "--public-key", str(pin))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and rc.key_id(key.public_key()) in done.stderr
    within = tmp_path / "within.json"
    within.write_text(json.dumps(_receipt_at(key, "2025-01-15T00:00:00.000000Z")))
    normal = _pin_json(tmp_path / "ok.json", key, "2025-01-01T00:00:00Z", "2025-02-01T00:00:00Z")
    ok = labeldp("receipt", "verify", str(within), "--public-key", str(normal))
    late = labeldp("receipt", "verify", str(receipt), "--public-key", str(normal))
    assert ok.returncode == 0 and late.returncode == 1, ok.stderr + late.stderr


def test_a_receipt_file_repeating_a_key_is_refused(tmp_path: Path) -> None:
    """json.loads keeps the last of repeated keys (the signed value), a reader keeping the first
    would show forged ones: the command refuses such a file (exit 2) naming the key."""
    key = Ed25519PrivateKey.generate()
    pin = _pin_json(tmp_path / "keys.json", key, "2025-01-01T00:00:00.000000Z", None)
    signed = json.dumps(_receipt_at(key, "2025-03-01T00:00:00.000000Z"))
    receipt = tmp_path / "receipt.json"
    receipt.write_text('{"epsilon": "0.001", "dataset": "other", ' + signed[1:])
    done = labeldp("receipt", "verify", str(receipt), "--public-key", str(pin))
    assert done.returncode == 2 and "more than once" in done.stderr, done.stdout + done.stderr
    receipt.write_text(signed)
    assert labeldp("receipt", "verify", str(receipt), "--public-key", str(pin)).returncode == 0


def test_a_pin_stating_one_key_twice_with_other_dates_is_refused(tmp_path: Path) -> None:
    key = Ed25519PrivateKey.generate()
    entry = {"public_key": rc.public_b64(key.public_key()), "created": "2025-01-01T00:00:00Z"}
    pin = tmp_path / "keys.json"
    pin.write_text(json.dumps({"keys": [entry, {**entry, "retired": "2025-02-01T00:00:00Z"}]}))
    with pytest.raises(rc.InvalidParameterError, match="stated twice"):
        rc.load_key_validity(pin)


def test_impossible_dates_and_unreadable_receipts_are_one_line_naming_them(
    tmp_path: Path,
) -> None:
    """Found by the CLI audit: a date of the right shape but no such day (2025-02-30) was
    refused in the parser's words alone (or a traceback at the features party's start), and an
    empty, non-UTF-8 or BOM receipt file was not named."""
    receipt, key = _signed(tmp_path, "2025-03-01T00:00:00.000000Z")
    pin = tmp_path / "labels.pub"
    pin.write_text(rc.pem_with_validity(key.public_key(), "2025-01-01T00:00:00Z", None))
    args = ["receipt", "verify", str(receipt), "--public-key", str(pin)]
    for option, value in (
        ("--valid-from", "2025-02-30T00:00:00Z"),
        ("--valid-until", "2025-13-01T00:00:00Z"),
    ):
        done = labeldp(*args, option, value)
        assert done.returncode == 2
        assert done.stderr.startswith(f"labeldp receipt verify: {option} must be a UTC time"), (
            done.stderr
        )
    feb30 = tmp_path / "feb30.pub"
    feb30.write_text(pin.read_text().replace("2025-01-01", "2025-02-30"))
    done = labeldp("receipt", "verify", str(receipt), "--public-key", str(feb30))
    assert done.returncode == 2 and f"public key file {feb30}: Created of key" in done.stderr
    for name, data in (("empty", b""), ("utf16", b"\xff\xfe{}"), ("bom", b"\xef\xbb\xbf{}")):
        bad = tmp_path / f"{name}.json"
        bad.write_bytes(data)
        done = labeldp("receipt", "verify", str(bad), "--public-key", str(pin))
        assert done.returncode == 2
        assert done.stderr.startswith(f"labeldp receipt verify: {bad}: not a JSON receipt"), (
            done.stderr
        )
    missing = tmp_path / "missing.json"
    done = labeldp("receipt", "verify", str(missing), "--public-key", str(pin))
    assert done.stderr == f"labeldp receipt verify: {missing}: No such file or directory\n"
