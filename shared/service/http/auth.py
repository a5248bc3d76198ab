"""Bearer tokens: constant-time matching and the one 401 both services answer."""

from __future__ import annotations

import hmac
from collections.abc import Iterable
from typing import TypeVar

from shared.service.http.errors import HTTPProblem

NameT = TypeVar("NameT")
MISSING_OR_INVALID = "missing or invalid bearer token"


def presented_token(authorization: str | None) -> bytes | None:
    """The token of an ``Authorization: Bearer <token>`` header, else ``None``."""
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip().encode("utf-8")


def match_token(authorization: str | None, table: Iterable[tuple[NameT, bytes]]) -> NameT | None:
    """The name whose token is presented, compared against EVERY token in constant time (no
    early exit: the time taken does not depend on which token matched, or how much of it)."""
    presented = presented_token(authorization)
    if presented is None:
        return None
    found: NameT | None = None
    for name, expected in table:
        if hmac.compare_digest(presented, expected):
            found = name
    return found


def unauthorized() -> HTTPProblem:
    """401 with ``WWW-Authenticate: Bearer``, naming the Authorization header."""
    return HTTPProblem(
        401,
        MISSING_OR_INVALID,
        [("Authorization", MISSING_OR_INVALID)],
        headers={"WWW-Authenticate": "Bearer"},
    )
