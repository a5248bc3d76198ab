"""The paper's Algorithm 1 as written, for the speed benchmark (never used by the service).

Implements Liu & Huang, "RPWithPrior", Lemma 3.5 + Algorithm 1 literally: for every pair of
histogram cells (i <= j) evaluate F at the four corners, then at the critical points e1, e2 of
Lemma 3.5, recomputing the inner sum h = sum_{l=i+1}^{j-1} alpha_l (n_{l+1} - n_l) (and the
integral inside every F evaluation) for each pair, so the cost is O(k^3) against the O(k^2)
prefix-sum kernel of ``shared.mechanisms.rp_with_prior.optimal_interval``.

Two readings where the text is loose: corners with A1 > A2 (only possible when i = j) are skipped,
since F is defined for A1 <= A2; and lines 22-24 also record f (the text updates only A1, A2).
The same code runs as plain Python (``naive_optimal_interval``) and compiled by numba
(``naive_optimal_interval_numba``), to separate the algorithmic gain from the compilation gain.
"""

from __future__ import annotations

import math
import types
from collections.abc import Callable
from typing import Any

import numpy as np
from numba import njit


def _cell_integral(
    edges: np.ndarray, alpha: np.ndarray, i: int, j: int, a1: float, a2: float
) -> float:
    """Integral of f over [a1, a2] for a1 in cell i, a2 in cell j, summing the cells between."""
    if i == j:
        return alpha[i] * (a2 - a1)
    total = alpha[i] * (edges[i + 1] - a1) + alpha[j] * (a2 - edges[j])
    for ell in range(i + 1, j):
        total += alpha[ell] * (edges[ell + 1] - edges[ell])
    return total


def _objective(
    edges: np.ndarray,
    alpha: np.ndarray,
    i: int,
    j: int,
    a1: float,
    a2: float,
    two_zeta: float,
    delta: float,
) -> float:
    """F(A1, A2) = 2 zeta / (2 zeta + e^-eps (A2 - A1)) * integral (Lemma 3.3); -1 if A1 > A2."""
    if a1 > a2:
        return -1.0
    return two_zeta / (two_zeta + delta * (a2 - a1)) * _cell_integral(edges, alpha, i, j, a1, a2)


def _algorithm1(
    edges: np.ndarray, alpha: np.ndarray, two_zeta: float, delta: float
) -> tuple[float, float]:
    k = alpha.size
    f = 0.0
    best_a1 = edges[0]
    best_a2 = edges[k]
    for i in range(k):
        for j in range(i, k):
            # Lines 4-7: the four corners of the cell pair.
            for l_ in (edges[i], edges[i + 1]):
                for m_ in (edges[j], edges[j + 1]):
                    value = _objective(edges, alpha, i, j, l_, m_, two_zeta, delta)
                    if f < value:
                        f, best_a1, best_a2 = value, l_, m_
            # Line 8: critical points of Lemma 3.5 (h recomputed for this pair).
            if alpha[j] == alpha[i]:
                continue
            h = alpha[i] * edges[i + 1] - alpha[j] * edges[j]
            for ell in range(i + 1, j):
                h += alpha[ell] * (edges[ell + 1] - edges[ell])
            c1 = two_zeta * alpha[i] - delta * h
            c2 = two_zeta * alpha[j] - delta * h
            e1 = c2 / (delta * (alpha[j] - alpha[i]))
            e2 = c1 / (delta * (alpha[j] - alpha[i]))
            e2_inside = edges[j] < e2 < edges[j + 1]
            e1_inside = edges[i] < e1 < edges[i + 1]
            if e2_inside:  # lines 9-14
                for l_ in (edges[i], edges[i + 1]):
                    value = _objective(edges, alpha, i, j, l_, e2, two_zeta, delta)
                    if f < value:
                        f, best_a1, best_a2 = value, l_, e2
            if e1_inside:  # lines 15-20
                for m_ in (edges[j], edges[j + 1]):
                    value = _objective(edges, alpha, i, j, e1, m_, two_zeta, delta)
                    if f < value:
                        f, best_a1, best_a2 = value, e1, m_
            if e1_inside and e2_inside:  # lines 21-25
                value = _objective(edges, alpha, i, j, e1, e2, two_zeta, delta)
                if f < value:
                    f, best_a1, best_a2 = value, e1, e2
    return best_a1, best_a2


def _compiled(function: Callable[..., Any], **twins: object) -> Callable[..., Any]:
    """``function``'s very code compiled by numba, its callees bound to their compiled twins."""
    rebound = types.FunctionType(function.__code__, {**globals(), **twins}, function.__name__)
    return njit(rebound)


_cell_integral_jit = njit(cache=True)(_cell_integral)
_objective_jit = _compiled(_objective, _cell_integral=_cell_integral_jit)
_algorithm1_jit = _compiled(_algorithm1, _objective=_objective_jit)


def _solve(
    algorithm: Callable[..., Any], edges: np.ndarray, probs: np.ndarray, epsilon: float, zeta: float
) -> tuple[float, float]:
    """Run ``algorithm`` on the histogram (edges n_0..n_k, cell masses) -> (A1, A2)."""
    edges = np.ascontiguousarray(edges, dtype=np.float64)
    alpha = np.ascontiguousarray(probs, dtype=np.float64) / np.diff(edges)
    a1, a2 = algorithm(edges, alpha, 2.0 * zeta, math.exp(-epsilon))
    return float(a1), float(a2)


def naive_optimal_interval(
    edges: np.ndarray, probs: np.ndarray, *, epsilon: float, zeta: float
) -> tuple[float, float]:
    """Algorithm 1 in plain Python: the histogram (edges n_0..n_k, cell masses) -> (A1, A2)."""
    return _solve(_algorithm1, edges, probs, epsilon, zeta)


def naive_optimal_interval_numba(
    edges: np.ndarray, probs: np.ndarray, *, epsilon: float, zeta: float
) -> tuple[float, float]:
    """The same Algorithm 1 code compiled by numba (still O(k^3))."""
    return _solve(_algorithm1_jit, edges, probs, epsilon, zeta)
