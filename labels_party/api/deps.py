"""Dependencies: the service state, bearer-token authentication, role checks, and the dataset
a call is on (``DatasetCall``)."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Header, Path, Request

from labels_party.access.principals import Authenticator, Caller
from labels_party.catalog.datasets import LOOKUP_PATTERN
from labels_party.config import Role, Settings
from labels_party.db.engine import Database
from labels_party.errors import BadInputError, FieldError
from labels_party.metrics import Metrics
from labels_party.releasing.model_releases import ModelReleaseService
from labels_party.releasing.receipts import ReceiptService
from labels_party.releasing.releases import ReleaseService
from shared.service.http.auth import unauthorized
from shared.service.http.errors import HTTPProblem
from shared.service.http.requests import check_query


@dataclass(frozen=True, kw_only=True)
class Services:
    """Everything a request handler needs, built once per app."""

    settings: Settings
    db: Database
    releases: ReleaseService
    model_releases: ModelReleaseService
    metrics: Metrics
    authenticate: Authenticator  # role-only tokens, then named principals
    receipts: ReceiptService | None = None


def get_services(request: Request) -> Services:
    return request.app.state.services  # type: ignore[no-any-return]


ServicesDep = Annotated[Services, Depends(get_services)]


def identify(services: Services, authorization: str | None) -> Caller | None:
    """Who presents this token: a role-only token's role, or a named principal."""
    return services.authenticate(authorization)


def require(*roles: Role) -> Callable[[Request], Role]:
    """A dependency admitting only ``roles`` (401 without a valid token, 403 otherwise).

    Keeps the caller (role and principal) as ``request.state.caller`` (:func:`actor_of`). Then
    checks the query string (after the role, so a caller without it learns nothing).
    """

    def dependency(request: Request) -> Role:
        caller = identify(get_services(request), request.headers.get("authorization"))
        if caller is None:
            raise unauthorized()
        if caller.role not in roles:
            detail = f"role {caller.role!r} may not call this endpoint ({', '.join(roles)})"
            raise HTTPProblem(403, detail, [("Authorization", detail)])
        request.state.caller = caller
        check_query(request)
        return caller.role

    return dependency


def actor_of(request: Request) -> str | None:
    """The named principal of an admitted request (None: a role-only token)."""
    caller: Caller | None = getattr(request.state, "caller", None)
    return None if caller is None else caller.actor


Actor = Annotated[str | None, Depends(actor_of)]


AnyRole = Annotated[Role, Depends(require("advertiser", "publisher", "operator"))]
Advertiser = Annotated[Role, Depends(require("advertiser"))]
Publisher = Annotated[Role, Depends(require("publisher"))]
Operator = Annotated[Role, Depends(require("operator"))]
MessageReader = Annotated[Role, Depends(require("publisher", "advertiser"))]

NamePath = Path(pattern=LOOKUP_PATTERN, description="dataset name")


@dataclass(frozen=True, kw_only=True)
class DatasetCall:
    """A call on one dataset: the caller's role and principal, the service state, the
    dataset's name."""

    role: Role
    services: Services
    name: str
    actor: str | None = None


def on_dataset(*roles: Role) -> Callable[..., DatasetCall]:
    """A dependency admitting ``roles`` (:func:`require`), then reading the dataset's name from
    the path; declare a JSON body after it, as after a role. (This module does not postpone
    annotations: FastAPI must see ``Depends(admit)``, a local, as an object.)"""
    admit = require(*roles)

    def dependency(
        request: Request, role: Annotated[Role, Depends(admit)], name: str = NamePath
    ) -> DatasetCall:
        return DatasetCall(
            role=role, services=get_services(request), name=name, actor=actor_of(request)
        )

    return dependency


AnyRoleOn = Annotated[DatasetCall, Depends(on_dataset("advertiser", "publisher", "operator"))]
AdvertiserOn = Annotated[DatasetCall, Depends(on_dataset("advertiser"))]
PublisherOn = Annotated[DatasetCall, Depends(on_dataset("publisher"))]
OperatorOn = Annotated[DatasetCall, Depends(on_dataset("operator"))]


def _idempotency_key(
    request: Request,
    idempotency_key: Annotated[
        str | None,
        Header(
            alias="Idempotency-Key",
            description="1 to 255 visible ASCII characters naming this request: a repeat by the "
            "same caller with the same key and request is answered (Idempotent-Replayed: true) "
            "and spends or adds nothing",
        ),
    ] = None,
) -> str | None:
    """The request's one ``Idempotency-Key`` (``labels_party.budget.idempotency``); sent twice,
    a 422 naming it (the first would count silently, a proxy joining them a 422: say so)."""
    if len(request.headers.getlist("idempotency-key")) > 1:
        raise BadInputError(
            "Idempotency-Key given more than once",
            [FieldError(field="Idempotency-Key", message="give one key per request")],
        )
    return idempotency_key


# The optional ``Idempotency-Key`` of releases, model releases and top-ups.
IdempotencyKeyHeader = Annotated[str | None, Depends(_idempotency_key)]
