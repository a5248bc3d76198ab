"""RPWithPrior: the optimal-interval label randomizer, sampled exactly on a public output grid.

Implements Liu & Huang, "RPWithPrior: Label Differential Privacy in Regression":
Lemma 3.3 (density (3.4)), Remark 3.4 (rules (3.12) projection and (3.17) uniform for labels
outside the interval), Lemma 3.5 + Algorithm 1 (optimal interval, here exact in O(k^2) over
histogram edges), Algorithm 2 (sampling), and a corrected closed form of the Appendix D error.

Privacy: the released value is a fixed public function of a cell index on a grid of N cells,
and every label's pmf over the cells takes only two values, ``t/m`` on its window of m cells and
``(1 - t)/(N - m)`` elsewhere, with ``m/N <= t <= m/Gamma`` (Gamma = m + e^-eps (N - m)); so
the probabilities any two labels give any cell are within a factor e^eps, and the uniform rule's
``1/N`` lies between the two values. The parameters (interval, zeta) are chosen from the noisy
prior alone (post-processing): the density family is epsilon-DP for ANY parameters.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal

import numpy as np

from shared.domain import check_epsilon, check_labels
from shared.errors import InvalidParameterError
from shared.mechanisms import registry
from shared.mechanisms._interval_kernels import (
    assign_cells,
    best_f_pair,
    best_f_pair_hull,
    best_mse_candidate,
    cell_values,
    mse_candidate,
    window_starts,
)
from shared.mechanisms.histogram import Prior
from shared.rng import Rng

OutsideRule = Literal["project", "uniform"]
OUTSIDE_RULES: tuple[str, ...] = ("project", "uniform")
SELECT_RULES: tuple[str, ...] = ("mse", "paper")
METHODS: tuple[str, ...] = ("pairs", "hull")

DEFAULT_GRID_CELLS = 2**24
MAX_GRID_CELLS = 2**48
# Bernoulli draws compare a uniform on the 2^-53 grid of [0, 1) with an exact dyadic threshold.
_BITS = 53
_ONE = 2**_BITS
# Float error of the computed out-of-window probability is a few ulps; this margin dominates it,
# so the threshold is always rounded to the private side (never above m / Gamma).
_SAFETY = 1e-14

# The zeta grid of ``choose_parameters``: log-spaced, relative to the prior's domain width.
ZETA_GRID_SIZE = 32
ZETA_GRID_MIN = 2.0**-14
ZETA_GRID_MAX = 1.0


def _check_real(value: Any, name: str) -> float:
    """A finite real number as a float (bools and non-numbers refused)."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise InvalidParameterError(f"{name} ({value!r}) must be a real number")
    result = float(value)
    if not math.isfinite(result):
        raise InvalidParameterError(f"{name} ({value!r}) must be finite")
    return result


def check_zeta(zeta: Any) -> float:
    """The half-width zeta of the high-probability window, a finite number > 0."""
    value = _check_real(zeta, "zeta")
    if value <= 0.0:
        raise InvalidParameterError(f"zeta ({zeta!r}) must be > 0")
    return value


def _check_prior(prior: Any) -> Prior:
    if not isinstance(prior, Prior):
        raise InvalidParameterError(f"prior must be a Prior, got {type(prior).__name__}")
    return prior


def _check_choice(value: Any, choices: tuple[str, ...], name: str) -> str:
    if not isinstance(value, str) or value not in choices:
        raise InvalidParameterError(f"{name} ({value!r}) must be one of {', '.join(choices)}")
    return value


def interval_objective(prior: Prior, a1: float, a2: float, *, epsilon: float, zeta: float) -> float:
    """F(A1, A2) = 2 zeta / (2 zeta + e^-eps (A2 - A1)) * P(A1 <= Y <= A2) (Lemma 3.3)."""
    prior = _check_prior(prior)
    eps = check_epsilon(epsilon)
    z = check_zeta(zeta)
    lo, hi = _check_real(a1, "a1"), _check_real(a2, "a2")
    if lo > hi:
        raise InvalidParameterError(f"a1 ({a1}) must be <= a2 ({a2})")
    mass = float(prior.cdf(hi) - prior.cdf(lo))
    return 2.0 * z / (2.0 * z + math.exp(-eps) * (hi - lo)) * mass


def optimal_interval(
    prior: Prior, *, epsilon: float, zeta: float, method: str = "pairs"
) -> tuple[float, float]:
    """The interval [A1, A2] maximising F (Lemma 3.5, Algorithm 1), exactly, in O(k^2).

    Implements Liu & Huang, Lemma 3.5 and Algorithm 1. Proof that a pair of edges is optimal:
    with A1 in cell i and A2 in cell j (i <= j, A1 <= A2) both mass = P(A1 <= Y <= A2) and
    gamma = 2 zeta + e^-eps (A2 - A1) > 0 are affine, so each {F <= t} = {2 zeta mass - t gamma
    <= 0} is a half-plane: F is quasi-convex on that polytope (a rectangle, or a triangle when
    i = j), whose vertices are edge pairs, and a quasi-convex function peaks at a vertex.
    Outside [n_0, n_k] F only decreases (Lemma 3.5). With the CDF at the edges a pair is O(1).

    ``method="pairs"`` (default) scans all pairs, ties going to the smallest A1, then the
    smallest A2. ``method="hull"`` finds the same maximum in O(k log k) (tangents to a lower
    convex hull; for k ~ 10^6), but an exact tie may resolve to another pair.
    """
    prior = _check_prior(prior)
    eps = check_epsilon(epsilon)
    z = check_zeta(zeta)
    kernel = (
        best_f_pair if _check_choice(method, METHODS, "method") == "pairs" else best_f_pair_hull
    )
    cum = np.concatenate(([0.0], np.cumsum(prior.probs)))
    # Shifting the edges to start at 0 keeps the widths exact for far-from-zero domains.
    i, j, _ = kernel(prior.edges - prior.edges[0], cum, 2.0 * z, math.exp(-eps))
    return float(prior.edges[i]), float(prior.edges[j])


def _segment_moments(prior: Prior, lo: float, hi: float, centre: float) -> np.ndarray:
    """(mass, E[Y - centre; lo <= Y <= hi], E[(Y - centre)^2; ...]) under the histogram prior."""
    left = np.clip(prior.edges[:-1], lo, hi) - centre
    right = np.clip(prior.edges[1:], lo, hi) - centre
    density = prior.probs / np.diff(prior.edges)
    mass = density * (right - left)
    return np.array(
        [
            mass.sum(),
            (mass * (left + right) / 2.0).sum(),
            (mass * (left * left + left * right + right * right) / 3.0).sum(),
        ]
    )


@dataclass(frozen=True, kw_only=True)
class RPWithPrior:
    """The RPWithPrior randomizer for interval [a1, a2], window half-width zeta and epsilon.

    Implements Liu & Huang, Algorithm 2 with density (3.4) and rule (3.12) (``outside=
    "project"``) or (3.17) (``outside="uniform"``) for labels outside [a1, a2], discretised
    exactly: outputs are the centres of ``grid_cells`` (N) equal cells of
    [a1 - zeta, a2 + zeta] (width w); a label y gets a window of m = round(2 zeta / w) cells
    starting at s(y) = round((clip(y, a1, a2) - a1) / w) (clipped to N - m), each with
    probability t/m, and every other cell (1 - t)/(N - m), where t is m/Gamma rounded down to
    the 2^-53 grid (never below m/N). ``epsilon = inf`` (no noise) is not this class's job:
    the pipeline releases clipped labels directly.

    Privacy (epsilon-label-DP for any parameters): see the module docstring; the float output
    is a fixed function of the cell index, so rounding cannot reveal the label.

    Derived public constants: ``cell_width`` (w), ``window_cells`` (m) and ``threshold``
    (t * 2^53, the exact integer numerator of the in-window probability).
    """

    a1: float
    a2: float
    zeta: float
    epsilon: float
    outside: OutsideRule = "project"
    grid_cells: int = DEFAULT_GRID_CELLS

    cell_width: float = field(init=False, repr=False, compare=False)
    window_cells: int = field(init=False, repr=False, compare=False)
    threshold: int = field(init=False, repr=False, compare=False)
    _delta: float = field(init=False, repr=False, compare=False)
    _gamma: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        a1 = _check_real(self.a1, "a1")
        a2 = _check_real(self.a2, "a2")
        if a1 > a2:
            raise InvalidParameterError(f"a1 ({self.a1}) must be <= a2 ({self.a2})")
        zeta = check_zeta(self.zeta)
        eps = check_epsilon(self.epsilon)
        _check_choice(self.outside, OUTSIDE_RULES, "outside")
        cells = self.grid_cells
        if isinstance(cells, bool) or not isinstance(cells, int | np.integer):
            raise InvalidParameterError(f"grid_cells ({cells!r}) must be an integer")
        if not 1 <= cells <= MAX_GRID_CELLS:
            raise InvalidParameterError(f"grid_cells ({cells}) must be in [1, 2^48]")
        cells = int(cells)
        low, high = a1 - zeta, a2 + zeta
        span = high - low
        if not (math.isfinite(low) and math.isfinite(high) and math.isfinite(span)):
            raise InvalidParameterError(
                f"output range [a1 - zeta, a2 + zeta] = [{low}, {high}] must be finite"
            )
        width = span / cells
        if not width > 0.0:
            raise InvalidParameterError(f"output cells of [{low}, {high}] / {cells} are empty")
        # 2 zeta / span <= 1 (up to rounding) before scaling by N: no overflow for huge zeta.
        window = min(max(round(2.0 * zeta / span * cells), 1), cells)
        delta = math.exp(-eps)
        threshold = _ONE
        if window < cells:
            # P(out of window) = delta (N - m) / Gamma; round it UP (so t rounds down).
            p_out = delta * (cells - window) / (window + delta * (cells - window))
            threshold = _ONE - max(math.ceil(p_out * (1.0 + _SAFETY) * _ONE), 1)
            # t >= m/N keeps in-window >= out-of-window per cell (matters only for tiny eps).
            floor = -((-window * _ONE) // cells)
            if threshold < floor:
                raise InvalidParameterError(
                    f"epsilon ({self.epsilon!r}) is too small to realise exactly with 53-bit "
                    "uniforms on this grid"
                )
        for name, value in (("a1", a1), ("a2", a2), ("zeta", zeta), ("epsilon", eps)):
            object.__setattr__(self, name, value)
        object.__setattr__(self, "grid_cells", cells)
        object.__setattr__(self, "cell_width", width)
        object.__setattr__(self, "window_cells", int(window))
        object.__setattr__(self, "threshold", int(threshold))
        object.__setattr__(self, "_delta", delta)
        object.__setattr__(self, "_gamma", 2.0 * zeta + delta * (a2 - a1))

    # ----------------------------------------------------------------- public description
    @property
    def output_range(self) -> tuple[float, float]:
        """[a1 - zeta, a2 + zeta]: every output lies inside (cell centres, strictly)."""
        return (self.a1 - self.zeta, self.a2 + self.zeta)

    @property
    def gamma(self) -> float:
        """The continuous normaliser gamma = 2 zeta + e^-eps (a2 - a1) of (3.4)."""
        return self._gamma

    def public_params(self) -> dict[str, Any]:
        """Every public parameter, JSON-safe; ``RPWithPrior(**public_params())`` rebuilds it."""
        return {
            "a1": self.a1,
            "a2": self.a2,
            "zeta": self.zeta,
            "epsilon": self.epsilon,
            "outside": self.outside,
            "grid_cells": self.grid_cells,
        }

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> RPWithPrior:
        """Rebuild (and re-validate) a randomizer from :meth:`public_params` output."""
        if not isinstance(params, Mapping):
            raise InvalidParameterError(f"params must be a mapping, got {type(params).__name__}")
        required = {"a1", "a2", "zeta", "epsilon"}
        allowed = required | {"outside", "grid_cells"}
        missing = required - set(params)
        unknown = set(params) - allowed
        if missing:
            raise InvalidParameterError(f"missing parameter(s): {', '.join(sorted(missing))}")
        if unknown:
            raise InvalidParameterError(
                f"unknown parameter(s): {', '.join(sorted(map(str, unknown)))}"
            )
        return cls(**dict(params))

    def output_values(self, cells: np.ndarray | None = None) -> np.ndarray:
        """Output value of each cell index (all N cell centres, ascending, if ``cells`` is None).

        The value of cell j is (a1 - zeta) + (j + 0.5) w, a fixed function of j (if cells are
        narrower than the float resolution of the range, neighbours may share a value).
        """
        index = np.arange(self.grid_cells) if cells is None else np.asarray(cells)
        if not np.issubdtype(index.dtype, np.integer):
            raise InvalidParameterError(f"cells must be integers, got dtype {index.dtype}")
        flat = np.ascontiguousarray(index, dtype=np.int64).ravel()
        values = cell_values(flat, self.a1 - self.zeta, self.cell_width)
        return values.reshape(index.shape)

    def cell_index(self, values: np.ndarray) -> np.ndarray:
        """The cell of each output value (inverse of :meth:`output_values` on the grid)."""
        offset = (np.asarray(values, dtype=np.float64) - (self.a1 - self.zeta)) / self.cell_width
        return np.clip(np.floor(offset), 0, self.grid_cells - 1).astype(np.int64)

    def window_start(self, labels: np.ndarray) -> np.ndarray:
        """First cell s(y) of each label's window (projection into [a1, a2], rule (3.12))."""
        y = np.asarray(labels, dtype=np.float64)
        if not np.all(np.isfinite(y)):
            raise InvalidParameterError("labels must be finite")
        flat = np.ascontiguousarray(y).ravel()
        max_start = self.grid_cells - self.window_cells
        return window_starts(flat, self.a1, self.a2, self.cell_width, max_start).reshape(y.shape)

    def _outside(self, labels: np.ndarray) -> np.ndarray:
        return (labels < self.a1) | (labels > self.a2)

    # ----------------------------------------------------------------- the mechanism
    def cell_probability(self, cells: np.ndarray, labels: np.ndarray) -> np.ndarray:
        """P(output cell = j | label = y), the exact pmf of :meth:`randomize` (broadcast)."""
        index = np.asarray(cells)
        if not np.issubdtype(index.dtype, np.integer):
            raise InvalidParameterError(f"cells must be integers, got dtype {index.dtype}")
        y = np.asarray(labels, dtype=np.float64)
        if not np.all(np.isfinite(y)):
            raise InvalidParameterError("labels must be finite")
        n_cells, m = self.grid_cells, self.window_cells
        start = self.window_start(y)
        in_window = (index >= start) & (index < start + m)
        p_in = self.threshold / (_ONE * m)
        p_out = (_ONE - self.threshold) / (_ONE * (n_cells - m)) if m < n_cells else 0.0
        prob = np.where(in_window, p_in, p_out)
        if self.outside == "uniform":
            prob = np.where(self._outside(y), 1.0 / n_cells, prob)
        return np.where((index >= 0) & (index < n_cells), prob, 0.0)

    def randomize_cells(self, labels: np.ndarray, rng: Rng) -> np.ndarray:
        """Output cell index of each label (Algorithm 2 on the grid; see the class docstring)."""
        y = np.ascontiguousarray(check_labels(labels))
        n, n_cells, m = y.size, self.grid_cells, self.window_cells
        uniform = self.outside == "uniform"
        outside = self._outside(y) if uniform else np.zeros(n, dtype=bool)
        # random() is on the 2^-53 grid, so P(u < threshold 2^-53) = threshold / 2^53 exactly.
        in_window = rng.random(n) < self.threshold * 2.0**-_BITS
        in_window &= ~outside
        n_uniform = int(np.count_nonzero(outside))
        n_in = int(np.count_nonzero(in_window))
        n_out = n - n_uniform - n_in
        empty = np.zeros(0, dtype=np.int64)
        inside_draws = rng.integers(0, m, size=n_in) if n_in else empty
        outside_draws = rng.integers(0, n_cells - m, size=n_out) if n_out else empty
        uniform_draws = rng.integers(0, n_cells, size=n_uniform) if n_uniform else empty
        return assign_cells(
            y,
            window_starts(y, self.a1, self.a2, self.cell_width, n_cells - m),
            self.a1,
            self.a2,
            m,
            in_window,
            np.ascontiguousarray(inside_draws, dtype=np.int64),
            np.ascontiguousarray(outside_draws, dtype=np.int64),
            np.ascontiguousarray(uniform_draws, dtype=np.int64),
            uniform,
        )

    def randomize(self, labels: np.ndarray, rng: Rng) -> np.ndarray:
        """The epsilon-DP noisy labels: grid values in ``output_range`` (Algorithm 2)."""
        return self.output_values(self.randomize_cells(labels, rng))

    def density(self, y_tilde: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Continuous density f(y_tilde | y): (3.4) in [a1, a2], (3.12) or (3.17) outside it."""
        out = np.asarray(y_tilde, dtype=np.float64)
        labels = np.asarray(y, dtype=np.float64)
        if not (np.all(np.isfinite(out)) and np.all(np.isfinite(labels))):
            raise InvalidParameterError("y_tilde and y must be finite")
        low, high = self.output_range
        in_range = (out >= low) & (out <= high)
        projected = np.clip(labels, self.a1, self.a2)
        near = np.abs(out - projected) <= self.zeta
        value = np.where(near, 1.0, self._delta) / self._gamma
        if self.outside == "uniform":
            value = np.where(self._outside(labels), 1.0 / (high - low), value)
        return np.where(in_range, value, 0.0)

    def output_probability(self, outputs: np.ndarray, y: np.ndarray) -> np.ndarray:
        """P(output = v | label y) for output values v (0 off the public grid), broadcast."""
        values = np.asarray(outputs, dtype=np.float64)
        cells = self.cell_index(values)
        on_grid = self.output_values(cells) == values
        return np.where(on_grid, self.cell_probability(cells, y), 0.0)

    # ----------------------------------------------------------------- accuracy
    def conditional_moments(self, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """E[y_tilde | y] and Var(y_tilde | y) of the continuous density (3.4).

        A mixture of U[a1 - zeta, a2 + zeta] (weight w = e^-eps W / gamma, W = a2 - a1 +
        2 zeta) and U[p - zeta, p + zeta] (weight 1 - w), p = clip(y, a1, a2): mean
        w c + (1 - w) p, second moment w (c^2 + W^2 / 12) + (1 - w)(p^2 + zeta^2 / 3), c the
        interval centre; under the uniform rule (3.17) a label outside [a1, a2] gets the first
        component alone.
        """
        y = np.asarray(y, dtype=np.float64)
        width = self.a2 - self.a1 + 2.0 * self.zeta
        w = self._delta * width / self._gamma
        centre = 0.5 * (self.a1 + self.a2)
        p = np.clip(y, self.a1, self.a2)
        mean = w * centre + (1.0 - w) * p
        second = w * (centre**2 + width**2 / 12.0) + (1.0 - w) * (p**2 + self.zeta**2 / 3.0)
        if self.outside == "uniform":
            outside = self._outside(y)
            mean = np.where(outside, centre, mean)
            second = np.where(outside, centre**2 + width**2 / 12.0, second)
        return mean, np.maximum(second - mean**2, 0.0)

    def breakpoints(self) -> np.ndarray:
        """The moments are quadratic in y on each side of a1 and a2."""
        return np.array([self.a1, self.a2])

    def affine_expectation(self) -> tuple[float, float]:
        """(a, b) with E[y_tilde | y] = a y + b for y in [a1, a2] (continuous density (3.4)).

        delta/gamma on [a1 - zeta, a2 + zeta] plus (1 - delta)/gamma on [y - zeta, y + zeta]:
        a = 2 zeta (1 - delta)/gamma, b = delta (a2 - a1 + 2 zeta)(a1 + a2) / (2 gamma).
        """
        delta, gamma = self._delta, self._gamma
        a = 2.0 * self.zeta * (1.0 - delta) / gamma
        b = delta * (self.a2 - self.a1 + 2.0 * self.zeta) * (self.a1 + self.a2) / (2.0 * gamma)
        return a, b

    def expected_squared_error(self, prior: Prior) -> float:
        """E[(y_tilde - y)^2] for y from the histogram prior (continuous density, exact).

        Replaces Liu & Huang, Appendix D, whose expression is in fact the conditional mean with
        the window term missing the factor (1 - e^-eps). With p the projection of y, delta =
        e^-eps, W = a2 - a1 + 2 zeta and c = (a1 + a2)/2: E[(y_tilde - y)^2 | y] =
        delta W/gamma ((c - y)^2 + W^2/12) + (1 - delta)/gamma (2 zeta (p - y)^2 + 2 zeta^3/3)
        ((c - y)^2 + W^2/12 for y outside [a1, a2] under the uniform rule), integrated in closed
        form against the piecewise-uniform prior.
        """
        prior = _check_prior(prior)
        centre = 0.5 * (prior.lo + prior.hi)  # moments about the domain centre: no cancellation
        below = _segment_moments(prior, -math.inf, self.a1, centre)
        inside = _segment_moments(prior, self.a1, self.a2, centre)
        above = _segment_moments(prior, self.a2, math.inf, centre)
        return float(
            mse_candidate(
                self.a1 - centre,
                self.a2 - centre,
                self.zeta,
                self._delta,
                self.outside == "uniform",
                *below,
                *inside,
                *above,
            )
        )


# --------------------------------------------------------------------- parameter choice
def zeta_grid(prior: Prior, *, size: int = ZETA_GRID_SIZE) -> np.ndarray:
    """Candidate zetas: ``size`` log-spaced multiples of the prior's (public) domain width."""
    prior = _check_prior(prior)
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise InvalidParameterError(f"size ({size!r}) must be an integer >= 1")
    return (prior.hi - prior.lo) * np.geomspace(ZETA_GRID_MIN, ZETA_GRID_MAX, size)


def _prefix_moments(prior: Prior) -> tuple[np.ndarray, ...]:
    """Edges and prefix sums of mass, E[Y; Y < edge], E[Y^2; Y < edge], all rescaled.

    Coordinates are centred on the domain and divided by its width (MSE scales by width^2), so
    the kernel works with numbers of order 1 whatever the label units.
    """
    centre, scale = 0.5 * (prior.lo + prior.hi), prior.hi - prior.lo
    x = (prior.edges - centre) / scale
    left, right = x[:-1], x[1:]
    p = prior.probs
    zero = np.zeros(1)
    m0 = np.concatenate((zero, np.cumsum(p)))
    m1 = np.concatenate((zero, np.cumsum(p * (left + right) / 2.0)))
    m2 = np.concatenate((zero, np.cumsum(p * (left * left + left * right + right * right) / 3.0)))
    return x, m0, m1, m2


def choose_parameters(
    prior: Prior,
    *,
    epsilon: float,
    select: str = "mse",
    zeta: float | None = None,
    outside: OutsideRule = "project",
    grid_cells: int = DEFAULT_GRID_CELLS,
) -> RPWithPrior:
    """An epsilon-DP RPWithPrior whose parameters come from the (noisy) prior alone.

    ``select="paper"``: Algorithm 1's F-optimal interval for ``zeta`` (zeta=None: over
    :func:`zeta_grid`, the zeta whose F-optimal interval has the lowest expected squared error).
    ``select="mse"``: (a1, a2, zeta) minimising the exact expected squared error over all pairs
    of histogram edges (a1 <= a2) and the zeta grid (only ``zeta`` if given); O(1) per candidate
    via prefix sums of the prior's moments. Since Algorithm 1's interval is a pair of edges,
    "mse" is never worse than "paper". Post-processing of the prior: costs no privacy.
    """
    prior = _check_prior(prior)
    eps = check_epsilon(epsilon)
    _check_choice(select, SELECT_RULES, "select")
    _check_choice(outside, OUTSIDE_RULES, "outside")
    zetas = zeta_grid(prior) if zeta is None else np.array([check_zeta(zeta)])

    def build(a1: float, a2: float, z: float) -> RPWithPrior:
        return RPWithPrior(
            a1=a1, a2=a2, zeta=float(z), epsilon=eps, outside=outside, grid_cells=grid_cells
        )

    if select == "mse":
        x, m0, m1, m2 = _prefix_moments(prior)
        scale = prior.hi - prior.lo
        i, j, z, _ = best_mse_candidate(
            x, m0, m1, m2, zetas / scale, math.exp(-eps), outside == "uniform"
        )
        return build(float(prior.edges[i]), float(prior.edges[j]), zetas[z])

    best: RPWithPrior | None = None
    best_error = math.inf
    for z in zetas:
        candidate = build(*optimal_interval(prior, epsilon=eps, zeta=float(z)), z)
        error = candidate.expected_squared_error(prior)
        if error < best_error:
            best, best_error = candidate, error
    assert best is not None  # zetas is never empty
    return best


# --------------------------------------------------------------------- the family
def candidates(
    prior: Prior,
    *,
    epsilon: float,
    zeta: float | None = None,
    select: str | None = None,
    outside: OutsideRule = "project",
) -> list[RPWithPrior]:
    """What ``mechanism="auto"`` compares: for each zeta of :func:`zeta_grid` (or only ``zeta``),
    Algorithm 1's interval ("paper") and the least-label-MSE interval ("mse") (or only
    ``select``), without duplicates; a candidate not realisable exactly at this epsilon is
    skipped (that depends on the prior only)."""
    _check_choice(outside, OUTSIDE_RULES, "outside")
    if select is not None:
        _check_choice(select, SELECT_RULES, "select")
    zetas = zeta_grid(prior) if zeta is None else [check_zeta(zeta)]
    rules = ("paper", "mse") if select is None else (select,)
    attempts = (
        partial(choose_parameters, prior, epsilon=epsilon, select=rule, zeta=z, outside=outside)
        for z in map(float, zetas)
        for rule in rules
    )
    return registry.realisable(attempts, key=lambda m: (m.a1, m.a2, m.zeta))


def build(
    prior: Prior,
    *,
    epsilon: float,
    n: int | None = None,
    model_dim: int | None = None,
    select: str | None = None,
    zeta: float | None = None,
    outside: OutsideRule = "project",
) -> RPWithPrior:
    """The RPWithPrior an explicit request releases: with ``n`` and no ``select``, the candidate
    whose raw or debiased targets minimise C = bias^2 + (model_dim / n) Var
    (``shared.selection``; the least-label-MSE interval is often a narrow one whose projection
    bias no amount of data removes, bench/results/accuracy_housing.md); otherwise
    :func:`choose_parameters` with ``select`` (default "mse")."""
    if n is None or select is not None:
        return choose_parameters(
            prior, epsilon=epsilon, select=select or "mse", zeta=zeta, outside=outside
        )
    from shared.selection import choose

    best = choose(
        prior,
        epsilon=epsilon,
        n=n,
        model_dim=model_dim,
        zeta=zeta,
        outside=outside,
        families=(MECHANISM_NAME,),
    )
    return best.mechanism


MECHANISM_NAME = "rpwithprior"
# A requested zeta (label units) must lie within these multiples of the label range.
ZETA_RATIO = (1e-9, 1e9)


def check_options(options: Mapping[str, Any], width: float) -> None:
    """A requested zeta within ZETA_RATIO x the public label range (hi - lo)."""
    zeta = options.get("zeta")
    low, high = ZETA_RATIO
    if zeta is not None and not low * width <= float(zeta) <= high * width:
        raise InvalidParameterError(
            f"zeta ({zeta!r}) must lie in [{low:g}, {high:g}] x (label_max - label_min) "
            f"= [{low * width:g}, {high * width:g}]"
        )


registry.register(
    registry.MechanismFamily(
        name=MECHANISM_NAME,
        mechanism_type=RPWithPrior,
        options=frozenset({"select", "zeta", "outside"}),
        build=build,
        candidates=candidates,
        from_params=RPWithPrior.from_params,
        light_prior=True,
        reads_n=True,
        check_options=check_options,
        option_specs={
            "select": registry.OptionSpec(
                kind="string", choices=("mse", "paper"), description="RPWithPrior"
            ),
            "zeta": registry.OptionSpec(
                kind="number",
                gt=0.0,
                description="RPWithPrior noise radius (label units; within 1e-9 to 1e9 x "
                "(label_max - label_min))",
            ),
            "outside": registry.OptionSpec(
                kind="string", choices=("project", "uniform"), description="RPWithPrior"
            ),
        },
    )
)
