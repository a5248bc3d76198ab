"""Dependencies: the service state, bearer-token authentication and role checks."""

from __future__ import annotations

import hmac
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from fastapi.dependencies.models import Dependant

from labels_party.config import Role, Settings
from labels_party.db.engine import Database
from labels_party.errors import BadInputError, FieldError
from labels_party.metrics import Metrics
from labels_party.receipts import ReceiptService
from labels_party.releases import ReleaseService


class AuthError(Exception):
    """401 (no or unknown token) or 403 (a valid token of the wrong role)."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


@dataclass(frozen=True, kw_only=True)
class Services:
    """Everything a request handler needs, built once per app."""

    settings: Settings
    db: Database
    releases: ReleaseService
    metrics: Metrics
    token_table: tuple[tuple[Role, bytes], ...]
    receipts: ReceiptService | None = None


def get_services(request: Request) -> Services:
    return request.app.state.services  # type: ignore[no-any-return]


ServicesDep = Annotated[Services, Depends(get_services)]


def identify(services: Services, authorization: str | None) -> Role | None:
    """The role whose token is presented, comparing against every token in constant time."""
    if not authorization:
        return None
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    presented = token.strip().encode("utf-8")
    found: Role | None = None
    for role, expected in services.token_table:
        if hmac.compare_digest(presented, expected):  # no early exit: time is role-independent
            found = role
    return found


def _declared_query(dependant: Dependant) -> set[str]:
    names = {param.alias for param in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _declared_query(sub)
    return names


def check_query(request: Request) -> None:
    """Refuse query parameters the endpoint does not declare, and repeated ones (422).

    FastAPI ignores unknown parameters and keeps the last of repeated ones, so a typo
    (``?overwite=true``) or ``?overwrite=true&overwrite=false`` would be silently reinterpreted.
    """
    route = request.scope.get("route")
    dependant = getattr(route, "dependant", None)
    if dependant is None:
        return
    declared = _declared_query(dependant)
    errors = []
    for name in dict.fromkeys(request.query_params.keys()):
        if name not in declared:
            errors.append(FieldError(field=f"query.{name}", message="unknown query parameter"))
        elif len(request.query_params.getlist(name)) > 1:
            errors.append(FieldError(field=f"query.{name}", message="given more than once"))
    if errors:
        raise BadInputError("invalid query string", errors[:10])


def require(*roles: Role) -> Callable[[Request], Role]:
    """A dependency admitting only ``roles`` (401 without a valid token, 403 otherwise).

    Then checks the query string (after the role, so a caller without it learns nothing).
    """

    def dependency(request: Request) -> Role:
        role = identify(get_services(request), request.headers.get("authorization"))
        if role is None:
            raise AuthError(401, "missing or invalid bearer token")
        if role not in roles:
            raise AuthError(403, f"role {role!r} may not call this endpoint ({', '.join(roles)})")
        check_query(request)
        return role

    return dependency


AnyRole = Annotated[Role, Depends(require("advertiser", "publisher", "operator"))]
Advertiser = Annotated[Role, Depends(require("advertiser"))]
Publisher = Annotated[Role, Depends(require("publisher"))]
Operator = Annotated[Role, Depends(require("operator"))]
MessageReader = Annotated[Role, Depends(require("publisher", "advertiser"))]
