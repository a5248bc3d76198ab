"""Model releases: public features (publisher), a released model (advertiser), its message."""

from __future__ import annotations

from functools import partial
from typing import Annotated, Any

from fastapi import APIRouter, Path, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response

from labels_party.api.deps import (
    AdvertiserOn,
    AnyRoleOn,
    IdempotencyKeyHeader,
    MessageReader,
    PublisherOn,
    ServicesDep,
)
from labels_party.api.routes import BodyDocumentedRoute
from labels_party.budget import idempotency as idem
from labels_party.catalog import listings
from labels_party.errors import BadInputError, FieldError
from labels_party.releasing import model_releases as mr
from labels_party.schemas import ModelReleaseCreate, ModelReleaseList
from shared.errors import InvalidParameterError
from shared.estimators import registry as estimators
from shared.message import JSON_MEDIA_TYPE
from shared.model_message import MODEL_RELEASE_ID_PATTERN
from shared.service.http.requests import json_body, require_media

router = APIRouter(tags=["model releases"], route_class=BodyDocumentedRoute)
# Documented (OpenAPI) and checked by mr.stored_model: a malformed id is simply not found (404),
# as for label releases.
ModelReleasePath = Path(
    json_schema_extra={"pattern": MODEL_RELEASE_ID_PATTERN}, description="model release id"
)


def _parameters() -> set[str]:
    """Every parameter some registered estimator family reads (``shared.estimators.registry``)."""
    found: set[str] = set()
    for name in estimators.names():
        family = estimators.get(name)
        for kind in family.privacies:
            found |= family.allowed(kind)
    return found


@router.post(
    "/v1/datasets/{name}/public-features",
    status_code=201,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "text/csv": {"schema": {"type": "string"}},
                "application/json": {"schema": {"type": "object"}},
            },
        }
    },
)
async def upload_public_features(request: Request, call: PublisherOn) -> Any:
    """Upload the numeric feature columns the publisher chooses for model releases.

    CSV (``example_id,col,...``) or JSON (``{"rows": [{"example_id": ..., "col": 1.5}]}``); every
    id registered in the dataset, every value a finite number. The advertiser sees these columns.
    """
    media = require_media(
        request.headers.get("content-type"), {"text/csv": 1, "application/json": 1, "": 1}
    )
    await run_in_threadpool(mr.dataset_for_features, call.services.db, call.name)
    table = mr.parse_features(await request.body(), media or "application/json")
    store = partial(mr.store_features, actor_role=call.role)
    return await run_in_threadpool(store, call.services.db, call.name, table)


@router.post(
    "/v1/datasets/{name}/model-releases",
    status_code=201,
    responses={200: {"description": "dry_run: what it would charge and leave, nothing spent"}},
)
async def create_model_release(
    response: Response,
    call: AdvertiserOn,
    body: Annotated[ModelReleaseCreate, json_body(ModelReleaseCreate)],
    idempotency_key: IdempotencyKeyHeader,
) -> Any:
    """Fit ``estimator`` on the labels joined with the public features; spend (epsilon, delta).

    With ``dry_run``: every check, then what it would charge and leave (200), nothing spent (a
    key is not kept). With ``Idempotency-Key``, a repeat of the request gets the first answer."""
    model_request = mr.ModelRequest(
        **body.model_dump(exclude={"params", "dry_run"}),
        params=body.params.model_dump(exclude_none=True),
    )
    key = idem.IdempotencyKey.of(
        idempotency_key,
        kind=idem.MODEL,
        request=mr.public_request(model_request),
        role=call.role,
        actor=call.actor,
    )
    service = call.services.model_releases
    try:
        if body.dry_run:
            response.status_code = 200
            preview = partial(service.preview, request=model_request)
            return await run_in_threadpool(preview, dataset=call.name)
        create = partial(service.create, request=model_request, key=key)
        meta = await run_in_threadpool(
            create, dataset=call.name, actor_role=call.role, actor=call.actor
        )
    except InvalidParameterError as exc:  # an estimator refused a parameter: name it
        message = str(exc)
        named = sorted(_parameters())
        field = next((f"params.{p}" for p in named if message.startswith(f"{p} (")), "params")
        if message.startswith("delta ("):
            field = "delta"
        raise BadInputError(message, [FieldError(field=field, message=message)]) from None
    if isinstance(meta, idem.Replayed):
        response.headers[idem.REPLAYED_HEADER] = "true"
        call.services.metrics.replay(idem.MODEL)
    else:
        call.services.metrics.model_release(estimator=meta["estimator"], privacy=meta["privacy"])
    receipts = call.services.receipts
    if receipts is not None:
        sign = partial(receipts.sign_after_release, model=True)
        await run_in_threadpool(sign, meta["id"])
    return meta


@router.get("/v1/datasets/{name}/model-releases", response_model=ModelReleaseList)
def list_model_releases(call: AnyRoleOn) -> Any:
    """A dataset's model releases, newest first: what each released and spent, when, by whom."""
    models = listings.list_model_releases(call.services.db, call.name)
    return {"dataset": call.name, "model_releases": models}


@router.get("/v1/model-releases/{model_release_id}")
def get_model_release(
    role: MessageReader, services: ServicesDep, model_release_id: str = ModelReleasePath
) -> Response:
    """The stored model message (``shared.model_message.ModelMessage``), byte-identical."""
    text = mr.stored_model(services.db, model_release_id)
    return Response(text, media_type=JSON_MEDIA_TYPE, headers={"Cache-Control": "no-store"})
