"""One APIRouter per resource; JSON bodies are typed parameters read after the role check
(``shared.http.requests.json_body``), bulk streams are parsed as they arrive."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

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
