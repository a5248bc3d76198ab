"""One JSON error shape for every failure: ``{"detail": str, "errors": [{field, message}]}``.

Domain errors map to status codes here and only here. Nothing in an error body or a log line
echoes a submitted value: pydantic's ``input`` is dropped, unexpected exceptions are logged by
type and location only (their messages could quote data).
"""

from __future__ import annotations

import logging
import sqlite3
import traceback
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from sqlalchemy.exc import OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException

from labels_party.api.deps import AuthError
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
from shared.errors import BudgetExceededError, InvalidParameterError

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


def error_body(detail: str, errors: list[FieldError] | None = None, **extra: Any) -> dict[str, Any]:
    return {"detail": detail, "errors": [e.as_dict() for e in errors or []], **extra}


def _loc(loc: tuple[Any, ...] | list[Any]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "body"


def field_errors(
    exc: ValidationError | RequestValidationError, *, drop: int = 0
) -> list[FieldError]:
    """pydantic / FastAPI errors as FieldErrors, without the offending input."""
    raw = exc.errors(include_input=False) if isinstance(exc, ValidationError) else exc.errors()
    out = []
    for err in raw:
        loc = tuple(err.get("loc", ()))[drop:]
        message = str(err.get("msg", "invalid"))
        if message.startswith("Value error, "):
            message = message.removeprefix("Value error, ")
        out.append(FieldError(field=_loc(loc), message=message))
    return out


def _where(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return "?"
    last = frames[-1]
    return f"{last.filename}:{last.lineno} in {last.name}"


def install(app: FastAPI) -> None:
    """Register the handlers on ``app``."""

    @app.exception_handler(ServiceError)
    async def _service(_request: Request, exc: ServiceError) -> JSONResponse:
        status = next((code for cls, code in STATUS.items() if isinstance(exc, cls)), 400)
        return JSONResponse(error_body(exc.detail, exc.errors), status_code=status)

    @app.exception_handler(AuthError)
    async def _auth(_request: Request, exc: AuthError) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        field = "Authorization"
        return JSONResponse(
            error_body(exc.detail, [FieldError(field=field, message=exc.detail)]),
            status_code=exc.status,
            headers=headers,
        )

    @app.exception_handler(BudgetExceededError)
    async def _budget(_request: Request, exc: BudgetExceededError) -> JSONResponse:
        return JSONResponse(
            error_body(
                str(exc),
                [FieldError(field="epsilon", message=f"only {exc.left:g} of the budget is left")],
                spent=exc.spent,
                requested=exc.requested,
                left=exc.left,
                budget=exc.budget,
            ),
            status_code=409,
        )

    @app.exception_handler(InvalidParameterError)
    async def _invalid(_request: Request, exc: InvalidParameterError) -> JSONResponse:
        return JSONResponse(
            error_body(str(exc), [FieldError(field="params", message=str(exc))]), status_code=422
        )

    @app.exception_handler(RequestValidationError)
    async def _validation(_request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = field_errors(exc)
        return JSONResponse(error_body("invalid request", errors), status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse(
            error_body(str(exc.detail)), status_code=exc.status_code, headers=exc.headers
        )

    @app.exception_handler(OperationalError)
    async def _db(_request: Request, exc: OperationalError) -> JSONResponse:
        locked = isinstance(exc.orig, sqlite3.OperationalError) and "locked" in str(exc.orig)
        if locked:
            return JSONResponse(error_body("the database is busy; retry later"), status_code=503)
        log.error("database error %s at %s", type(exc.orig).__name__, _where(exc))
        return JSONResponse(error_body("internal error"), status_code=500)

    @app.exception_handler(Exception)
    async def _unexpected(_request: Request, exc: Exception) -> JSONResponse:
        # The message is not logged: it could quote data (a label in a numpy error, say).
        log.error("internal error %s at %s", type(exc).__name__, _where(exc))
        return JSONResponse(error_body("internal error"), status_code=500)
