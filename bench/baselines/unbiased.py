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

The LP and its output grid (Appendix J's range [L, U], refinement rounds) are defined once, in
``shared.mechanisms._unbiased_lp``; the product mechanism ``shared.mechanisms.unbiased``
realises the same LP on exact integers. This module keeps the paper's options (nearest
rounding, a midpoint grid, a given output grid) and samples with floats.

A benchmark baseline only (continuous labels are rounded with floating-point uniforms; see the
package docstring); the labels party serves the exact ``unbiased`` mechanism instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import numpy as np

from bench.baselines._common import PublicParams, check_choice, check_eps, label_array, uniforms
from shared.errors import InvalidParameterError
from shared.mechanisms import _unbiased_lp as lp
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
    return lp.check_grid(values, name=name, min_size=min_size)


def output_range_bounds(input_grid: np.ndarray, *, epsilon: float) -> tuple[float, float]:
    """[L, U] of Appendix J (``shared.mechanisms._unbiased_lp.output_range_bounds``)."""
    return lp.output_range_bounds(input_grid, epsilon=_check_unbiased_eps(epsilon))


def default_output_grid(
    input_grid: np.ndarray, *, epsilon: float, n_outputs: int | None = None
) -> np.ndarray:
    """``n_outputs`` points evenly spaced on [L, U] (Appendix J); default K // 2 + 1."""
    eps = _check_unbiased_eps(epsilon)
    return lp.default_output_grid(input_grid, epsilon=eps, n_outputs=n_outputs)


def rounding_weights(prior: Prior, grid: np.ndarray, *, rounding: Rounding) -> np.ndarray:
    """Probability of each grid point after rounding a label drawn from ``prior`` (exact;
    ``shared.mechanisms._unbiased_lp.rounding_weights``)."""
    check_choice(rounding, name="rounding", choices=ROUNDINGS)
    return lp.rounding_weights(prior, grid, rounding=rounding)


def optimal_unbiased(
    *,
    input_grid: np.ndarray,
    weights: np.ndarray,
    epsilon: float,
    rounding: Rounding = "randomized",
    **lp_options: Any,
) -> Unbiased:
    """Solve the unbiased-randomizer LP for prior ``weights`` on ``input_grid``.

    Implements Badanidiyuru et al. 2023, Algorithm 1, with the product's LP
    (:func:`shared.mechanisms._unbiased_lp.solve`, which checks its inputs; ``lp_options`` are
    its ``output_grid``, ``n_outputs`` and ``refine``), solved at a slightly smaller epsilon so
    that the float matrix this baseline samples from is epsilon-DP to rounding error (checked
    by :class:`Unbiased`). The returned mechanism keeps only the outputs it uses.
    """
    eps = _check_unbiased_eps(epsilon)
    check_choice(rounding, name="rounding", choices=ROUNDINGS)
    eps_lp = eps - min(_EPS_SLACK_ABS, _EPS_SLACK_REL * eps)
    grid = _check_grid(input_grid, name="input_grid", min_size=2)
    outputs, p = lp.solve(
        input_grid=grid, weights=weights, epsilon=eps_lp, min_column=_MIN_COLUMN, **lp_options
    )
    return Unbiased(
        epsilon=eps,
        input_grid=grid,
        output_grid=outputs,
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
