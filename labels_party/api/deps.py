"""Dependencies: the service state, bearer-token authentication, role checks, and the dataset
a call is on (``DatasetCall``)."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Path, Request

from labels_party.config import Role, Settings
from labels_party.datasets import LOOKUP_PATTERN
from labels_party.db.engine import Database
from labels_party.metrics import Metrics
from labels_party.model_releases import ModelReleaseService
from labels_party.receipts import ReceiptService
from labels_party.releases import ReleaseService
from shared.http.auth import match_token, unauthorized
from shared.http.errors import HTTPProblem
from shared.http.requests import check_query


@dataclass(frozen=True, kw_only=True)
class Services:
    """Everything a request handler needs, built once per app."""

    settings: Settings
    db: Database
    releases: ReleaseService
    model_releases: ModelReleaseService
    metrics: Metrics
    token_table: tuple[tuple[Role, bytes], ...]
    receipts: ReceiptService | None = None


def get_services(request: Request) -> Services:
    return request.app.state.services  # type: ignore[no-any-return]


ServicesDep = Annotated[Services, Depends(get_services)]


def identify(services: Services, authorization: str | None) -> Role | None:
    """The role whose token is presented (constant time, every token compared)."""
    return match_token(authorization, services.token_table)


def require(*roles: Role) -> Callable[[Request], Role]:
    """A dependency admitting only ``roles`` (401 without a valid token, 403 otherwise).

    Then checks the query string (after the role, so a caller without it learns nothing).
    """

    def dependency(request: Request) -> Role:
        role = identify(get_services(request), request.headers.get("authorization"))
        if role is None:
            raise unauthorized()
        if role not in roles:
            detail = f"role {role!r} may not call this endpoint ({', '.join(roles)})"
            raise HTTPProblem(403, detail, [("Authorization", detail)])
        check_query(request)
        return role

    return dependency


AnyRole = Annotated[Role, Depends(require("advertiser", "publisher", "operator"))]
Advertiser = Annotated[Role, Depends(require("advertiser"))]
Publisher = Annotated[Role, Depends(require("publisher"))]
Operator = Annotated[Role, Depends(require("operator"))]
MessageReader = Annotated[Role, Depends(require("publisher", "advertiser"))]

NamePath = Path(pattern=LOOKUP_PATTERN, description="dataset name")


@dataclass(frozen=True, kw_only=True)
class DatasetCall:
    """A call on one dataset: the caller's role, the service state, the dataset's name."""

    role: Role
    services: Services
    name: str


def on_dataset(*roles: Role) -> Callable[..., DatasetCall]:
    """A dependency admitting ``roles`` (:func:`require`), then reading the dataset's name from
    the path; declare a JSON body after it, as after a role. (This module does not postpone
    annotations: FastAPI must see ``Depends(admit)``, a local, as an object.)"""
    admit = require(*roles)

    def dependency(
        request: Request, role: Annotated[Role, Depends(admit)], name: str = NamePath
    ) -> DatasetCall:
        return DatasetCall(role=role, services=get_services(request), name=name)

    return dependency


AnyRoleOn = Annotated[DatasetCall, Depends(on_dataset("advertiser", "publisher", "operator"))]
AdvertiserOn = Annotated[DatasetCall, Depends(on_dataset("advertiser"))]
PublisherOn = Annotated[DatasetCall, Depends(on_dataset("publisher"))]
OperatorOn = Annotated[DatasetCall, Depends(on_dataset("operator"))]
