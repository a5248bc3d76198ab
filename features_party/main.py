"""The features party's FastAPI application (the publisher's side).

Reading order: api/routes/datasets.py (features in, examples synced) -> api/routes/models.py
(jobs) -> jobs.py -> pull.py (the one message) -> training.py.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI

from features_party.api import errors
from features_party.api.deps import require_token
from features_party.api.routes import datasets, health, models
from features_party.config import Settings, undated_keys
from features_party.db.engine import make_engine, make_sessionmaker
from features_party.jobs import JobRunner
from features_party.metrics import make_registry
from features_party.schemas import FeatureUploadIn, ModelCreate, PredictIn
from shared.service.http import openapi
from shared.service.http.app import add_outer_layers, service_app


def _request_counter(requests: Counter[tuple[str, str, int]]) -> Callable[..., None]:
    def record(*, method: str, route: str, status: int) -> None:
        requests[(method, route, status)] += 1

    return record


def _warn_undated(settings: Settings) -> None:
    """Log, at start, the pinned keys whose receipts are accepted with their date unchecked
    (``--no-date-check``), as ``labeldp receipt verify --no-date-check`` warns."""
    if settings.no_date_check and settings.labels_public_key is not None:
        undated = undated_keys(settings.labels_public_key)
        if undated:
            logging.getLogger("features_party").warning(
                "--no-date-check: %s states no validity for key %s; receipts it signs are "
                "accepted without checking their date",
                settings.labels_public_key,
                ", ".join(undated),
            )


def create_app(settings: Settings) -> FastAPI:
    """Build the app; the database is opened (and jobs recovered) at start-up."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        _warn_undated(settings)
        engine = make_engine(settings.database_url)
        app.state.engine = engine
        app.state.sessions = make_sessionmaker(engine)
        app.state.runner = JobRunner(app.state.sessions, settings)
        app.state.runner.recover()
        try:
            yield
        finally:
            app.state.runner.shutdown()
            engine.dispose()

    app = service_app(
        title="labeldp features party",
        summary="Publisher's service: features, the one label-DP message, training.",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.write_lock = threading.Lock()
    app.state.requests = Counter()
    app.state.counters = Counter({"feature_rows_received": 0})
    app.state.metrics = make_registry(app.state)
    errors.install(app)

    auth = [Depends(require_token)]
    app.include_router(health.public_router)
    app.include_router(health.router, dependencies=auth)
    app.include_router(datasets.router, dependencies=auth)
    app.include_router(models.router, dependencies=auth)
    app.add_middleware(errors.BodyGuardMiddleware)
    record = _request_counter(app.state.requests)
    add_outer_layers(app, record=record, catch_all=errors.CatchAllMiddleware)
    openapi.install(
        app,
        models=[FeatureUploadIn, ModelCreate, PredictIn],
        server_error="server or labels-party error",
        security={
            "bearer": {"type": "http", "scheme": "bearer", "description": "LABELDP_FEATURES_TOKEN"}
        },
        public_paths=["/healthz"],
    )
    return app
