"""Dependencies: database session, settings, job runner, bearer-token check."""

from __future__ import annotations

import hmac
from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request
from fastapi.dependencies.models import Dependant
from sqlalchemy.orm import Session

from features_party.api.errors import FieldHTTPError
from features_party.config import Settings
from features_party.features import FeatureInputError
from features_party.jobs import JobRunner

# The same words as the labels party's 401 (one auth message across both services).
MISSING_OR_INVALID = "missing or invalid bearer token"


def get_settings(request: Request) -> Settings:
    return request.app.state.settings


def get_session(request: Request) -> Iterator[Session]:
    with request.app.state.sessions() as session:
        yield session


def get_runner(request: Request) -> JobRunner:
    return request.app.state.runner


def require_token(request: Request) -> None:
    """With ``LABELDP_FEATURES_TOKEN`` set, require it as a bearer token (constant time).

    Then checks the query string (after the token, so a caller without it learns nothing).
    """
    expected: str | None = request.app.state.settings.features_token
    if expected is not None:  # else: loopback-only deployment, see config.Settings
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise FieldHTTPError(
                401,
                MISSING_OR_INVALID,
                field="Authorization",
                headers={"WWW-Authenticate": "Bearer"},
            )
        if not hmac.compare_digest(token.strip().encode(), expected.encode()):
            raise FieldHTTPError(
                401,
                MISSING_OR_INVALID,
                field="Authorization",
                headers={"WWW-Authenticate": "Bearer"},
            )
    check_query(request)


def _declared_query(dependant: Dependant) -> set[str]:
    names = {param.alias for param in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _declared_query(sub)
    return names


def check_query(request: Request) -> None:
    """Refuse undeclared and repeated query parameters (FastAPI ignores the first, keeps the
    last of the second), so a typo such as ``?overwite=true`` is never silently dropped."""
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
        raise FeatureInputError("invalid query string", errors[:10])


def require_json(request: Request) -> None:
    """A JSON-only endpoint: ``application/json`` (or no Content-Type at all), else 415."""
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media not in ("", "application/json"):
        raise FieldHTTPError(
            415,
            f"Content-Type {media} not supported: send application/json",
            field="Content-Type",
            message="must be application/json",
        )


SessionDep = Annotated[Session, Depends(get_session)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
RunnerDep = Annotated[JobRunner, Depends(get_runner)]
