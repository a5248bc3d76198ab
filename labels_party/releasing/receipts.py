"""The labels party's release receipts: its signing key, key rotation, and signing from storage.

The private Ed25519 key lives in one file (default ``labels-signing-key.pem`` next to the SQLite
database; with PostgreSQL it must be named: ``LABELDP_SIGNING_KEY`` or ``--signing-key``), created
on first start with mode 0600 and refused if group or others may read it.
Every public key that ever signed is recorded in the ``signing_keys`` table and published by
``GET /v1/keys``; rotation (``labeldp keys rotate``) writes a new private key over the file and
retires the previous public key, which stays published, so older receipts stay verifiable.

A receipt is signed from what is stored (the release row and its ledger entries), once: right
after the release is committed, or on its first request for a release made before there were
keys (or whose signing failed). The signed receipt is stored and served unchanged afterwards.
See ``shared.service.receipt`` for the format.
"""

from __future__ import annotations

import hashlib
import json
import logging
import stat
from datetime import UTC, datetime
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import insert, select, update

from labels_party.budget import ledger
from labels_party.catalog.listings import release_header
from labels_party.db.engine import Database
from labels_party.db.models import ledger as ledger_table
from labels_party.db.models import model_receipts, receipts, signing_keys
from labels_party.releasing.model_releases import stored_model
from labels_party.releasing.releases import release_metadata
from shared import epsilon as amounts
from shared.errors import InvalidParameterError
from shared.service import files
from shared.service import receipt as rc

log = logging.getLogger("labels_party")


class RetiredKeyError(RuntimeError):
    """The key file holds a key this database retired: it would sign receipts dated after its
    retirement, which every pin refuses (and ``GET /v1/keys`` would show it current again)."""


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def product_version() -> str:
    try:
        return importlib_metadata.version("labeldp")
    except importlib_metadata.PackageNotFoundError:
        return "unknown"


def _write_private(path: Path, key: Ed25519PrivateKey, *, replace: bool = True) -> bool:
    """Write ``key`` as PEM with mode 0600, whole (``shared.service.files``). With ``replace``
    False only if ``path`` does not exist yet: False if another process created it first
    (replicas sharing the key file start at once)."""
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)  # 0700 when it creates it
    if replace:
        files.write_whole(path, pem)
        return True
    return files.create_whole(path, pem)


def _read_private(path: Path) -> Ed25519PrivateKey:
    """The Ed25519 key in ``path``; an InvalidParameterError naming the file where it is not
    one (a folder, unreadable, not PEM, a password, another algorithm) or is open to others."""
    try:
        mode = path.stat().st_mode
        data = None if stat.S_ISDIR(mode) else path.read_bytes()
    except OSError as exc:
        raise InvalidParameterError(f"signing key {path}: {exc.strerror}") from None
    if data is None:
        raise InvalidParameterError(f"signing key {path} is a folder, not a key file")
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise InvalidParameterError(
            f"signing key {path} is accessible by group or others (mode {mode & 0o777:o}); "
            f"run: chmod 600 {path}"
        )
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (TypeError, ValueError, UnsupportedAlgorithm):
        raise InvalidParameterError(
            f"signing key {path} is not a PEM private key without a password"
        ) from None
    if not isinstance(key, Ed25519PrivateKey):
        raise InvalidParameterError(f"signing key {path} is not an Ed25519 private key")
    return key


class KeyStore:
    """The signing key file and the table of published public keys."""

    def __init__(self, db: Database, path: Path) -> None:
        self._db = db
        self.path = path

    def ensure(self) -> str:
        """Create the key file if missing, register its public key; returns its key id."""
        if not self.path.exists() and _write_private(
            self.path, Ed25519PrivateKey.generate(), replace=False
        ):
            log.info("created the receipt signing key %s", self.path)
        return self._register(_read_private(self.path))

    def current_id(self) -> str:
        """The key id of the key file, checked to be the registered current key; writes nothing
        (``labeldp keys public``: a mistyped ``--signing-key`` created a new key there and retired
        the service's real one, found by an audit)."""
        if not self.path.exists():
            raise FileNotFoundError(
                f"no signing key at {self.path} (the service creates it at its first start)"
            )
        kid = rc.key_id(_read_private(self.path).public_key())
        with self._db.read() as conn:
            row = conn.execute(
                select(signing_keys.c.retired).where(signing_keys.c.key_id == kid)
            ).first()
        if row is None or row.retired is not None:
            state = "not registered" if row is None else f"retired at {row.retired}"
            raise InvalidParameterError(
                f"the key in {self.path} ({kid}) is {state}: not the service's current signing "
                "key (check --signing-key)"
            )
        return kid

    def current(self) -> Ed25519PrivateKey:
        """The key that signs now (read from its file each time, so a rotation takes effect)."""
        key = _read_private(self.path)
        self._register(key)
        return key

    def rotate(self) -> tuple[str, str]:
        """Replace the signing key; returns (retired key id or "", new key id)."""
        old = rc.key_id(_read_private(self.path).public_key()) if self.path.exists() else ""
        _write_private(self.path, Ed25519PrivateKey.generate())
        return old, self.ensure()

    def _register(self, key: Ed25519PrivateKey) -> str:
        """Record the public key as current (others retired); idempotent."""
        public = key.public_key()
        kid = rc.key_id(public)
        with self._db.read() as conn:
            rows = {
                row.key_id: row.retired
                for row in conn.execute(select(signing_keys.c.key_id, signing_keys.c.retired))
            }
        if rows.get(kid) is not None:
            raise RetiredKeyError(
                f"the signing key {kid} in {self.path} was retired at {rows[kid]}: a retired key "
                "never signs again (a key file restored from a backup?); `labeldp keys rotate` "
                "writes a new one"
            )
        if (
            kid in rows
            and rows[kid] is None
            and all(retired is not None for other, retired in rows.items() if other != kid)
        ):
            return kid
        now = _now()
        with self._db.write() as conn:
            present = conn.execute(
                select(signing_keys.c.retired).where(signing_keys.c.key_id == kid)
            ).first()
            if present is None:
                conn.execute(
                    insert(signing_keys).values(
                        key_id=kid,
                        algorithm=rc.ALGORITHM,
                        public_key=rc.public_b64(public),
                        created=now,
                        retired=None,
                    )
                )
            elif present.retired is not None:  # retired since the read above
                raise RetiredKeyError(f"the signing key {kid} was retired at {present.retired}")
            conn.execute(
                update(signing_keys)
                .where(signing_keys.c.key_id != kid, signing_keys.c.retired.is_(None))
                .values(retired=now)
            )
        return kid

    def published(self) -> list[dict[str, Any]]:
        """Every public key that ever signed, current first, as ``GET /v1/keys`` shows them."""
        with self._db.read() as conn:
            rows = conn.execute(select(signing_keys).order_by(signing_keys.c.created)).all()
        out = []
        for row in rows:
            public = rc.from_b64(row.public_key)
            out.append(
                {
                    "key_id": row.key_id,
                    "algorithm": row.algorithm,
                    "public_key": row.public_key,
                    # The block under its Key-Id / Created / Retired lines: a pin that dates it.
                    "public_key_pem": rc.pem_with_validity(public, row.created, row.retired),
                    "status": "current" if row.retired is None else "retired",
                    "created": row.created,
                    "retired": row.retired,
                }
            )
        out.sort(key=lambda item: item["status"] != "current")
        return out


class ReceiptService:
    """Signs each release's receipt once, from the stored release and ledger rows."""

    def __init__(self, db: Database, keys: KeyStore) -> None:
        self._db = db
        self.keys = keys

    def get(self, release_id: str) -> dict[str, Any]:
        """The stored signed receipt, signing it now if it has none (404 for an unknown id)."""
        return self._stored_or_signed(receipts, receipts.c.release_id, release_id, self.payload)

    def get_model(self, model_release_id: str) -> dict[str, Any]:
        """A model release's stored signed receipt, signed now if it has none (404 unknown)."""
        column = model_receipts.c.model_release_id
        return self._stored_or_signed(model_receipts, column, model_release_id, self.model_payload)

    def _stored_or_signed(
        self, table: Any, column: Any, key: str, payload_of: Any
    ) -> dict[str, Any]:
        with self._db.read() as conn:
            stored = conn.execute(select(table.c.receipt).where(column == key)).scalar()
        if stored is not None:
            return json.loads(stored)  # type: ignore[no-any-return]
        payload = payload_of(key)
        signed = rc.sign(payload, self.keys.current())
        with self._db.write() as conn:  # first signer wins; a concurrent second one is dropped
            stored = conn.execute(select(table.c.receipt).where(column == key)).scalar()
            if stored is not None:
                return json.loads(stored)  # type: ignore[no-any-return]
            conn.execute(
                insert(table).values(
                    {
                        column.name: key,
                        "key_id": signed["key_id"],
                        "receipt": rc.canonical(signed).decode("ascii"),
                        "signed_at": payload["signed_at"],
                    }
                )
            )
        return signed

    def sign_after_release(self, release_id: str, *, model: bool = False) -> None:
        """Sign right after a (label or ``model``) release; a failure is logged (the receipt is
        signed on request)."""
        try:
            (self.get_model if model else self.get)(release_id)
        except Exception as exc:  # noqa: BLE001 - the release is committed; never fail it here
            log.error("could not sign the receipt of %s: %s", release_id, type(exc).__name__)

    def payload(self, release_id: str) -> dict[str, Any]:
        """What the receipt of ``release_id`` states, from the stored rows (public data only)."""
        meta = release_metadata(self._db, release_id)  # 404 for an unknown release
        with self._db.read() as conn:
            entries = [
                dict(entry._mapping)
                for entry in conn.execute(
                    select(ledger_table)
                    .where(ledger_table.c.release_id == release_id)
                    .order_by(ledger_table.c.seq)
                )
            ]
        delta = amounts.add(amounts.ZERO, *(ledger.delta(entry) for entry in entries))
        return {
            "receipt_version": rc.RECEIPT_VERSION,
            **{
                key: meta[key]
                for key in (
                    "dataset",
                    "mechanism",
                    "requested_mechanism",
                    "params",
                    "epsilon1",
                    "epsilon2",
                    "epsilon",
                    "n",
                    "message_sha256",
                    "binary_sha256",
                    "binary_size",
                )
            },
            "release_id": meta["id"],
            # The whole message header (version 2): any changed field fails verification.
            "header": rc.header_json(release_header(self._db, release_id)),
            "delta": "0" if delta == 0 else amounts.text(delta),
            "ledger_entries": [
                {"seq": int(e["seq"]), "kind": e["kind"], "entry_hash": e["entry_hash"]}
                for e in entries
            ],
            "released_at": meta["created"],
            "signed_at": _now(),
            "product": "labeldp",
            "product_version": product_version(),
        }

    def model_payload(self, model_release_id: str) -> dict[str, Any]:
        """What a model release's receipt states: its whole header, its charge (epsilon,
        delta), the sha256 of its stored message and its ledger entry (public data only)."""
        text = stored_model(self._db, model_release_id)  # 404 for an unknown model release
        message = json.loads(text)
        header = message["header"]
        with self._db.read() as conn:
            entries = [
                dict(entry._mapping)
                for entry in conn.execute(
                    select(ledger_table)
                    .where(
                        ledger_table.c.kind == ledger.KIND_MODEL,
                        ledger_table.c.dataset == header["dataset"],
                        ledger_table.c.parameters.contains(
                            f'"model_release_id":"{model_release_id}"'
                        ),
                    )
                    .order_by(ledger_table.c.seq)
                )
            ]
        return {
            "receipt_version": rc.RECEIPT_VERSION,
            "kind": "model",
            "model_release_id": model_release_id,
            "dataset": header["dataset"],
            "estimator": header["estimator"],
            "privacy": header["privacy"],
            "epsilon": header["epsilon"],
            "delta": header["delta"] or "0",
            "message_sha256": header["body_sha256"],
            "stored_message_sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
            "header": header,
            "ledger_entries": [
                {"seq": int(e["seq"]), "kind": e["kind"], "entry_hash": e["entry_hash"]}
                for e in entries
            ],
            "released_at": header["created"],
            "signed_at": _now(),
            "product": "labeldp",
            "product_version": product_version(),
        }
