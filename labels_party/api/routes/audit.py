"""The operator's trails (``labels_party.budget.trails``): refused releases and message
downloads."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from sqlalchemy import Table
from sqlalchemy.exc import OperationalError

from labels_party.api import errors
from labels_party.api.deps import Operator, Services, ServicesDep
from labels_party.api.routes import BodyDocumentedRoute
from labels_party.budget import trails
from labels_party.db.models import access_log, release_audit
from labels_party.errors import FieldError, ServiceError
from shared import epsilon as amounts
from shared.errors import BudgetExceededError, InvalidParameterError
from shared.plan import ReleaseRequest
from shared.service.http.errors import internal_error_body

router = APIRouter(prefix="/v1", tags=["audit"], route_class=BodyDocumentedRoute)


def caller_view(exc: BaseException, *, histogram_share_given: bool) -> tuple[int, dict[str, Any]]:
    """The status and body the caller gets for ``exc`` from ``POST .../releases``.

    Mirrors the handlers of ``labels_party.api.errors`` and the release route's mapping of an
    engine ``InvalidParameterError`` to 422 (tested against the real responses).
    """
    if isinstance(exc, InvalidParameterError):
        exc = errors.engine_refusal(exc, histogram_share_given=histogram_share_given)
    if isinstance(exc, ServiceError):
        status = next((code for cls, code in errors.STATUS.items() if isinstance(exc, cls)), 400)
        found = exc.errors
        if not found:
            field = next(
                (f for cls, f in errors.DEFAULT_FIELD.items() if isinstance(exc, cls)), "request"
            )
            found = [FieldError(field=field, message=exc.detail)]
        return status, errors.error_body(exc.detail, found)
    if isinstance(exc, BudgetExceededError):
        left = f"only {amounts.text(exc.left)} of the budget is left"
        return 409, errors.error_body(str(exc), [FieldError(field="epsilon", message=left)])
    if isinstance(exc, OperationalError) and "locked" in str(exc.orig):
        busy = FieldError(field="database", message="busy; retry later")
        return 503, errors.error_body("the database is busy; retry later", [busy])
    return 500, internal_error_body()


def release_recorder(
    services: Services,
    *,
    role: str,
    dataset: str,
    request: ReleaseRequest,
    actor: str | None = None,
) -> Any:
    """An ``on_error`` for ``trails.audited`` that records a failed release for the operator."""

    def record(exc: BaseException) -> None:
        status, body = caller_view(exc, histogram_share_given=request.epsilon_histogram is not None)
        trails.record_refusal(
            services.db,
            actor_role=role,
            actor=actor,
            dataset=dataset,
            request=request.public(),
            status=status,
            error_class=type(exc).__name__,
            body=body,
        )

    return record


@dataclass(frozen=True)
class TrailPage:
    """One page of an operator trail: entries with seq > after, at most limit of them."""

    after: int = Query(default=0, ge=0, le=2**63 - 1, description="entries with seq > after")
    limit: int = Query(default=100, ge=1, le=1000)


Page = Annotated[TrailPage, Depends()]


def _page(services: Services, table: Table, page: TrailPage, public: Callable[..., Any]) -> Any:
    result = trails.page(services.db, table, after=page.after, limit=page.limit)
    result["entries"] = [public(row) for row in result["entries"]]
    return result


@router.get("/audit")
def get_audit(role: Operator, services: ServicesDep, page: Page) -> Any:
    """Releases refused or failed after acceptance: who, when, what was asked, what they got."""
    return _page(services, release_audit, page, trails.public_refusal)


@router.get("/access-log")
def get_access_log(role: Operator, services: ServicesDep, page: Page) -> Any:
    """Every message download: role, release id, time, encoding, bytes sent, completed."""
    return _page(services, access_log, page, trails.public_access)
