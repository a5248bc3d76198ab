"""Releases: create (advertiser), metadata (any role), the one message (publisher, advertiser)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Path, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse

from labels_party import catalog
from labels_party import datasets as ds
from labels_party import releases as rel
from labels_party.api.body import parse_model, require_json
from labels_party.api.deps import Advertiser, AnyRole, MessageReader, ServicesDep
from labels_party.api.errors import engine_field
from labels_party.api.routes import json_body_doc
from labels_party.api.routes.datasets import NamePath
from labels_party.errors import BadInputError, FieldError, NotAcceptableError
from labels_party.schemas import ZETA_MAX_RATIO, ZETA_MIN_RATIO, ReleaseCreate, ReleasePublic
from shared.errors import InvalidParameterError
from shared.message import BINARY_MEDIA_TYPE, JSON_MEDIA_TYPE, MessageHeader

router = APIRouter(tags=["releases"])
ReleasePath = Path(pattern=rel.RELEASE_ID_PATTERN, description="release id")


@router.post(
    "/v1/datasets/{name}/releases",
    status_code=201,
    response_model=ReleasePublic,
    openapi_extra=json_body_doc(ReleaseCreate),
)
async def create_release(
    request: Request, role: Advertiser, services: ServicesDep, name: str = NamePath
) -> Any:
    """Randomize every registered example's label and store the one message, spending epsilon."""
    require_json(request.headers.get("content-type"))
    body = parse_model(ReleaseCreate, await request.body())
    if body.params.zeta is not None:
        row, _ = await run_in_threadpool(ds.get_dataset, services.db, name)
        _check_zeta(body.params.zeta, width=row.label_max - row.label_min)
    request_ = rel.ReleaseRequest(
        mechanism=body.mechanism,
        epsilon=body.epsilon,
        epsilon_histogram=body.epsilon_histogram,
        bins=body.params.bins,
        params=body.params.mechanism_params(),
    )
    try:
        meta = await run_in_threadpool(
            services.releases.create, dataset=name, request=request_, actor_role=role
        )
    except InvalidParameterError as exc:  # the engine refused a parameter: name the field
        field = engine_field(str(exc))
        if field == "epsilon_histogram" and body.epsilon_histogram is None:
            field = "epsilon"  # the default split of epsilon made the histogram's share
        raise BadInputError(str(exc), [FieldError(field=field, message=str(exc))]) from None
    services.metrics.release(meta["mechanism"])
    return meta


def _check_zeta(zeta: float, *, width: float) -> None:
    """RPWithPrior's noise radius, in label units, within a sane ratio of the label range."""
    if not ZETA_MIN_RATIO * width <= zeta <= ZETA_MAX_RATIO * width:
        raise BadInputError(
            "params.zeta is out of range for this dataset's label bounds",
            [
                FieldError(
                    field="params.zeta",
                    message=f"must lie in [{ZETA_MIN_RATIO:g}, {ZETA_MAX_RATIO:g}] x "
                    "(label_max - label_min)",
                )
            ],
        )


@router.get("/v1/releases/{release_id}", response_model=ReleasePublic)
def get_release(role: AnyRole, services: ServicesDep, release_id: str = ReleasePath) -> Any:
    """Public metadata of a release."""
    return rel.release_metadata(services.db, release_id)


def negotiate(accept: str | None) -> str:
    """JSON unless the binary encoding is preferred; 406 if neither is acceptable."""
    if not accept or not accept.strip():
        return JSON_MEDIA_TYPE
    quality: dict[str, float] = {}
    for item in accept.split(","):
        kind, *options = (piece.strip() for piece in item.split(";"))
        q = 1.0
        for option in options:
            key, _, value = option.partition("=")
            if key.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        quality[kind.lower()] = max(q, quality.get(kind.lower(), 0.0))

    def q_of(media: str) -> float:
        top = media.split("/")[0]
        for key in (media, f"{top}/*", "*/*"):
            if key in quality:
                return quality[key]
        return 0.0

    q_json, q_binary = q_of(JSON_MEDIA_TYPE), q_of(BINARY_MEDIA_TYPE)
    if q_json <= 0 and q_binary <= 0:
        raise NotAcceptableError(
            f"cannot produce any of {accept!r}; use {JSON_MEDIA_TYPE} or {BINARY_MEDIA_TYPE}",
            [FieldError(field="Accept", message=f"use {JSON_MEDIA_TYPE} or {BINARY_MEDIA_TYPE}")],
        )
    return BINARY_MEDIA_TYPE if q_binary > q_json else JSON_MEDIA_TYPE


_MESSAGE_PATH = "/v1/releases/{release_id}/message"


@router.head(_MESSAGE_PATH, summary="The message's headers only")
@router.get(
    _MESSAGE_PATH,
    responses={
        200: {
            "description": "the message (stored once; every pull is byte-identical)",
            "content": {
                JSON_MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/LabelMessage"}},
                BINARY_MEDIA_TYPE: {"schema": {"type": "string", "format": "binary"}},
            },
        },
        304: {"description": "If-None-Match names this representation's ETag"},
    },
)
def get_message(
    request: Request, role: MessageReader, services: ServicesDep, release_id: str = ReleasePath
) -> Response:
    """The one privatized message: JSON, or the binary encoding (``Accept``), streamed.

    ETag: the message's sha256 (``header.body_sha256``) for JSON, the binary encoding's sha256
    for the binary one; ``If-None-Match`` with it answers 304, and ``HEAD`` sends the headers only.
    """
    kind = negotiate(request.headers.get("accept"))
    message = rel.stored_message(services.db, release_id)
    binary = kind == BINARY_MEDIA_TYPE
    etag = f'"{message.binary_sha256 if binary else message.message_sha256}"'
    headers = {
        "X-Labeldp-Body-Sha256": message.message_sha256,
        "ETag": etag,
        "Cache-Control": "private, no-cache",
        "Vary": "Accept",
    }
    if _matches(request.headers.get("if-none-match"), etag):
        return Response(status_code=304, headers=headers)
    if binary:
        headers["Content-Length"] = str(message.size)
    if request.method == "HEAD":
        return Response(media_type=kind, headers=headers)
    body = rel.iter_binary if binary else rel.iter_json
    return StreamingResponse(body(services.db, message), media_type=kind, headers=headers)


def _matches(if_none_match: str | None, etag: str) -> bool:
    """Whether an ``If-None-Match`` header names ``etag`` (weak comparison, RFC 9110 13.1.2)."""
    if not if_none_match:
        return False
    tags = [tag.strip().removeprefix("W/") for tag in if_none_match.split(",")]
    return "*" in tags or etag in tags


@router.get("/v1/releases/{release_id}/header", response_model=MessageHeader)
def get_header(role: AnyRole, services: ServicesDep, release_id: str = ReleasePath) -> Any:
    """The header of the release's message (public: parameters, epsilons, noisy histogram)."""
    return catalog.release_header(services.db, release_id)
