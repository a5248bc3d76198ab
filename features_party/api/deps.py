"""Dependencies: database session, settings, job runner, bearer-token check."""

from __future__ import annotations

import hmac
from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, HTTPException, Request
from sqlalchemy.orm import Session

from features_party.config import Settings
from features_party.jobs import JobRunner


def get_settings(request: Request) -> Settings:
    return request.app.state.settings


def get_session(request: Request) -> Iterator[Session]:
    with request.app.state.sessions() as session:
        yield session


def get_runner(request: Request) -> JobRunner:
    return request.app.state.runner


def require_token(request: Request) -> None:
    """With ``LABELDP_FEATURES_TOKEN`` set, require it as a bearer token (constant time)."""
    expected: str | None = request.app.state.settings.features_token
    if expected is None:
        return  # loopback-only deployment, see config.Settings
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise HTTPException(
            status_code=401,
            detail="missing bearer token",
            headers={"WWW-Authenticate": "Bearer"},
        )
    if not hmac.compare_digest(token.strip().encode(), expected.encode()):
        raise HTTPException(
            status_code=401, detail="invalid token", headers={"WWW-Authenticate": "Bearer"}
        )


SessionDep = Annotated[Session, Depends(get_session)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
RunnerDep = Annotated[JobRunner, Depends(get_runner)]
