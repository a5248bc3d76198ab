"""Liveness and Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from sqlalchemy import func, select, text
from sqlalchemy.exc import SQLAlchemyError

from features_party.api.deps import SessionDep
from features_party.api.errors import StrictJSONRoute
from features_party.db.models import FeatureRow, TrainedModel
from shared.http_errors import database_error

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
    return {"status": "ok", "service": "features"}


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@router.get("/metrics", response_class=PlainTextResponse)
def metrics(request: Request, session: SessionDep) -> str:
    """Prometheus text format: requests, feature rows per dataset, jobs, message pulls."""
    lines = [
        "# HELP labeldp_features_http_requests_total HTTP requests by route and status.",
        "# TYPE labeldp_features_http_requests_total counter",
    ]
    for (method, route, status), count in sorted(request.app.state.requests.items()):
        lines.append(
            f'labeldp_features_http_requests_total{{method="{method}",route="{_label(route)}",'
            f'status="{status}"}} {count}'
        )
    lines += [
        "# HELP labeldp_features_rows Stored feature rows per dataset.",
        "# TYPE labeldp_features_rows gauge",
    ]
    rows = session.execute(select(FeatureRow.dataset, func.count()).group_by(FeatureRow.dataset))
    for dataset, count in rows:
        lines.append(f'labeldp_features_rows{{dataset="{_label(dataset)}"}} {count}')
    lines += [
        "# HELP labeldp_features_models Training jobs by status.",
        "# TYPE labeldp_features_models gauge",
    ]
    query = select(TrainedModel.status, func.count()).group_by(TrainedModel.status)
    by_status = {row[0]: row[1] for row in session.execute(query)}
    for status in ("queued", "running", "succeeded", "failed"):
        lines.append(f'labeldp_features_models{{status="{status}"}} {by_status.get(status, 0)}')
    counters = {**request.app.state.counters, **request.app.state.runner.counters}
    for name, value in sorted(counters.items()):
        lines.append(f"# TYPE labeldp_features_{name}_total counter")
        lines.append(f"labeldp_features_{name}_total {value}")
    return "\n".join(lines) + "\n"
