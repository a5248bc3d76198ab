"""Designs shared by the estimator tests: random, one high-leverage point, near-collinear."""

from __future__ import annotations

import numpy as np


def designs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(11)
    random = rng.normal(size=(25, 3))
    leverage = rng.normal(size=(25, 3))
    leverage[7] = [40.0, -35.0, 50.0]  # one point far out: it dominates its own fit
    base = rng.normal(size=(25, 1))
    collinear = np.hstack([base, base + 1e-4 * rng.normal(size=(25, 1)), rng.normal(size=(25, 1))])
    return {"random": random, "leverage": leverage, "collinear": collinear}
