"""The application shell both services share: the FastAPI app and its outermost layers."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from fastapi import FastAPI

from shared.service.http.middleware import RequestMetricsMiddleware

API_VERSION = "1"


def service_app(
    *, title: str, summary: str, lifespan: Callable[[FastAPI], AbstractAsyncContextManager[None]]
) -> FastAPI:
    """A service's app: its title and one-line summary (OpenAPI ``info``), API version 1.

    A path with a trailing slash is an unknown route (404, the one error shape), not a 307 to
    the path without it: the API documents its paths exactly, and a redirect would make a
    client re-send a request body (and its bearer token) to a second URL.
    """
    return FastAPI(
        title=title,
        version=API_VERSION,
        summary=summary,
        lifespan=lifespan,
        redirect_slashes=False,
    )


def add_outer_layers(app: FastAPI, *, record: Callable[..., None], catch_all: type[Any]) -> None:
    """Add the layers every service has outside its own: request counting (``record``), then,
    outermost, ``catch_all`` (a ``shared.service.http.errors.CatchAllMiddleware``): nothing
    escapes."""
    app.add_middleware(RequestMetricsMiddleware, record=record)
    app.add_middleware(catch_all)
