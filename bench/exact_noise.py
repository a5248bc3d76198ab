"""The exact samplers of the model releases against the float samplers they replaced.

Run: ``python -m bench.exact_noise [--rounds 7] [--out FILE]``.

Each round times, one after the other in one process: the sparse vector that chooses ePTR's
r_x (``constants.dp_norm_quantile``: exact discrete Laplace comparisons, numba kernel) and the
float-Laplace version it replaced (reimplemented here as it was: inverse CDF of 2^-53-grid
uniforms, all 4,097 comparisons vectorised), each on the same norms, seeded and from the OS
CSPRNG; and ePTR's exact Gaussian (``gaussian.gaussian_mechanism``) against ``value + s *
ndtri(u)`` on the same coordinates. Medians and worst of the rounds, per call / coordinate.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from scipy.special import ndtri

from bench import emit
from shared.estimators import constants as C
from shared.mechanisms.gaussian import gaussian_mechanism
from shared.rng import Rng, SystemRandom, uniforms


def float_laplace(rng: Rng, scale: float, size: int) -> np.ndarray:
    """The replaced sampler: Laplace(0, scale) by the inverse CDF of 2^-53-grid uniforms."""
    u = np.maximum(uniforms(rng, size), 2.0**-54) - 0.5
    return -scale * np.sign(u) * np.log1p(-2.0 * np.abs(u))


def float_norm_quantile(norms: np.ndarray, *, epsilon: float, above: float, rng: Rng) -> float:
    """``dp_norm_quantile`` as it was before the exact comparisons (same grid, same rule)."""
    values = np.sort(np.asarray(norms, dtype=np.float64))
    counts = values.size - np.searchsorted(values, C.NORM_GRID, side="right")
    threshold = above - float_laplace(rng, 2.0 / epsilon, 1)[0]
    fired = np.flatnonzero(
        counts - float_laplace(rng, 2.0 / epsilon, C.NORM_GRID.size) <= threshold
    )
    return float(C.NORM_GRID[fired[0]] if fired.size else C.NORM_GRID[-1])


def per_call(run: Callable[[], object], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        run()
    return (time.perf_counter() - start) / calls


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=2000, help="sparse vector calls a round")
    parser.add_argument("--coordinates", type=int, default=20_000, help="Gaussian, a round")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    data = np.random.default_rng(1)
    cases = {
        "n = 24, eps_r_x = 1 (the audit's)": (np.exp(data.normal(0.0, 0.4, 24)), 1.0),
        "n = 8000, eps_r_x = 0.05": (np.linalg.norm(data.normal(size=(8000, 5)), axis=1), 0.05),
    }
    sources: dict[str, Rng] = {"seeded": np.random.default_rng(2), "CSPRNG": SystemRandom()}
    runs: dict[str, Callable[[], object]] = {}
    for case, (norms, eps) in cases.items():
        above = C.target_above(norms.size, eps)
        for source, rng in sources.items():
            for kind, fn in (("exact", C.dp_norm_quantile), ("float", float_norm_quantile)):
                runs[f"sparse vector, {case}, {source}, {kind}"] = (
                    lambda fn=fn, norms=norms, eps=eps, above=above, rng=rng: fn(
                        norms, epsilon=eps, above=above, rng=rng
                    )
                )
    values = data.normal(size=args.coordinates)
    csprng = SystemRandom()
    gaussian = {
        "Gaussian, CSPRNG, exact": lambda: gaussian_mechanism(values, scale=0.7, rng=csprng),
        "Gaussian, CSPRNG, float": lambda: values + 0.7 * ndtri(uniforms(csprng, values.size)),
    }
    for run in (*runs.values(), *gaussian.values()):
        run()  # warm-up: numba compiled, caches hot
    samples: dict[str, list[float]] = {key: [] for key in (*runs, *gaussian)}
    for _ in range(args.rounds):
        for key, run in runs.items():
            samples[key].append(per_call(run, args.calls))
        for key, run in gaussian.items():
            samples[key].append(per_call(run, 1) / values.size)
    lines = [
        f"`python -m bench.exact_noise --rounds {args.rounds} --calls {args.calls} "
        f"--coordinates {args.coordinates}` on {datetime.now(UTC):%Y-%m-%d}, "
        f"{platform.machine()}, {os.cpu_count()} CPUs; median and worst of {args.rounds} rounds, "
        "each the mean over its calls (sparse vector: per release; Gaussian: per coordinate).",
        "",
        "| what | exact: median | exact: worst | float: median | float: worst | exact / float |",
        "|---|---|---|---|---|---|",
    ]
    keys = [key.removesuffix(", exact") for key in samples if key.endswith(", exact")]
    for key in keys:
        exact, flt = samples[f"{key}, exact"], samples[f"{key}, float"]
        unit, scale = ("us", 1e6) if key.startswith("Gaussian") else ("ms", 1e3)
        ratio = statistics.median(exact) / statistics.median(flt)
        lines.append(
            f"| {key} | {statistics.median(exact) * scale:.3g} {unit} | "
            f"{max(exact) * scale:.3g} {unit} | {statistics.median(flt) * scale:.3g} {unit} | "
            f"{max(flt) * scale:.3g} {unit} | {ratio:.3g} |"
        )
        print(lines[-1], flush=True)
    emit("\n".join(lines), args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
