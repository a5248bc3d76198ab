"""Liveness (no auth) and Prometheus metrics (operator token)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse, PlainTextResponse
from sqlalchemy import select, text
from sqlalchemy.exc import SQLAlchemyError

from labels_party.api.deps import Operator, ServicesDep
from labels_party.api.routes import BodyDocumentedRoute
from labels_party.db.models import datasets
from labels_party.metrics import CONTENT_TYPE
from shared.service.http.errors import database_error, error_shape
from shared.service.http.requests import check_query

router = APIRouter(tags=["health"], route_class=BodyDocumentedRoute)


@router.get("/healthz", response_model=None, dependencies=[Depends(check_query)])
def healthz(services: ServicesDep) -> dict[str, Any] | JSONResponse:
    """The service is up and its database answers and can be written (no authentication);
    503 naming the reason if not (``Database.write_problem``: a write tried and rolled back,
    nothing committed; a writer holding the lock is busy, which is ok)."""
    try:
        with services.db.read() as conn:
            conn.execute(text("SELECT 1"))
        problem = services.db.write_problem()
    except SQLAlchemyError as exc:
        answer = database_error(exc)
        if answer is None:
            raise
        return JSONResponse({"status": "unavailable", **answer[1]}, status_code=answer[0])
    if problem is not None:
        body = error_shape(f"the database cannot be written: {problem}", [("database", problem)])
        return JSONResponse({"status": "unavailable", **body}, status_code=503)
    return {"status": "ok"}


@router.get("/metrics", response_class=PlainTextResponse)
def metrics(role: Operator, services: ServicesDep) -> PlainTextResponse:
    """Prometheus text format (operator token: it shows per-dataset budgets)."""
    with services.db.read() as conn:
        rows = conn.execute(
            select(datasets.c.name, datasets.c.epsilon_spent, datasets.c.epsilon_budget).order_by(
                datasets.c.name
            )
        ).all()
    body = services.metrics.render(datasets=[(r[0], r[1], r[2]) for r in rows])
    return PlainTextResponse(body, media_type=CONTENT_TYPE)
