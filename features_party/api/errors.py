"""One place maps domain errors to HTTP: ``{"detail": ..., "errors": [{"field", "message"}]}``.

Every error names at least one field (``dataset``, ``rows[2].features``, ``Content-Type``,
``path``, ``method``, ``server``, ...). Unexpected exceptions become a JSON 500 inside the app
(``CatchAllMiddleware``) and are logged by type and place, not with their message.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import FastAPI, HTTPException, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match
from starlette.types import Receive, Scope, Send

from features_party.features import FeatureConflictError, FeatureInputError
from shared.errors import IntegrityError, InvalidParameterError
from shared.service import strict_input
from shared.service.client import ServiceError
from shared.service.http import errors as http_errors
from shared.service.http.middleware import HTTPMiddleware

log = logging.getLogger("features_party")


class FieldHTTPError(HTTPException):
    """An HTTP error about one named field (header, path or body part)."""

    def __init__(
        self,
        status_code: int,
        detail: str,
        *,
        field: str,
        message: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(status_code=status_code, detail=detail, headers=headers)
        self.field = field
        self.message = message or detail


class StrictJSONRequest(Request):
    """A request whose JSON body may not repeat a key in any object (422 naming the place)."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            try:
                self._json = strict_input.loads(await self.body())
            except strict_input.DuplicateKeyError as exc:
                raise FieldHTTPError(
                    422,
                    "a JSON object repeats a key",
                    field=exc.field,
                    message=strict_input.DUPLICATE_KEY_MESSAGE,
                ) from None
        return self._json


class StrictJSONRoute(APIRoute):
    """Every route of this service reads JSON bodies through ``StrictJSONRequest``."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict(request: Request) -> Response:
            return await handler(StrictJSONRequest(request.scope, request.receive))

        return strict


def error_body(detail: str, errors: list[tuple[str, str]] | None = None) -> dict[str, Any]:
    """The one error shape; an empty ``errors`` becomes a generic ``request`` entry."""
    return http_errors.error_shape(detail, [(field or "body", msg) for field, msg in errors or []])


_METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")


def _allowed_methods(request: Request) -> str:
    """Every method some route serves on this path (Starlette names only the first route's)."""
    allowed = []
    for method in _METHODS:
        probe = {**request.scope, "method": method}
        if any(route.matches(probe)[0] == Match.FULL for route in request.app.router.routes):
            allowed.append(method)
    return ", ".join(allowed)


def install(app: FastAPI) -> None:
    """Register the exception handlers on ``app`` (the kit's shared ones first)."""
    http_errors.install(app, log)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = []
        for error in exc.errors():
            if error.get("type") == "json_invalid":  # loc is ("body", <offset>)
                errors.append(("body", f"malformed JSON: {error.get('ctx', {}).get('error', '')}"))
            else:
                errors.extend(http_errors.validation_problems([error]))
        return JSONResponse(status_code=422, content=error_body("invalid request", errors[:10]))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        status = exc.status_code
        if isinstance(exc, FieldHTTPError):
            error = (exc.field, exc.message)
        elif status == 400:  # FastAPI could not parse the body (bad UTF-8, nested too deeply)
            status, detail = 422, "malformed JSON body"
            error = ("body", "malformed JSON (invalid UTF-8, nested too deeply, or too large)")
        elif status == 404:  # the router: no such endpoint
            error = ("path", "no such endpoint (see /docs)")
        elif status == 405:
            allowed = _allowed_methods(request) or (exc.headers or {}).get("Allow", "")
            headers = {**(exc.headers or {}), "Allow": allowed}
            error = ("method", f"{request.method} not allowed; use {allowed}")
            return JSONResponse(
                status_code=405, content=error_body(detail, [error]), headers=headers
            )
        else:
            error = ("request", detail)
        return JSONResponse(
            status_code=status, content=error_body(detail, [error]), headers=exc.headers
        )

    @app.exception_handler(FeatureInputError)
    async def _input(_: Request, exc: FeatureInputError) -> JSONResponse:
        return JSONResponse(status_code=422, content=error_body(exc.detail, exc.errors))

    @app.exception_handler(FeatureConflictError)
    async def _conflict(_: Request, exc: FeatureConflictError) -> JSONResponse:
        return JSONResponse(status_code=409, content=error_body(exc.detail, exc.errors))

    @app.exception_handler(InvalidParameterError)
    async def _invalid(_: Request, exc: InvalidParameterError) -> JSONResponse:
        return JSONResponse(status_code=422, content=error_body(str(exc), [("body", str(exc))]))

    @app.exception_handler(ServiceError)
    async def _upstream(_: Request, exc: ServiceError) -> JSONResponse:
        # The labels party refused or is unreachable: a gateway error, with its reason.
        status = 504 if exc.status is None else 502
        if exc.status in (401, 403):
            # Not the caller's token: the labels party refused the one THIS service presents.
            return JSONResponse(
                status_code=502,
                content=error_body(
                    "the labels party refused this service's upstream credential (the publisher "
                    "token set by LABELDP_PUBLISHER_TOKEN or --token); the operator of the "
                    "features party must configure the labels party's current publisher token",
                    [
                        (
                            "upstream.publisher_token",
                            f"refused by the labels party (HTTP {exc.status})",
                        )
                    ],
                ),
            )
        upstream = [(str(e.get("field", "")), str(e.get("message", ""))) for e in exc.errors]
        return JSONResponse(
            status_code=status,
            content=error_body(
                f"labels party: {exc}", upstream or [("labels_party", "unreachable or refused")]
            ),
        )

    @app.exception_handler(IntegrityError)
    async def _integrity(_: Request, exc: IntegrityError) -> JSONResponse:
        return JSONResponse(
            status_code=502,
            content=error_body(f"message integrity: {exc}", [("message", "failed verification")]),
        )


class BodyGuardMiddleware(HTTPMiddleware):
    """Refuse a compressed body (any ``Content-Encoding`` but identity) with 415 (RFC 7694).

    Read as plain text it would be a confusing error or, worse, be misread.
    """

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        refused = http_errors.encoding_error(dict(scope.get("headers") or []))
        if refused is not None:
            await http_errors.send_json(send, 415, refused)
            return
        await self.app(scope, receive, send)


class CatchAllMiddleware(http_errors.CatchAllMiddleware):
    """Any unhandled exception becomes the JSON 500 and stays inside the app (outermost).

    Starlette's own catch-all re-raises after answering, so the server logged the traceback
    with its message, and answered with plain text when no JSON handler ran.
    """

    logger = log
