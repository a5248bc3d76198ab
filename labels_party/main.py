"""The labels-party FastAPI application (``create_app``) and its middleware.

Run it with ``labeldp serve labels --db PATH --port 8001``; tests build it with
``create_app(settings, rng_factory=...)`` to inject a seeded generator (production randomness is
always the OS CSPRNG, ``shared.rng.SystemRandom``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import numpy as np
from fastapi import FastAPI

from labels_party import console
from labels_party.access.principals import Authenticator
from labels_party.api import errors, limits
from labels_party.api.body import BodyLimitMiddleware
from labels_party.api.deps import Services
from labels_party.api.routes import (
    BODY_MODELS,
    datasets,
    examples,
    health,
    labels,
    ledger,
    releases,
)
from labels_party.api.routes import audit as audit_routes
from labels_party.api.routes import model_releases as model_release_routes
from labels_party.api.routes import receipts as receipt_routes
from labels_party.api.routes.external_releases import router as external_releases_router
from labels_party.config import Settings, default_key_path
from labels_party.db.engine import Database, create_schema, make_engine
from labels_party.metrics import Metrics
from labels_party.releasing.model_releases import ModelReleaseService
from labels_party.releasing.receipts import KeyStore, ReceiptService
from labels_party.releasing.releases import Randomizer, ReleaseService, RngFactory
from shared.message import LabelMessage
from shared.service.http import openapi
from shared.service.http.app import add_outer_layers, service_app
from shared.service.http.proxies import ForwardedClientMiddleware, TrustedProxies

log = logging.getLogger("labels_party")


def _warm_up() -> None:
    """Compile/load the numba kernels on throwaway public data (no label is involved)."""
    from shared.mechanisms import registry
    from shared.randomizer import label_randomizer

    try:
        fake = np.linspace(0.0, 1.0, 256)
        for mechanism in registry.names():
            label_randomizer(
                fake,
                lo=0.0,
                hi=1.0,
                epsilon1=1.0,
                epsilon2=1.0,
                mechanism=mechanism,
                rng=np.random.default_rng(0),
            )
        log.info("randomizer kernels warmed up")
    except Exception as exc:  # noqa: BLE001 - a failed warm-up only costs first-call latency
        log.warning("warm-up failed: %s", type(exc).__name__)


def create_app(
    settings: Settings,
    *,
    rng_factory: RngFactory | None = None,
    randomizer: Randomizer | None = None,
) -> FastAPI:
    """Build the app. ``rng_factory`` / ``randomizer`` are for tests only (default: CSPRNG)."""
    engine = make_engine(settings.database_url, lock_timeout=settings.lock_timeout)
    db = Database(engine, lock_timeout=settings.lock_timeout)
    create_schema(engine)
    metrics = Metrics()
    keys = KeyStore(db, settings.signing_key_path or default_key_path(settings.database_url))
    keys.ensure()  # the signing key is created on first start
    services = Services(
        settings=settings,
        db=db,
        releases=ReleaseService(
            db,
            rng_factory=rng_factory,
            randomizer=randomizer,
            concurrency=settings.release_concurrency,
            commit_delay=settings.debug_commit_delay,
        ),
        model_releases=ModelReleaseService(db, rng_factory=rng_factory),
        metrics=metrics,
        authenticate=Authenticator(
            db, tuple((role, token.encode("utf-8")) for role, token in settings.tokens.items())
        ),
        receipts=ReceiptService(db, keys),
    )

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if settings.warmup:
            threading.Thread(target=_warm_up, name="labeldp-warmup", daemon=True).start()
        yield
        db.dispose()

    app = service_app(
        title="labeldp labels party",
        summary="Label ingest, privacy-budget ledger and the one privatized message.",
        lifespan=lifespan,
    )
    app.state.services = services
    errors.install(app)
    routers = (datasets, examples, labels, releases, ledger, health, receipt_routes, audit_routes)
    for module in routers:
        app.include_router(module.router)
    app.include_router(model_release_routes.router)
    app.include_router(external_releases_router)
    app.include_router(console.router)
    app.add_middleware(
        BodyLimitMiddleware,
        max_body_bytes=settings.max_body_bytes,
        max_json_bytes=settings.max_json_bytes,
        endpoint_limit=limits.endpoint_limit,
    )
    if settings.rate_limit > 0:
        authenticate = services.authenticate
        app.add_middleware(
            limits.RateLimitMiddleware,
            rate=settings.rate_limit,
            burst=settings.rate_burst,
            is_valid=lambda header: authenticate(header) is not None,
        )
    if settings.trusted_proxies:  # outside the rate limit: it keys on the client found here
        app.add_middleware(
            ForwardedClientMiddleware, proxies=TrustedProxies(settings.trusted_proxies)
        )
    add_outer_layers(app, record=metrics.request, catch_all=errors.CatchAllMiddleware)
    openapi.install(app, models=[*BODY_MODELS, LabelMessage])
    return app
