"""Numba kernels for RPWithPrior's parameter search: arrays in, indices and scalars out.

Every kernel scans candidate intervals ``[edges[i], edges[j]]`` (``i <= j``) of a histogram prior
in a fixed order (``i`` ascending, then ``j`` ascending; for the joint search ``zeta`` first) and
replaces the incumbent only on a strict improvement, so ties always resolve to the first
candidate in that order: the result is a deterministic function of the inputs.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def best_f_pair(edges: np.ndarray, cum: np.ndarray, two_zeta: float, delta: float) -> tuple:
    """Edge indices ``(i, j)``, ``i < j``, maximising ``(cum[j]-cum[i]) / (2 zeta + delta w)``.

    ``w = edges[j] - edges[i]``, ``cum`` the prior's CDF at the edges, ``delta = e^-epsilon``;
    this is F(A1, A2) / (2 zeta) of RPWithPrior Lemma 3.3, O(1) per pair via the prefix sums.
    """
    n = edges.size
    best = -1.0
    best_i = 0
    best_j = n - 1
    for i in range(n - 1):
        ci = cum[i]
        base = two_zeta - delta * edges[i]
        for j in range(i + 1, n):
            value = (cum[j] - ci) / (base + delta * edges[j])
            if value > best:
                best = value
                best_i = i
                best_j = j
    return best_i, best_j, best


@njit(cache=True)
def best_f_pair_hull(edges: np.ndarray, cum: np.ndarray, two_zeta: float, delta: float) -> tuple:
    """The maximiser of :func:`best_f_pair` in O(k log k) by tangents to a lower convex hull.

    F / (2 zeta) is the slope from P_i = (delta edges[i], cum[i]) to Q_j = (2 zeta + delta
    edges[j], cum[j]); for fixed j the best i < j is where the line from Q_j touches the lower
    hull of P_0..P_{j-1} (every other point lies above that line), found by binary search.
    Same maximum as :func:`best_f_pair`; exact ties may resolve to a different pair.
    """
    n = edges.size
    hull = np.empty(n, dtype=np.int64)
    size = 0
    best = -1.0
    best_i = 0
    best_j = n - 1
    for j in range(1, n):
        p = j - 1
        px = delta * edges[p]
        while size >= 2:
            a = hull[size - 2]
            b = hull[size - 1]
            ax = delta * edges[a]
            bx = delta * edges[b]
            # Keep only strict left turns: the chain stays the lower hull.
            if (bx - ax) * (cum[p] - cum[a]) - (cum[b] - cum[a]) * (px - ax) > 0.0:
                break
            size -= 1
        hull[size] = p
        size += 1
        qx = two_zeta + delta * edges[j]
        qy = cum[j]
        lo = 0
        hi = size - 1
        while lo < hi:  # first hull vertex whose successor lies above the line to Q_j
            mid = (lo + hi) // 2
            h = hull[mid]
            g = hull[mid + 1]
            hx = delta * edges[h]
            if (cum[g] - cum[h]) * (qx - hx) >= (qy - cum[h]) * (delta * edges[g] - hx):
                hi = mid
            else:
                lo = mid + 1
        i = hull[lo]
        value = (qy - cum[i]) / (qx - delta * edges[i])
        if value > best:
            best = value
            best_i = i
            best_j = j
    return best_i, best_j, best


@njit(cache=True)
def mse_candidate(
    a1: float,
    a2: float,
    zeta: float,
    delta: float,
    uniform_outside: bool,
    below0: float,
    below1: float,
    below2: float,
    in0: float,
    in1: float,
    in2: float,
    above0: float,
    above1: float,
    above2: float,
) -> float:
    """E[(Y~ - Y)^2] of the continuous RPWithPrior density for the given prior moments.

    ``below*``, ``in*``, ``above*`` are the prior's moments (mass, E[Y; .], E[Y^2; .]) over
    ``y < a1``, ``a1 <= y <= a2`` and ``y > a2``. With ``W = a2 - a1 + 2 zeta``, ``c`` the centre
    of ``[a1 - zeta, a2 + zeta]``, ``gamma = 2 zeta + delta (a2 - a1)`` and ``p`` the projection
    of ``y`` into ``[a1, a2]``, density (3.4)/(3.12) is ``delta/gamma`` on the whole output range
    plus ``(1 - delta)/gamma`` on ``[p - zeta, p + zeta]``, so

        E[(Y~ - y)^2 | y] = delta W/gamma ((c - y)^2 + W^2/12)
                            + (1 - delta)/gamma (2 zeta (p - y)^2 + 2 zeta^3 / 3);

    under the uniform rule (3.17) a ``y`` outside the interval gets ``(c - y)^2 + W^2/12``.
    """
    width = a2 - a1 + 2.0 * zeta
    centre = 0.5 * (a1 + a2)
    gamma = 2.0 * zeta + delta * (a2 - a1)
    spread = width * width / 12.0
    far = delta * width / gamma
    near = (1.0 - delta) / gamma
    q_in = centre * centre * in0 - 2.0 * centre * in1 + in2
    q_below = centre * centre * below0 - 2.0 * centre * below1 + below2
    q_above = centre * centre * above0 - 2.0 * centre * above1 + above2
    window = 2.0 * zeta * zeta * zeta / 3.0
    if uniform_outside:
        outside0 = below0 + above0
        return (
            far * (q_in + in0 * spread)
            + near * window * in0
            + q_below
            + q_above
            + outside0 * spread
        )
    # E[(p - y)^2]: only labels outside [a1, a2] move under the projection.
    projected = (a1 * a1 * below0 - 2.0 * a1 * below1 + below2) + (
        a2 * a2 * above0 - 2.0 * a2 * above1 + above2
    )
    total0 = below0 + in0 + above0
    return far * (q_in + q_below + q_above + total0 * spread) + near * (
        2.0 * zeta * projected + window * total0
    )


@njit(cache=True)
def best_mse_candidate(
    edges: np.ndarray,
    m0: np.ndarray,
    m1: np.ndarray,
    m2: np.ndarray,
    zetas: np.ndarray,
    delta: float,
    uniform_outside: bool,
) -> tuple:
    """``(i, j, z, mse)`` minimising the expected squared error over edge pairs x zetas.

    ``m0, m1, m2`` are prefix sums of the prior's moments at the edges (mass, E[Y; Y < edge],
    E[Y^2; Y < edge]), so each candidate ``[edges[i], edges[j]]`` (``i <= j``) with
    ``zetas[z]`` costs O(1) through :func:`mse_candidate`.
    """
    n = edges.size
    t0 = m0[n - 1]
    t1 = m1[n - 1]
    t2 = m2[n - 1]
    best = np.inf
    best_i = 0
    best_j = n - 1
    best_z = 0
    for z in range(zetas.size):
        zeta = zetas[z]
        for i in range(n):
            a1 = edges[i]
            b0 = m0[i]
            b1 = m1[i]
            b2 = m2[i]
            for j in range(i, n):
                value = mse_candidate(
                    a1,
                    edges[j],
                    zeta,
                    delta,
                    uniform_outside,
                    b0,
                    b1,
                    b2,
                    m0[j] - b0,
                    m1[j] - b1,
                    m2[j] - b2,
                    t0 - m0[j],
                    t1 - m1[j],
                    t2 - m2[j],
                )
                if value < best:
                    best = value
                    best_i = i
                    best_j = j
                    best_z = z
    return best_i, best_j, best_z, best


@njit(cache=True)
def window_starts(
    labels: np.ndarray, a1: float, a2: float, width: float, max_start: int
) -> np.ndarray:
    """First window cell of each label: clip(rint((clip(y, a1, a2) - a1) / width), 0, max_start)."""
    out = np.empty(labels.size, dtype=np.int64)
    for k in range(labels.size):
        p = min(max(labels[k], a1), a2)
        s = np.rint((p - a1) / width)
        out[k] = min(max(int(s), 0), max_start)
    return out


@njit(cache=True)
def assign_cells(
    labels: np.ndarray,
    starts: np.ndarray,
    a1: float,
    a2: float,
    m: int,
    in_window: np.ndarray,
    inside_draws: np.ndarray,
    outside_draws: np.ndarray,
    uniform_draws: np.ndarray,
    uniform_outside: bool,
) -> np.ndarray:
    """Output cell of each label from pre-drawn randomness (RPWithPrior Algorithm 2 on a grid).

    ``starts`` are the window starts (:func:`window_starts`). A label outside [a1, a2] under the
    uniform rule takes the next ``uniform_draws`` value (uniform on [0, N)); otherwise an
    in-window label takes ``s + inside_draws`` (uniform on [0, m)) and the others ``r`` or
    ``r + m`` for the next ``r = outside_draws`` (uniform on [0, N - m)), skipping the window.
    Each draw array is consumed in label order.
    """
    n = labels.size
    out = np.empty(n, dtype=np.int64)
    a = 0
    b = 0
    c = 0
    for k in range(n):
        y = labels[k]
        if uniform_outside and (y < a1 or y > a2):
            out[k] = uniform_draws[c]
            c += 1
        elif in_window[k]:
            out[k] = starts[k] + inside_draws[a]
            a += 1
        else:
            r = outside_draws[b]
            b += 1
            out[k] = r + m if r >= starts[k] else r
    return out


@njit(cache=True)
def cell_values(cells: np.ndarray, low: float, width: float) -> np.ndarray:
    """Output value of each cell index: low + (j + 0.5) width."""
    out = np.empty(cells.size, dtype=np.float64)
    for k in range(cells.size):
        out[k] = low + (cells[k] + 0.5) * width
    return out
