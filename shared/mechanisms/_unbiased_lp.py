"""The optimal unbiased randomizer's linear program (floating point; no privacy claim by itself).

Implements Badanidiyuru, Ghazi, Kumar, Manurangsi, Raman & Sinha, "Optimal Unbiased Randomizers
for Regression with Label Differential Privacy" (NeurIPS 2023), Algorithm 1 (OptUnbiasedRand),
as outlined in Liu & Huang (revised), Appendix J: for a finite public input grid g with prior
weights w, the transition matrix to a finite public output grid z that minimises the
prior-weighted expected squared error subject to unbiasedness and the epsilon-DP constraints,
solved with scipy's HiGHS. The one definition of this LP: the product mechanism
(``shared.mechanisms.unbiased``, which realises it on exact integers and verifies the DP
inequality itself) and the benchmark's float baseline (``bench.baselines.unbiased``) both call
:func:`solve`.

The LP (one per prior), with b = e^-eps and one auxiliary variable m_j per output:

    minimise   sum_i w_i sum_j P[i, j] (z_j - g_i)^2,   P[i, j] = b m_j + (1 - b) q[i, j]
    subject to sum_j P[i, j] = 1,  sum_j P[i, j] z_j = g_i   (every input i)
               0 <= q[i, j] <= m_j                          (every input i, output j)

Every entry of column j then lies in [b m_j, m_j], which is exactly the DP constraint
max_i P[i, j] <= e^eps min_i P[i, j] (any column satisfying it is of this form), with K m
inequality rows instead of the K^2 m pairwise ones.

Output grid: randomized response over the K outputs z_i = g_i + K (g_i - mean(g)) / (e^eps - 1)
is unbiased (its mean for input i is (e^eps z_i + sum_{j != i} z_j) / (e^eps + K - 1) = g_i
because sum z = sum g), which is where the range [L, U] = [z_0, z_{K-1}] of Appendix J comes
from. Rounding each z_i unbiasedly onto any grid that contains L and U keeps it unbiased and
epsilon-DP (post-processing), so the LP is feasible for every such grid, at every epsilon. The
default candidates are K // 2 + 1 points evenly spaced on [L, U]; then a few refinement rounds
re-solve on the outputs in use plus the midpoints to their neighbours (an optimum needs at most
2 K outputs, Badanidiyuru et al. 2023). [L, U] widens like K / epsilon, so the outputs reach far
beyond [lo, hi] at small epsilon. Everything here is computed from public inputs (grid, prior
weights, epsilon), never from labels.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

import numpy as np

from shared.domain import check_epsilon
from shared.errors import InvalidParameterError
from shared.mechanisms.histogram import Prior

ROUNDINGS: tuple[str, ...] = ("randomized", "nearest")
# A refinement round is skipped when it would give more than this many outputs per input, and
# refinement stops once a round gains less than _MIN_GAIN (relative).
_MAX_REFINED = 2.5
_MIN_GAIN = 1e-3
# HiGHS (solver, presolve) tried in turn: dual simplex without presolve (~25% faster here,
# measured; the same optimum: on 300 priors, epsilon 1e-4 to 50, 285 bit for bit and the rest
# within 2e-12 in the realised weights, none refused), then as ``linprog``'s "highs-ds" and
# "highs-ipm" ran it before (with presolve), where the first attempt fails.
_ATTEMPTS: tuple[tuple[str, bool], ...] = (("simplex", False), ("simplex", True), ("ipm", True))
_FEASIBILITY_TOLERANCE = 1e-10
# ``linprog``'s default ``tol``, from which it derives the check of a reported optimum.
_LINPROG_TOL = 1e-9
# The default output grid is [L, U] at this share of the LP's epsilon (a little wider).
_GRID_EPSILON_SHARE = 1.0 - 1e-6


def check_grid(values: object, *, name: str, min_size: int) -> np.ndarray:
    """A finite, strictly increasing 1-D float64 grid of at least ``min_size`` points."""
    try:
        grid = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise InvalidParameterError(f"{name} must be an array of numbers") from None
    if grid.ndim != 1 or grid.size < min_size:
        raise InvalidParameterError(f"{name} must be a 1-D array of >= {min_size} points")
    if not np.all(np.isfinite(grid)):
        raise InvalidParameterError(f"{name} must be finite")
    if not np.all(np.diff(grid) > 0):
        raise InvalidParameterError(f"{name} must be strictly increasing")
    return np.ascontiguousarray(grid)


def output_range_bounds(input_grid: np.ndarray, *, epsilon: float) -> tuple[float, float]:
    """[L, U] of Appendix J: the outputs of the unbiased randomized response on the grid."""
    grid = check_grid(input_grid, name="input_grid", min_size=2)
    eps = check_epsilon(epsilon)
    # z_i = g_i + K (g_i - mean) / (e^eps - 1), the Appendix J formula rearranged.
    spread = grid.size / math.expm1(eps)
    mean = float(grid.mean())
    return grid[0] + spread * (grid[0] - mean), grid[-1] + spread * (grid[-1] - mean)


def default_output_grid(
    input_grid: np.ndarray, *, epsilon: float, n_outputs: int | None = None
) -> np.ndarray:
    """``n_outputs`` points evenly spaced on [L, U] (Appendix J); default K // 2 + 1.

    The refinement rounds of :func:`solve` then add resolution where the solution puts mass
    (measured on several priors: within 0.5 % of a 300-output grid, 3-10x faster).
    """
    lower, upper = output_range_bounds(input_grid, epsilon=epsilon)
    k = np.asarray(input_grid).size
    if n_outputs is None:
        n_outputs = k // 2 + 1
    if isinstance(n_outputs, bool) or not isinstance(n_outputs, int | np.integer) or n_outputs < 2:
        raise InvalidParameterError(f"n_outputs ({n_outputs!r}) must be an integer >= 2")
    return np.linspace(lower, upper, int(n_outputs))


def rounding_weights(prior: Prior, grid: np.ndarray, *, rounding: str = "randomized") -> np.ndarray:
    """Probability of each grid point after rounding a label drawn from ``prior`` (exact).

    ``"nearest"``: prior mass of each point's Voronoi cell. ``"randomized"``: the expected
    linear-interpolation weight E[hat_i(clip(Y))]; the prior is piecewise uniform, so on each
    elementary interval between prior edges and grid points the average of the (linear) weight
    is its value at the interval's midpoint.
    """
    points = check_grid(grid, name="grid", min_size=2)
    if rounding not in ROUNDINGS:
        raise InvalidParameterError(
            f"rounding ({rounding!r}) must be one of {', '.join(ROUNDINGS)}"
        )
    if rounding == "nearest":
        cuts = prior.cdf(0.5 * (points[1:] + points[:-1]))
        return np.diff(np.concatenate(([0.0], cuts, [1.0])))
    breaks = np.unique(np.concatenate([prior.edges, points]))
    left, right = breaks[:-1], breaks[1:]
    mid = 0.5 * (left + right)
    cell = np.searchsorted(prior.edges, mid, side="right") - 1
    inside = (cell >= 0) & (cell < prior.k)
    cell = np.clip(cell, 0, prior.k - 1)
    density = np.where(inside, prior.probs[cell] / np.diff(prior.edges)[cell], 0.0)
    mass = density * (right - left)
    seg = np.clip(np.searchsorted(points, mid, side="right") - 1, 0, points.size - 2)
    frac = np.clip((mid - points[seg]) / (points[seg + 1] - points[seg]), 0.0, 1.0)
    weights = np.bincount(seg, weights=mass * (1.0 - frac), minlength=points.size)
    weights += np.bincount(seg + 1, weights=mass * frac, minlength=points.size)
    return weights / weights.sum()


def _constraints(z: np.ndarray, k: int, b: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The LP's constraint matrix in compressed-column form, built directly with numpy.

    Variables q[i, j] (column i m + j), then m_j (column k m + j); rows: the K m inequality
    rows q[i, j] - m_j <= 0 (row i m + j), then the K rows sum_j P[i, j] = 1 (row K m + i) and
    the K rows sum_j P[i, j] z_j = g_i (row K m + K + i). Entry for entry (indices, values and
    their order) the matrix built before from ``scipy.sparse`` Kronecker products, as
    ``linprog`` handed it to HiGHS, ``csc_array(vstack((A_ub, A_eq)))`` (tested against it): a
    q column keeps its mean row even where z_j = 0, an m column drops it. Returns (indptr,
    indices, values), indices as int32 as HiGHS takes them.
    """
    m = z.size
    n_q = k * m
    i, j = np.divmod(np.arange(n_q), m)
    # q[i, j]: 1 in its inequality row, 1 - b in row i's sum, (1 - b) z_j in row i's mean.
    q_rows = np.stack([i * m + j, n_q + i, n_q + k + i], axis=1)
    q_values = np.stack([np.ones(n_q), np.full(n_q, 1.0 - b), (1.0 - b) * z[j]], axis=1)
    # m_j: -1 in the K inequality rows of column j, b in every sum row, b z_j in every mean
    # row (left out where z_j = 0).
    inputs = np.arange(k)
    m_rows = np.concatenate(
        [
            inputs[None, :] * m + np.arange(m)[:, None],
            np.broadcast_to(n_q + inputs, (m, k)),
            np.broadcast_to(n_q + k + inputs, (m, k)),
        ],
        axis=1,
    )
    m_values = np.concatenate(
        [np.full((m, k), -1.0), np.full((m, k), b), np.repeat(b * z[:, None], k, axis=1)], axis=1
    )
    keep = np.ones(m_rows.shape, dtype=bool)
    keep[:, 2 * k :] = (z != 0.0)[:, None]
    counts = np.concatenate([np.full(n_q, 3), keep.sum(axis=1)])
    indptr = np.zeros(n_q + m + 1, dtype=np.int32)
    np.cumsum(counts, out=indptr[1:])
    indices = np.concatenate([q_rows.ravel(), m_rows[keep]]).astype(np.int32)
    values = np.concatenate([q_values.ravel(), m_values[keep]])
    return indptr, indices, values


def _solve_lp(
    g: np.ndarray, w: np.ndarray, z: np.ndarray, *, epsilon: float
) -> tuple[np.ndarray, np.ndarray]:
    """The LP of the module docstring (normalised units); returns (q, m) with P = b m + (1-b) q.

    Writing P[i, j] = b m_j + (1 - b) q[i, j] with b = e^-eps and 0 <= q[i, j] <= m_j puts
    every entry in [b m_j, m_j] (ratio e^eps) with K m rows instead of 2 K m. HiGHS dual
    simplex, then (rarely, ~1 prior in 1,000, it stalls) its interior point method, through
    :func:`_highs` (``_ATTEMPTS``).
    """
    k, m = g.size, z.size
    b = math.exp(-epsilon)
    sq = w[:, None] * (z[None, :] - g[:, None]) ** 2
    cost = np.concatenate([((1.0 - b) * sq).ravel(), b * sq.sum(axis=0)])
    matrix = _constraints(z, k, b)
    b_eq = np.concatenate([np.ones(k), g])
    lower = np.concatenate([np.full(k * m, -np.inf), b_eq])
    upper = np.concatenate([np.zeros(k * m), b_eq])
    message = ""
    for solver, presolve in _ATTEMPTS:
        x, message = _highs(cost, matrix, lower, upper, solver=solver, presolve=presolve)
        if x is not None:
            return x[: k * m].reshape(k, m), x[k * m :]
    raise InvalidParameterError(f"the unbiased-randomizer LP failed: {message}")


def _highs(
    cost: np.ndarray,
    matrix: tuple[np.ndarray, np.ndarray, np.ndarray],
    lower: np.ndarray,
    upper: np.ndarray,
    *,
    solver: str,
    presolve: bool,
) -> tuple[np.ndarray | None, str]:
    """min cost x subject to lower <= A x <= upper, x >= 0 (A compressed by column): the
    solution, or None and why not.

    What ``scipy.optimize.linprog(method="highs-ds" / "highs-ipm", options={"presolve": ...})``
    does, without its argument parsing and option checks (~2 ms of the ~4 ms per solve at
    these sizes): the same model, the same HiGHS options, the same acceptance test (HiGHS
    reports optimal and the solution meets the bounds and rows to linprog's tolerance,
    sqrt(1e-9) * 10), through scipy's own HiGHS binding. Where that binding is missing (its
    module is private to scipy) or has another API, this is ``linprog`` itself, which gives
    the same solution, bit for bit (tested).
    """
    core = _highs_binding()
    if core is not None:
        try:
            return _highs_direct(core, cost, matrix, lower, upper, solver, presolve)
        except (AttributeError, TypeError):  # a scipy whose private binding has another API
            pass
    return _linprog(cost, matrix, lower, upper, solver=solver, presolve=presolve)


def _highs_direct(
    core: Any,
    cost: np.ndarray,
    matrix: tuple[np.ndarray, np.ndarray, np.ndarray],
    lower: np.ndarray,
    upper: np.ndarray,
    solver: str,
    presolve: bool,
) -> tuple[np.ndarray | None, str]:
    """:func:`_highs` through scipy's HiGHS binding ``core``."""
    indptr, indices, values = matrix
    n_col, n_row = cost.size, lower.size
    highs = core._Highs()
    # The model as arrays (HiGHS' passModel from pointers: no per-element conversion, ~0.6 ms
    # less per solve than filling a HighsLp); starts without the final nnz, no integer columns.
    if (
        highs.passOptions(_highs_options(solver, presolve)) == core.HighsStatus.kError
        or highs.passModel(
            n_col,
            n_row,
            int(indptr[-1]),
            int(core.MatrixFormat.kColwise),
            int(core.ObjSense.kMinimize),
            0.0,
            cost,
            np.zeros(n_col),
            np.full(n_col, core.kHighsInf),
            np.where(np.isinf(lower), -core.kHighsInf, lower),
            upper,
            indptr[:-1],
            indices,
            values,
            np.zeros(n_col, dtype=np.int32),
        )
        == core.HighsStatus.kError
        or highs.run() == core.HighsStatus.kError
    ):
        return None, "HiGHS reported an error"
    status = highs.getModelStatus()
    if status != core.HighsModelStatus.kOptimal:
        return None, highs.modelStatusToString(status)
    solution = highs.getSolution()
    x = np.array(solution.col_value)
    rows = np.array(solution.row_value)
    tol = math.sqrt(_LINPROG_TOL) * 10.0  # linprog's check of a reported optimum
    slack = upper - rows
    n_ub = int(np.count_nonzero(np.isinf(lower)))
    if (
        np.isnan(x).any()
        or np.isnan(slack).any()
        or np.any(x < -tol)
        or np.any(slack[:n_ub] < -tol)
        or np.any(np.abs(slack[n_ub:]) > tol)
    ):
        return None, "the solution does not satisfy the constraints within the tolerance"
    return x, ""


@lru_cache(maxsize=8)
def _highs_options(solver: str, presolve: bool) -> Any:
    """The HiGHS options ``linprog(method="highs-ds" / "highs-ipm")`` sets (HiGHS copies them
    on ``passOptions``, so one object serves every solve)."""
    core = _highs_binding()
    options = core.HighsOptions()
    options.presolve = "on" if presolve else "off"
    options.solver = solver
    options.highs_debug_level = 0
    options.primal_feasibility_tolerance = _FEASIBILITY_TOLERANCE
    options.dual_feasibility_tolerance = _FEASIBILITY_TOLERANCE
    options.log_to_console = False
    options.output_flag = False
    options.simplex_strategy = 1  # dual
    return options


@lru_cache(maxsize=1)
def _highs_binding() -> Any:
    """scipy's own binding of HiGHS (what ``linprog`` calls), or None where a scipy version
    has it elsewhere (the module is private to scipy): imported on first use, since only
    building this mechanism needs scipy."""
    try:
        from scipy.optimize._highspy import _core
    except ImportError:  # pragma: no cover - a scipy that moved it: ``linprog`` instead
        return None
    return _core


def _linprog(
    cost: np.ndarray,
    matrix: tuple[np.ndarray, np.ndarray, np.ndarray],
    lower: np.ndarray,
    upper: np.ndarray,
    *,
    solver: str,
    presolve: bool,
) -> tuple[np.ndarray | None, str]:
    """:func:`_highs` through ``scipy.optimize.linprog`` (the same model and options)."""
    from scipy import sparse
    from scipy.optimize import linprog

    indptr, indices, values = matrix
    n_ub = int(np.count_nonzero(np.isinf(lower)))
    a = sparse.csc_array((values, indices, indptr), shape=(lower.size, cost.size)).tocsr()
    result = linprog(
        cost,
        A_ub=a[:n_ub],
        b_ub=upper[:n_ub],
        A_eq=a[n_ub:],
        b_eq=upper[n_ub:],
        bounds=(0.0, None),
        method={"simplex": "highs-ds", "ipm": "highs-ipm"}[solver],
        options={
            "presolve": presolve,
            "primal_feasibility_tolerance": _FEASIBILITY_TOLERANCE,
            "dual_feasibility_tolerance": _FEASIBILITY_TOLERANCE,
        },
    )
    if result.status == 0 and result.x is not None:
        return result.x, ""
    return None, str(result.message)


def _objective(
    q: np.ndarray, mins: np.ndarray, g: np.ndarray, w: np.ndarray, z: np.ndarray, *, epsilon: float
) -> float:
    """Prior-weighted expected squared error of an LP solution (normalised units)."""
    b = math.exp(-epsilon)
    p = b * mins[None, :] + (1.0 - b) * q
    return float(w @ (p * (z[None, :] - g[:, None]) ** 2).sum(axis=1))


def _refined(z: np.ndarray, used: np.ndarray) -> np.ndarray:
    """The used outputs plus the midpoints to their neighbours on the previous grid."""
    before = z[np.maximum(used - 1, 0)]
    after = z[np.minimum(used + 1, z.size - 1)]
    return np.unique(np.concatenate([z[used], 0.5 * (z[used] + before), 0.5 * (z[used] + after)]))


def _polish(q: np.ndarray, mins: np.ndarray, *, epsilon: float) -> np.ndarray:
    """Make the LP's approximate solution stochastic with every column in [b m_j, m_j].

    q is clipped into [0, m_j], so P = b m_j + (1 - b) q lies in [b m_j, m_j], then each row is
    divided by its sum (off by ~1e-13): a row-wide factor that moves column ratios by ~1e-13,
    which the caller's epsilon slack absorbs. The unbiasedness the LP delivers (~1e-15 in
    normalised units) is left as it is: a correcting tilt would have to move mass by a large
    relative amount in near-deterministic rows.
    """
    b = math.exp(-epsilon)
    p = b * mins[None, :] + (1.0 - b) * np.clip(q, 0.0, mins[None, :])
    return p / p.sum(axis=1, keepdims=True)


def _check_weights(weights: np.ndarray, size: int) -> np.ndarray:
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (size,) or not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        raise InvalidParameterError(
            "weights must be finite, >= 0, not all 0, and one per input grid point"
        )
    return w / w.sum()


def solve(
    *,
    input_grid: np.ndarray,
    weights: np.ndarray,
    epsilon: float,
    output_grid: np.ndarray | None = None,
    n_outputs: int | None = None,
    refine: int = 4,
    min_column: float = 0.0,
) -> tuple[np.ndarray, np.ndarray]:
    """(outputs, P): the LP solved at exactly ``epsilon``, polished, its used outputs only.

    ``output_grid`` defaults to :func:`default_output_grid` (``n_outputs`` points); a given
    grid must contain the Appendix J range [L, U] (else the LP may be infeasible at small
    epsilon, which raises). Then ``refine`` rounds (each one only lowers the error) re-solve on
    the outputs the last solution used plus the midpoints to their neighbours. Output columns
    whose largest entry m_j is at most ``min_column`` times the largest (and exact zeros) are
    dropped, then each row renormalised. Callers that need the result to be epsilon-DP pass a
    slightly smaller epsilon here and check the matrix themselves.
    """
    eps = check_epsilon(epsilon)
    grid = check_grid(input_grid, name="input_grid", min_size=2)
    w = _check_weights(weights, grid.size)
    if isinstance(refine, bool) or not isinstance(refine, int | np.integer) or refine < 0:
        raise InvalidParameterError(f"refine ({refine!r}) must be an integer >= 0")
    # Normalised units (inputs on [-1, 1]) keep the LP well conditioned.
    centre = 0.5 * (grid[0] + grid[-1])
    half = 0.5 * (grid[-1] - grid[0])
    g = (grid - centre) / half
    if output_grid is None:
        # Built in normalised units (exact at the ends even for labels far from 0) and at a
        # slightly smaller epsilon, so slightly wider than [L, U]: feasible with room to spare.
        z = default_output_grid(g, epsilon=eps * _GRID_EPSILON_SHARE, n_outputs=n_outputs)
    else:
        if n_outputs is not None:
            raise InvalidParameterError("give output_grid or n_outputs, not both")
        z = (check_grid(output_grid, name="output_grid", min_size=2) - centre) / half
    q, mins = _solve_lp(g, w, z, epsilon=eps)
    error = _objective(q, mins, g, w, z, epsilon=eps)
    for _ in range(int(refine)):
        z_next = _refined(z, np.flatnonzero(mins > 0))
        if z_next.size > _MAX_REFINED * g.size:
            break  # keep the solve time bounded (< 2 s for K = 65); the gain left is < 0.5 %
        q_next, mins_next = _solve_lp(g, w, z_next, epsilon=eps)
        error_next = _objective(q_next, mins_next, g, w, z_next, epsilon=eps)
        if error_next <= error:  # the used outputs are kept, so this holds up to solver noise
            z, q, mins = z_next, q_next, mins_next
        if error_next > error * (1.0 - _MIN_GAIN):
            break
        error = min(error, error_next)
    keep = mins > max(min_column * mins.max(), 0.0)
    p = _polish(q[:, keep], mins[keep], epsilon=eps)
    return centre + half * z[keep], p
