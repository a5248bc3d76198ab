"""Request bodies: size limits, Content-Type dispatch, streaming into the parsers."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol, TypeVar

from pydantic import BaseModel
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from labels_party.errors import (
    PayloadTooLargeError,
)
from shared.service.http import errors as http_errors
from shared.service.http.middleware import HTTPMiddleware
from shared.service.http.requests import media_type, require_media

ModelT = TypeVar("ModelT", bound=BaseModel)
T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class BodyLimitMiddleware(HTTPMiddleware):
    """Refuse bodies over the limit: up front by Content-Length, else while streaming.

    JSON bodies are parsed whole, so they get the smaller ``max_json_bytes``. A body with a
    ``Content-Encoding`` (gzip, br, ...) is refused with 415 (RFC 7694): read as plain text it
    would be garbage or, worse, be misread.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_body_bytes: int,
        max_json_bytes: int,
        endpoint_limit: Callable[[str, str], int | None] | None = None,
    ) -> None:
        """``endpoint_limit(method, path)``: an endpoint's own, smaller limit (or None)."""
        super().__init__(app)
        self.max_body_bytes = max_body_bytes
        self.max_json_bytes = max_json_bytes
        self.endpoint_limit = endpoint_limit

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = dict(scope.get("headers") or [])
        refused = http_errors.encoding_error(headers)
        if refused is not None:
            await http_errors.send_json(send, 415, refused, close=True)
            return
        kind = media_type(headers.get(b"content-type", b"").decode("latin-1"))
        limit = self.max_json_bytes if kind in ("application/json", "") else self.max_body_bytes
        own = self.endpoint_limit(scope["method"], scope["path"]) if self.endpoint_limit else None
        limit = limit if own is None else min(limit, own)
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            too_large = http_errors.error_shape(_too_large(limit), [("body", "too large")])
            await http_errors.send_json(send, 413, too_large, close=True)
            return
        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise PayloadTooLargeError(_too_large(limit))
            return message

        await self.app(scope, limited_receive, send)


def _too_large(limit: int) -> str:
    return f"request body exceeds the limit of {limit} bytes"


class StreamParser(Protocol[T_co]):
    """A chunk-fed parser of a bulk body (labels or example ids)."""

    def feed(self, chunk: bytes) -> None: ...

    def finish(self) -> T_co: ...


async def feed_stream(request: Request, parser: StreamParser[object]) -> None:
    """Feed the request body to ``parser`` chunk by chunk as it arrives (never held whole)."""
    async for chunk in request.stream():
        if chunk:
            parser.feed(chunk)


async def read_batch(
    request: Request,
    *,
    parse_json: Callable[[bytes], T],
    streams: Mapping[str, Callable[[], StreamParser[T]]],
) -> T:
    """One ingest batch: a JSON body parsed whole, or a bulk body (one of ``streams``' media
    types) fed to its parser as it arrives; another media type is a 415."""
    kind = require_media(request.headers.get("content-type"), ["application/json", *streams])
    if kind == "application/json":
        return parse_json(await request.body())
    parser = streams[kind]()
    await feed_stream(request, parser)
    return parser.finish()
