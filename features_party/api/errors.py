"""One place maps domain errors to HTTP: ``{"detail": ..., "errors": [{"field", "message"}]}``."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from features_party.features import FeatureConflictError, FeatureInputError
from shared.client import ServiceError
from shared.errors import IntegrityError, InvalidParameterError


def error_body(detail: str, errors: list[tuple[str, str]] | None = None) -> dict[str, Any]:
    return {
        "detail": detail,
        "errors": [{"field": field, "message": message} for field, message in errors or []],
    }


def install(app: FastAPI) -> None:
    """Register the exception handlers on ``app``."""

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = []
        for error in exc.errors():
            loc = [str(part) for part in error.get("loc", ()) if part != "body"]
            errors.append((".".join(loc) or "body", str(error.get("msg", "invalid"))))
        return JSONResponse(status_code=422, content=error_body("invalid request", errors))

    @app.exception_handler(HTTPException)
    async def _http(_: Request, exc: HTTPException) -> JSONResponse:
        detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        return JSONResponse(
            status_code=exc.status_code, content=error_body(detail), headers=exc.headers
        )

    @app.exception_handler(FeatureInputError)
    async def _input(_: Request, exc: FeatureInputError) -> JSONResponse:
        return JSONResponse(status_code=422, content=error_body(exc.detail, exc.errors))

    @app.exception_handler(FeatureConflictError)
    async def _conflict(_: Request, exc: FeatureConflictError) -> JSONResponse:
        return JSONResponse(status_code=409, content=error_body(exc.detail, exc.errors))

    @app.exception_handler(InvalidParameterError)
    async def _invalid(_: Request, exc: InvalidParameterError) -> JSONResponse:
        return JSONResponse(status_code=422, content=error_body(str(exc)))

    @app.exception_handler(ServiceError)
    async def _upstream(_: Request, exc: ServiceError) -> JSONResponse:
        # The labels party refused or is unreachable: a gateway error, with its reason.
        status = 504 if exc.status is None else 502
        return JSONResponse(
            status_code=status,
            content=error_body(
                f"labels party: {exc}",
                [(str(e.get("field", "")), str(e.get("message", ""))) for e in exc.errors],
            ),
        )

    @app.exception_handler(IntegrityError)
    async def _integrity(_: Request, exc: IntegrityError) -> JSONResponse:
        return JSONResponse(status_code=502, content=error_body(f"message integrity: {exc}"))
