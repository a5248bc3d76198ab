"""Numba kernel for the exact unbiased randomizer's per-label loop (``shared.mechanisms.unbiased``).

One pass per label: clip to the input grid, find its cell, round up iff the rounding draw is
below R = ceil(t 2^53), then pick the output whose cumulative weight first exceeds the response
draw. The arithmetic is the same, operation for operation, as ``ExactUnbiased.rounding`` (numpy),
so the outputs are exactly what the numpy description gives for the same draws; no float is
compared with a draw (Badanidiyuru et al. 2023, Algorithm 1, realised on integers).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

_TWO_53 = 9007199254740992.0  # 2^53: the rounding draw's resolution
# Runs up to this long are searched by counting (branch-free), longer ones by bisection.
_COUNT_LIMIT = 128


@njit(cache=True)
def respond(
    labels: np.ndarray,
    grid: np.ndarray,
    cumulative: np.ndarray,
    outputs: np.ndarray,
    total: np.int64,
    up_draws: np.ndarray,
    draws: np.ndarray,
) -> np.ndarray:
    """Outputs for finite ``labels`` from uniform ``up_draws`` in [0, 2^53) and ``draws`` in
    [0, total); ``cumulative`` holds each row's cumulative integer weights, row i shifted by
    i * total, laid end to end (K rows of len(outputs))."""
    k = grid.size
    m = outputs.size
    lo, hi = grid[0], grid[k - 1]
    out = np.empty(labels.size, dtype=np.float64)
    for n in range(labels.size):
        y = min(max(labels[n], lo), hi)
        # low = (number of grid points <= y) - 1, clipped to [0, k - 2]
        low = min(max(_count_at_most(grid, 0, k, y) - 1, 0), k - 2)
        t = (y - grid[low]) / (grid[low + 1] - grid[low])
        t = min(max(t, 0.0), 1.0)
        threshold = np.int64(math.ceil(t * _TWO_53))
        row = low + 1 if up_draws[n] < threshold else low
        target = draws[n] + row * total
        # The first output j with cumulative[row m + j] > target: the row's entries are
        # increasing and its last is (row + 1) total > target, so j is the count of those <=.
        out[n] = outputs[_count_at_most(cumulative, row * m, m, target)]
    return out


@njit(cache=True, inline="always")
def _count_at_most(values: np.ndarray, start: int, size: int, x: float) -> int:
    """How many of ``values[start : start + size]`` (increasing) are <= ``x``: a branch-free
    count for short runs (the grids here hold a few dozen points; a binary search's branches
    are mispredicted on random labels and draws), a binary search for long ones."""
    if size <= _COUNT_LIMIT:
        count = 0
        for i in range(start, start + size):
            count += values[i] <= x
        return count
    left, right = start, start + size
    while left < right:
        mid = (left + right) // 2
        if values[mid] <= x:
            left = mid + 1
        else:
            right = mid
    return left - start
