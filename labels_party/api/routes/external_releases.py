"""External releases: record the spend of a release a Spark job executed (advertiser)."""

from __future__ import annotations

from functools import partial
from typing import Annotated, Any

from fastapi import APIRouter, Response
from fastapi.concurrency import run_in_threadpool

from labels_party import external_releases as ext
from labels_party.api.deps import AdvertiserOn
from labels_party.api.errors import engine_refusal
from labels_party.api.routes import BodyDocumentedRoute
from labels_party.api.routes.releases import release_request
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
    call: AdvertiserOn,
    body: Annotated[ExternalReleaseCreate, json_body(ExternalReleaseCreate)],
) -> Any:
    """Check an externally executed release against the plan and spend its epsilon.

    The plan is recomputed from the dataset and n; the header must match it. The budget check,
    the release row and the ledger entries are one transaction. A replay returns 200.
    """
    record = partial(
        ext.record,
        dataset=call.name,
        request=release_request(body),
        n=body.n,
        universe_sha256=body.universe_sha256,
        labels_sha256=body.labels_sha256,
        plan_given=body.plan,
        header_raw=body.header,
        actor_role=call.role,
        actor=call.actor,
    )
    try:
        meta, new = await run_in_threadpool(record, call.services.db)
    except InvalidParameterError as exc:  # the engine refused a parameter: name the field
        given = body.epsilon_histogram is not None
        raise engine_refusal(exc, histogram_share_given=given) from None
    if new:
        call.services.metrics.release(meta["mechanism"])
    else:
        response.status_code = 200
    return meta
