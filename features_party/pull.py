"""Fetch the ONE message of a release from the labels party, verify it, keep it.

The message is pulled at most once per release (binary encoding, bounded retries with
exponential back-off) and stored byte for byte; later jobs read the stored copy and verify it
again (format version, lengths, finiteness and the body sha256: ``shared.message.decode_binary``).
A message whose body does not match its sha256, whose format version is unknown, or which is
for another dataset or release is refused and never stored.

With a pinned labels-party key (``Settings.labels_public_key``), every job also fetches the
release's signed receipt and refuses the message (``shared.service.receipt.ReceiptError``; a new
message is then not stored) unless the signature verifies under a pinned key, the receipt was
signed inside that key's validity as the pin states it (a pinned key without dates is refused:
``UndatedKeyError``) and the receipt names this message: its whole header, release, dataset, body
sha256, n, mechanism and the epsilons it ran at. A pin with an undated key stops the service at
start unless ``Settings.no_date_check`` waives the date check of such a key's receipts (dates the
pin states still hold). Without a pin, nothing is checked beyond the sha256 (as before receipts
existed).
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from features_party.config import Settings
from features_party.db.models import StoredMessage
from shared.errors import IntegrityError
from shared.message import BINARY_MEDIA_TYPE, MessageHeader, decode_binary
from shared.service.client import LabelsPartyClient
from shared.service.receipt import (
    ReceiptError,
    check_header,
    check_model_header,
    load_key_validity,
    load_public_keys,
)
from shared.service.receipt import verify as verify_receipt

log = logging.getLogger("features_party.pull")


def labels_client(settings: Settings, *, timeout: float | None = None) -> LabelsPartyClient:
    """A client of the labels party with the publisher token and the pull retry policy."""
    return LabelsPartyClient(
        settings.labels_url,
        token=settings.labels_token,
        retry=settings.pull_retry,
        timeout=timeout or settings.pull_timeout,
        ca_file=settings.labels_ca_file,
    )


def load_stored(
    session: Session, release_id: str
) -> tuple[MessageHeader, list[str], np.ndarray] | None:
    """The stored message, verified again (a corrupted database row is not trusted)."""
    stored = session.get(StoredMessage, release_id)
    if stored is None:
        return None
    header, ids, labels = decode_binary(stored.raw)
    if header.body_sha256 != stored.body_sha256 or header.release_id != release_id:
        raise IntegrityError(f"stored message of release {release_id!r} does not match its row")
    return header, ids, labels


def pull_message(
    session: Session, settings: Settings, *, release_id: str, dataset: str
) -> tuple[MessageHeader, list[str], np.ndarray, bool]:
    """The verified message of ``release_id`` (from the database, or pulled once and stored).

    Returns (header, example ids, noisy labels, pulled_now). Raises ``IntegrityError`` for a
    bad message and ``shared.service.client.ServiceError`` when the labels party refuses or is down.
    """
    stored = load_stored(session, release_id)
    if stored is not None:
        header, ids, labels = stored
        _check_dataset(header, dataset)
        check_receipt(settings, header)
        return header, ids, labels, False
    with labels_client(settings) as client:
        pulled = client.download_message(release_id, binary=True)
    _check_dataset(pulled.header, dataset)
    binary = pulled.media_type == BINARY_MEDIA_TYPE
    check_receipt(settings, pulled.header, raw=pulled.raw if binary else None)
    if pulled.media_type != BINARY_MEDIA_TYPE:
        # Keep one encoding on disk: re-encode is not needed because decode already verified;
        # store the JSON-derived content in binary form for uniform loading.
        from shared.message import encode_binary

        raw = b"".join(encode_binary(pulled.header, pulled.example_ids, pulled.noisy_labels))
    else:
        raw = pulled.raw
    session.add(
        StoredMessage(
            release_id=release_id,
            dataset=pulled.header.dataset,
            header_json=pulled.header.model_dump_json(),
            body_sha256=pulled.header.body_sha256,
            media_type=BINARY_MEDIA_TYPE,
            raw=raw,
        )
    )
    session.commit()
    log.info(
        "stored message of release %s (%d labels, sha256 %s)",
        release_id,
        pulled.header.n,
        pulled.header.body_sha256,
    )
    return pulled.header, pulled.example_ids, pulled.noisy_labels, True


def check_receipt(settings: Settings, header: MessageHeader, *, raw: bytes | None = None) -> None:
    """With a pinned key: the release's receipt verifies and names this message (else raise).

    ``raw``: the binary encoding as pulled, whose sha256 the receipt must state too (it covers
    the whole header: parameters, histogram, mean).
    """
    if settings.labels_public_key is None:
        return
    keys = load_public_keys(settings.labels_public_key)
    validity = load_key_validity(settings.labels_public_key)
    with labels_client(settings) as client:
        receipt = client.receipt(header.release_id)
    body = verify_receipt(
        receipt, keys, validity=validity, require_dates=not settings.no_date_check
    )
    check_header(
        body, header, binary_sha256=None if raw is None else hashlib.sha256(raw).hexdigest()
    )
    log.info("receipt of release %s verified (key %s)", header.release_id, body["key_id"])


def check_model_receipt(
    settings: Settings,
    model_release_id: str,
    header_json: Any,
    *,
    receipt: dict[str, Any] | None = None,
) -> dict[str, Any] | None:
    """With a pinned key: the model release's receipt verifies and states exactly this model
    message's header (``shared.service.receipt.check_model_header``), else raise; returns the
    receipt as signed (to keep), or None without a pin.

    ``receipt``: the one kept with the stored message (checked offline, against the pinned keys
    and their validity); None fetches it from the labels party."""
    if settings.labels_public_key is None:
        return None
    keys = load_public_keys(settings.labels_public_key)
    validity = load_key_validity(settings.labels_public_key)
    stored = receipt is not None
    if receipt is None:
        with labels_client(settings) as client:
            receipt = client.request(
                "GET", f"/v1/model-releases/{model_release_id}/receipt", idempotent=True
            ).json()
    body = verify_receipt(
        receipt, keys, validity=validity, require_dates=not settings.no_date_check
    )
    if body.get("model_release_id") != model_release_id:
        raise ReceiptError("the receipt is about another model release")
    check_model_header(body, header_json)
    log.log(
        logging.DEBUG if stored else logging.INFO,
        "receipt of model release %s verified (key %s)",
        model_release_id,
        body["key_id"],
    )
    return dict(receipt)


def _check_dataset(header: MessageHeader, dataset: str) -> None:
    if header.dataset != dataset:
        raise IntegrityError(
            f"release {header.release_id!r} is for dataset {header.dataset!r}, not {dataset!r}"
        )
