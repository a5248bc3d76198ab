"""Releases: create (advertiser), metadata (any role), the one message (publisher, advertiser)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from typing import Annotated, Any

from fastapi import APIRouter, Path, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse

from labels_party.api.deps import (
    Actor,
    AdvertiserOn,
    AnyRole,
    IdempotencyKeyHeader,
    MessageReader,
    ServicesDep,
)
from labels_party.api.errors import engine_refusal
from labels_party.api.routes import BodyDocumentedRoute
from labels_party.api.routes.audit import release_recorder
from labels_party.budget import idempotency as idem
from labels_party.budget.trails import audited, logged_download
from labels_party.catalog import listings
from labels_party.errors import FieldError, NotAcceptableError, NotFoundError
from labels_party.releasing import releases as rel
from labels_party.schemas import (
    ReleaseCreate,
    ReleasePreview,
    ReleasePublic,
    ReleaseRequestBody,
)
from shared.errors import InvalidParameterError
from shared.message import (
    BINARY_MEDIA_TYPE,
    JSON_MEDIA_TYPE,
    RELEASE_ID_PATTERN,
    MessageHeader,
)
from shared.plan import ReleaseRequest
from shared.service.http.requests import json_body

router = APIRouter(tags=["releases"], route_class=BodyDocumentedRoute)
# Documented (OpenAPI), and checked by known_release: a malformed id is simply not found (404).
ReleasePath = Path(json_schema_extra={"pattern": RELEASE_ID_PATTERN}, description="release id")
_RELEASE_ID_RE = re.compile(RELEASE_ID_PATTERN)


def known_release(release_id: str) -> str:
    """``release_id`` if it is well formed; else the 404 an unknown release gets."""
    if not _RELEASE_ID_RE.fullmatch(release_id):
        raise NotFoundError(
            "release not found", [FieldError(field="release_id", message="unknown release")]
        )
    return release_id


@contextmanager
def _release_field() -> Iterator[None]:
    """An unknown release's 404 names the path parameter, ``release_id``."""
    try:
        yield
    except NotFoundError as exc:
        if [e.field for e in exc.errors] == ["id"]:
            raise NotFoundError(
                exc.detail, [FieldError(field="release_id", message="unknown release")]
            ) from None
        raise


@router.post(
    "/v1/datasets/{name}/releases",
    status_code=201,
    response_model=ReleasePublic | ReleasePreview,
    responses={200: {"model": ReleasePreview, "description": "dry_run: the plan, nothing spent"}},
)
async def create_release(
    response: Response,
    call: AdvertiserOn,
    body: Annotated[ReleaseCreate, json_body(ReleaseCreate)],
    idempotency_key: IdempotencyKeyHeader,
) -> Any:
    """Randomize every registered example's label and store the one message, spending epsilon.

    With ``dry_run`` the plan is returned (200) and nothing is read or spent (a key is not
    kept). With ``Idempotency-Key``, a repeat of the request gets the first answer again.
    """
    role, services, name = call.role, call.services, call.name
    request_ = release_request(body)
    key = idem.IdempotencyKey.of(
        idempotency_key, kind=idem.RELEASE, request=request_.public(), role=role, actor=call.actor
    )
    try:
        if body.dry_run:
            response.status_code = 200
            return await run_in_threadpool(
                services.releases.preview, dataset=name, request=request_
            )
        create = partial(
            services.releases.create,
            dataset=name,
            request=request_,
            actor_role=role,
            actor=call.actor,
            key=key,
        )
        recorder = release_recorder(
            services, role=role, actor=call.actor, dataset=name, request=request_
        )
        meta = await run_in_threadpool(audited, create, recorder)  # refusals leave a trace
    except InvalidParameterError as exc:  # the engine refused a parameter: name the field
        given = body.epsilon_histogram is not None
        raise engine_refusal(exc, histogram_share_given=given) from None
    if isinstance(meta, idem.Replayed):
        response.headers[idem.REPLAYED_HEADER] = "true"
        services.metrics.replay(idem.RELEASE)
    else:
        services.metrics.release(meta["mechanism"])
    if services.receipts is not None:  # sign now from the stored rows (else on first request)
        await run_in_threadpool(services.receipts.sign_after_release, meta["id"])
    return meta


def release_request(body: ReleaseRequestBody) -> ReleaseRequest:
    """The service's request from a release body (``/releases`` and ``/external-releases``)."""
    return ReleaseRequest.from_params(
        body.params.model_dump(exclude_none=True),  # the options the caller gave
        epsilon=body.epsilon,
        mechanism=body.mechanism,
        epsilon_histogram=body.epsilon_histogram,
    )


@router.get("/v1/releases/{release_id}", response_model=ReleasePublic)
def get_release(role: AnyRole, services: ServicesDep, release_id: str = ReleasePath) -> Any:
    """Public metadata of a release."""
    with _release_field():
        return rel.release_metadata(services.db, known_release(release_id))


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
    request: Request,
    role: MessageReader,
    actor: Actor,
    services: ServicesDep,
    release_id: str = ReleasePath,
) -> Response:
    """The one privatized message: JSON, or the binary encoding (``Accept``), streamed.

    ETag: the message's sha256 (``header.body_sha256``) for JSON, the binary encoding's sha256
    for the binary one; ``If-None-Match`` with it answers 304, and ``HEAD`` sends the headers only.
    """
    kind = negotiate(request.headers.get("accept"))
    binary = kind == BINARY_MEDIA_TYPE
    with _release_field():
        message = rel.stored_message(services.db, known_release(release_id))
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
    chunks = rel.iter_binary if binary else rel.iter_json
    body = logged_download(  # the operator's access log: who pulled which message, when
        services.db,
        chunks(services.db, message),
        actor_role=role,
        actor=actor,
        release_id=release_id,
        encoding=kind,
    )
    return StreamingResponse(body, media_type=kind, headers=headers)


def _matches(if_none_match: str | None, etag: str) -> bool:
    """Whether an ``If-None-Match`` header names ``etag`` (weak comparison, RFC 9110 13.1.2)."""
    if not if_none_match:
        return False
    tags = [tag.strip().removeprefix("W/") for tag in if_none_match.split(",")]
    return "*" in tags or etag in tags


@router.get("/v1/releases/{release_id}/header", response_model=MessageHeader)
def get_header(role: AnyRole, services: ServicesDep, release_id: str = ReleasePath) -> Any:
    """The header of the release's message (public: parameters, epsilons, noisy histogram)."""
    with _release_field():
        return listings.release_header(services.db, known_release(release_id))
