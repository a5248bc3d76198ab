"""``labeldp receipt verify RECEIPT.json --public-key KEYFILE [--message FILE|DIR]``.

Exit 0 when the receipt's signature verifies under a key of KEYFILE inside that key's validity
(and, with ``--message``, the message is the one the receipt names: a binary or JSON file, a
Parquet message directory as the Spark job publishes it, ``shared.parquet_message``, or a model
release's JSON message); 1 when it does not, naming what differs; 2 for unusable input.

The receipt's date is always checked: a key KEYFILE gives no dates (a bare PEM block, base64
lines) fails (exit 1, ``UNCHECKED``) unless the operator states the window with ``--valid-from``
/ ``--valid-until`` or waives the check with ``--no-date-check`` (a ``WARNING`` line says so).
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path
from typing import Any

from shared.errors import IntegrityError, InvalidParameterError
from shared.message import (
    MAGIC,
    MessageHeader,
    decode_binary,
    decode_header,
    from_json_message,
    validated,
)
from shared.service import receipt as rc
from shared.service import strict_input


def register_commands(commands: Any) -> None:
    """Add ``labeldp receipt verify``."""
    parser = commands.add_parser("receipt", help="check a labels party's signed release receipt")
    sub = parser.add_subparsers(dest="receipt_command", required=True, metavar="ACTION")
    verify = sub.add_parser("verify", help="verify a receipt's signature (and a message file)")
    verify.add_argument("receipt", type=Path, help="the receipt JSON (GET .../receipt)")
    verify.add_argument(
        "--public-key", type=Path, required=True, help="PEM or base64 public key(s) to trust"
    )
    verify.add_argument(
        "--message",
        type=Path,
        help="a downloaded message (binary or JSON file) or a Parquet message directory "
        "(header.json + body/) the receipt must name",
    )
    verify.add_argument(
        "--valid-from",
        metavar="UTC_TIME",
        help="refuse a receipt signed before this time (e.g. 2025-01-31T12:00:00Z); with "
        "--valid-until, the validity of a key the key file gives no dates",
    )
    verify.add_argument(
        "--valid-until",
        metavar="UTC_TIME",
        help="refuse a receipt signed at or after this time (the key's retirement)",
    )
    verify.add_argument(
        "--no-date-check",
        action="store_true",
        help="accept a receipt whose key the key file gives no dates (a warning says the date "
        "was not checked); dates the file states are still checked",
    )
    verify.set_defaults(func=verify_command)


def check_message_file(receipt: dict[str, Any], path: Path) -> None:
    """Raise ``IntegrityError`` unless the file (or directory) is the intact message the receipt
    names: its whole header, its body sha256 and, for a binary file, the sha256 of its bytes.
    The header is compared first, so a changed field (``n``, ``body_sha256`` included) is named;
    then the body against the header's sha256."""
    if path.is_dir():
        check_parquet_message(receipt, path)
        return
    raw = path.read_bytes()
    if receipt.get("kind") == "model":
        check_model_message(receipt, _json_document(raw, what="model message"))
        return
    if raw.startswith(MAGIC):
        rc.check_header(receipt, decode_header(raw))
        header, _ids, _labels = decode_binary(raw)
        rc.check_header(receipt, header, binary_sha256=hashlib.sha256(raw).hexdigest())
        return
    document = _json_document(raw, what="message")
    header = validated(MessageHeader, document.get("header"), what="message header")
    rc.check_header(receipt, header)
    from_json_message(document)


def check_model_message(receipt: dict[str, Any], document: dict[str, Any]) -> None:
    """Raise unless ``document`` is the model message the model receipt names: its whole header
    field by field (``shared.service.receipt.check_model_header``), then its body against the
    header's sha256 (``shared.model_message.verify_model``)."""
    from shared.model_message import verify_model

    header = document.get("header")
    if not isinstance(header, dict):
        raise IntegrityError("the model message has no header object")
    rc.check_model_header(receipt, header)
    verify_model(document)


def _json_document(raw: bytes, *, what: str) -> dict[str, Any]:
    """A JSON message file as one object, read once (``IntegrityError`` naming ``what``)."""
    try:
        document = strict_input.loads(raw)
    except ValueError as exc:
        raise IntegrityError(f"the {what} is not JSON: {exc}") from None
    if not isinstance(document, dict):
        raise IntegrityError(f"the {what} is not a JSON object")
    return document


def check_parquet_message(receipt: dict[str, Any], directory: Path) -> None:
    """Raise ``IntegrityError`` unless the Parquet message directory is the one the receipt names.

    First ``header.json``: equal to the receipt's header field by field (the error names the
    fields that differ) and its bytes of the sha256 the labels party recorded at publication
    (the receipt's ``binary_sha256``); then the body, read and checked against the header's body
    sha256 (``shared.parquet_message.read_parquet_message``).
    """
    from shared.message import MessageHeader
    from shared.parquet_message import HEADER, read_parquet_message

    raw = (directory / HEADER).read_bytes()
    try:
        header = MessageHeader.model_validate_json(raw)
    except ValueError as exc:
        raise IntegrityError(f"{directory}/{HEADER} is not a valid message header: {exc}") from None
    rc.check_header(receipt, header, binary_sha256=hashlib.sha256(raw).hexdigest())
    if read_parquet_message(directory).raw_header != raw:
        raise IntegrityError(f"{directory}/{HEADER} changed while it was read")


def _key_validity(args: argparse.Namespace, keys: dict[str, Any]) -> dict[str, Any]:
    """The keys' validity: the key file's dates, narrowed to ``--valid-from`` / ``--valid-until``
    if given (InvalidParameterError for a bad time or an empty window)."""
    validity = rc.load_key_validity(args.public_key)
    if args.valid_from is None and args.valid_until is None:
        return validity
    if args.no_date_check:
        raise InvalidParameterError("--no-date-check contradicts --valid-from / --valid-until")
    start = None if args.valid_from is None else rc.utc_time(args.valid_from, "--valid-from")
    end = None if args.valid_until is None else rc.utc_time(args.valid_until, "--valid-until")
    if start is not None and end is not None and start >= end:
        raise InvalidParameterError(f"--valid-from {start} is not before --valid-until {end}")
    return rc.within_window(keys, validity, start, end)


def verify_command(args: argparse.Namespace) -> int:
    """``labeldp receipt verify``: 0 verified, 1 not (or its date unchecked), 2 unusable input."""
    try:
        keys = rc.load_public_keys(args.public_key)
        validity = _key_validity(args, keys)
    except (InvalidParameterError, OSError, ValueError) as exc:
        print(f"labeldp receipt verify: {exc}", file=sys.stderr)
        return 2
    try:
        receipt = strict_input.loads(args.receipt.read_text(encoding="utf-8"))  # no repeated key
    except (OSError, ValueError) as exc:  # named (a CLI audit: the parser's words alone)
        reason = exc.strerror if isinstance(exc, OSError) else f"not a JSON receipt: {exc}"
        print(f"labeldp receipt verify: {args.receipt}: {reason}", file=sys.stderr)
        return 2
    try:
        body = rc.verify(receipt, keys, validity=validity, require_dates=not args.no_date_check)
        if args.message is not None:
            check_message_file(body, args.message)
    except rc.UndatedKeyError as exc:
        print(
            f"UNCHECKED: {exc}; or state the key's validity with --valid-from / --valid-until; "
            "or accept it undated with --no-date-check",
            file=sys.stderr,
        )
        return 1
    except (IntegrityError, OSError) as exc:
        print(f"INVALID: {exc}", file=sys.stderr)
        return 1
    except ImportError as exc:  # a Parquet message needs pyarrow (the spark extra)
        print(f"labeldp receipt verify: cannot read a Parquet message: {exc}", file=sys.stderr)
        return 2
    created, retired = validity.get(body["key_id"], (None, None))
    if created is None and retired is None:
        print(
            f"WARNING: {args.public_key} states no validity for key {body['key_id']}: the "
            f"receipt's date (signed_at {body.get('signed_at')}) was not checked (--no-date-check)",
            file=sys.stderr,
        )
        dated = "date not checked"
    else:
        dated = f"signed at {body.get('signed_at')}, inside its validity"
    print(
        f"OK: release {body.get('release_id') or body.get('model_release_id')} of dataset "
        f"{body.get('dataset')}, epsilon {body.get('epsilon')} (epsilon1 {body.get('epsilon1')}, "
        f"epsilon2 {body.get('epsilon2')}), signed by key {body['key_id']} ({dated})"
    )
    return 0
