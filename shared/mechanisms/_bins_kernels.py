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


# Up to this many thresholds a label's bin is a count of the thresholds <= it (compares without
# branches, which numba vectorises); beyond, a binary search (measured at 10^6 labels: 1.8 ms vs
# 11 ms at 5 thresholds, 7 vs 34 ms at 63, 85 vs 60 ms at 999).
LINEAR_SEARCH_MAX = 128


@njit(cache=True, inline="always")
def _bin_of(y: float, thresholds: np.ndarray) -> int:
    """``searchsorted(thresholds, y, side="right")``: how many thresholds are <= y.

    A count over the thresholds when there are at most ``LINEAR_SEARCH_MAX`` of them (no
    data-dependent branch, so unsorted labels cost no mispredictions), else Khuong and Morin's
    branch-free binary search: ``base`` ends at the last threshold <= y (or 0), one more
    comparison counts it.
    """
    m = thresholds.size
    if m <= LINEAR_SEARCH_MAX:
        count = 0
        for j in range(m):
            count += np.int64(thresholds[j] <= y)
        return count
    base = 0
    length = m
    while length > 1:
        half = length >> 1
        if thresholds[base + half] <= y:
            base += half
        length -= half
    return base + (1 if thresholds[base] <= y else 0)


@njit(cache=True, inline="always")
def _response(b: int, v: np.uint64, keep: np.uint64, other: np.uint64, inverse: float) -> int:
    """Algorithm 1 for a label in bin ``b`` and a draw v uniform on [0, D): ``b`` if v < keep,
    else the ((v - keep) // other)-th bin other than ``b``, exactly as :func:`apply_response`.

    The quotient is estimated in floating point (``inverse`` = 1 / other; relative error a few
    2^-53, so the estimate of a quotient below d < 2^50 is off by at most one) and corrected
    with exact integer comparisons: the exact integer quotient without a 64-bit division. Every
    step is computed for every draw and chosen by conditional moves: no branch depends on v.
    """
    switch = v >= keep
    rest = v - keep if switch else np.uint64(0)
    chosen = np.uint64(np.float64(rest) * inverse)
    if chosen * other > rest:
        chosen -= np.uint64(1)
    if (chosen + np.uint64(1)) * other <= rest:
        chosen += np.uint64(1)
    index = np.int64(chosen)
    index += np.int64(index >= b)
    return index if switch else b


@njit(cache=True)
def respond_draws(
    labels: np.ndarray,
    thresholds: np.ndarray,
    outputs: np.ndarray,
    draws: np.ndarray,
    keep: np.uint64,
    other: np.uint64,
) -> np.ndarray:
    """RR-on-Bins' randomization in one pass from given draws v_i uniform on [0, D).

    ``outputs[respond(Phi(y_i), v_i)]`` for every label: :func:`bin_index`, then
    :func:`apply_response`, then the output lookup, fused (same result, element for element).
    """
    out = np.empty(labels.size, dtype=np.float64)
    inverse = 1.0 / np.float64(other) if other > 0 else 0.0  # d = 1: no other bin
    for i in range(labels.size):
        b = _bin_of(labels[i], thresholds)
        v = np.uint64(draws[i])
        out[i] = outputs[_response(b, v, keep, other, inverse)]
    return out


@njit(cache=True, inline="always")
def _below(word: np.uint64, total: np.uint64, twice: np.uint64) -> np.uint64:
    """``word % total`` for ``word < 4 total``, without a division (two conditional moves)."""
    if word >= twice:
        word -= twice
    if word >= total:
        word -= total
    return word


@njit(cache=True)
def _respond_two(
    labels: np.ndarray, threshold: float, outputs: np.ndarray, words: np.ndarray, args: tuple
) -> None:
    """:func:`respond_words` for two bins and D a power of two (no word is rejected).

    v = word % D is ``word & (D - 1)``, below 2^63, so signed comparisons serve; the label's
    bin is ``threshold <= y`` and the output flips to the other bin iff v >= keep (the other
    bin is 1 - b whatever the quotient, which is always 0). No branch and no gather: numba
    vectorises the loop.
    """
    mask, keep, out, filled = args
    low, high = outputs[0], outputs[1]
    for j in range(labels.size):
        v = np.int64(np.uint64(words[j]) & mask)
        flip = (threshold <= labels[j]) != (v >= keep)
        out[filled + j] = high if flip else low


@njit(cache=True)
def respond_words(
    labels: np.ndarray,
    thresholds: np.ndarray,
    outputs: np.ndarray,
    words: np.ndarray,
    limit: np.uint64,
    total: np.uint64,
    keep: np.uint64,
    other: np.uint64,
    out: np.ndarray,
    filled: int,
) -> int:
    """RR-on-Bins' randomization straight from raw 64-bit CSPRNG words, in one pass.

    Each word below ``limit`` (the largest multiple of D = ``total`` below 2^64, which must be
    at most 4 D, i.e. D > 2^64 / 5; 0 keeps every word) gives the draw v = word % D, exactly
    uniform on [0, D), and randomizes the next label, ``out[filled]``; a word at or above
    ``limit`` is skipped (rejection sampling). This is ``shared.rng.SystemRandom.integers(0, D)``
    followed by :func:`respond_draws`, word for word the same draws and outputs. Returns how
    many of ``out`` are filled.

    Two bins (D = 2^62, nothing rejected): :func:`_respond_two`. Otherwise a first pass
    assumes no word is rejected (for RR-on-Bins' D > 2^62 - d a word is rejected with
    probability below d 2^-62) and only notes whether one was; if so, the words are consumed
    again one by one, skipping the rejected ones, over the same outputs.
    """
    d = outputs.size
    count = min(words.size, labels.size - filled)
    twice = total + total
    bound = limit - np.uint64(1)  # the largest kept word (limit 0 wraps to 2^64 - 1: all kept)
    inverse = 1.0 / np.float64(other) if other > 0 else 0.0  # d = 1: no other bin
    chunk = labels[filled : filled + count]
    if d == 2 and limit == 0 and total & (total - np.uint64(1)) == 0:
        mask = total - np.uint64(1)
        _respond_two(chunk, thresholds[0], outputs, words, (mask, np.int64(keep), out, filled))
        return filled + count
    rejected = False
    for j in range(count):
        word = np.uint64(words[j])
        bad = word > bound
        rejected |= bad
        v = _below(np.uint64(0) if bad else word, total, twice)
        b = _bin_of(chunk[j], thresholds)
        out[filled + j] = outputs[_response(b, v, keep, other, inverse)]
    if not rejected:
        return filled + count
    for j in range(words.size):
        if filled == labels.size:
            break
        word = np.uint64(words[j])
        if word > bound:
            continue
        v = _below(word, total, twice)
        b = _bin_of(labels[filled], thresholds)
        out[filled] = outputs[_response(b, v, keep, other, inverse)]
        filled += 1
    return filled
