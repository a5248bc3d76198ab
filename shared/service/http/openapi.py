"""One OpenAPI customisation for both services: the real error shape on every operation."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel

from shared.service.http.errors import ErrorBody


def install(
    app: FastAPI,
    *,
    models: Iterable[type[BaseModel]] = (),
    server_error: str = "server error or busy database",
    security: dict[str, Any] | None = None,
    public_paths: Iterable[str] = (),
) -> None:
    """``app.openapi`` becomes FastAPI's schema plus ``models`` (bodies parsed by hand), with
    every 4XX / 5XX as :class:`ErrorBody` instead of FastAPI's own 422 shape, and ``security``
    (a scheme name -> definition) required on every path but ``public_paths``."""
    extra = [ErrorBody, *models]
    public = set(public_paths)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = get_openapi(
            title=app.title,
            version=app.version,
            summary=app.summary,
            description=app.description,
            routes=app.routes,
        )
        components = schema.setdefault("components", {})
        parts = components.setdefault("schemas", {})
        for model in extra:
            doc = model.model_json_schema(ref_template="#/components/schemas/{model}")
            parts.update(doc.pop("$defs", {}))
            parts[model.__name__] = doc
        for name in ("HTTPValidationError", "ValidationError"):
            parts.pop(name, None)
        if security:
            components["securitySchemes"] = security
        error = {
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
        }
        for path, item in schema.get("paths", {}).items():
            for operation in item.values():
                responses = operation.setdefault("responses", {})
                responses.pop("422", None)
                responses["4XX"] = {"description": "error (see API.md)", **error}
                responses["5XX"] = {"description": server_error, **error}
                if security and path not in public:
                    operation["security"] = [{name: []} for name in security]
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
