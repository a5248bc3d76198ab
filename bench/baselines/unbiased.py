"""The "Unbiased" randomizer: least squared error subject to E[y~ | y] = y and epsilon-DP.

Implements Badanidiyuru, Ghazi, Kumar, Manurangsi, Raman & Sinha, "Optimal Unbiased Randomizers
for Regression with Label Differential Privacy" (NeurIPS 2023), Algorithm 1 (OptUnbiasedRand),
as outlined in Liu & Huang (revised), Appendix J: labels are rounded to a finite public input
grid, then mapped to a finite public output grid by the transition matrix that minimises the
prior-weighted expected squared error subject to unbiasedness and the epsilon-DP constraints, a
linear program solved with scipy's HiGHS.

Labels are mapped to the input grid by unbiased randomized rounding (default, as in
Badanidiyuru et al.: E[rounded | y] = y, so E[y~ | y] = y for every label on the grid's span) or
by rounding to the nearest grid point (``rounding="nearest"``: unbiased only at grid points).
Both are fixed public maps applied after clipping to the grid's span.

Privacy: the matrix is accepted only if every output column j has
m_j <= P[i, j] <= e^epsilon m_j for all inputs i (checked on construction). A label's output law
is one row, or under randomized rounding a convex combination of two adjacent rows, so it also
lies in [m_j, e^epsilon m_j] column by column: any two labels (including labels beyond the grid,
which are clipped to it first) give output probabilities within a factor e^epsilon.

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

A benchmark baseline only (continuous labels are rounded with floating-point uniforms; see the
package docstring); the labels party does not serve it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal, get_args

import numpy as np
from scipy import sparse
from scipy.optimize import linprog

from bench.baselines._common import PublicParams, check_choice, check_eps, label_array, uniforms
from shared.errors import InvalidParameterError
from shared.mechanisms.histogram import Prior
from shared.rng import Rng

Rounding = Literal["randomized", "nearest"]
ROUNDINGS: tuple[str, ...] = get_args(Rounding)
GRIDS: tuple[str, ...] = ("edges", "midpoints")
MAX_EPSILON = 700.0

# The LP is solved at a slightly smaller epsilon; the slack absorbs the solver's feasibility
# tolerance and the polishing below, so the accepted matrix is epsilon-DP to rounding error.
_EPS_SLACK_ABS = 1e-6
_EPS_SLACK_REL = 1e-4
# A refinement round is skipped when it would give more than this many outputs per input, and
# refinement stops once a round gains less than _MIN_GAIN (relative).
_MAX_REFINED = 2.5
_MIN_GAIN = 1e-3
# Output columns whose mass is below this share of the largest are dropped before polishing.
_MIN_COLUMN = 1e-12
# Relative float slack allowed when checking the DP ratio of a finished matrix.
_RATIO_TOL = 1e-12


def _check_unbiased_eps(epsilon: object) -> float:
    eps = check_eps(epsilon)
    if eps > MAX_EPSILON:
        # P[i, j] >= e^-eps m_j must stay a normal double, or the matrix could not be exactly DP.
        raise InvalidParameterError(f"epsilon ({epsilon!r}) must be <= {MAX_EPSILON} for Unbiased")
    return eps


def _check_grid(values: object, *, name: str, min_size: int) -> np.ndarray:
    grid = np.asarray(values, dtype=np.float64)
    if grid.ndim != 1 or grid.size < min_size:
        raise InvalidParameterError(f"{name} must be a 1-D array of >= {min_size} points")
    if not np.all(np.isfinite(grid)):
        raise InvalidParameterError(f"{name} must be finite")
    if not np.all(np.diff(grid) > 0):
        raise InvalidParameterError(f"{name} must be strictly increasing")
    return np.ascontiguousarray(grid)


def output_range_bounds(input_grid: np.ndarray, *, epsilon: float) -> tuple[float, float]:
    """[L, U] of Appendix J: the outputs of the unbiased randomized response on the grid."""
    grid = _check_grid(input_grid, name="input_grid", min_size=2)
    eps = _check_unbiased_eps(epsilon)
    # z_i = g_i + K (g_i - mean) / (e^eps - 1), the Appendix J formula rearranged.
    spread = grid.size / math.expm1(eps)
    mean = float(grid.mean())
    return grid[0] + spread * (grid[0] - mean), grid[-1] + spread * (grid[-1] - mean)


def default_output_grid(
    input_grid: np.ndarray, *, epsilon: float, n_outputs: int | None = None
) -> np.ndarray:
    """``n_outputs`` points evenly spaced on [L, U] (Appendix J); default K // 2 + 1.

    The refinement rounds of :func:`optimal_unbiased` then add resolution where the solution
    puts mass (measured on several priors: within 0.5 % of a 300-output grid, 3-10x faster).
    """
    lower, upper = output_range_bounds(input_grid, epsilon=epsilon)
    k = np.asarray(input_grid).size
    if n_outputs is None:
        n_outputs = k // 2 + 1
    if isinstance(n_outputs, bool) or not isinstance(n_outputs, int | np.integer) or n_outputs < 2:
        raise InvalidParameterError(f"n_outputs ({n_outputs!r}) must be an integer >= 2")
    return np.linspace(lower, upper, int(n_outputs))


def rounding_weights(prior: Prior, grid: np.ndarray, *, rounding: Rounding) -> np.ndarray:
    """Probability of each grid point after rounding a label drawn from ``prior`` (exact).

    ``"nearest"``: prior mass of each point's Voronoi cell. ``"randomized"``: the expected
    linear-interpolation weight E[hat_i(clip(Y))]; the prior is piecewise uniform, so on each
    elementary interval between prior edges and grid points the average of the (linear) weight
    is its value at the interval's midpoint.
    """
    points = _check_grid(grid, name="grid", min_size=2)
    check_choice(rounding, name="rounding", choices=ROUNDINGS)
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


def _solve_lp(
    g: np.ndarray, w: np.ndarray, z: np.ndarray, *, epsilon: float
) -> tuple[np.ndarray, np.ndarray]:
    """The LP of the module docstring (normalised units); returns (q, m) with P = b m + (1-b) q.

    Writing P[i, j] = b m_j + (1 - b) q[i, j] with b = e^-eps and 0 <= q[i, j] <= m_j puts
    every entry in [b m_j, m_j] (ratio e^eps) with K m rows instead of 2 K m; HiGHS dual
    simplex solves K = 65, m ~ 130 in well under a second.
    """
    k, m = g.size, z.size
    b = math.exp(-epsilon)
    sq = w[:, None] * (z[None, :] - g[:, None]) ** 2
    cost = np.concatenate([((1.0 - b) * sq).ravel(), b * sq.sum(axis=0)])
    eye_k = sparse.identity(k, format="csr")
    ones_k = np.ones((k, 1))
    a_eq = sparse.hstack(
        [
            (1.0 - b)
            * sparse.vstack(
                [
                    sparse.kron(eye_k, sparse.csr_matrix(np.ones((1, m)))),
                    sparse.kron(eye_k, sparse.csr_matrix(z[None, :])),
                ]
            ),
            b * sparse.csr_matrix(np.vstack([np.ones((k, m)), ones_k * z[None, :]])),
        ],
        format="csr",
    )
    b_eq = np.concatenate([np.ones(k), g])
    a_ub = sparse.hstack(
        [
            sparse.identity(k * m, format="csr"),
            -sparse.kron(sparse.csr_matrix(ones_k), sparse.identity(m), format="csr"),
        ],
        format="csr",
    )
    result = linprog(
        cost,
        A_ub=a_ub,
        b_ub=np.zeros(k * m),
        A_eq=a_eq,
        b_eq=b_eq,
        bounds=(0.0, None),
        method="highs-ds",
        options={"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10},
    )
    if result.status != 0 or result.x is None:
        raise InvalidParameterError(f"the unbiased-randomizer LP failed: {result.message}")
    return result.x[: k * m].reshape(k, m), result.x[k * m :]


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
    """Make the LP's approximate solution exactly stochastic and DP (to rounding).

    q is clipped into [0, m_j], so P = b m_j + (1 - b) q lies in [b m_j, m_j], then each row is
    divided by its sum (off by ~1e-13): a row-wide factor that moves column ratios by ~1e-13,
    which the LP's epsilon slack absorbs. The unbiasedness the LP delivers (~1e-15 in
    normalised units) is left as it is and checked by :class:`Unbiased`: a correcting tilt
    would have to move mass by a large relative amount in near-deterministic rows.
    """
    b = math.exp(-epsilon)
    p = b * mins[None, :] + (1.0 - b) * np.clip(q, 0.0, mins[None, :])
    return p / p.sum(axis=1, keepdims=True)


def optimal_unbiased(
    *,
    input_grid: np.ndarray,
    weights: np.ndarray,
    epsilon: float,
    output_grid: np.ndarray | None = None,
    n_outputs: int | None = None,
    refine: int = 4,
    rounding: Rounding = "randomized",
) -> Unbiased:
    """Solve the unbiased-randomizer LP for prior ``weights`` on ``input_grid``.

    Implements Badanidiyuru et al. 2023, Algorithm 1. ``output_grid`` defaults to
    :func:`default_output_grid`; a given grid must contain the Appendix J range [L, U] (else the
    LP may be infeasible at small epsilon, which raises). Then ``refine`` rounds (each one only
    lowers the error) re-solve on the outputs the last solution used plus the midpoints to their
    neighbours; an optimum needs at most 2 K outputs (Badanidiyuru et al. 2023), so these LPs
    stay small. The returned mechanism keeps only the outputs it uses.
    """
    eps = _check_unbiased_eps(epsilon)
    grid = _check_grid(input_grid, name="input_grid", min_size=2)
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != grid.shape or not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        raise InvalidParameterError(
            "weights must be finite, >= 0, not all 0, and one per input grid point"
        )
    check_choice(rounding, name="rounding", choices=ROUNDINGS)
    if isinstance(refine, bool) or not isinstance(refine, int | np.integer) or refine < 0:
        raise InvalidParameterError(f"refine ({refine!r}) must be an integer >= 0")
    eps_lp = eps - min(_EPS_SLACK_ABS, _EPS_SLACK_REL * eps)
    if output_grid is None:
        # [L, U] at the LP's (slightly smaller) epsilon, which is slightly wider: feasible.
        outputs = default_output_grid(grid, epsilon=eps_lp, n_outputs=n_outputs)
    else:
        if n_outputs is not None:
            raise InvalidParameterError("give output_grid or n_outputs, not both")
        outputs = _check_grid(output_grid, name="output_grid", min_size=2)
    # Normalised units (inputs on [-1, 1]) keep the LP well conditioned.
    centre = 0.5 * (grid[0] + grid[-1])
    half = 0.5 * (grid[-1] - grid[0])
    g, z = (grid - centre) / half, (outputs - centre) / half
    w = w / w.sum()
    q, mins = _solve_lp(g, w, z, epsilon=eps_lp)
    error = _objective(q, mins, g, w, z, epsilon=eps_lp)
    for _ in range(int(refine)):
        z_next = _refined(z, np.flatnonzero(mins > 0))
        if z_next.size > _MAX_REFINED * g.size:
            break  # keep the solve time bounded (< 2 s for K = 65); the gain left is < 0.5 %
        q_next, mins_next = _solve_lp(g, w, z_next, epsilon=eps_lp)
        error_next = _objective(q_next, mins_next, g, w, z_next, epsilon=eps_lp)
        if error_next <= error:  # the used outputs are kept, so this holds up to solver noise
            z, q, mins = z_next, q_next, mins_next
        if error_next > error * (1.0 - _MIN_GAIN):
            break
        error = min(error, error_next)
    keep = mins > _MIN_COLUMN * mins.max()
    p = _polish(q[:, keep], mins[keep], epsilon=eps_lp)
    return Unbiased(
        epsilon=eps,
        input_grid=grid,
        output_grid=centre + half * z[keep],
        probabilities=p,
        rounding=rounding,
    )


@dataclass(frozen=True, kw_only=True, eq=False)  # arrays inside: identity equality
class Unbiased(PublicParams):
    """An unbiased epsilon-DP transition matrix from ``input_grid`` to ``output_grid``.

    Build it with :meth:`from_prior` or :func:`optimal_unbiased`; a hand-made matrix is
    accepted only if it is stochastic, unbiased and epsilon-DP (checked here).
    """

    epsilon: float
    input_grid: np.ndarray
    output_grid: np.ndarray
    probabilities: np.ndarray
    rounding: Rounding = "randomized"
    _cumulative: np.ndarray = field(init=False, repr=False, compare=False)

    MECHANISM = "unbiased"
    PUBLIC = ("epsilon", "rounding", "input_grid", "output_grid", "probabilities")

    def __post_init__(self) -> None:
        eps = _check_unbiased_eps(self.epsilon)
        check_choice(self.rounding, name="rounding", choices=ROUNDINGS)
        grid = _check_grid(self.input_grid, name="input_grid", min_size=2)
        outputs = _check_grid(self.output_grid, name="output_grid", min_size=2)
        p = np.array(self.probabilities, dtype=np.float64)
        if p.shape != (grid.size, outputs.size):
            raise InvalidParameterError(
                f"probabilities must have shape {(grid.size, outputs.size)}, got {p.shape}"
            )
        if not np.all(np.isfinite(p)) or np.any(p < 0):
            raise InvalidParameterError("probabilities must be finite and >= 0")
        sums = p.sum(axis=1)
        if np.max(np.abs(sums - 1.0)) > 1e-9:
            raise InvalidParameterError("every row of probabilities must sum to 1")
        p /= sums[:, None]
        span = outputs[-1] - outputs[0]
        bias = np.max(np.abs(p @ outputs - grid))
        if bias > 1e-9 * span:
            raise InvalidParameterError(f"the matrix is not unbiased (max |bias| = {bias:.3g})")
        cmax, cmin = p.max(axis=0), p.min(axis=0)
        bound = math.exp(eps)
        dp = (cmax == 0.0) | ((cmin > 0.0) & (cmax <= bound * cmin * (1.0 + _RATIO_TOL)))
        if not np.all(dp):
            worst = int(np.flatnonzero(~dp)[0])
            ratio = cmax[worst] / cmin[worst] if cmin[worst] > 0 else math.inf
            raise InvalidParameterError(
                f"the matrix is not {eps}-DP: output column {worst} has ratio {ratio:.6g}"
            )
        for array in (grid, outputs, p):
            array.setflags(write=False)
        cumulative = np.cumsum(p, axis=1)
        cumulative /= cumulative[:, -1:]  # exactly 1.0 at the end: trailing zeros never drawn
        cumulative.setflags(write=False)
        object.__setattr__(self, "epsilon", eps)
        object.__setattr__(self, "input_grid", grid)
        object.__setattr__(self, "output_grid", outputs)
        object.__setattr__(self, "probabilities", p)
        object.__setattr__(self, "_cumulative", cumulative)

    @classmethod
    def from_prior(
        cls,
        prior: Prior,
        *,
        epsilon: float,
        grid: Literal["edges", "midpoints"] | np.ndarray = "edges",
        n_outputs: int | None = None,
        refine: int = 4,
        rounding: Rounding = "randomized",
    ) -> Unbiased:
        """The optimal unbiased randomizer for a (noisy, public) histogram prior.

        ``grid="edges"`` (default) uses the prior's k + 1 cell edges, which span [lo, hi], so
        with randomized rounding E[y~ | y] = y for every label in the bounds;
        ``"midpoints"`` uses the k cell midpoints (labels within half a cell of a bound are
        then rounded inward: biased there). The weights are the exact rounded prior
        (:func:`rounding_weights`), so the LP minimises E[(y~ - r)^2] over the rounded label r,
        and with randomized rounding E[(y~ - y)^2] = E[(y~ - r)^2] + E[(r - y)^2].
        """
        if not isinstance(prior, Prior):
            raise InvalidParameterError(f"prior must be a Prior, got {type(prior).__name__}")
        if isinstance(grid, str):
            check_choice(grid, name="grid", choices=GRIDS)
            points = prior.edges if grid == "edges" else prior.midpoints
            if points.size < 2:
                raise InvalidParameterError("grid='midpoints' needs a prior with >= 2 cells")
        else:
            points = _check_grid(grid, name="grid", min_size=2)
        weights = rounding_weights(prior, points, rounding=rounding)
        return optimal_unbiased(
            input_grid=points,
            weights=weights,
            epsilon=epsilon,
            n_outputs=n_outputs,
            refine=refine,
            rounding=rounding,
        )

    @property
    def output_values(self) -> np.ndarray:
        """The possible outputs, sorted (alias of ``output_grid``)."""
        return self.output_grid

    @property
    def output_range(self) -> tuple[float, float]:
        return float(self.output_grid[0]), float(self.output_grid[-1])

    def _rounding_split(self, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(lower grid index, probability of rounding up) of each label, clipped to the grid."""
        g = self.input_grid
        y = np.clip(labels, g[0], g[-1])
        if self.rounding == "nearest":
            index = np.searchsorted(0.5 * (g[1:] + g[:-1]), y, side="right")
            return index, np.zeros(y.size)
        low = np.clip(np.searchsorted(g, y, side="right") - 1, 0, g.size - 2)
        up = np.clip((y - g[low]) / (g[low + 1] - g[low]), 0.0, 1.0)
        return low, up

    def output_probabilities(self, labels: np.ndarray | list[float]) -> np.ndarray:
        """P(y~ = output_grid[j] | y) for each label: shape (n, len(output_grid))."""
        low, up = self._rounding_split(label_array(labels))
        p = self.probabilities
        high = np.minimum(low + 1, p.shape[0] - 1)
        return (1.0 - up)[:, None] * p[low] + up[:, None] * p[high]

    def pmf(self, y_tilde: np.ndarray, y: np.ndarray) -> np.ndarray:
        """P(output = y_tilde | label y), broadcasting; 0 off the output grid."""
        yt, yy = np.broadcast_arrays(np.asarray(y_tilde, float), np.asarray(y, float))
        probs = self.output_probabilities(yy.ravel())
        j = np.clip(np.searchsorted(self.output_grid, yt.ravel()), 0, self.output_grid.size - 1)
        hit = self.output_grid[j] == yt.ravel()
        return np.where(hit, probs[np.arange(j.size), j], 0.0).reshape(yt.shape)

    def randomize(self, labels: np.ndarray | list[float], rng: Rng) -> np.ndarray:
        """One output per label: round to the input grid, then a categorical draw per row."""
        values = label_array(labels)
        n = values.size
        low, up = self._rounding_split(values)
        if self.rounding == "randomized":
            index = low + (uniforms(rng, n) < up)
        else:
            index = low
        u = uniforms(rng, n)
        out = np.empty(n, dtype=np.int64)
        order = np.argsort(index, kind="stable")
        bounds = np.concatenate(
            ([0], np.cumsum(np.bincount(index, minlength=self.input_grid.size)))
        )
        for i in np.flatnonzero(np.diff(bounds)):
            chosen = order[bounds[i] : bounds[i + 1]]
            out[chosen] = np.searchsorted(self._cumulative[i], u[chosen], side="right")
        return self.output_grid[np.minimum(out, self.output_grid.size - 1)]

    def affine_expectation(self) -> tuple[float, float] | None:
        """(1, 0) under randomized rounding (E[y~ | y] = y on the input grid's span)."""
        return (1.0, 0.0) if self.rounding == "randomized" else None

    def grid_squared_error(self, weights: np.ndarray) -> float:
        """sum_i w_i E[(y~ - g_i)^2 | g_i]: the LP objective for input-grid weights."""
        w = np.asarray(weights, dtype=np.float64)
        sq = (self.output_grid[None, :] - self.input_grid[:, None]) ** 2
        return float(w @ (self.probabilities * sq).sum(axis=1) / w.sum())
