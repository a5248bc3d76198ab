"""Signed release receipts: Ed25519 signatures over canonical JSON, and their verification.

A receipt is the labels party's signed statement of what one release is and what it cost: the
dataset, the release id, the mechanism and its public parameters, the exact charges (epsilon1,
epsilon2, their sum, delta), n, the message's body sha256 and binary sha256, the hashes of the
ledger entries that paid for it, the product version and the times. The signed bytes are the
canonical JSON (sorted keys, no spaces, ASCII, Python's shortest round-trip floats) of every
field but ``signature``; ``key_id`` (the first 16 hex digits of the sha256 of the raw 32-byte
public key) is itself signed, so a receipt cannot be re-attributed to another key.

Ed25519 (RFC 8032) through the ``cryptography`` package: deterministic signatures, 32-byte keys.
A receipt proves who said it and that nothing was changed since; it says nothing about privacy
that the ledger does not (it is checked against the message, not instead of it).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from shared import epsilon as amounts
from shared.errors import IntegrityError, InvalidParameterError
from shared.service import strict_input

if TYPE_CHECKING:
    from shared.message import MessageHeader

ALGORITHM = "ed25519"
# Version 2 adds ``header``: the message's whole header, compared field by field on verify.
RECEIPT_VERSION = 2
PEM_BEGIN = "-----BEGIN PUBLIC KEY-----"
PEM_END = "-----END PUBLIC KEY-----"
# RFC 7468 explanatory text right above a PEM block: ``Created:`` / ``Retired:`` (the key's
# validity, as ``GET /v1/keys`` states it) and ``Key-Id:``, as ``labeldp keys public`` prints.
_PEM_WITH_TEXT = re.compile(
    r"((?:^[A-Za-z][A-Za-z-]*:[^\n]*\n)*)(" + PEM_BEGIN + r".*?" + PEM_END + r")",
    re.MULTILINE | re.DOTALL,
)
_TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?Z$")


class ReceiptError(IntegrityError):
    """A receipt whose signature, key or content does not check out."""


class UndatedKeyError(ReceiptError):
    """A receipt whose signature verifies under a key the pin states no validity for, so its date
    could not be checked (raised only when dates are required)."""


def canonical(payload: Mapping[str, Any]) -> bytes:
    """The bytes a receipt's signature covers (sorted keys, no spaces, no NaN / infinity)."""
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def raw_public(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def key_id(key: Ed25519PublicKey) -> str:
    """The id a receipt names its key by: sha256 of the raw public key, first 16 hex digits."""
    return hashlib.sha256(raw_public(key)).hexdigest()[:16]


def public_pem(key: Ed25519PublicKey) -> str:
    return key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode("ascii")


def public_b64(key: Ed25519PublicKey) -> str:
    return base64.b64encode(raw_public(key)).decode("ascii")


def sign(payload: Mapping[str, Any], private_key: Ed25519PrivateKey) -> dict[str, Any]:
    """``payload`` with ``algorithm``, ``key_id`` and its base64 ``signature`` added."""
    body = {**payload, "algorithm": ALGORITHM, "key_id": key_id(private_key.public_key())}
    body.pop("signature", None)
    signature = private_key.sign(canonical(body))
    return {**body, "signature": base64.b64encode(signature).decode("ascii")}


def verify(
    receipt: Mapping[str, Any],
    keys: Mapping[str, Ed25519PublicKey],
    *,
    validity: Mapping[str, tuple[str | None, str | None]] | None = None,
    require_dates: bool = False,
) -> dict[str, Any]:
    """The receipt without its signature if it verifies under one of ``keys`` (by key id).

    ``validity``: (created, retired) of keys by id (:func:`load_key_validity`); a receipt whose
    ``signed_at`` lies outside its key's period does not verify (a retired key signs nothing
    dated after its retirement). ``require_dates``: a key ``validity`` gives no date (a bare
    PEM block, base64 lines) is refused (:class:`UndatedKeyError`) instead of trusted at any
    date. Raises :class:`ReceiptError` naming what failed: the shape, an unknown key, the
    signature, the date.
    """
    if not isinstance(receipt, Mapping):
        raise ReceiptError("a receipt must be a JSON object")
    body = {key: value for key, value in receipt.items() if key != "signature"}
    signature = receipt.get("signature")
    if not isinstance(signature, str):
        raise ReceiptError("the receipt has no signature")
    if body.get("algorithm") != ALGORITHM:
        raise ReceiptError(f"the receipt's algorithm is not {ALGORITHM}")
    kid = body.get("key_id")
    key = keys.get(kid) if isinstance(kid, str) else None
    if key is None:
        raise ReceiptError(f"the receipt is signed by key {kid!r}, which is not a pinned key")
    try:
        raw_signature = base64.b64decode(signature, validate=True)
        key.verify(raw_signature, canonical(body))
    except (InvalidSignature, binascii.Error, ValueError):
        raise ReceiptError("the receipt's signature does not verify") from None
    created, retired = (validity or {}).get(kid, (None, None))
    if require_dates and created is None and retired is None:
        raise UndatedKeyError(
            f"the receipt's signature verifies under key {kid}, but the pin states no validity "
            f"for that key, so its date (signed_at {body.get('signed_at')}) cannot be checked: "
            "pin the output of `labeldp keys public --all` or the JSON of GET /v1/keys"
        )
    if created is not None or retired is not None:
        signed_at = body.get("signed_at")
        if not isinstance(signed_at, str):
            raise ReceiptError("the receipt states no signed_at")
        if (created is not None and signed_at < created) or (
            retired is not None and signed_at >= retired
        ):
            raise ReceiptError(
                f"the receipt was signed at {signed_at}, outside key {kid}'s validity "
                f"({created} to {retired or 'now'})"
            )
    return body


def load_public_keys(path: str | Path) -> dict[str, Ed25519PublicKey]:
    """The Ed25519 public keys in a file, by key id.

    Accepted: PEM ``PUBLIC KEY`` blocks (several pin several keys), lines of base64 raw 32-byte
    keys, or the JSON of ``GET /v1/keys``. Raises :class:`InvalidParameterError` otherwise.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidParameterError(f"cannot read public key file {path}: {exc}") from None
    keys: list[Ed25519PublicKey] = []
    try:
        if text.lstrip().startswith("{"):
            keys = [from_b64(item["public_key"]) for item in json.loads(text)["keys"]]
        elif PEM_BEGIN in text:
            for block in text.split(PEM_BEGIN)[1:]:
                block = block.split(PEM_END)[0] + PEM_END + "\n"  # not the next key's text
                key = serialization.load_pem_public_key((PEM_BEGIN + block).encode("ascii"))
                if not isinstance(key, Ed25519PublicKey):
                    raise ValueError("not an Ed25519 key")
                keys.append(key)
        else:
            keys = [from_b64(line.strip()) for line in text.splitlines() if line.strip()]
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidParameterError(
            f"public key file {path} holds no valid Ed25519 public key ({exc})"
        ) from None
    if not keys:
        raise InvalidParameterError(f"public key file {path} holds no public key")
    return {key_id(key): key for key in keys}


def load_key_validity(path: str | Path) -> dict[str, tuple[str | None, str | None]]:
    """(created, retired) of each key by id, where the key file states them: the JSON of
    ``GET /v1/keys``, or a PEM file whose blocks carry ``Created:`` / ``Retired:`` lines above
    them (:func:`pem_with_validity`, ``labeldp keys public``). A key stated without dates (a
    bare PEM block, base64 lines) is absent: no date check for it."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidParameterError(f"cannot read public key file {path}: {exc}") from None
    if PEM_BEGIN in text and not text.lstrip().startswith("{"):
        return _pem_validity(text, path)
    if not text.lstrip().startswith("{"):
        return {}
    out: dict[str, tuple[str | None, str | None]] = {}
    try:
        for item in strict_input.loads(text)["keys"]:
            kid = key_id(from_b64(item["public_key"]))
            dates = (
                _json_time(item.get("created"), "created", kid, path),
                _json_time(item.get("retired"), "retired", kid, path),
            )
            _add_validity(out, kid, dates, path)
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidParameterError(f"public key file {path}: {exc}") from None
    return out


def _json_time(value: object, name: str, kid: str, path: str | Path) -> str | None:
    """A JSON pin's stated time, normalized (:func:`utc_time`) as a PEM pin's is: compared as
    written, ``2025-06-01T02:00:00+02:00`` or ``2025-2-1T00:00:00Z`` misordered dates."""
    if value is not None and not isinstance(value, str):
        raise InvalidParameterError(f"{name} of key {kid} must be a UTC time string")
    return _utc_time(value, name, kid, path)


def _add_validity(
    out: dict[str, tuple[str | None, str | None]],
    kid: str,
    dates: tuple[str | None, str | None],
    path: str | Path,
) -> None:
    """Record a key's dates; the same key stated twice with other dates is refused (which would
    hold?)."""
    if out.get(kid, dates) != dates:
        raise InvalidParameterError(f"public key file {path}: key {kid} is stated twice")
    out[kid] = dates


def pem_with_validity(key: Ed25519PublicKey, created: str | None, retired: str | None) -> str:
    """A PEM public key with its id and validity as RFC 7468 explanatory text above the block,
    the pin file format :func:`load_key_validity` reads dates from."""
    lines = [f"Key-Id: {key_id(key)}"]
    lines += [f"{name}: {value}" for name, value in (("Created", created), ("Retired", retired))
              if value is not None]  # fmt: skip
    return "\n".join(lines) + "\n" + public_pem(key)


def _pem_validity(text: str, path: str | Path) -> dict[str, tuple[str | None, str | None]]:
    """The dates above each PEM block (``Created:``, ``Retired:``), checked, by key id."""
    out: dict[str, tuple[str | None, str | None]] = {}
    for match in _PEM_WITH_TEXT.finditer(text):
        fields: dict[str, str] = {}
        for line in match.group(1).splitlines():
            name, _, value = line.partition(":")
            if name.strip().lower() in fields:  # which one would hold? neither
                raise InvalidParameterError(
                    f"public key file {path}: {name.strip()} is stated twice above one key"
                )
            fields[name.strip().lower()] = value.strip()
        try:
            key = serialization.load_pem_public_key(match.group(2).encode("ascii"))
        except ValueError as exc:
            raise InvalidParameterError(f"public key file {path}: {exc}") from None
        if not isinstance(key, Ed25519PublicKey):
            raise InvalidParameterError(f"public key file {path}: not an Ed25519 key")
        kid = key_id(key)
        if fields.get("key-id", kid) != kid:
            raise InvalidParameterError(
                f"public key file {path}: Key-Id {fields['key-id']} is above key {kid}"
            )
        created, retired = (
            _utc_time(fields.get(name.lower()), name, kid, path) for name in ("Created", "Retired")
        )
        if created is not None or retired is not None:
            _add_validity(out, kid, (created, retired), path)
    return out


def _utc_time(value: str | None, name: str, kid: str, path: str | Path) -> str | None:
    """A PEM pin's stated time, normalized (:func:`utc_time`)."""
    return (
        None if value is None else utc_time(value, f"public key file {path}: {name} of key {kid}")
    )


def utc_time(value: str, what: str) -> str:
    """A stated time in the form receipts date themselves (``signed_at``: microseconds, Z), so
    that the string comparison of :func:`verify` orders them; InvalidParameterError naming
    ``what`` if it is not a UTC time."""
    problem = f"{what} must be a UTC time like 2025-01-31T12:00:00.000000Z, not {value!r}"
    if not _TIMESTAMP.match(value):
        raise InvalidParameterError(problem)
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:  # the right shape, no such moment: 2025-02-30 (a CLI audit)
        raise InvalidParameterError(f"{problem} ({exc})") from None
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


def within_window(
    keys: Mapping[str, Ed25519PublicKey],
    validity: Mapping[str, tuple[str | None, str | None]],
    valid_from: str | None,
    valid_until: str | None,
) -> dict[str, tuple[str | None, str | None]]:
    """Every key's validity narrowed to the window an operator states (``labeldp receipt verify
    --valid-from / --valid-until``, times as :func:`utc_time` returns them): the later start and
    the earlier end of the pin's dates (if any) and the window's, so a key the pin gives no
    dates gets the window's."""
    out: dict[str, tuple[str | None, str | None]] = {}
    for kid in keys:
        created, retired = validity.get(kid, (None, None))
        starts = [t for t in (created, valid_from) if t is not None]
        ends = [t for t in (retired, valid_until) if t is not None]
        out[kid] = (max(starts) if starts else None, min(ends) if ends else None)
    return out


def from_b64(text: str) -> Ed25519PublicKey:
    """An Ed25519 public key from the base64 of its raw 32 bytes."""
    raw = base64.b64decode(text, validate=True)
    return Ed25519PublicKey.from_public_bytes(raw)


def header_json(header: MessageHeader) -> dict[str, Any]:
    """A message header as a receipt states it: its JSON object (every field, every format)."""
    return json.loads(header.model_dump_json())  # type: ignore[no-any-return]


def check_header(
    receipt: Mapping[str, Any], header: MessageHeader, *, binary_sha256: str | None = None
) -> None:
    """Raise :class:`ReceiptError` unless the (verified) receipt is about this message header.

    A receipt of version 2 or later states the WHOLE header: every field must equal the
    receipt's, and the error names the ones that differ (a JSON or Parquet message has no
    binary sha256 to bind it, so this is what binds its parameters, histogram and mean). Then
    (every version) :func:`check_matches` on its main fields and the binary sha256, if given.
    A version-1 receipt binds those main fields only."""
    stated = receipt.get("header")
    if stated is not None:
        if not isinstance(stated, Mapping):
            raise ReceiptError("the receipt's header is not a JSON object")
        actual = header_json(header)
        differ = sorted(k for k in set(stated) | set(actual) if stated.get(k) != actual.get(k))
        if differ:
            raise ReceiptError(
                f"the message's header differs from the receipt's in: {', '.join(differ)}"
            )
    elif int(receipt.get("receipt_version", 1)) >= 2:
        raise ReceiptError("the receipt states no header")
    same = ("release_id", "dataset", "n", "mechanism", "epsilon1", "epsilon2")
    fields = {name: getattr(header, name) for name in same}
    check_matches(receipt, **fields, message_sha256=header.body_sha256, binary_sha256=binary_sha256)


def check_model_header(receipt: Mapping[str, Any], header: Mapping[str, Any]) -> None:
    """Raise :class:`ReceiptError` unless the (verified) receipt is about this model message:
    its whole header (a ``ModelHeader`` as JSON) equal to the receipt's, naming what differs."""
    if receipt.get("kind") != "model":
        raise ReceiptError("the receipt is not a model release's")
    stated = receipt.get("header")
    if not isinstance(stated, Mapping):
        raise ReceiptError("the receipt states no header")
    differ = sorted(k for k in set(stated) | set(header) if stated.get(k) != header.get(k))
    if differ:
        raise ReceiptError(
            f"the model message's header differs from the receipt's in: {', '.join(differ)}"
        )


def check_matches(
    receipt: Mapping[str, Any],
    *,
    release_id: str,
    dataset: str,
    message_sha256: str,
    n: int,
    mechanism: str,
    epsilon1: float,
    epsilon2: float,
    binary_sha256: str | None = None,
) -> None:
    """Raise :class:`ReceiptError` unless the (verified) receipt is about this message.

    The header's epsilons are the floats the steps ran at: each the largest float not above the
    exact charge the receipt states (``shared.epsilon.float_at_most``).
    """
    expected: dict[str, Any] = {
        "release_id": release_id,
        "dataset": dataset,
        "message_sha256": message_sha256,
        "n": n,
        "mechanism": mechanism,
    }
    if binary_sha256 is not None:
        expected["binary_sha256"] = binary_sha256
    for name, value in expected.items():
        if receipt.get(name) != value:
            raise ReceiptError(f"the receipt's {name} does not match the message")
    for name, ran_at in (("epsilon1", epsilon1), ("epsilon2", epsilon2)):
        try:
            charged = amounts.float_at_most(Decimal(str(receipt.get(name))))
        except (ArithmeticError, ValueError):
            raise ReceiptError(f"the receipt's {name} is not a decimal amount") from None
        if charged != ran_at:
            raise ReceiptError(f"the receipt's {name} does not match the message")
