"""bench.exact_noise runs end to end on tiny sizes and reports every row side by side."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bench import exact_noise
from shared.estimators import constants as C


def test_the_benchmark_reports_each_exact_sampler_next_to_the_float_one(tmp_path: Path) -> None:
    out = tmp_path / "exact_noise.md"
    argv = ["--rounds", "1", "--calls", "2", "--coordinates", "50", "--out", str(out)]
    assert exact_noise.main(argv) == 0
    rows = [line for line in out.read_text().splitlines() if line.startswith("| ")][1:]
    assert len(rows) == 5  # two cases x two sources, and the Gaussian
    assert all(len(row.split("|")) == 8 for row in rows)


def test_the_float_reference_returns_a_grid_radius_near_the_exact_one() -> None:
    """The replaced sampler, kept for the comparison, answers on the same grid and about the
    same rank (its law differs from the exact one by floating-point effects only)."""
    rng = np.random.default_rng(4)
    norms = np.linalg.norm(rng.normal(size=(4000, 3)), axis=1)
    above = C.target_above(norms.size, 0.5)
    ranks = {}
    for name, fn in (("exact", C.dp_norm_quantile), ("float", exact_noise.float_norm_quantile)):
        radii = [fn(norms, epsilon=0.5, above=above, rng=rng) for _ in range(200)]
        assert np.isin(radii, C.NORM_GRID).all()
        ranks[name] = np.median([np.count_nonzero(norms > r) for r in radii])
    assert abs(ranks["exact"] - ranks["float"]) <= 0.2 * above
