"""The HTTP error pieces both services share: the error shape, problems, the common handlers.

The shape is ``{"detail": str, "errors": [{"field": str, "message": str}], ...}``; each service
maps its own domain errors onto it (``labels_party.api.errors``, ``features_party.api.errors``)
and registers the common handlers with :func:`install` (an :class:`HTTPProblem` raised by the
kit's request checks, a database that is down, any other database error).
Unexpected exceptions are logged by type and place only: their messages could quote data.
"""

from __future__ import annotations

import json
import logging
import traceback
from collections.abc import Iterable
from typing import Any, ClassVar

from fastapi import FastAPI, Request
from pydantic import BaseModel
from starlette.types import Message, Receive, Scope, Send

from shared.service.http.middleware import HTTPMiddleware

# The longest text an error body repeats in any one string: a message may name what was sent
# (a dataset name, an unknown mechanism), and a 100 KB mechanism came back whole (a fuzzer).
MAX_ERROR_TEXT = 500


def _bounded(text: str) -> str:
    return text if len(text) <= MAX_ERROR_TEXT else text[: MAX_ERROR_TEXT - 1] + "\u2026"


def error_shape(detail: str, errors: Iterable[tuple[str, str]], **extra: Any) -> dict[str, Any]:
    """The one error body; no ``(field, message)`` pairs becomes a generic ``request`` entry.
    Each text at most :data:`MAX_ERROR_TEXT` characters (cut with an ellipsis)."""
    listed = list(errors) or [("request", detail)]
    return {
        "detail": _bounded(detail),
        "errors": [
            {"field": _bounded(field), "message": _bounded(message)} for field, message in listed
        ],
        **extra,
    }


class ErrorItem(BaseModel):
    field: str
    message: str


class ErrorBody(BaseModel):
    """Every 4xx/5xx response body (the OpenAPI schema of :func:`error_shape`)."""

    detail: str
    errors: list[ErrorItem]


class HTTPProblem(Exception):
    """An HTTP error naming its fields, raised by the kit (auth, query, media, strict JSON)."""

    def __init__(
        self,
        status: int,
        detail: str,
        errors: Iterable[tuple[str, str]],
        *,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.errors = list(errors)
        self.headers = headers


def location(loc: Iterable[Any]) -> str:
    """A pydantic / FastAPI error location as a field: ``("body", "rows", 2, "x")`` ->
    ``rows[2].x`` (a leading ``body`` dropped), ``("path", "name")`` -> ``path.name``."""
    parts = list(loc)
    if parts[:1] == ["body"]:
        parts = parts[1:]
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else ("." if out else "") + str(part)
    return out or "body"


def validation_problems(errors: Iterable[Any]) -> list[tuple[str, str]]:
    """pydantic / FastAPI error dicts as (field, message), never with the offending input."""
    return [
        (location(err.get("loc", ())), str(err.get("msg", "invalid")).removeprefix("Value error, "))
        for err in errors
    ]


def internal_error_body() -> dict[str, Any]:
    """The body of every unexpected-error 500 (the same in both services)."""
    return error_shape(
        "internal error; the request was not applied",
        [("server", "unexpected error (logged by type and place only)")],
    )


DATABASE_UNREACHABLE = "the database is unreachable; retry later (the service reconnects by itself)"


def database_error(exc: BaseException) -> tuple[int, dict[str, Any]] | None:
    """The 503 for a database that is down, unreachable, busy or cannot be written (read-only,
    no privilege, disk full: :func:`shared.service.write_probe.write_refusal`); ``None`` for
    other errors.

    SQLAlchemy's ``OperationalError`` (a refused or dropped connection, a server shutting down,
    a locked or unreadable SQLite file) and its pool ``TimeoutError`` are failures of the
    database, not of the request: 503, so that clients retry. The pool pings a connection
    before use, so the service recovers on its own once the database is back.
    """
    from sqlalchemy.exc import DBAPIError, OperationalError
    from sqlalchemy.exc import TimeoutError as PoolTimeoutError

    from shared.service.write_probe import write_refusal

    if isinstance(exc, DBAPIError) and (refusal := write_refusal(exc)) is not None:
        return 503, error_shape(
            f"the database cannot be written ({refusal}); retry later",
            [("database", f"{refusal}; retry later")],
        )
    if isinstance(exc, PoolTimeoutError):
        return 503, error_shape(
            "the database is busy; retry later", [("database", "busy; retry later")]
        )
    if isinstance(exc, OperationalError) or (
        isinstance(exc, DBAPIError) and exc.connection_invalidated
    ):
        if "locked" in str(exc.orig):  # SQLite: another writer held the lock too long
            return 503, error_shape(
                "the database is busy; retry later", [("database", "busy; retry later")]
            )
        return 503, error_shape(DATABASE_UNREACHABLE, [("database", "unreachable")])
    return None


def encoding_error(headers: dict[bytes, bytes]) -> dict[str, Any] | None:
    """The 415 body for a compressed request body (RFC 7694); ``None`` if it is uncompressed.

    Read as plain text a gzip or br body would be a confusing error or, worse, be misread.
    """
    coding = headers.get(b"content-encoding", b"").decode("latin-1").strip().lower()
    if coding in ("", "identity"):
        return None
    return error_shape(
        f"Content-Encoding {coding!r} is not supported: send the body uncompressed",
        [("Content-Encoding", "only identity (uncompressed) bodies are accepted")],
    )


def where(exc: BaseException) -> str:
    """``file:line in function`` of the innermost frame: where to look, without the message."""
    frames = traceback.extract_tb(exc.__traceback__)
    return f"{frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name}" if frames else "?"


async def send_json(
    send: Send,
    status: int,
    content: dict[str, Any],
    *,
    close: bool = False,
    extra_headers: Iterable[tuple[bytes, bytes]] = (),
) -> None:
    """Answer from a middleware with a JSON body (``close``: ask the client to hang up)."""
    body = json.dumps(content).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        *extra_headers,
    ]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class CatchAllMiddleware(HTTPMiddleware):
    """Turn any unhandled exception into the JSON 500 and keep it inside the app (outermost).

    Starlette's own catch-all re-raises after answering, and the server (uvicorn) then logs the
    exception WITH its message, which could quote data (a label in a numpy error, say), and
    answers with plain text when no JSON handler ran. Subclasses set ``logger`` to the service's.
    """

    logger: ClassVar[logging.Logger]

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False

        async def send_wrapper(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        except Exception as exc:  # noqa: BLE001 - the boundary of the application
            answer = database_error(exc)
            if answer is not None:
                self.logger.warning("database unavailable: %s", type(exc).__name__)
            else:
                self.logger.error("internal error %s at %s", type(exc).__name__, where(exc))
                answer = 500, internal_error_body()
            if not started:  # mid-stream: the server closes the connection (truncated body)
                await send_json(send, *answer)


def install(app: FastAPI, logger: logging.Logger) -> None:
    """Register the handlers both services share on ``app`` (``logger``: the service's)."""
    from fastapi.responses import JSONResponse
    from sqlalchemy.exc import SQLAlchemyError

    @app.exception_handler(HTTPProblem)
    async def _problem(_request: Request, exc: HTTPProblem) -> JSONResponse:
        body = error_shape(exc.detail, exc.errors[:10])
        return JSONResponse(body, status_code=exc.status, headers=exc.headers)

    @app.exception_handler(SQLAlchemyError)
    async def _database(_request: Request, exc: SQLAlchemyError) -> JSONResponse:
        answer = database_error(exc)
        if answer is not None:  # down, unreachable or busy: 503, and the pool reconnects
            logger.warning("database unavailable: %s", type(getattr(exc, "orig", exc)).__name__)
            return JSONResponse(answer[1], status_code=answer[0])
        logger.error("database error %s at %s", type(exc).__name__, where(exc))
        return JSONResponse(internal_error_body(), status_code=500)
