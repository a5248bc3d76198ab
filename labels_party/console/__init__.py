"""The operator console: static files served at ``/console`` and ``GET /v1/whoami``.

The page holds no data: its script calls the API with the bearer token typed into its login form
(kept in the tab's ``sessionStorage``). Every console response carries a strict
Content-Security-Policy (same-origin scripts and styles only, nothing inline, nothing framed), so
the page can load nothing from outside the service.
"""

from __future__ import annotations

from importlib.resources import files
from typing import Any

from fastapi import APIRouter
from fastapi.responses import RedirectResponse, Response

from labels_party.api.deps import Actor, AnyRole
from labels_party.errors import FieldError, NotFoundError

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
# The only files served: name -> media type (no directory listing, no path from the request).
ASSETS = {
    "index.html": "text/html; charset=utf-8",
    "console.js": "text/javascript; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
}

router = APIRouter(tags=["console"])


def asset(name: str) -> bytes:
    """The packaged file ``name`` (one of :data:`ASSETS`)."""
    return files(__package__).joinpath("static", name).read_bytes()


@router.get("/console", include_in_schema=False)
def console_page() -> Response:
    """The console's page (no data: everything comes from the API after login).

    Its links are relative (``console/static/...``, ``v1/...``), so it also works behind a proxy
    that serves the service under a path prefix.
    """
    return _serve("index.html")


@router.get("/console/", include_in_schema=False)
def console_slash() -> RedirectResponse:
    return RedirectResponse("../console", status_code=308)


@router.get("/console/static/{name}", include_in_schema=False)
def console_asset(name: str) -> Response:
    """The console's script and style sheet."""
    if name not in ASSETS or name == "index.html":
        raise NotFoundError(
            f"no console file {name!r}", [FieldError(field="path", message="unknown file")]
        )
    return _serve(name)


def _serve(name: str) -> Response:
    return Response(asset(name), media_type=ASSETS[name], headers=SECURITY_HEADERS)


@router.get("/v1/whoami", tags=["auth"])
def whoami(role: AnyRole, actor: Actor) -> dict[str, Any]:
    """The role of the presented token (the console shows the views that role may use) and its
    principal (null: a role-only token)."""
    return {"role": role, "actor": actor}
