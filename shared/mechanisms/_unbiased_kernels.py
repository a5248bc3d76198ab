"""Numba kernels for the exact unbiased randomizer's labels (``shared.mechanisms.unbiased``).

One pass per label, straight from raw 64-bit words: clip to the input grid, find its cell, round
up iff the rounding draw is below R = ceil(t 2^53), then pick the output whose cumulative weight
first exceeds the response draw. The arithmetic is the same, operation for operation, as
``ExactUnbiased.rounding`` (numpy), so the outputs are exactly what the numpy description gives
for the same draws; no float is compared with a draw in the response (Badanidiyuru et al. 2023,
Algorithm 1, realised on integers).

Both searches start from a lookup table and step forward: a table gives, for a label's (or a
draw's) bucket, a count that is never above the true one, and the loop then advances while the
next value is <= the label (draw). Whatever the table holds, the loop ends at the exact count
of values <= x (the values are increasing and the last one is above every x searched), so the
tables only decide how many steps it takes, typically none: they are a speed-up, not a part of
the law (tested against ``numpy.searchsorted`` on adversarial grids).
"""

from __future__ import annotations

import numpy as np
from numba import njit

_TWO_53 = 9007199254740992.0  # 2^53: the rounding draw's resolution
_LOW_53 = np.uint64((1 << 53) - 1)
# Label buckets per input cell of the grid's lookup table, and the draw buckets per row
# (2^_DRAW_BUCKET_BITS, the top bits of a 53-bit draw) of the response's.
CELL_BUCKETS = 64
_DRAW_BUCKET_BITS = 8


@njit(cache=True, inline="always")
def _bucket(y: float, lo: float, scale: float, buckets: int) -> int:
    """The label bucket of ``y`` >= ``lo``: floor((y - lo) scale), the last bucket from
    ``buckets`` - 1 up (also for NaN, as for a grid whose span overflows). Non-decreasing in
    ``y``, which is all the lookup's exactness needs."""
    f = (y - lo) * scale
    return np.int64(f) if f < buckets else buckets - 1


@njit(cache=True)
def cell_table(grid: np.ndarray, scale: float, buckets: int) -> np.ndarray:
    """For each label bucket b, how many interior grid points (``grid[1:-1]``) lie in buckets
    below b: every one of them is <= any label of bucket b (buckets are non-decreasing in the
    value), so this is a lower bound of the label's count."""
    lo = grid[0]
    table = np.zeros(buckets, dtype=np.int64)
    for i in range(1, grid.size - 1):
        b = _bucket(grid[i], lo, scale, buckets)
        if b + 1 < buckets:
            table[b + 1] += 1
    return np.cumsum(table)


def draw_table(cumulative: np.ndarray, rows: int, outputs: int) -> tuple[np.ndarray, int]:
    """(table, shift): for row i and draw bucket c (v >> shift, the top bits of a 53-bit draw
    v), how many of row i's cumulative weights (``cumulative``: rows laid end to end, row i
    shifted by i D) lie in lower buckets: each is < every draw of bucket c."""
    shift = 53 - _DRAW_BUCKET_BITS
    local = cumulative.reshape(rows, outputs) - (np.arange(rows, dtype=np.int64) << 53)[:, None]
    starts = np.arange(1 << _DRAW_BUCKET_BITS, dtype=np.int64) << shift
    table = np.stack([np.searchsorted(row, starts, side="left") for row in local])
    return np.ascontiguousarray(table.ravel(), dtype=np.int64), shift


@njit(cache=True, error_model="numpy")
def respond_words(
    labels: np.ndarray,
    first: int,
    grid: np.ndarray,
    interior: np.ndarray,
    cells: np.ndarray,
    scale: float,
    cumulative: np.ndarray,
    draws: np.ndarray,
    shift: int,
    outputs: np.ndarray,
    words: np.ndarray,
    out: np.ndarray,
) -> None:
    """``out[first : first + c]`` for finite ``labels[first : first + c]`` from 2 c raw 64-bit
    ``words``: label ``first + j`` rounds with the low 53 bits of ``words[j]`` and responds with
    the low 53 bits of ``words[c + j]`` (each exactly uniform on [0, 2^53): 2^53 divides 2^64).

    ``interior``: the grid's interior points then +inf (K - 1 values), so the count of those
    <= y is the lower grid index l directly (in [0, K - 2]: the clip of the numpy code);
    ``cells``: :func:`cell_table` with ``scale`` = buckets / (hi - lo); ``cumulative``: each
    row's cumulative integer weights, row i shifted by i D (D = 2^53), laid end to end;
    ``draws``, ``shift``: :func:`draw_table`. Indices are unsigned (no negative-index wrap
    code in the loop; every one is in range by construction).
    """
    u = np.uint64
    k = grid.size
    m = outputs.size
    lo, hi = grid[0], grid[k - 1]
    buckets = cells.size
    per_row = draws.size // k
    c = words.size // 2
    for j in range(c):
        y = min(max(labels[u(first + j)], lo), hi)
        # low = how many interior points are <= y: from the table's lower bound, step up.
        low = cells[u(_bucket(y, lo, scale, buckets))]
        while interior[u(low)] <= y:
            low += 1
        g_low = grid[u(low)]
        t = (y - g_low) / (grid[u(low + 1)] - g_low)
        t = min(max(t, 0.0), 1.0)
        # Round up iff the draw is below R = ceil(t 2^53): for an integer draw that is the
        # same as being below t 2^53 itself, which is exact in float64 (2^53 scales exactly,
        # and every draw < 2^53 is a double).
        row = low + np.int64(np.float64(words[u(j)] & _LOW_53) < t * _TWO_53)
        v = np.int64(words[u(c + j)] & _LOW_53)
        # The first output whose cumulative weight exceeds v: the row's last is D > v.
        start = row * m
        target = v + (row << 53)
        index = draws[u(row * per_row + (v >> shift))]
        while cumulative[u(start + index)] <= target:
            index += 1
        out[u(first + j)] = outputs[u(index)]
