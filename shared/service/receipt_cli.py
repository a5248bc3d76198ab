"""``labeldp receipt verify RECEIPT.json --public-key KEYFILE [--message FILE|DIR]``.

Exit 0 when the receipt's signature verifies under a key of KEYFILE (and, with ``--message``,
the message is the one the receipt names: a binary or JSON file, a Parquet message directory
as the Spark job publishes it, ``shared.parquet_message``, or a model release's JSON message);
1 when it does not, naming what differs; 2 for unusable input.
"""

from __future__ import annotations

import argparse
import hashlib
import json
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
        document = json.loads(raw)
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


def verify_command(args: argparse.Namespace) -> int:
    try:
        keys = rc.load_public_keys(args.public_key)
        validity = rc.load_key_validity(args.public_key)
        receipt = json.loads(args.receipt.read_text(encoding="utf-8"))
    except (InvalidParameterError, OSError, ValueError) as exc:
        print(f"labeldp receipt verify: {exc}", file=sys.stderr)
        return 2
    try:
        body = rc.verify(receipt, keys, validity=validity)
        if args.message is not None:
            check_message_file(body, args.message)
    except (IntegrityError, OSError) as exc:
        print(f"INVALID: {exc}", file=sys.stderr)
        return 1
    except ImportError as exc:  # a Parquet message needs pyarrow (the spark extra)
        print(f"labeldp receipt verify: cannot read a Parquet message: {exc}", file=sys.stderr)
        return 2
    print(
        f"OK: release {body.get('release_id')} of dataset {body.get('dataset')}, epsilon "
        f"{body.get('epsilon')} (epsilon1 {body.get('epsilon1')}, "
        f"epsilon2 {body.get('epsilon2')}), signed by key {body['key_id']}"
    )
    return 0
