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
    """The Docker modules first (the longest work, started at once under ``-n``), the fuzz tests
    last: Schemathesis' in-process ASGI client leaves process-wide state behind (later
    TestClient requests saw their ``Accept`` header merged with ``*/*``)."""
    items.sort(key=lambda item: ("tests/fuzz/" in item.nodeid, _group(item.nodeid) != "docker"))


def _group(nodeid: str) -> str:
    """The unit a worker runs whole: a test module, or every module that drives Docker (one
    dockerd, the same image tags and wheelhouse: they must not run side by side)."""
    module = nodeid.split("::", 1)[0]
    return "docker" if module.startswith("tests/compose/") else module


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under pytest-xdist (``tests/run.sh`` runs ``-n`` workers) each worker takes whole
    :func:`_group` units in collection order, so a module's fixtures (a started service, a
    Spark cluster, a deployment) are built once, on one worker."""
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _group(nodeid)

    config.option.loadscopereorder = False  # keep the order above (Docker first, fuzz last)
    return GroupScheduling(config, log)
