"""shared.service.receipt: Ed25519 over canonical JSON; every field is covered; key files;
matching."""

from __future__ import annotations

import base64
import copy
import json
import math
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given
from hypothesis import strategies as st

from shared.errors import InvalidParameterError
from shared.service import receipt as rc

PAYLOAD: dict[str, Any] = {
    "receipt_version": 1,
    "dataset": "ds",
    "release_id": "rel_0123456789abcdef01234567",
    "mechanism": "rpwithprior",
    "requested_mechanism": "auto",
    "params": {"a1": 25.0, "a2": 50.0, "zeta": 15.25, "outside": "project"},
    "epsilon1": "0.25",
    "epsilon2": "0.75",
    "epsilon": "1",
    "delta": "0",
    "n": 50,
    "message_sha256": "a" * 64,
    "binary_sha256": "b" * 64,
    "binary_size": 1318,
    "ledger_entries": [
        {"seq": 2, "kind": "histogram", "entry_hash": "c" * 64},
        {"seq": 3, "kind": "randomizer", "entry_hash": "d" * 64},
    ],
    "released_at": "2025-01-01T00:00:00.000000Z",
    "signed_at": "2025-01-01T00:00:01.000000Z",
    "product": "labeldp",
    "product_version": "0.1.0",
}
KEY = Ed25519PrivateKey.generate()
KEYS = {rc.key_id(KEY.public_key()): KEY.public_key()}


def leaves(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every scalar's path in a JSON value."""
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in leaves(v, (*path, k))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in leaves(v, (*path, i))]
    return [path]


def altered(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    return str(value) + "x" if not str(value).endswith("x") else str(value)[:-1] + "y"


def test_a_valid_receipt_verifies_and_names_its_key() -> None:
    signed = rc.sign(PAYLOAD, KEY)
    assert signed["algorithm"] == "ed25519" and signed["key_id"] in KEYS
    assert len(base64.b64decode(signed["signature"])) == 64
    body = rc.verify(json.loads(json.dumps(signed)), KEYS)  # survives a JSON round trip
    assert body == {k: v for k, v in signed.items() if k != "signature"}


@pytest.mark.parametrize("path", leaves(rc.sign(PAYLOAD, KEY)), ids=str)
def test_changing_any_field_breaks_the_signature(path: tuple[Any, ...]) -> None:
    signed = rc.sign(PAYLOAD, KEY)
    tampered = copy.deepcopy(signed)
    target = tampered
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = altered(target[path[-1]])
    with pytest.raises(rc.ReceiptError):
        rc.verify(tampered, KEYS)


def test_added_or_removed_fields_break_the_signature() -> None:
    signed = rc.sign(PAYLOAD, KEY)
    with pytest.raises(rc.ReceiptError, match="signature"):
        rc.verify({**signed, "note": "extra"}, KEYS)
    for name in ("dataset", "ledger_entries", "epsilon"):
        with pytest.raises(rc.ReceiptError, match="signature"):
            rc.verify({k: v for k, v in signed.items() if k != name}, KEYS)


def test_wrong_key_missing_signature_and_garbage_are_refused() -> None:
    signed = rc.sign(PAYLOAD, KEY)
    other = Ed25519PrivateKey.generate().public_key()
    with pytest.raises(rc.ReceiptError, match="not a pinned key"):
        rc.verify(signed, {rc.key_id(other): other})
    # A pinned key listed under the receipt's key id but not its signer still fails.
    with pytest.raises(rc.ReceiptError, match="signature"):
        rc.verify(signed, {signed["key_id"]: other})
    # Re-signed by another key under the same claimed key id: the id is signed, the key is not it.
    forged = rc.sign(PAYLOAD, Ed25519PrivateKey.generate())
    with pytest.raises(rc.ReceiptError):
        rc.verify({**forged, "key_id": signed["key_id"]}, KEYS)
    for bad in ({**signed, "signature": "not base64!"}, {**signed, "signature": 5}, [], "x"):
        with pytest.raises(rc.ReceiptError):
            rc.verify(bad, KEYS)  # type: ignore[arg-type]
    without = {k: v for k, v in signed.items() if k != "signature"}
    with pytest.raises(rc.ReceiptError, match="no signature"):
        rc.verify(without, KEYS)


@given(st.dictionaries(st.text(max_size=8), st.integers() | st.text(max_size=8), max_size=6))
def test_any_payload_round_trips(payload: dict[str, Any]) -> None:
    signed = rc.sign(payload, KEY)
    assert rc.verify(json.loads(json.dumps(signed)), KEYS)["key_id"] == signed["key_id"]


def test_key_files_pem_base64_and_keys_json(tmp_path: Path) -> None:
    public = KEY.public_key()
    other = Ed25519PrivateKey.generate().public_key()
    kid, other_id = rc.key_id(public), rc.key_id(other)
    pem = tmp_path / "k.pem"
    pem.write_text(rc.public_pem(public) + rc.public_pem(other))
    assert set(rc.load_public_keys(pem)) == {kid, other_id}
    raw = tmp_path / "k.b64"
    raw.write_text(rc.public_b64(public) + "\n")
    assert list(rc.load_public_keys(raw)) == [kid]
    doc = tmp_path / "keys.json"
    doc.write_text(json.dumps({"keys": [{"public_key": rc.public_b64(other)}]}))
    assert list(rc.load_public_keys(doc)) == [other_id]
    for text in ("", "not a key", "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"):
        bad = tmp_path / "bad"
        bad.write_text(text)
        with pytest.raises(InvalidParameterError, match="public key"):
            rc.load_public_keys(bad)
    with pytest.raises(InvalidParameterError, match="cannot read"):
        rc.load_public_keys(tmp_path / "missing")


def test_check_matches_names_the_field_that_differs() -> None:
    fields = {
        "release_id": PAYLOAD["release_id"],
        "dataset": "ds",
        "message_sha256": "a" * 64,
        "n": 50,
        "mechanism": "rpwithprior",
        "epsilon1": 0.25,
        "epsilon2": 0.75,
        "binary_sha256": "b" * 64,
    }
    rc.check_matches(PAYLOAD, **fields)
    for name, wrong in (
        ("release_id", "rel_x"),
        ("dataset", "other"),
        ("message_sha256", "e" * 64),
        ("n", 51),
        ("mechanism", "rr_on_bins"),
        ("epsilon1", 0.5),
        ("epsilon2", 0.7),
        ("binary_sha256", "f" * 64),
    ):
        with pytest.raises(rc.ReceiptError, match=name):
            rc.check_matches(PAYLOAD, **{**fields, name: wrong})
    # The header's float is the largest float not above the exact charge.
    third = {**PAYLOAD, "epsilon1": "0.1"}
    below = math.nextafter(0.1, 0.0)  # float(0.1) is above the decimal 0.1
    rc.check_matches(third, **{**fields, "epsilon1": below})
    with pytest.raises(rc.ReceiptError, match="epsilon1"):
        rc.check_matches(third, **{**fields, "epsilon1": 0.1})


def test_pem_validity_lines_are_read_checked_and_normalized(tmp_path: Path) -> None:
    """``Created:`` / ``Retired:`` above a PEM block date its key (``labeldp keys public``); a
    time in another form is refused, a Key-Id over another key too; a bare block has no dates."""
    first, second = (Ed25519PrivateKey.generate().public_key() for _ in range(2))
    pin = tmp_path / "pin.pem"
    pin.write_text(
        rc.pem_with_validity(first, "2025-01-01T00:00:00Z", "2025-06-01T00:00:00.5Z")
        + rc.public_pem(second)
    )
    assert set(rc.load_public_keys(pin)) == {rc.key_id(first), rc.key_id(second)}
    assert rc.load_key_validity(pin) == {
        rc.key_id(first): ("2025-01-01T00:00:00.000000Z", "2025-06-01T00:00:00.500000Z")
    }
    for bad, match in (
        (rc.pem_with_validity(first, "1 Jan 2025", None), "Created of key"),
        (rc.pem_with_validity(first, None, "2025-06-01T00:00:00+02:00"), "Retired of key"),
        (f"Key-Id: {rc.key_id(second)}\n" + rc.public_pem(first), "Key-Id"),
        ("Retired: 2025-01-01T00:00:00Z\n" + rc.pem_with_validity(first, "2024-01-01T00:00:00Z",
         "2030-01-01T00:00:00Z"), "Retired is stated twice"),
        ("Created: 2000-01-01T00:00:00Z\n" + rc.pem_with_validity(first, "2024-01-01T00:00:00Z",
         None), "Created is stated twice"),
    ):  # fmt: skip
        pin.write_text(bad)
        with pytest.raises(InvalidParameterError, match=match):
            rc.load_key_validity(pin)


def test_required_dates_refuse_a_key_the_pin_gives_none() -> None:
    """Issue 24, item 4: with ``require_dates`` a receipt whose key the pin gives no validity (a
    bare PEM block, base64 lines) is refused naming the key, not trusted at any date; a dated
    key verifies inside its validity and fails outside it; without it nothing changes."""
    signed = rc.sign(PAYLOAD, KEY)
    kid = signed["key_id"]
    for validity in (None, {}, {kid: (None, None)}):
        with pytest.raises(rc.UndatedKeyError, match=f"key {kid}.*no validity"):
            rc.verify(signed, KEYS, validity=validity, require_dates=True)
        assert rc.verify(signed, KEYS, validity=validity)["key_id"] == kid
    dated = {kid: ("2024-12-31T00:00:00.000000Z", None)}
    assert rc.verify(signed, KEYS, validity=dated, require_dates=True)["key_id"] == kid
    late = {kid: ("2025-01-02T00:00:00.000000Z", None)}
    with pytest.raises(rc.ReceiptError, match="outside key"):
        rc.verify(signed, KEYS, validity=late, require_dates=True)
    # The signature is checked first: a forged receipt is reported as such, not as undated.
    with pytest.raises(rc.ReceiptError, match="signature"):
        rc.verify({**signed, "epsilon": "2"}, KEYS, require_dates=True)


def test_an_operators_window_narrows_every_key() -> None:
    """``within_window``: the later start and the earlier end of the pin's dates and the stated
    window; an undated key takes the window's; ``utc_time`` normalizes or refuses a time."""
    first, second = (Ed25519PrivateKey.generate().public_key() for _ in range(2))
    keys = {rc.key_id(k): k for k in (first, second)}
    a, b = keys
    pinned = {a: ("2025-01-01T00:00:00.000000Z", "2025-06-01T00:00:00.000000Z")}
    start, end = "2025-02-01T00:00:00.000000Z", "2025-09-01T00:00:00.000000Z"
    assert rc.within_window(keys, pinned, start, end) == {
        a: (start, "2025-06-01T00:00:00.000000Z"),
        b: (start, end),
    }
    assert rc.within_window(keys, pinned, None, None) == {**pinned, b: (None, None)}
    assert rc.utc_time("2025-02-01T00:00:00Z", "x") == start
    with pytest.raises(InvalidParameterError, match="--valid-from must be a UTC time"):
        rc.utc_time("2025-02-01", "--valid-from")
