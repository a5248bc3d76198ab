"""The optimal unbiased randomizer, realised on exact integers: E[noisy | y] = y, epsilon-label-DP.

Implements Badanidiyuru, Ghazi, Kumar, Manurangsi, Raman & Sinha, "Optimal Unbiased Randomizers
for Regression with Label Differential Privacy" (NeurIPS 2023), Algorithm 1 (OptUnbiasedRand):
labels are clipped to a public input grid g_0 < ... < g_{K-1} (the noisy prior's edges,
coarsened to at most ``UNBIASED_CELLS`` cells), mapped to it by unbiased randomized rounding,
then each grid point i is sent to output z_j with probability W[i, j] / D, the transition matrix
that minimises the prior-weighted squared error subject to unbiasedness and epsilon-DP (the LP
of ``shared.mechanisms._unbiased_lp``, solved at a slightly smaller epsilon).

Exact realisation. The LP's float matrix is turned into integers W[i, j] >= 1 with every row
summing to D = 2^53 (each entry rounded up, the row's excess taken off its largest entry), and
the result is accepted only if, for every output column j, max_i W[i, j] <= r min_i W[i, j]
holds in integer arithmetic, with r <= e^epsilon a rational LOWER bound of e^epsilon (a Taylor
polynomial of e^x, every term >= 0, rounded down: :func:`exp_lower_bound`). Otherwise the
mechanism is refused (``InvalidParameterError``; ``auto`` then skips it). The same check runs
on every construction, including :meth:`ExactUnbiased.from_params` on a received message.

Sampling, per label: clip y to [g_0, g_{K-1}], find the cell [g_l, g_{l+1}] containing it and
t = (y - g_l) / (g_{l+1} - g_l); round up to l + 1 iff an exactly uniform integer u in [0, 2^53)
is below R = ceil(t 2^53) (so the rounding probability is R / 2^53 exactly, within 2^-53 of t:
E[rounded] = y up to 2^-53 of a cell); then one exactly uniform integer v in [0, D) picks the
output j with C[i, j - 1] <= v < C[i, j], C the row's cumulative weights. No float is
compared in the response, so its probabilities are W[i, j] / D exactly. Unbiasedness holds to
the LP's accuracy: every row's mean is checked to be its grid point within 1e-6 of the output
span (measured: ~1e-8), and ``conditional_moments`` reports the realised mean.

Privacy (epsilon-label-DP for every input, every epsilon > 0). Whatever the label, its output
law is ((2^53 - R) W[l] + R W[l + 1]) / (2^53 D), a convex combination of at most two rows
(clipping and the rounding probability R depend on the label only through which rows and
weights are mixed, and ANY mixture stays within each column's [min_i W[i, j], max_i W[i, j]]).
So for any two labels and any output, the ratio of probabilities is at most
max_i W[i, j] / min_i W[i, j] <= r <= e^epsilon, and every column's entries are >= 1, so every
output is reachable from every label. The grid and weights are built from the epsilon1-DP prior
and public numbers only: post-processing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache, partial
from typing import Any

import numpy as np

from shared.domain import check_epsilon, check_labels
from shared.errors import InvalidParameterError
from shared.mechanisms import _unbiased_kernels as kernels
from shared.mechanisms import _unbiased_lp as lp
from shared.mechanisms import registry
from shared.mechanisms.histogram import Prior
from shared.rng import Rng, SystemRandom

MECHANISM_NAME = "unbiased"
# The input grid: the prior's edges, coarsened to at most this many cells (the LP's cost grows
# fast with the grid; measured on the accuracy benchmark as the "unbiased" variant).
UNBIASED_CELLS = 16
# Every row of integer weights sums to D = 2^53: integers up to D are exact doubles, so the
# message's list of floats carries them exactly.
WEIGHT_BITS = 53
WEIGHT_TOTAL = 1 << WEIGHT_BITS
# The rounding draw's resolution (P(round up) = R / 2^53).
ROUNDING_BITS = 53
# Grids the int64 sampler can hold: K * D < 2^63.
MAX_GRID = 1000
# Labels per ``os.urandom`` call of the CSPRNG path (two 64-bit words each: 256 KiB), so each
# chunk is still in cache when the kernel reads it.
LABELS_PER_DRAW = 1 << 14
# The LP runs at epsilon - min(_SLACK_ABS, _SLACK_REL epsilon); the slack absorbs the solver's
# tolerance and the integer rounding (relative errors ~1e-9), so the exact check passes.
_SLACK_ABS = 1e-5
_SLACK_REL = 1e-3
# The LP runs at most at this epsilon: e^-36 D is about 2, so the smallest weights are already
# a few units there; a smaller epsilon is only stricter, and e^eps stays finite.
_LP_EPSILON_CAP = 36.0
# Below this epsilon the outputs span more than ~10^4 label ranges and HiGHS starts losing the
# unbiasedness constraints to its tolerances (measured: some priors fail at 1e-5 and 1e-6, all
# fail from 1e-7 down; none from 1e-4 up): refused, and ``auto`` skips the family there.
MIN_EPSILON = 1e-4
# Output columns whose largest probability is below this share of the largest column's are
# dropped (their integers would carry too few digits for the ratio to survive rounding).
_MIN_COLUMN = 1e-9
# Beyond x = 44, e^x > 2^63 > any ratio of weights in [1, 2^53]: the bound at 44 suffices.
_EXP_CAP = 44
# Largest |E[noisy | g_i] - g_i| accepted: this share of the output span (HiGHS meets the
# equality rows to ~1e-8 relative, measured), plus the float resolution of the outputs
# themselves (labels far from 0, e.g. [10^6, 10^6 + 0.001]).
_BIAS_TOL = 1e-6
_BIAS_ULPS = 64


@lru_cache(maxsize=256)
def exp_lower_bound(epsilon: float) -> Fraction:
    """A rational r with r <= e^epsilon, provably (exact rational arithmetic, no float).

    The Taylor polynomial sum_{k <= N} x^k / k! at x = min(epsilon, 44) (every term >= 0, so
    any truncation is below e^x <= e^epsilon), with N where the terms fall below 2^-80 of the
    sum, then rounded down to a multiple of 2^-64. Tight to about 2^-64 relative.
    """
    x = Fraction(min(check_epsilon(epsilon), _EXP_CAP))
    term = total = Fraction(1)
    k = 0
    while True:
        k += 1
        term = term * x / k
        total += term
        if k > x and term * (1 << 80) < total:
            break
    return Fraction(math.floor(total * (1 << 64)), 1 << 64)


def dp_violations(weights: np.ndarray, epsilon: float) -> list[int]:
    """Columns j where max_i W[i, j] <= r min_i W[i, j] fails (r = :func:`exp_lower_bound`),
    checked on Python integers: exact."""
    bound = exp_lower_bound(epsilon)
    highs, lows = weights.max(axis=0), weights.min(axis=0)
    return [
        j
        for j, (high, low) in enumerate(zip(highs.tolist(), lows.tolist(), strict=True))
        if int(high) * bound.denominator > bound.numerator * int(low)
    ]


def integer_weights(probabilities: np.ndarray, total: int = WEIGHT_TOTAL) -> np.ndarray:
    """Integers W >= 1 with every row summing to ``total``, W ~ probabilities * total.

    Each entry is rounded up (so none is 0 and no column's smallest entry shrinks), then each
    row's excess is taken off its largest entry (>= total / m, so it moves by a relative
    ~m^2 / total). Refused if that largest entry would drop below 1 (never for real rows).
    """
    p = np.asarray(probabilities, dtype=np.float64)
    w = np.maximum(np.ceil(p * float(total)), 1.0).astype(np.int64)
    rows = np.arange(w.shape[0])
    top = np.argmax(w, axis=1)
    w[rows, top] -= w.sum(axis=1) - total
    if np.any(w[rows, top] < 1):
        raise InvalidParameterError("the unbiased randomizer's rows cannot be realised")
    return w


def _check_weights(weights: Any, shape: tuple[int, int]) -> np.ndarray:
    """Integer weights of ``shape``, each in [1, D], every row summing to D exactly."""
    try:
        raw = np.asarray(weights, dtype=np.float64)
    except (TypeError, ValueError):
        raise InvalidParameterError("weights must be numbers") from None
    if raw.size != shape[0] * shape[1]:
        raise InvalidParameterError(f"weights must hold {shape[0]} x {shape[1]} numbers")
    raw = raw.reshape(shape)
    if not np.all(np.isfinite(raw)) or np.any(raw != np.floor(raw)):
        raise InvalidParameterError("weights must be whole numbers")
    if np.any(raw < 1) or np.any(raw > WEIGHT_TOTAL):
        raise InvalidParameterError(f"weights must lie in [1, 2^{WEIGHT_BITS}]")
    w = raw.astype(np.int64)
    if np.any(w.sum(axis=1) != WEIGHT_TOTAL):
        raise InvalidParameterError(f"every row of weights must sum to 2^{WEIGHT_BITS}")
    return w


def _bias_tolerance(grid: np.ndarray, outputs: np.ndarray) -> float:
    """How far E[noisy | g_i] may be from g_i: rounding error of the LP and of the floats."""
    span = max(float(outputs[-1] - outputs[0]), float(grid[-1] - grid[0]))
    scale = max(float(np.max(np.abs(outputs))), float(np.max(np.abs(grid))))
    return _BIAS_TOL * span + _BIAS_ULPS * float(np.spacing(scale))


def _lookup_tables(grid: np.ndarray, cumulative: np.ndarray, outputs: int) -> dict[str, Any]:
    """The kernel's search tables (``_unbiased_kernels``): the grid's interior points then
    +inf, its label-bucket table and scale, the response's draw-bucket table and shift. Each
    table only sets where a search starts (never past the answer), not the outputs."""
    buckets = kernels.CELL_BUCKETS * (grid.size - 1)
    with np.errstate(over="ignore", divide="ignore"):
        scale = float(buckets / (grid[-1] - grid[0]))  # inf or 0 at float extremes: still exact
    draws, shift = kernels.draw_table(cumulative, grid.size, outputs)
    tables = {
        "interior": np.append(grid[1:-1], np.inf),
        "cells": kernels.cell_table(grid, scale, buckets),
        "scale": scale,
        "draws": draws,
        "shift": shift,
    }
    for value in tables.values():
        if isinstance(value, np.ndarray):
            value.setflags(write=False)
    return tables


def _generator_words(rng: np.random.Generator, n: int) -> np.ndarray:
    """2 n words for :func:`_unbiased_kernels.respond_words` from a seeded Generator (tests,
    benchmarks): n rounding draws in [0, 2^ROUNDING_BITS), then n response draws in [0, D),
    each by ``rng.integers``, exactly uniform."""
    up = rng.integers(0, 1 << ROUNDING_BITS, size=n)
    draw = rng.integers(0, WEIGHT_TOTAL, size=n)
    return np.concatenate([np.asarray(up, np.int64), np.asarray(draw, np.int64)]).view(np.uint64)


@dataclass(frozen=True, kw_only=True, eq=False)
class ExactUnbiased:
    """Unbiased randomized rounding onto ``input_grid``, then row i of the integer ``weights``
    (out of 2^53) picks one of ``output_values``; construction verifies the DP inequality on
    the integers exactly and refuses otherwise (module docstring)."""

    epsilon: float
    input_grid: np.ndarray
    output_values: np.ndarray
    weights: np.ndarray
    _cumulative: np.ndarray = field(init=False, repr=False)
    _probabilities: np.ndarray = field(init=False, repr=False)
    _lookup: dict[str, Any] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        eps = check_epsilon(self.epsilon)
        grid = lp.check_grid(self.input_grid, name="input_grid", min_size=2)
        outputs = lp.check_grid(self.output_values, name="output_values", min_size=1)
        if grid.size > MAX_GRID:
            raise InvalidParameterError(f"input_grid must hold at most {MAX_GRID} points")
        w = _check_weights(self.weights, (grid.size, outputs.size))
        bad = dp_violations(w, eps)
        if bad:
            raise InvalidParameterError(
                f"the weights are not {eps}-DP: output column {bad[0]} has max / min above e^eps"
            )
        probabilities = w / float(WEIGHT_TOTAL)  # exact: w <= 2^53, a power-of-two division
        bias = float(np.max(np.abs(probabilities @ outputs - grid)))
        if not bias <= _bias_tolerance(grid, outputs):
            raise InvalidParameterError(f"the weights are not unbiased (max |bias| = {bias:.3g})")
        offsets = np.arange(grid.size, dtype=np.int64)[:, None] * WEIGHT_TOTAL
        cumulative = np.ascontiguousarray((np.cumsum(w, axis=1) + offsets).ravel())
        for array in (grid, outputs, w, probabilities, cumulative):
            array.setflags(write=False)
        object.__setattr__(self, "epsilon", eps)
        object.__setattr__(self, "input_grid", grid)
        object.__setattr__(self, "output_values", outputs)
        object.__setattr__(self, "weights", w)
        object.__setattr__(self, "_probabilities", probabilities)
        object.__setattr__(self, "_cumulative", cumulative)
        object.__setattr__(self, "_lookup", _lookup_tables(grid, cumulative, outputs.size))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ExactUnbiased):
            return NotImplemented
        return self.public_params() == other.public_params()

    def __hash__(self) -> int:
        return hash((self.epsilon, self.input_grid.tobytes(), self.weights.tobytes()))

    @property
    def output_range(self) -> tuple[float, float]:
        """The smallest and largest output."""
        return float(self.output_values[0]), float(self.output_values[-1])

    def rounding(self, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(l, R) per label: the lower grid point's index and R = ceil(t 2^53), so that the
        label rounds up to l + 1 with probability R / 2^53 exactly (labels clipped first)."""
        g = self.input_grid
        y = np.clip(np.asarray(labels, dtype=np.float64), g[0], g[-1])
        low = np.clip(np.searchsorted(g, y, side="right") - 1, 0, g.size - 2)
        t = np.clip((y - g[low]) / (g[low + 1] - g[low]), 0.0, 1.0)
        return low, np.ceil(np.ldexp(t, ROUNDING_BITS)).astype(np.int64)

    def randomize(self, labels: np.ndarray, rng: Rng) -> np.ndarray:
        """One output per label: exact randomized rounding (a draw in [0, 2^53)), then one
        integer draw in [0, D) picks the row's output, in one numba pass over raw 64-bit words
        (``_unbiased_kernels.respond_words``).

        From the OS CSPRNG: ``os.urandom`` in chunks of ``LABELS_PER_DRAW`` labels, 2 c words
        for a chunk of c labels, the low 53 bits of the first c its rounding draws and of the
        next c its response draws: exactly uniform, because both spans are powers of two
        dividing 2^64 (no rejection), and no byte drawn that is not used. A seeded Generator
        (tests): ``rng.integers``, all rounding draws first (:func:`_generator_words`).
        """
        if not isinstance(rng, np.random.Generator | SystemRandom):
            raise InvalidParameterError(
                f"rng must be a numpy Generator or shared.rng.SystemRandom, got {rng!r}"
            )
        y = np.ascontiguousarray(check_labels(labels))
        out = np.empty(y.size, dtype=np.float64)
        if isinstance(rng, SystemRandom):
            for first in range(0, y.size, LABELS_PER_DRAW):
                count = min(LABELS_PER_DRAW, y.size - first)
                self._respond(y, first, rng.words(2 * count), out)
        elif y.size:
            self._respond(y, 0, _generator_words(rng, y.size), out)
        return out

    def _respond(self, labels: np.ndarray, first: int, words: np.ndarray, out: np.ndarray) -> None:
        """``out[first : first + c]`` from 2 c ``words`` (``_unbiased_kernels.respond_words``)."""
        lookup = self._lookup
        kernels.respond_words(
            labels,
            first,
            self.input_grid,
            lookup["interior"],
            lookup["cells"],
            lookup["scale"],
            self._cumulative,
            lookup["draws"],
            lookup["shift"],
            self.output_values,
            words,
            out,
        )

    def output_probabilities(self, labels: np.ndarray) -> np.ndarray:
        """P(output = output_values[j] | y) for each label: shape (n, m), as realised."""
        y = np.asarray(labels, dtype=np.float64).reshape(-1)
        low, threshold = self.rounding(y)
        r = np.ldexp(threshold.astype(np.float64), -ROUNDING_BITS)[:, None]
        p = self._probabilities
        return (1.0 - r) * p[low] + r * p[low + 1]

    def output_probability(self, outputs: np.ndarray, y: np.ndarray) -> np.ndarray:
        """P(output = v | label y), broadcast over ``outputs`` and ``y`` (0 off the outputs)."""
        values, labels = np.broadcast_arrays(
            np.asarray(outputs, dtype=np.float64), np.asarray(y, dtype=np.float64)
        )
        flat = values.reshape(-1)
        slot = np.clip(np.searchsorted(self.output_values, flat), 0, self.output_values.size - 1)
        valid = self.output_values[slot] == flat
        probs = self.output_probabilities(labels.reshape(-1))[np.arange(flat.size), slot]
        return np.where(valid, probs, 0.0).reshape(values.shape)

    def conditional_moments(self, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """E[noisy | y] (clip(y) to within 1e-6 of the output span, checked on construction)
        and Var(noisy | y), from the integer weights and the realised rounding probability."""
        labels = np.asarray(y, dtype=np.float64)
        p = self.output_probabilities(labels)
        mean = p @ self.output_values
        var = np.einsum("ij,ij->i", p, (self.output_values[None, :] - mean[:, None]) ** 2)
        return mean.reshape(labels.shape), var.reshape(labels.shape)

    def breakpoints(self) -> np.ndarray:
        """The moments are one quadratic (mean linear) between input grid points."""
        return np.asarray(self.input_grid, dtype=np.float64)

    def affine_expectation(self) -> tuple[float, float]:
        """(1, 0): E[noisy | y] = y for labels on the grid's span (the prior's [lo, hi])."""
        return 1.0, 0.0

    def expected_squared_error(self, prior: Prior) -> float:
        """E[(noisy - y)^2] for y from the piecewise-uniform ``prior`` (exact quadrature)."""
        from shared.selection import quadrature  # selection imports the registry: no cycle

        y, w = quadrature(prior, self.breakpoints())
        mean, var = self.conditional_moments(y)
        return float(np.dot(w, var + (mean - y) ** 2))

    def public_params(self) -> dict[str, Any]:
        """Grids and integer weights (row-major, exact as doubles): enough to rebuild it."""
        return {
            "mechanism": MECHANISM_NAME,
            "epsilon": float(self.epsilon),
            "input_grid": [float(v) for v in self.input_grid],
            "output_values": [float(v) for v in self.output_values],
            "weights": [float(v) for v in self.weights.ravel()],
        }

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> ExactUnbiased:
        """Inverse of :meth:`public_params`; re-verifies the DP inequality on the integers."""
        if not isinstance(params, Mapping):
            raise InvalidParameterError(f"unbiased params must be a dict, got {type(params)}")
        expected = {"epsilon", "input_grid", "output_values", "weights"}
        if set(params) - {"mechanism"} != expected:
            raise InvalidParameterError(
                f"unbiased params need exactly {sorted(expected)} (and optionally 'mechanism'), "
                f"got {sorted(params)}"
            )
        if params.get("mechanism", MECHANISM_NAME) != MECHANISM_NAME:
            raise InvalidParameterError(f"mechanism ({params['mechanism']!r}) is not 'unbiased'")
        return cls(**{key: params[key] for key in sorted(expected)})


def coarse_grid(prior: Prior, cells: int = UNBIASED_CELLS) -> np.ndarray:
    """The prior's edges at about ``cells`` evenly spaced cell boundaries (all of them when it
    has at most ``cells`` cells): the input grid, spanning [lo, hi]."""
    if isinstance(cells, bool) or not isinstance(cells, int | np.integer) or cells < 1:
        raise InvalidParameterError(f"cells ({cells!r}) must be an integer >= 1")
    picks = np.unique(np.rint(np.linspace(0, prior.k, min(prior.k, int(cells)) + 1)).astype(int))
    return prior.edges[picks]


def realise(input_grid: np.ndarray, grid_weights: np.ndarray, *, epsilon: float) -> ExactUnbiased:
    """The LP for ``grid_weights`` on ``input_grid``, solved at a slightly smaller epsilon and
    realised on integers; refused (InvalidParameterError) if the exact check fails."""
    eps = check_epsilon(epsilon)
    if eps < MIN_EPSILON:
        raise InvalidParameterError(
            f"epsilon ({eps!r}) is too small for the unbiased randomizer (< {MIN_EPSILON})"
        )
    eps_lp = min(eps - min(_SLACK_ABS, _SLACK_REL * eps), _LP_EPSILON_CAP)
    outputs, probabilities = lp.solve(
        input_grid=input_grid, weights=grid_weights, epsilon=eps_lp, min_column=_MIN_COLUMN
    )
    return ExactUnbiased(
        epsilon=eps,
        input_grid=input_grid,
        output_values=outputs,
        weights=integer_weights(probabilities),
    )


def build(prior: Prior, *, epsilon: float, cells: int = UNBIASED_CELLS) -> ExactUnbiased:
    """The least-squared-error unbiased randomizer for the (noisy, public) histogram ``prior``.

    Input grid: :func:`coarse_grid`; grid weights: the exact probabilities of each grid point
    after randomized rounding of a label drawn from the prior (``rounding_weights``), so the LP
    minimises E[(noisy - rounded)^2], and E[(noisy - y)^2] = that + E[(rounded - y)^2].
    """
    if not isinstance(prior, Prior):
        raise InvalidParameterError(f"prior must be a Prior, got {type(prior).__name__}")
    grid = coarse_grid(prior, cells)
    return realise(grid, lp.rounding_weights(prior, grid), epsilon=epsilon)


# Input-grid sizes ``auto`` compares (at most this many cells).
CANDIDATE_CELLS: tuple[int, ...] = (UNBIASED_CELLS,)


# ``auto`` compares the family only from this epsilon (the randomizer's own, epsilon2) up. Its
# outputs are unbiased but spread like randomized response over the grid: the noise variance
# of unbiased binary randomized response is (hi - lo)^2 e^eps / (e^eps - 1)^2, 1.3 label ranges
# squared at 0.9 and 11 at 0.3. The criterion's model dimension under-weights that variance for
# the flexible models the features party may pick, and below 0.9 it chose this family where the
# model then lost to the mean: ads at 0.3 in 9 of 10 splits, one GBM at 2.19x the DP constant
# (bench/results/worst_case.md, "The unbiased family in auto"). A public number: privacy is
# unaffected; ``mechanism="unbiased"`` may still be asked for at any epsilon.
AUTO_MIN_EPSILON = 0.9


def candidates(prior: Prior, *, epsilon: float) -> list[ExactUnbiased]:
    """What ``mechanism="auto"`` compares: :func:`build` at each of ``CANDIDATE_CELLS``, from
    ``AUTO_MIN_EPSILON`` up (none below); one not realisable exactly at this epsilon is skipped
    (that depends on the prior only)."""
    if not check_epsilon(epsilon) >= AUTO_MIN_EPSILON:
        return []
    attempts = (partial(build, prior, epsilon=epsilon, cells=c) for c in CANDIDATE_CELLS)
    return registry.realisable(
        attempts, key=lambda m: (m.input_grid.tobytes(), m.weights.tobytes())
    )


registry.register(
    registry.MechanismFamily(
        name=MECHANISM_NAME,
        mechanism_type=ExactUnbiased,
        options=frozenset(),
        build=build,
        candidates=candidates,
        from_params=ExactUnbiased.from_params,
        # In ``auto`` (bias 0, variance from the integer weights under the prior): measured in
        # bench/results/worst_case.md, "The unbiased family in auto".
        in_auto=True,
    )
)
