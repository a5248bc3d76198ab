"""Numba kernels for RR-on-Bins' optimal bins: prefix sums in, partitions and costs out.

Ghazi et al., "Regression with Label Differential Privacy", Algorithm 2 and Appendix B. All
kernels work on the prior's support ``x[0] < ... < x[k-1]`` (masses ``p > 0``) through prefix
sums ``P0, P1, P2`` (length k + 1) of ``p``, ``p x`` and ``p x^2``. A bin is a run ``[a, b]`` of
support indices; with ``q = e^-epsilon`` its weights are ``w_y = p_y (q + (1 - q) [a <= y <= b])``
(the paper's ``p_y e^{eps [y in S]}`` divided by ``e^eps``, which cannot overflow), its output is
``argmin_c sum_y w_y loss(c, y)`` and its cost that minimum. A partition into d bins has expected
loss ``sum of bin costs / (1 + (d - 1) q)``.

Loss codes: 0 squared ``(c - y)^2``, 1 absolute ``|c - y|``, 2 Poisson ``c - y log c``.
The dynamic programs replace an incumbent only on a strict improvement (the penalised one also on
an equal cost with fewer bins), scanning ``r`` ascending, so every result is a deterministic
function of the inputs.
"""

from __future__ import annotations

import numpy as np
from numba import njit

SQUARED = 0
ABSOLUTE = 1
POISSON = 2

# What every bin kernel reads: (x, P0, P1, P2, q, 1 - q, loss code), one tuple so that numba
# compiles each kernel once for it and the kernels' signatures do not repeat its seven parts.
Support = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float, float, int]


@njit(cache=True)
def _cum_weight(m: int, a: int, b: int, prefix: np.ndarray, q: float, omq: float) -> float:
    """``sum_{y <= m} w_y * g_y`` for the bin ``[a, b]`` (``prefix`` is the prefix sum of p g)."""
    inside = 0.0
    if m >= a:
        inside = prefix[min(m, b) + 1] - prefix[a]
    return q * prefix[m + 1] + omq * inside


@njit(cache=True)
def _absolute_cost(
    m: int,
    a: int,
    b: int,
    x: np.ndarray,
    P0: np.ndarray,
    P1: np.ndarray,
    q: float,
    omq: float,
    w_total: float,
    wy_total: float,
) -> float:
    """``sum_y w_y |x_m - y|`` for the bin ``[a, b]``, O(1) by splitting the sum at ``x_m``."""
    c = x[m]
    w_lo = _cum_weight(m, a, b, P0, q, omq)
    wy_lo = _cum_weight(m, a, b, P1, q, omq)
    cost = (c * w_lo - wy_lo) + ((wy_total - wy_lo) - c * (w_total - w_lo))
    return max(cost, 0.0)


@njit(cache=True)
def _median_index(a: int, b: int, P0: np.ndarray, q: float, omq: float, half: float) -> int:
    """Smallest support index m with cumulative weight >= half (binary search, O(log k))."""
    lo = 0
    hi = P0.size - 2
    while lo < hi:
        mid = (lo + hi) // 2
        if _cum_weight(mid, a, b, P0, q, omq) >= half:
            hi = mid
        else:
            lo = mid + 1
    return lo


@njit(cache=True)
def _closed_form(
    a: int, b: int, P0: np.ndarray, P1: np.ndarray, P2: np.ndarray, q: float, omq: float, loss: int
) -> tuple:
    """(cost, output) of the bin ``[a, b]`` for the squared and Poisson losses, O(1).

    Both are minimised by the weighted mean ``c = W1 / W0`` (Appendix B); the minimum is
    ``W2 - W1 c`` (squared) or ``W0 c - W1 log c = W1 (1 - log c)`` (Poisson).
    """
    k = P0.size - 1
    w0 = q * P0[k] + omq * (P0[b + 1] - P0[a])
    w1 = q * P1[k] + omq * (P1[b + 1] - P1[a])
    c = w1 / w0
    if loss == SQUARED:
        w2 = q * P2[k] + omq * (P2[b + 1] - P2[a])
        return max(w2 - w1 * c, 0.0), c
    if w1 <= 0.0:  # every label is 0 (the support is {0}): output 0 costs 0 (0 log 0 = 0)
        return 0.0, 0.0
    return w1 * (1.0 - np.log(c)), c


@njit(cache=True)
def bin_cost(a: int, b: int, support: Support) -> tuple:
    """(cost, output, median index or -1) of one bin, computed directly (no amortisation)."""
    x, P0, P1, P2, q, omq, loss = support
    if loss != ABSOLUTE:
        cost, c = _closed_form(a, b, P0, P1, P2, q, omq, loss)
        return cost, c, -1
    k = x.size
    w_total = q * P0[k] + omq * (P0[b + 1] - P0[a])
    wy_total = q * P1[k] + omq * (P1[b + 1] - P1[a])
    m = _median_index(a, b, P0, q, omq, 0.5 * w_total)
    return _absolute_cost(m, a, b, x, P0, P1, q, omq, w_total, wy_total), x[m], m


@njit(cache=True)
def row_costs(r: int, support: Support, cost: np.ndarray, center: np.ndarray) -> None:
    """Costs and outputs of every bin ``[r, i]``, ``i = r .. k-1``, in amortised O(1) each.

    Squared and Poisson: closed forms from the prefix sums. Absolute (Appendix B): the weighted
    median is carried from ``i - 1`` to ``i`` and walked to the smallest index whose cumulative
    weight reaches half the total; only the weight of ``x_i`` changes between steps, so the walk
    is short and, as the paper shows, O(k) in total for one ``r``.
    """
    x, P0, P1, P2, q, omq, loss = support
    k = x.size
    if loss != ABSOLUTE:
        for i in range(r, k):
            c_i, ctr = _closed_form(r, i, P0, P1, P2, q, omq, loss)
            cost[i] = c_i
            center[i] = ctr
        return
    m = -1
    for i in range(r, k):
        w_total = q * P0[k] + omq * (P0[i + 1] - P0[r])
        wy_total = q * P1[k] + omq * (P1[i + 1] - P1[r])
        half = 0.5 * w_total
        if m < 0:
            m = _median_index(r, i, P0, q, omq, half)
        else:
            while _cum_weight(m, r, i, P0, q, omq) < half:
                m += 1
            while m > 0 and _cum_weight(m - 1, r, i, P0, q, omq) >= half:
                m -= 1
        cost[i] = _absolute_cost(m, r, i, x, P0, P1, q, omq, w_total, wy_total)
        center[i] = x[m]


@njit(cache=True)
def cost_matrix(support: Support) -> tuple:
    """All bin costs and outputs as k x k matrices (row r, column i: bin ``[r, i]``; NaN below)."""
    k = support[0].size
    costs = np.full((k, k), np.nan)
    centers = np.full((k, k), np.nan)
    cost = np.empty(k)
    center = np.empty(k)
    for r in range(k):
        row_costs(r, support, cost, center)
        for i in range(r, k):
            costs[r, i] = cost[i]
            centers[r, i] = center[i]
    return costs, centers


@njit(cache=True)
def penalised_partition(support: Support, penalty: float) -> tuple:
    """Partition minimising ``sum over bins (cost - penalty)``, with no limit on the bin count.

    One Dinkelbach step (see ``rr_on_bins``): the Algorithm 2 recursion without its bin-count
    index, pushed forward from each finished prefix ``r`` so that a bin row ``[r, .]`` is
    computed once, in amortised O(1) per bin: O(k^2) time, O(k) memory. Returns, for every
    prefix length, the start of its last bin, its unpenalised cost and its bin count.
    """
    k = support[0].size
    best = np.full(k + 1, np.inf)
    best[0] = 0.0
    total = np.zeros(k + 1)
    count = np.zeros(k + 1, dtype=np.int64)
    start = np.zeros(k + 1, dtype=np.int64)
    cost = np.empty(k)
    center = np.empty(k)
    for r in range(k):
        row_costs(r, support, cost, center)
        base = best[r] - penalty
        n_bins = count[r] + 1
        for i in range(r, k):
            candidate = base + cost[i]
            j = i + 1
            if candidate < best[j] or (candidate == best[j] and n_bins < count[j]):
                best[j] = candidate
                total[j] = total[r] + cost[i]
                count[j] = n_bins
                start[j] = r
    return start, total, count


@njit(cache=True)
def layered_partition(support: Support, max_bins: int) -> tuple:
    """Algorithm 2 as written, for at most ``max_bins`` bins: O(k^2 max_bins) time.

    ``total[i, j]`` is the least cost of splitting the first i support values into j bins (the
    paper's ``A[i][j]``, divided by e^eps); ``start[i, j]`` the start of the last of those bins.
    """
    k = support[0].size
    n_layers = max_bins
    total = np.full((k + 1, n_layers + 1), np.inf)
    total[0, 0] = 0.0
    start = np.zeros((k + 1, n_layers + 1), dtype=np.int64)
    cost = np.empty(k)
    center = np.empty(k)
    for r in range(k):
        row_costs(r, support, cost, center)
        top = min(n_layers, r + 1)  # a prefix of r values holds at most r bins
        for i in range(r, k):
            c_i = cost[i]
            for j in range(1, top + 1):
                candidate = total[r, j - 1] + c_i
                if candidate < total[i + 1, j]:
                    total[i + 1, j] = candidate
                    start[i + 1, j] = r
    return total, start


@njit(cache=True)
def bin_index(labels: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """``searchsorted(thresholds, labels, side="right")``: how many thresholds are <= each label.

    A plain binary search per label; numpy's searchsorted is several times slower on unsorted
    labels, and this is the hot loop of randomizing millions of labels.
    """
    n = labels.size
    m = thresholds.size
    out = np.empty(n, dtype=np.int64)
    for i in range(n):
        y = labels[i]
        lo = 0
        hi = m
        while lo < hi:
            mid = (lo + hi) >> 1
            if thresholds[mid] <= y:
                lo = mid + 1
            else:
                hi = mid
        out[i] = lo
    return out


@njit(cache=True)
def apply_response(index: np.ndarray, draws: np.ndarray, keep: int, other: int) -> None:
    """Algorithm 1's randomization, in place, from one draw v uniform on [0, D) per label.

    ``v < keep`` keeps bin ``index[i]``; otherwise ``(v - keep) // other`` (uniform on
    0 .. d-2, since D - keep = (d - 1) other) picks another bin, skipping ``index[i]`` itself.
    """
    for i in range(index.size):
        v = draws[i]
        if v >= keep:
            chosen = (v - keep) // other
            if chosen >= index[i]:
                chosen += 1
            index[i] = chosen
