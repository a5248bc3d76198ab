"""Liveness and Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from sqlalchemy import Engine, text
from sqlalchemy.exc import SQLAlchemyError

from features_party.api.deps import SessionDep
from features_party.api.errors import StrictJSONRoute
from features_party.metrics import CONTENT_TYPE, render
from shared.service.http.errors import database_error, error_shape
from shared.service.http.requests import check_query
from shared.service.write_probe import database_write_problem

router = APIRouter(tags=["health"], route_class=StrictJSONRoute)
public_router = APIRouter(tags=["health"], route_class=StrictJSONRoute)

# The health check's write (shared.service.write_probe), rolled back: an UPDATE of the table
# every feature upload writes that matches no row (nothing changes even before the rollback).
PROBE_WRITE = "UPDATE feature_datasets SET synced_rows = synced_rows WHERE 1 = 0"


@public_router.get("/healthz", response_model=None, dependencies=[Depends(check_query)])
def healthz(session: SessionDep) -> dict[str, str] | JSONResponse:
    """200 when the database answers and can be written, else 503 naming why: unreachable, or
    cannot be written (``shared.service.write_probe.database_write_problem``: the SQLite file's
    permissions, then a write tried and rolled back, nothing committed; a writer holding the
    lock is busy, which is ok)."""
    try:
        session.execute(text("SELECT 1"))
        session.rollback()  # the read's connection back to the pool before the probe takes one
        bind = session.get_bind()
        problem = database_write_problem(bind, PROBE_WRITE) if isinstance(bind, Engine) else None
    except SQLAlchemyError as exc:
        answer = database_error(exc)
        if answer is None:
            raise
        body = {"status": "unavailable", "service": "features", **answer[1]}
        return JSONResponse(body, status_code=answer[0])
    if problem is not None:
        shape = error_shape(f"the database cannot be written: {problem}", [("database", problem)])
        body = {"status": "unavailable", "service": "features", **shape}
        return JSONResponse(body, status_code=503)
    return {"status": "ok", "service": "features"}


@router.get("/metrics", response_class=PlainTextResponse)
def metrics(request: Request) -> PlainTextResponse:
    """Prometheus text format: requests, feature rows per dataset, jobs, message pulls."""
    return PlainTextResponse(render(request.app.state.metrics), media_type=CONTENT_TYPE)
