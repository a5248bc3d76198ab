"""Dependencies: database session, settings, job runner, bearer-token check."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.orm import Session

from features_party.config import Settings
from features_party.jobs import JobRunner
from shared.service.http.auth import match_token, unauthorized
from shared.service.http.requests import check_query


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
        table = [("publisher", expected.encode("utf-8"))]
        if match_token(request.headers.get("authorization"), table) is None:
            raise unauthorized()
    check_query(request)


SessionDep = Annotated[Session, Depends(get_session)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
RunnerDep = Annotated[JobRunner, Depends(get_runner)]
