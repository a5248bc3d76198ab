"""Shared pytest fixtures."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
KIT_DATASETS = REPO_ROOT.parent / "shared" / "datasets"


@pytest.fixture
def rng() -> np.random.Generator:
    """A seeded generator: tests are deterministic; production uses the OS CSPRNG."""
    return np.random.default_rng(20261121)
