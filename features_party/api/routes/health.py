"""Liveness and Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from features_party.api.deps import SessionDep
from features_party.api.errors import StrictJSONRoute
from features_party.metrics import CONTENT_TYPE, render
from shared.service.database_url import sqlite_write_problem
from shared.service.http.errors import database_error, error_shape

router = APIRouter(tags=["health"], route_class=StrictJSONRoute)
public_router = APIRouter(tags=["health"], route_class=StrictJSONRoute)


@public_router.get("/healthz", response_model=None)
def healthz(session: SessionDep) -> dict[str, str] | JSONResponse:
    """200 when the database answers, else 503 saying it is unreachable."""
    try:
        session.execute(text("SELECT 1"))
    except SQLAlchemyError as exc:
        answer = database_error(exc)
        if answer is None:
            raise
        body = {"status": "unavailable", "service": "features", **answer[1]}
        return JSONResponse(body, status_code=answer[0])
    bind = session.get_bind()
    problem = sqlite_write_problem(str(bind.url)) if hasattr(bind, "url") else None
    if problem is not None:
        shape = error_shape(f"the database cannot be written: {problem}", [("database", problem)])
        body = {"status": "unavailable", "service": "features", **shape}
        return JSONResponse(body, status_code=503)
    return {"status": "ok", "service": "features"}


@router.get("/metrics", response_class=PlainTextResponse)
def metrics(request: Request) -> PlainTextResponse:
    """Prometheus text format: requests, feature rows per dataset, jobs, message pulls."""
    return PlainTextResponse(render(request.app.state.metrics), media_type=CONTENT_TYPE)
