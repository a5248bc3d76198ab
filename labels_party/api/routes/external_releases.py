"""External releases (advertiser): charge a release a Spark job will execute, BEFORE it draws
any noise; then record its message, or its failure
(``labels_party.releasing.external_releases``)."""

from __future__ import annotations

from functools import partial
from typing import Annotated, Any

from fastapi import APIRouter, Path, Response
from fastapi.concurrency import run_in_threadpool

from labels_party.api.deps import AdvertiserOn
from labels_party.api.errors import engine_refusal
from labels_party.api.routes import BodyDocumentedRoute
from labels_party.api.routes.audit import release_recorder
from labels_party.api.routes.releases import release_request
from labels_party.budget.trails import audited
from labels_party.releasing import external_releases as ext
from labels_party.schemas import (
    ExternalReleaseCharge,
    ExternalReleaseFailure,
    ExternalReleasePublication,
    ReleasePublic,
)
from shared.errors import InvalidParameterError
from shared.message import RELEASE_ID_PATTERN
from shared.service.http.requests import json_body

router = APIRouter(tags=["releases"], route_class=BodyDocumentedRoute)
_PATH = "/v1/datasets/{name}/external-releases"
ReleaseIdPath = Path(pattern=RELEASE_ID_PATTERN, description="the charged release's id")
_REPLAY = {200: {"model": ReleasePublic, "description": "already recorded (a replay)"}}


@router.post(_PATH, status_code=201, response_model=ReleasePublic, responses=_REPLAY)
async def charge_external_release(
    response: Response,
    call: AdvertiserOn,
    body: Annotated[ExternalReleaseCharge, json_body(ExternalReleaseCharge)],
) -> Any:
    """Charge a release before the job draws its noise (state ``charged``).

    The plan is recomputed from the dataset and n and must be the job's; the budget check, the
    release row and its two ledger entries are one transaction. A replay returns 200.
    """
    request = release_request(body)
    charge = partial(
        ext.charge,
        call.services.db,
        dataset=call.name,
        request=request,
        n=body.n,
        release_id=body.release_id,
        labels_sha256=body.labels_sha256,
        plan_given=body.plan,
        actor_role=call.role,
        actor=call.actor,
    )
    recorder = release_recorder(
        call.services, role=call.role, actor=call.actor, dataset=call.name, request=request
    )
    try:  # a refused charge leaves a trace for the operator, as a refused release does
        meta, new = await run_in_threadpool(audited, charge, recorder)
    except InvalidParameterError as exc:  # the engine refused a parameter: name the field
        given = body.epsilon_histogram is not None
        raise engine_refusal(exc, histogram_share_given=given) from None
    if not new:
        response.status_code = 200
    return meta


@router.post(
    _PATH + "/{release_id}/publication",
    status_code=201,
    response_model=ReleasePublic,
    responses=_REPLAY,
)
async def publish_external_release(
    response: Response,
    call: AdvertiserOn,
    body: Annotated[ExternalReleasePublication, json_body(ExternalReleasePublication)],
    release_id: str = ReleaseIdPath,
) -> Any:
    """Record the message of a charged release (state ``released``): its header must be what
    the charged plan produces, its universe the dataset's. A replay returns 200."""
    publish = partial(
        ext.publish,
        dataset=call.name,
        release_id=release_id,
        universe_sha256=body.universe_sha256,
        header_raw=body.header,
        actor_role=call.role,
        actor=call.actor,
    )
    meta, new = await run_in_threadpool(publish, call.services.db)
    if new:
        call.services.metrics.release(meta["mechanism"])
    else:
        response.status_code = 200
    return meta


@router.post(_PATH + "/{release_id}/failure", response_model=ReleasePublic)
async def fail_external_release(
    call: AdvertiserOn,
    body: Annotated[ExternalReleaseFailure, json_body(ExternalReleaseFailure)],
    release_id: str = ReleaseIdPath,
) -> Any:
    """Mark a charged release failed (state ``failed``): its charge stays, nothing is
    published. Idempotent."""
    fail = partial(
        ext.fail,
        dataset=call.name,
        release_id=release_id,
        reason=body.reason,
        actor_role=call.role,
        actor=call.actor,
    )
    return await run_in_threadpool(fail, call.services.db)
