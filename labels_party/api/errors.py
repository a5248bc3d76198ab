"""One JSON error shape for every failure: ``{"detail": str, "errors": [{field, message}]}``.

Domain errors map to status codes here and only here. Nothing in an error body or a log line
echoes a submitted value: pydantic's ``input`` is dropped, unexpected exceptions are logged by
type and location only (their messages could quote data).
"""

from __future__ import annotations

import logging
import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from labels_party.errors import (
    BadInputError,
    ConflictError,
    FieldError,
    NotAcceptableError,
    NotFoundError,
    PayloadTooLargeError,
    ServiceError,
    ServiceUnavailableError,
    UnsupportedMediaTypeError,
)
from shared import epsilon as amounts
from shared.errors import BudgetExceededError, InvalidParameterError
from shared.mechanisms import registry
from shared.service.http import errors as http_errors
from shared.service.http.errors import internal_error_body

log = logging.getLogger("labels_party")

STATUS: dict[type[ServiceError], int] = {
    BadInputError: 422,
    NotFoundError: 404,
    ConflictError: 409,
    PayloadTooLargeError: 413,
    UnsupportedMediaTypeError: 415,
    NotAcceptableError: 406,
    ServiceUnavailableError: 503,
}


# The field an error names when its raiser gave none (every error names at least one).
DEFAULT_FIELD: dict[type[ServiceError], str] = {
    PayloadTooLargeError: "body",
    UnsupportedMediaTypeError: "Content-Type",
    NotAcceptableError: "Accept",
    ServiceUnavailableError: "database",
    BadInputError: "body",
}
# Engine amounts (``shared``) -> the request field that carries them; a mechanism option (any
# registered family's, ``shared.mechanisms.registry``) and ``bins`` are ``params.<name>``.
_ENGINE_FIELDS = {"epsilon": "epsilon", "epsilon1": "epsilon_histogram", "epsilon2": "epsilon"}
# URL parameters named as the same thing is everywhere else (a dataset is ``dataset``).
_URL_FIELDS = {"path.name": "dataset"}
_LEADING_NAME = re.compile(r"^([a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)?)\b")


def error_body(detail: str, errors: list[FieldError] | None = None, **extra: Any) -> dict[str, Any]:
    """The one error shape; an empty ``errors`` becomes a generic ``request`` entry."""
    return http_errors.error_shape(detail, [(e.field, e.message) for e in errors or []], **extra)


def engine_field(message: str) -> str:
    """The request field an engine ``InvalidParameterError`` is about (``params`` if unclear)."""
    match = _LEADING_NAME.match(message)
    if not match:
        return "params"
    name = match.group(1)
    options = frozenset({"bins"}).union(*(f.options for f in registry.families()))
    if name in options:
        return f"params.{name}"
    return _ENGINE_FIELDS.get(name, name if name.startswith("params.") else "params")


def engine_refusal(exc: InvalidParameterError, *, histogram_share_given: bool) -> BadInputError:
    """An engine refusal of a release request as the 422 naming the field it is about (without
    ``epsilon_histogram`` in the request, the default split of ``epsilon`` made that share)."""
    field = engine_field(str(exc))
    if field == "epsilon_histogram" and not histogram_share_given:
        field = "epsilon"
    return BadInputError(str(exc), [FieldError(field=field, message=str(exc))])


def field_errors(exc: RequestValidationError) -> list[FieldError]:
    """FastAPI's errors as FieldErrors, without the offending input."""
    return [
        FieldError(field=f, message=m) for f, m in http_errors.validation_problems(exc.errors())
    ]


def install(app: FastAPI) -> None:
    """Register the handlers on ``app`` (the kit's shared ones first)."""
    http_errors.install(app, log)

    @app.exception_handler(ServiceError)
    async def _service(_request: Request, exc: ServiceError) -> JSONResponse:
        status = next((code for cls, code in STATUS.items() if isinstance(exc, cls)), 400)
        errors = exc.errors
        if not errors:
            field = next((f for cls, f in DEFAULT_FIELD.items() if isinstance(exc, cls)), "request")
            errors = [FieldError(field=field, message=exc.detail)]
        return JSONResponse(error_body(exc.detail, errors), status_code=status)

    @app.exception_handler(BudgetExceededError)
    async def _budget(_request: Request, exc: BudgetExceededError) -> JSONResponse:
        left = amounts.text(exc.left)
        return JSONResponse(
            error_body(
                str(exc),
                [
                    FieldError(
                        field=getattr(exc, "field", "epsilon"),
                        message=f"only {left} of the budget is left",
                    )
                ],
                spent=amounts.text(exc.spent),
                requested=amounts.text(exc.requested),
                left=left,
                budget=amounts.text(exc.budget),
            ),
            status_code=409,
        )

    @app.exception_handler(InvalidParameterError)
    async def _invalid(_request: Request, exc: InvalidParameterError) -> JSONResponse:
        field = engine_field(str(exc))
        return JSONResponse(
            error_body(str(exc), [FieldError(field=field, message=str(exc))]), status_code=422
        )

    @app.exception_handler(RequestValidationError)
    async def _validation(_request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [
            FieldError(field=_URL_FIELDS.get(e.field, e.field), message=e.message)
            for e in field_errors(exc)
        ]
        return JSONResponse(error_body("invalid request", errors), status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        # Raised by the router itself: no route (404) or not this method (405).
        if exc.status_code == 404:
            error = FieldError(field="path", message="no such endpoint (see /docs)")
        elif exc.status_code == 405:
            allowed = (exc.headers or {}).get("Allow", "")
            error = FieldError(
                field="method", message=f"{request.method} not allowed; use {allowed}"
            )
        else:
            error = FieldError(field="request", message=str(exc.detail))
        return JSONResponse(
            error_body(str(exc.detail), [error]), status_code=exc.status_code, headers=exc.headers
        )

    @app.exception_handler(Exception)
    async def _unexpected(_request: Request, exc: Exception) -> JSONResponse:
        # Only reached if CatchAllMiddleware is bypassed; Starlette re-raises after this.
        log.error("internal error %s at %s", type(exc).__name__, http_errors.where(exc))
        return JSONResponse(internal_error_body(), status_code=500)


class CatchAllMiddleware(http_errors.CatchAllMiddleware):
    """Any unhandled exception becomes the JSON 500, logged by type and place only (outermost)."""

    logger = log
