"""Named principals: several bearer tokens per role, each naming a person or an integration.

A principal is (name, role, sha256 of its token). :func:`issue` draws the token from the OS
CSPRNG (``secrets.token_urlsafe(32)``: 256 bits), stores only its sha256 and returns the token
once; :func:`revoke` marks the principal revoked (the row stays: the ledger names it).
Authentication (:class:`Authenticator`) hashes a presented token and looks the digest up among
unrevoked principals: the digest of a 256-bit random token is as unguessable as the token, and
no secret is ever compared or stored. The role-only tokens of ``LABELDP_TOKENS`` keep working;
their principal is the role itself, so a principal may not be named after a role.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import insert, select, update
from sqlalchemy.exc import IntegrityError

from labels_party.catalog.datasets import utc_now
from labels_party.config import ROLES, Role
from labels_party.db.engine import Database
from labels_party.db.models import principals
from shared.errors import InvalidParameterError
from shared.service.http.auth import match_token, presented_token

NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}"
TOKEN_PREFIX = "ldp_"
# How long a looked-up token is trusted before it is looked up again: a revocation takes
# effect on every replica within this many seconds.
CACHE_SECONDS = 2.0


@dataclass(frozen=True, kw_only=True)
class Principal:
    """Who acts: a name and the role its token grants."""

    name: str
    role: Role
    created: str | None = None
    revoked: str | None = None

    def public(self) -> dict[str, Any]:
        return {"name": self.name, "role": self.role, "created": self.created,
                "revoked": self.revoked}  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class Caller:
    """The authenticated caller of one request: its role, and its principal's name when the
    token was a named one (None: a role-only token of ``LABELDP_TOKENS``)."""

    role: Role
    actor: str | None = None

    @property
    def name(self) -> str:
        """Who, for a log line or an answer: the principal, else the role."""
        return self.actor or self.role


def token_digest(token: str) -> str:
    """sha256 of a bearer token, as stored."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def check_name(name: str) -> str:
    """A principal's name: 1-64 of letters, digits and ``._@-``, not a role's name."""
    if not isinstance(name, str) or not re.fullmatch(NAME_PATTERN, name):
        raise InvalidParameterError(
            f"principal name ({name!r}) must be 1-64 letters, digits or ._@- (starting with a "
            "letter or digit)"
        )
    if name in ROLES:
        raise InvalidParameterError(
            f"principal name ({name!r}) is a role's name, which the role-only tokens use"
        )
    return name


def check_role(role: str) -> Role:
    if role not in ROLES:
        raise InvalidParameterError(f"role ({role!r}) must be one of {', '.join(ROLES)}")
    return role  # type: ignore[return-value]


def issue(db: Database, *, name: str, role: str) -> tuple[Principal, str]:
    """A new principal and its token (returned once, never stored: only its sha256 is)."""
    principal = Principal(name=check_name(name), role=check_role(role), created=utc_now())
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    try:
        with db.write() as conn:
            conn.execute(
                insert(principals).values(
                    name=principal.name,
                    role=principal.role,
                    token_sha256=token_digest(token),
                    created=principal.created,
                )
            )
    except IntegrityError:
        raise InvalidParameterError(f"principal {name!r} exists already") from None
    return principal, token


def listing(db: Database) -> list[Principal]:
    """Every principal, revoked ones included, by name (no token, no digest)."""
    with db.read() as conn:
        rows = conn.execute(select(principals).order_by(principals.c.name)).all()
    return [
        Principal(name=row.name, role=row.role, created=row.created, revoked=row.revoked)
        for row in rows
    ]


def revoke(db: Database, name: str) -> Principal:
    """Revoke ``name``'s token now (its row stays, for the ledger that names it)."""
    with db.write() as conn:
        row = conn.execute(select(principals).where(principals.c.name == name)).first()
        if row is None:
            raise InvalidParameterError(f"no principal {name!r}")
        if row.revoked is not None:
            raise InvalidParameterError(f"principal {name!r} was revoked at {row.revoked}")
        revoked = utc_now()
        conn.execute(update(principals).where(principals.c.name == name).values(revoked=revoked))
    return Principal(name=row.name, role=row.role, created=row.created, revoked=revoked)


class Authenticator:
    """Who presents this ``Authorization`` header: a role-only token (compared in constant
    time against every one) or a named principal's (its sha256 looked up, cached for
    ``CACHE_SECONDS``)."""

    def __init__(
        self,
        db: Database,
        role_tokens: tuple[tuple[Role, bytes], ...],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._db = db
        self._role_tokens = role_tokens
        self._clock = clock
        self._cache: dict[str, tuple[float, Caller | None]] = {}
        self._lock = threading.Lock()

    def __call__(self, authorization: str | None) -> Caller | None:
        role = match_token(authorization, self._role_tokens)
        if role is not None:
            return Caller(role=role)
        presented = presented_token(authorization)
        if presented is None:
            return None
        return self._named(hashlib.sha256(presented).hexdigest())

    def _named(self, digest: str) -> Caller | None:
        now = self._clock()
        with self._lock:
            hit = self._cache.get(digest)
        if hit is not None and now - hit[0] < CACHE_SECONDS:
            return hit[1]
        with self._db.read() as conn:
            row = conn.execute(
                select(principals.c.name, principals.c.role).where(
                    principals.c.token_sha256 == digest, principals.c.revoked.is_(None)
                )
            ).first()
        caller = None if row is None else Caller(role=row.role, actor=row.name)
        with self._lock:
            if len(self._cache) >= 10_000:
                self._cache.clear()  # bounded: bad tokens cannot grow it without limit
            self._cache[digest] = (now, caller)
        return caller
