"""Shared pytest fixtures."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
KIT_DATASETS = REPO_ROOT.parent / "shared" / "datasets"


@pytest.fixture
def rng() -> np.random.Generator:
    """A seeded generator: tests are deterministic; production uses the OS CSPRNG."""
    return np.random.default_rng(20261121)


# ---- a real PostgreSQL server (tests/postgres.py) -------------------------------------------


@pytest.fixture(scope="session")
def postgres() -> Iterator[Any]:
    """One PostgreSQL server for the session (skips only if its binaries are absent)."""
    from tests.postgres import SKIP_REASON, find_bindir, postgres_server

    if find_bindir() is None:
        pytest.skip(SKIP_REASON)
    pytest.importorskip("psycopg", reason="psycopg missing: pip install -e '.[postgres]'")
    with postgres_server() as server:
        yield server


@pytest.fixture
def postgres_url(postgres: Any) -> str:
    """A fresh, empty PostgreSQL database of the session's server."""
    return str(postgres.create_database())


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the fuzz tests last: Schemathesis' in-process ASGI client leaves process-wide state
    behind (later TestClient requests saw their ``Accept`` header merged with ``*/*``)."""
    items.sort(key=lambda item: "tests/fuzz/" in item.nodeid)
