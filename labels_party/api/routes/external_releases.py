"""External releases: record the spend of a release a Spark job executed (advertiser)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Response
from fastapi.concurrency import run_in_threadpool

from labels_party import external_releases as ext
from labels_party.api.deps import Advertiser, ServicesDep
from labels_party.api.errors import engine_field
from labels_party.api.routes import BodyDocumentedRoute
from labels_party.api.routes.datasets import NamePath
from labels_party.api.routes.releases import release_request
from labels_party.errors import BadInputError, FieldError
from labels_party.schemas import ExternalReleaseCreate, ReleasePublic
from shared.errors import InvalidParameterError
from shared.http.requests import json_body

router = APIRouter(tags=["releases"], route_class=BodyDocumentedRoute)


@router.post(
    "/v1/datasets/{name}/external-releases",
    status_code=201,
    response_model=ReleasePublic,
    responses={200: {"model": ReleasePublic, "description": "already recorded (a replay)"}},
)
async def create_external_release(
    response: Response,
    role: Advertiser,
    services: ServicesDep,
    body: Annotated[ExternalReleaseCreate, json_body(ExternalReleaseCreate)],
    name: str = NamePath,
) -> Any:
    """Check an externally executed release against the plan and spend its epsilon.

    The plan is recomputed from the dataset and n; the header must match it. The budget check,
    the release row and the ledger entries are one transaction. A replay returns 200.
    """
    request_ = release_request(body)
    try:
        meta, new = await run_in_threadpool(
            ext.record,
            services.db,
            dataset=name,
            request=request_,
            n=body.n,
            plan_given=body.plan,
            header_raw=body.header,
            actor_role=role,
        )
    except InvalidParameterError as exc:  # the engine refused a parameter: name the field
        field = engine_field(str(exc))
        raise BadInputError(str(exc), [FieldError(field=field, message=str(exc))]) from None
    if new:
        services.metrics.release(meta["mechanism"])
    else:
        response.status_code = 200
    return meta
