"""One APIRouter per resource; JSON bodies are typed parameters read after the role check
(``shared.service.http.requests.json_body``), bulk streams are parsed as they arrive."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi.routing import APIRoute
from pydantic import BaseModel

from shared.service.http.requests import JSONBody

# Every body model a route documents: ``main._openapi`` puts each in the schema's components,
# so a new route cannot leave a dangling reference.
BODY_MODELS: list[type[BaseModel]] = []


def json_body_doc(model: type[BaseModel], *, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """OpenAPI ``requestBody`` for a body the handler parses itself (see ``main.openapi``)."""
    if model not in BODY_MODELS:
        BODY_MODELS.append(model)
    content: dict[str, Any] = {
        "application/json": {"schema": {"$ref": f"#/components/schemas/{model.__name__}"}}
    }
    content.update(extra or {})
    return {"requestBody": {"required": True, "content": content}}


class BodyDocumentedRoute(APIRoute):
    """A route whose OpenAPI ``requestBody`` is its ``json_body`` parameter's model, so that a
    handler names its body model once (routes that stream a body document it themselves)."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        super().__init__(path, endpoint, **kwargs)
        bodies = [d.call.model for d in self.dependant.dependencies if isinstance(d.call, JSONBody)]
        if bodies and "requestBody" not in (self.openapi_extra or {}):
            self.openapi_extra = {**(self.openapi_extra or {}), **json_body_doc(bodies[0])}
