"""The features party's settings: one frozen object built from the CLI and the environment."""

from __future__ import annotations

import ipaddress
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from shared.errors import InvalidParameterError
from shared.service import tls
from shared.service.client import RetryPolicy, http_base_url
from shared.service.database_url import sqlite_url

FEATURES_TOKEN_ENV = "LABELDP_FEATURES_TOKEN"
PUBLISHER_TOKEN_ENV = "LABELDP_PUBLISHER_TOKEN"
LABELS_PUBLIC_KEY_ENV = "LABELDP_LABELS_PUBLIC_KEY"
LABELS_CA_FILE_ENV = "LABELDP_LABELS_CA_FILE"
NO_DATE_CHECK_ENV = "LABELDP_NO_DATE_CHECK"
LOOPBACK_NAMES = {"localhost", "127.0.0.1", "::1"}


def is_loopback(host: str) -> bool:
    """True for a host name / address that only this machine can reach."""
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def env_flag(name: str) -> bool:
    """A yes/no environment variable: ``1``, ``true``, ``yes`` or ``on`` is set; unset, empty,
    ``0``, ``false``, ``no`` or ``off`` is not; anything else is refused (a typo must not
    silently mean either)."""
    value = os.environ.get(name, "").strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("", "0", "false", "no", "off"):
        return False
    raise InvalidParameterError(f"${name} must be 1 or 0 (true/false, yes/no), not {value!r}")


def undated_keys(path: Path) -> list[str]:
    """The ids of the keys the pin ``path`` gives no validity (a bare PEM block, base64 lines):
    their receipts cannot be date-checked, so the pull refuses them
    (``shared.service.receipt.UndatedKeyError``) unless the operator waives the date check.
    An unusable pin (no key, unreadable dates) raises InvalidParameterError."""
    from shared.service.receipt import load_key_validity, load_public_keys

    keys = load_public_keys(path)
    validity = load_key_validity(path)
    return sorted(kid for kid in keys if validity.get(kid, (None, None)) == (None, None))


@dataclass(frozen=True, kw_only=True)
class Settings:
    """Everything the service needs; refuses unsafe combinations at construction.

    ``features_token``: when set, every endpoint except ``/healthz`` needs
    ``Authorization: Bearer <token>``; when unset the service only accepts a loopback bind
    address (any local process may then call it, as with a local database socket).
    ``labels_token`` is the PUBLISHER token of the labels party (used for example sync and the
    message pull).
    """

    labels_url: str
    labels_token: str
    features_token: str | None = None
    host: str = "127.0.0.1"
    port: int = 8002
    max_body_bytes: int = 256 * 1024 * 1024
    pull_retry: RetryPolicy = field(default_factory=RetryPolicy)
    pull_timeout: float = 120.0
    sync_batch: int = 200_000
    # The labels party's pinned receipt key(s) (shared.service.receipt.load_public_keys); when set,
    # a job trains only on a message whose signed receipt verifies and names it.
    labels_public_key: Path | None = None
    # Accept receipts signed by a pinned key the pin gives no dates (a bare PEM block, base64
    # lines), their date unchecked (``labeldp receipt verify --no-date-check``); without it such
    # a pin stops the service at start (:func:`undated_keys`).
    no_date_check: bool = False
    # https to the labels party: trust only this CA (shared.service.tls); None: the system's CAs.
    labels_ca_file: Path | None = None
    # Serve TLS with this certificate chain and key (both or neither).
    tls_cert: Path | None = None
    tls_key: Path | None = None
    # The database: a SQLAlchemy URL (SQLite or PostgreSQL), or a SQLite file ``db_path``.
    database_url: str = ""
    db_path: Path | None = None

    def __post_init__(self) -> None:
        if not self.database_url:
            if self.db_path is None:
                raise InvalidParameterError("a database is required (database_url or db_path)")
            object.__setattr__(self, "database_url", sqlite_url(self.db_path))
        http_base_url(self.labels_url, name="labels_url")
        if not self.labels_token:
            raise InvalidParameterError(
                "the labels party's publisher token is required "
                f"(--token or ${PUBLISHER_TOKEN_ENV})"
            )
        if self.features_token is not None and len(self.features_token) < 8:
            raise InvalidParameterError(f"${FEATURES_TOKEN_ENV} must be at least 8 characters")
        if self.features_token is None and not is_loopback(self.host):
            raise InvalidParameterError(
                f"host ({self.host!r}) is not a loopback address: set ${FEATURES_TOKEN_ENV} "
                "so that the features service requires a bearer token"
            )
        if not (0 <= self.port <= 65535):
            raise InvalidParameterError(f"port ({self.port}) must be in 0..65535")
        if self.max_body_bytes < 1024:
            raise InvalidParameterError(f"max_body_bytes ({self.max_body_bytes}) must be >= 1024")
        if not (math.isfinite(self.pull_timeout) and self.pull_timeout > 0):
            raise InvalidParameterError(f"pull_timeout ({self.pull_timeout}) must be > 0")
        if self.labels_public_key is not None:
            undated = undated_keys(self.labels_public_key)  # an unusable pin raises
            if undated and not self.no_date_check:
                raise InvalidParameterError(
                    f"--labels-public-key (${LABELS_PUBLIC_KEY_ENV}) {self.labels_public_key} "
                    f"states no validity for key {', '.join(undated)} (a bare PEM block or "
                    "base64 lines carry no dates), so no receipt it signs could be date-checked "
                    "and every pull would be refused: pin dated keys, the output of `labeldp "
                    "keys public --all` or the JSON of the labels party's GET /v1/keys; or "
                    f"accept them undated with --no-date-check (${NO_DATE_CHECK_ENV}=1: their "
                    "receipts' dates are then not checked)"
                )
        elif self.no_date_check:
            raise InvalidParameterError(
                f"--no-date-check (${NO_DATE_CHECK_ENV}) waives the date check of a pinned key's "
                "receipts: it needs --labels-public-key"
            )
        tls.check_server_files(self.tls_cert, self.tls_key)
        tls.check_ca_file(self.labels_ca_file, option="--labels-ca-file")

    @classmethod
    def from_env(
        cls,
        *,
        database_url: str,
        labels_url: str,
        labels_token: str | None,
        host: str = "127.0.0.1",
        port: int = 8002,
        **extra: object,
    ) -> Settings:
        """Settings from CLI values, falling back to the environment for the tokens and the key."""
        for name, env in (
            ("labels_public_key", LABELS_PUBLIC_KEY_ENV),
            ("labels_ca_file", LABELS_CA_FILE_ENV),
            ("tls_cert", "LABELDP_TLS_CERT"),
            ("tls_key", "LABELDP_TLS_KEY"),
        ):
            if extra.get(name) is None and os.environ.get(env):
                extra[name] = Path(os.environ[env])
        if not extra.get("no_date_check"):
            extra["no_date_check"] = env_flag(NO_DATE_CHECK_ENV)
        return cls(
            database_url=database_url,
            labels_url=labels_url,
            labels_token=labels_token or os.environ.get(PUBLISHER_TOKEN_ENV, ""),
            features_token=os.environ.get(FEATURES_TOKEN_ENV) or None,
            host=host,
            port=port,
            **extra,  # type: ignore[arg-type]
        )
