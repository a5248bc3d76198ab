"""Service settings: one frozen object built from the CLI and the environment, checked on load.

The server refuses to start without a token for each of the three roles (advertiser, publisher,
operator); tokens must be distinct and non-empty.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeVar

from sqlalchemy.engine import make_url

from shared.errors import InvalidParameterError
from shared.service import strict_input, tls
from shared.service.database_url import sqlite_url
from shared.service.http.proxies import ENV as TRUSTED_PROXIES_ENV
from shared.service.http.proxies import parse_entries

T = TypeVar("T", int, float)

Role = Literal["advertiser", "publisher", "operator"]
ROLES: tuple[Role, ...] = ("advertiser", "publisher", "operator")

DEFAULT_MAX_BODY_BYTES = 1 << 30  # bulk CSV / NDJSON / text streams: ~30 million labels
DEFAULT_MAX_JSON_BYTES = 64 << 20  # JSON documents are parsed whole, so keep them smaller
MIN_RECOMMENDED_TOKEN_CHARS = 16
# A served process's default request rate per token (``Settings`` built in code: off).
DEFAULT_RATE_LIMIT = 50.0
DEFAULT_RATE_BURST = 500

log = logging.getLogger("labels_party")

DEFAULT_KEY_FILE = "labels-signing-key.pem"


def default_key_path(database_url: str) -> Path:
    """Next to the SQLite file; another database has no directory, so the path must be given.

    (A default in the working directory would scatter private keys wherever a server started.)
    """
    url = make_url(database_url)
    if url.get_backend_name() == "sqlite" and url.database and url.database != ":memory:":
        return Path(url.database).resolve().parent / DEFAULT_KEY_FILE
    raise InvalidParameterError(
        f"a {url.get_backend_name()} database keeps no files: name the receipt signing key file "
        "with LABELDP_SIGNING_KEY or --signing-key (it is created with mode 0600 if missing)"
    )


def resolve_signing_key(
    explicit: Path | None, database_url: str, environ: Mapping[str, str]
) -> Path:
    """The signing key file: ``explicit``, else ``LABELDP_SIGNING_KEY``, else the default."""
    if explicit is not None:
        return explicit
    if environ.get("LABELDP_SIGNING_KEY"):
        return Path(environ["LABELDP_SIGNING_KEY"])
    return default_key_path(database_url)


@dataclass(frozen=True, kw_only=True)
class Tokens:
    """One bearer token per role (compared in constant time by the API layer)."""

    advertiser: str
    publisher: str
    operator: str

    def __post_init__(self) -> None:
        values = [self.advertiser, self.publisher, self.operator]
        for role, token in zip(ROLES, values, strict=True):
            if not isinstance(token, str) or not token.strip():
                raise InvalidParameterError(f"token for role {role!r} must be a non-empty string")
            if any(ch.isspace() for ch in token) or "," in token:
                raise InvalidParameterError(
                    f"token for role {role!r} must not contain whitespace or commas"
                )
        if len(set(values)) != len(values):
            raise InvalidParameterError("the three role tokens must be distinct")

    def items(self) -> list[tuple[Role, str]]:
        return [("advertiser", self.advertiser), ("publisher", self.publisher),
                ("operator", self.operator)]  # fmt: skip

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, object]) -> Tokens:
        unknown = set(mapping) - set(ROLES)
        if unknown:
            raise InvalidParameterError(f"unknown role(s) in tokens: {', '.join(sorted(unknown))}")
        missing = [role for role in ROLES if role not in mapping]
        if missing:
            raise InvalidParameterError(f"missing token(s) for role(s): {', '.join(missing)}")
        return cls(**{role: mapping[role] for role in ROLES})  # type: ignore[arg-type]

    @classmethod
    def from_env_string(cls, value: str) -> Tokens:
        """Parse ``advertiser=T1,publisher=T2,operator=T3``."""
        mapping: dict[str, str] = {}
        for part in value.split(","):
            role, sep, token = part.strip().partition("=")
            if not sep:
                raise InvalidParameterError(
                    "LABELDP_TOKENS must look like advertiser=T1,publisher=T2,operator=T3"
                )
            if role.strip() in mapping:
                raise InvalidParameterError(f"role {role.strip()!r} given twice in LABELDP_TOKENS")
            mapping[role.strip()] = token.strip()
        return cls.from_mapping(mapping)

    @classmethod
    def from_file(cls, path: str | Path) -> Tokens:
        """Read ``{"advertiser": "...", "publisher": "...", "operator": "..."}``."""
        try:
            data = strict_input.loads(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise InvalidParameterError(f"cannot read tokens file {path}: {exc.strerror}") from None
        except strict_input.DuplicateKeyError as exc:  # the last one won, silently (an audit)
            raise InvalidParameterError(f"tokens file {path} gives a role twice: {exc}") from None
        except json.JSONDecodeError as exc:
            raise InvalidParameterError(
                f"tokens file {path} is not valid JSON: {exc.msg}"
            ) from None
        except UnicodeDecodeError:
            raise InvalidParameterError(f"tokens file {path} is not UTF-8 text") from None
        if not isinstance(data, dict):
            raise InvalidParameterError(f"tokens file {path} must hold a JSON object")
        return cls.from_mapping(data)


def load_tokens(
    *, tokens_file: str | Path | None = None, environ: Mapping[str, str] | None = None
) -> Tokens:
    """Tokens from ``--tokens-file`` if given, else from ``LABELDP_TOKENS``; else refuse."""
    env = os.environ if environ is None else environ
    if tokens_file is not None:
        tokens = Tokens.from_file(tokens_file)
    elif env.get("LABELDP_TOKENS"):
        tokens = Tokens.from_env_string(env["LABELDP_TOKENS"])
    else:
        raise InvalidParameterError(
            "no tokens: set LABELDP_TOKENS=advertiser=T1,publisher=T2,operator=T3 "
            "or pass --tokens-file PATH"
        )
    short = [role for role, token in tokens.items() if len(token) < MIN_RECOMMENDED_TOKEN_CHARS]
    if short:
        log.warning(
            "tokens for %s are shorter than %d characters; use long random tokens in production",
            ", ".join(short),
            MIN_RECOMMENDED_TOKEN_CHARS,
        )
    return tokens


def _env_number(
    env: Mapping[str, str], name: str, default: T, *, parse: Callable[[str], T], minimum: T
) -> T:
    """``name`` from the environment parsed by ``parse`` (int or float), at least ``minimum``;
    ``default`` when unset or empty."""
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    what = "an integer" if parse is int else "a number"
    try:
        value = parse(raw)
    except ValueError:
        raise InvalidParameterError(f"{name} ({raw!r}) must be {what}") from None
    if not value >= minimum:  # type: ignore[operator]
        raise InvalidParameterError(f"{name} ({raw!r}) must be >= {minimum}")
    return value


def _env_int(env: Mapping[str, str], name: str, default: int, *, minimum: int) -> int:
    return _env_number(env, name, default, parse=int, minimum=minimum)


def _env_float(env: Mapping[str, str], name: str, default: float) -> float:
    return _env_number(env, name, default, parse=float, minimum=0)


@dataclass(frozen=True, kw_only=True)
class Settings:
    """Everything the labels-party service needs to run."""

    database_url: str
    tokens: Tokens
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_json_bytes: int = DEFAULT_MAX_JSON_BYTES
    # Randomizations running at once (each holds a copy of the labels; the rest queue).
    release_concurrency: int = 2
    # Compile the numba kernels in the background at start-up so the first release is fast.
    warmup: bool = False
    # Crash tests only: seconds to sleep while holding a write transaction open, before COMMIT.
    debug_commit_delay: float = 0.0
    # Seconds a writer waits for SQLite's write lock before giving up (503).
    lock_timeout: float = 120.0
    # The receipt signing key (labels_party.releasing.receipts); None: next to the SQLite database.
    signing_key_path: Path | None = None
    # Serve TLS with this certificate chain and key (both or neither; uvicorn's ssl_*file).
    tls_cert: Path | None = None
    tls_key: Path | None = None
    # Per bearer token (labels_party.api.limits): sustained requests per second and burst; 0 off.
    rate_limit: float = 0.0
    rate_burst: int = 0
    # Reverse proxies whose X-Forwarded-For names the client (shared.service.http.proxies):
    # addresses, CIDR networks or host names; empty: forwarded headers are never trusted.
    trusted_proxies: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.database_url:
            raise InvalidParameterError("database_url must not be empty")
        for name in ("max_body_bytes", "max_json_bytes", "release_concurrency"):
            if getattr(self, name) < 1:
                raise InvalidParameterError(f"{name} ({getattr(self, name)}) must be >= 1")
        tls.check_server_files(self.tls_cert, self.tls_key)
        if self.rate_limit > 0 and self.rate_burst < 1:
            raise InvalidParameterError(f"rate_burst ({self.rate_burst}) must be >= 1")
        object.__setattr__(self, "trusted_proxies", parse_entries(self.trusted_proxies))

    @classmethod
    def from_env(
        cls,
        *,
        database_url: str | None = None,
        db_path: str | Path | None = None,
        tokens_file: str | Path | None = None,
        environ: Mapping[str, str] | None = None,
        **overrides: object,
    ) -> Settings:
        """Settings from the process environment, CLI values taking precedence."""
        env = os.environ if environ is None else environ
        key_override = overrides.pop("signing_key_path", None)
        explicit_key = Path(str(key_override)) if key_override is not None else None
        if database_url is None:
            if db_path is not None:
                database_url = sqlite_url(db_path)
            else:
                database_url = env.get("LABELDP_DATABASE_URL") or sqlite_url("labels_party.db")
        values: dict[str, object] = {
            "database_url": database_url,
            "tokens": load_tokens(tokens_file=tokens_file, environ=env),
            "max_body_bytes": _env_int(
                env, "LABELDP_MAX_BODY_BYTES", DEFAULT_MAX_BODY_BYTES, minimum=1
            ),
            "max_json_bytes": _env_int(
                env, "LABELDP_MAX_JSON_BYTES", DEFAULT_MAX_JSON_BYTES, minimum=1
            ),
            "release_concurrency": _env_int(env, "LABELDP_RELEASE_CONCURRENCY", 2, minimum=1),
            "warmup": env.get("LABELDP_WARMUP", "1") not in ("0", "false", "no"),
            "debug_commit_delay": _env_float(env, "LABELDP_DEBUG_COMMIT_DELAY", 0.0),
            "signing_key_path": resolve_signing_key(explicit_key, database_url, env),
            "tls_cert": Path(env["LABELDP_TLS_CERT"]) if env.get("LABELDP_TLS_CERT") else None,
            "tls_key": Path(env["LABELDP_TLS_KEY"]) if env.get("LABELDP_TLS_KEY") else None,
            "rate_limit": _env_float(env, "LABELDP_RATE_LIMIT", DEFAULT_RATE_LIMIT),
            "rate_burst": _env_int(env, "LABELDP_RATE_BURST", DEFAULT_RATE_BURST, minimum=1),
            "trusted_proxies": parse_entries(env.get(TRUSTED_PROXIES_ENV, "")),
        }
        values.update(overrides)
        return cls(**values)  # type: ignore[arg-type]
