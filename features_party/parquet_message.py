"""The ONE message as a Spark job publishes it: ``header.json`` + a Parquet body, verified.

A release executed by ``labeldp release --engine spark`` is published as a directory::

    <out>/header.json            the same MessageHeader as the HTTP message
    <out>/body/part-*.parquet    example_id (string), noisy_label (double), sorted by example_id

``body_sha256`` covers the body in the documented order (``shared.message.body_sha256``: ids
joined by "\\n", then the float64 labels), i.e. the part files in name order, rows in file
order, which the job wrote sorted by example_id. :func:`read_parquet_message` checks the header,
the order, the count and the hash, exactly as the HTTP message is checked; with a labels-party
client it also checks that the labels party recorded this very header for the release
(its ledger spend). :func:`store_parquet_message` keeps it like a pulled message, so a training
job for that release trains from it without pulling anything.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
from sqlalchemy.orm import Session

from features_party.db.models import StoredMessage
from shared.errors import IntegrityError
from shared.message import BINARY_MEDIA_TYPE, MessageHeader, encode_binary
from shared.parquet_message import read_parquet_message as read_verified
from shared.service.client import LabelsPartyClient


def read_parquet_message(
    directory: Path | str, *, labels_party: LabelsPartyClient | None = None
) -> tuple[MessageHeader, list[str], np.ndarray]:
    """(header, example ids, noisy labels) of a Parquet message, verified
    (``shared.parquet_message.read_parquet_message``); else IntegrityError.

    ``labels_party``: also require the labels party's release metadata to carry this header's
    sha256 (``binary_sha256`` of an external release) and body sha256, i.e. that the release's
    spend is in its ledger.
    """
    message = read_verified(directory)
    header = message.header
    if labels_party is not None:
        release = labels_party.release(header.release_id)
        recorded = getattr(release, "binary_sha256", None)
        if release.message_sha256 != header.body_sha256 or recorded != _sha256(message.raw_header):
            raise IntegrityError(
                f"release {header.release_id!r}: the labels party recorded another message"
            )
    return header, message.example_ids, message.noisy_labels


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def store_parquet_message(
    session: Session, directory: Path | str, *, labels_party: LabelsPartyClient | None = None
) -> MessageHeader:
    """Verify a Parquet message and keep it as a pulled one (binary encoding, same sha256)."""
    header, ids, labels = read_parquet_message(directory, labels_party=labels_party)
    stored = session.get(StoredMessage, header.release_id)
    if stored is not None:
        if stored.body_sha256 != header.body_sha256:
            raise IntegrityError(f"release {header.release_id!r} is stored with another body")
        return header
    session.add(
        StoredMessage(
            release_id=header.release_id,
            dataset=header.dataset,
            header_json=header.model_dump_json(),
            body_sha256=header.body_sha256,
            media_type=BINARY_MEDIA_TYPE,
            raw=b"".join(encode_binary(header, ids, labels)),
        )
    )
    session.commit()
    return header
