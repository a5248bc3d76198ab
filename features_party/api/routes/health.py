"""Liveness and Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse
from sqlalchemy import text

from features_party.api.deps import SessionDep
from features_party.metrics import CONTENT_TYPE, render

router = APIRouter(tags=["health"])
public_router = APIRouter(tags=["health"])


@public_router.get("/healthz")
def healthz(session: SessionDep) -> dict[str, str]:
    """200 when the database answers."""
    session.execute(text("SELECT 1"))
    return {"status": "ok", "service": "features"}


@router.get("/metrics", response_class=PlainTextResponse)
def metrics(request: Request) -> PlainTextResponse:
    """Prometheus text format: requests, feature rows per dataset, jobs, message pulls."""
    return PlainTextResponse(render(request.app.state.metrics), media_type=CONTENT_TYPE)
