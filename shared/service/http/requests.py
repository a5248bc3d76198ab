"""Request checks both services apply: the query string and the body's media type."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Generic, TypeVar

from fastapi import Depends, Request
from fastapi.dependencies.models import Dependant
from pydantic import BaseModel, ValidationError

from shared.service import strict_input
from shared.service.http.errors import HTTPProblem, validation_problems

ModelT = TypeVar("ModelT", bound=BaseModel)

JSON_MEDIA = ("application/json", "")  # a body without Content-Type is read as JSON


def _declared_query(dependant: Dependant) -> set[str]:
    names = {param.alias for param in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _declared_query(sub)
    return names


def check_query(request: Request) -> None:
    """Refuse query parameters the endpoint does not declare, and repeated ones (422).

    FastAPI ignores unknown parameters and keeps the last of repeated ones, so a typo
    (``?overwite=true``) or ``?overwrite=true&overwrite=false`` would be silently reinterpreted.
    """
    dependant = getattr(request.scope.get("route"), "dependant", None)
    if dependant is None:
        return
    declared = _declared_query(dependant)
    errors = []
    for name in dict.fromkeys(request.query_params.keys()):
        if name not in declared:
            errors.append((f"query.{name}", "unknown query parameter"))
        elif len(request.query_params.getlist(name)) > 1:
            errors.append((f"query.{name}", "given more than once"))
    if errors:
        raise HTTPProblem(422, "invalid query string", errors)


def media_type(content_type: str | None) -> str:
    """The media type of a Content-Type header, lower case, without parameters."""
    return (content_type or "").split(";", 1)[0].strip().lower()


def require_media(content_type: str | None, allowed: Collection[str]) -> str:
    """The request's media type if it is one of ``allowed`` (415 naming Content-Type otherwise)."""
    kind = media_type(content_type)
    if kind not in allowed:
        accepted = ", ".join(k for k in allowed if k) or "application/json"
        raise HTTPProblem(
            415,
            f"Content-Type {kind or '(none)'!r} not accepted; use one of {accepted}",
            [("Content-Type", f"must be one of {accepted}")],
        )
    return kind


def require_json(request: Request) -> None:
    """A dependency for JSON-only endpoints (no Content-Type at all is read as JSON)."""
    require_media(request.headers.get("content-type"), JSON_MEDIA)


def parse_json(model: type[ModelT], body: bytes) -> ModelT:
    """A JSON body as ``model``, validated in pydantic's JSON mode (422 naming each bad field;
    an empty body and a repeated key are refused, never silently read as the last one)."""
    if not body.strip():
        raise HTTPProblem(422, "empty body: a JSON object is required", [("body", "is empty")])
    repeated = strict_input.find_duplicate_key(body)
    if repeated is not None:
        raise HTTPProblem(
            422, "a JSON object repeats a key", [(repeated, strict_input.DUPLICATE_KEY_MESSAGE)]
        )
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        problems = validation_problems(exc.errors(include_input=False))
        raise HTTPProblem(422, "invalid request body", problems) from None


class JSONBody(Generic[ModelT]):
    """The dependency :func:`json_body` declares; ``model`` is public so that a route class can
    document the body (``labels_party.api.routes.BodyDocumentedRoute``)."""

    def __init__(self, model: type[ModelT]) -> None:
        self.model = model

    async def __call__(self, request: Request) -> ModelT:
        require_json(request)
        return parse_json(self.model, await request.body())


def json_body(model: type[ModelT]) -> Any:
    """A typed JSON body as a dependency: ``body: Annotated[Model, json_body(Model)]``.

    415 unless the body is JSON, then :func:`parse_json`. Declare it after the role dependency:
    dependencies run in order, so a caller without the role learns nothing about the body.
    """
    return Depends(JSONBody(model))
