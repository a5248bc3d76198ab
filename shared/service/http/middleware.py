"""ASGI middleware both services install."""

from __future__ import annotations

from collections.abc import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

RecordRequest = Callable[..., None]  # record(method=..., route=..., status=...)


class HTTPMiddleware:
    """A pure ASGI middleware that acts on HTTP requests in :meth:`handle`; everything else
    (lifespan, websockets) passes through to ``app`` untouched."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await self.handle(scope, receive, send)

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        raise NotImplementedError


class RequestMetricsMiddleware(HTTPMiddleware):
    """Count each request by method, route template (bounded cardinality: ``unmatched`` for a
    path no route serves) and status, through ``record``; a request that raises counts as 500."""

    def __init__(self, app: ASGIApp, *, record: RecordRequest) -> None:
        super().__init__(app)
        self.record = record

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        status = 500

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = scope.get("route")
            path = getattr(route, "path", None) or "unmatched"
            self.record(method=scope["method"], route=path, status=status)
