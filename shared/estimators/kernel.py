"""Private Nadaraya-Watson regression released as ONE vector at public query points.

Implements Shen, Tong & Wang, "Efficient Propose-Test-Release", Algorithm 5 (ePTR-NW, SaLBo
(21)) and a label-DP counterpart with the exact sensitivity. The paper evaluates one point x0
per release; predicting at m points that way spends m releases. Here the estimate at all m
query points (a public grid, or points the caller names) is one vector release with that
vector's sensitivity, and predictions elsewhere interpolate the released values
(:func:`interpolate`, post-processing).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.spatial import cKDTree

from shared.domain import LabelDomain, check_epsilon
from shared.errors import InvalidParameterError
from shared.estimators._checks import (
    epsilon_delta,
    features,
    labels_for,
    positive,
    positives,
    queries_for,
)
from shared.estimators._linear import linear_label_release
from shared.estimators.eptr import EPTROutcome, eptr_release
from shared.rng import Rng

_ROWS_PER_BLOCK = 2048


def kernel_bound(dim: int, bandwidth: float) -> float:
    """sigma^-d C_K with C_K = (2 pi)^(-d/2): the Gaussian kernel's maximum K(x, x)."""
    return (2.0 * math.pi) ** (-dim / 2.0) * bandwidth ** (-dim)


def gaussian_kernel(queries: np.ndarray, x: np.ndarray, *, bandwidth: float) -> np.ndarray:
    """K_sigma(x_q, x_i) = (2 pi)^(-d/2) sigma^-d exp(-||x_q - x_i||^2 / (2 sigma^2)), (m, n)."""
    sq = np.sum(queries**2, axis=1)[:, None] + np.sum(x**2, axis=1)[None, :] - 2.0 * queries @ x.T
    np.maximum(sq, 0.0, out=sq)  # cancellation can leave tiny negatives
    return kernel_bound(x.shape[1], bandwidth) * np.exp(-sq / (2.0 * bandwidth**2))


def nw_estimate(
    queries: np.ndarray, x: np.ndarray, y: np.ndarray, *, bandwidth: float
) -> tuple[np.ndarray, np.ndarray]:
    """(sum_i K y_i, d(x_q) = sum_i K) at every query, in blocks of queries (memory-bounded)."""
    sums = np.empty(queries.shape[0])
    degree = np.empty(queries.shape[0])
    for start in range(0, queries.shape[0], _ROWS_PER_BLOCK):
        k = gaussian_kernel(queries[start : start + _ROWS_PER_BLOCK], x, bandwidth=bandwidth)
        sums[start : start + k.shape[0]] = k @ y
        degree[start : start + k.shape[0]] = k.sum(axis=1)
    return sums, degree


def nw_predict(
    x: np.ndarray, y: np.ndarray, points: np.ndarray, *, bandwidth: float, default: float
) -> np.ndarray:
    """Non-private Nadaraya-Watson at ``points`` (``default`` where every kernel underflows)."""
    sums, degree = nw_estimate(points, x, y, bandwidth=bandwidth)
    safe = np.where(degree > 0.0, degree, 1.0)
    return np.where(degree > 0.0, sums / safe, default)


@dataclass(frozen=True, kw_only=True, slots=True)
class EPTRNW(EPTROutcome):
    """ePTR-NW output at ``queries``. ``values``/``released`` are the DP output; ``gamma`` and
    ``release_probability`` depend on the private data (owner's diagnostics only)."""

    queries: np.ndarray
    values: np.ndarray

    def predict(self, points: np.ndarray, *, neighbours: int = 8) -> np.ndarray:
        return interpolate(self.queries, self.values, points, neighbours=neighbours)


@dataclass(frozen=True, kw_only=True, slots=True)
class LabelDPNW:
    """Label-DP NW output at ``queries``; ``sensitivity`` is the vector's exact L1 (public)."""

    queries: np.ndarray
    values: np.ndarray
    sensitivity: float
    noise_scale: float
    epsilon: float

    def predict(self, points: np.ndarray, *, neighbours: int = 8) -> np.ndarray:
        return interpolate(self.queries, self.values, points, neighbours=neighbours)


def nw_gamma(degree: np.ndarray, *, n: int, c0: float, k_max: float) -> float:
    """SaLBo (21) for the whole query vector: min_q (d(x_q) - c0 n - 2 K_max)_+ / (2 K_max).

    Each d(x_q) moves by at most K_max <= 2 K_max when one example changes (20), so each term
    is 1-Lipschitz, and a minimum of 1-Lipschitz functions is 1-Lipschitz.
    """
    return float(max(float(degree.min()) - c0 * n - 2.0 * k_max, 0.0) / (2.0 * k_max))


def eptr_nw(
    X: np.ndarray,
    y: np.ndarray,
    queries: np.ndarray,
    *,
    epsilon: float,
    delta: float,
    bandwidth: float,
    r_f: float,
    c0: float,
    rng: Rng,
    no_reply: np.ndarray | float = 0.0,
) -> EPTRNW:
    """(epsilon, delta)-DP Nadaraya-Watson at the m public ``queries``, one ePTR release.

    Implements Shen, Tong & Wang, Algorithm 5 (Gaussian kernel, C_K = (2 pi)^(-d/2)):
    y_i <- Pi_{r_f}(y_i), f(x_q) = Pi_{r_f}(sum K y / d(x_q)), then Algorithm 2 with the
    per-point alpha = 4 r_f C_K / (sigma^d c0 n) and gamma (21), extended to m points.

    Privacy: gamma = min_q gamma_q (:func:`nw_gamma`) is 1-Lipschitz; gamma > 0 gives
    d(x_q) >= c0 n + 2 K_max at every query, so on every neighbour d'(x_q) >= c0 n and each
    coordinate moves by at most alpha (19); the vector's L2 change is at most sqrt(m) alpha,
    which is the alpha handed to Algorithm 2. With m = 1 this is the paper's Algorithm 5. The
    Gaussian kernel satisfies |K| <= sigma^-d C_K everywhere, so the projection Pi_M of the
    features is not needed for privacy and is left to the caller.
    """
    x = features(X)
    target = labels_for(y, x.shape[0])
    points = queries_for(queries, x.shape[1])
    eps, dlt = epsilon_delta(epsilon, delta)
    sigma, rf, c = positives(bandwidth=bandwidth, r_f=r_f, c0=c0)
    n, dim = x.shape
    k_max = kernel_bound(dim, sigma)
    sums, degree = nw_estimate(points, x, np.clip(target, -rf, rf), bandwidth=sigma)
    safe = np.where(degree > 0.0, degree, 1.0)
    estimate = np.clip(np.where(degree > 0.0, sums / safe, 0.0), -rf, rf)
    gamma = nw_gamma(degree, n=n, c0=c, k_max=k_max)
    alpha_point = 4.0 * rf * k_max / (c * n)
    alpha = math.sqrt(points.shape[0]) * alpha_point
    out = eptr_release(
        estimate, gamma=gamma, alpha=alpha, epsilon=eps, delta=dlt, no_reply=no_reply, rng=rng
    )
    return EPTRNW(queries=points, values=out.value, **EPTROutcome.of(out, alpha=alpha))


def nw_map(
    X: np.ndarray, queries: np.ndarray, *, bandwidth: float, name: str = "queries"
) -> np.ndarray:
    """The public map W[q, i] = K(x_q, x_i) / d(x_q); refuses queries with zero degree."""
    x = features(X)
    points = queries_for(queries, x.shape[1], name=name)
    sigma = positive(bandwidth, name="bandwidth")
    k = gaussian_kernel(points, x, bandwidth=sigma)
    degree = k.sum(axis=1)
    empty = np.flatnonzero(~(degree > 0.0))
    if empty.size:
        raise InvalidParameterError(
            f"{name}: {empty.size} query point(s) (first: row {int(empty[0])}) have zero kernel "
            "degree (every kernel weight underflows): move them nearer the data or widen "
            "bandwidth"
        )
    return k / degree[:, None]


def label_dp_nw(
    X: np.ndarray,
    y: np.ndarray,
    queries: np.ndarray,
    *,
    lo: float,
    hi: float,
    epsilon: float,
    bandwidth: float,
    rng: Rng,
) -> LabelDPNW:
    """Pure epsilon-label-DP Nadaraya-Watson at the m public ``queries``, one vector release.

    Exact sensitivity (proof): with X public, f = W y with W[q, i] = K(x_q, x_i) / d(x_q) >= 0
    public. Changing label i moves f by W[:, i] (y_i - y_i'), of L1 norm
    sum_q W[q, i] |y_i - y_i'| <= sum_q K(x_q, x_i) / d(x_q) (hi - lo), reached by moving label
    i from lo to hi; so Delta_1 = max_i sum_q K(x_q, x_i) / d(x_q) (hi - lo), which for one
    query x0 is max_i K(x0, x_i) (hi - lo) / d(x0). Laplace noise of scale Delta_1 / epsilon
    per coordinate is epsilon-label-DP. Sampled exactly on integers like :func:`.ols.
    label_dp_ols` (see :mod:`._linear`); only public arithmetic is floating-point.
    """
    x = features(X)
    target = labels_for(y, x.shape[0])
    domain = LabelDomain(lo=lo, hi=hi)
    eps = check_epsilon(epsilon)
    points = queries_for(queries, x.shape[1])
    weights = nw_map(x, points, bandwidth=bandwidth)
    release = linear_label_release(
        weights, target, lo=domain.lo, hi=domain.hi, epsilon=eps, rng=rng
    )
    return LabelDPNW(
        queries=points,
        values=release.value,
        sensitivity=release.sensitivity,
        noise_scale=release.noise_scale,
        epsilon=eps,
    )


def interpolate(
    queries: np.ndarray, values: np.ndarray, points: np.ndarray, *, neighbours: int = 8
) -> np.ndarray:
    """Inverse-distance-weighted average of the released values at the nearest query points.

    Post-processing of a released vector: it reads only the public query points and the
    released values, so it costs no privacy. A point that coincides with a query gets its value.
    """
    q = features(queries, name="queries")
    target = queries_for(points, q.shape[1], name="points")
    released = np.asarray(values, dtype=np.float64)
    if released.shape != (q.shape[0],):
        raise InvalidParameterError(f"values must have shape ({q.shape[0]},), got {released.shape}")
    if isinstance(neighbours, bool) or not isinstance(neighbours, int) or neighbours < 1:
        raise InvalidParameterError(f"neighbours ({neighbours!r}) must be an integer >= 1")
    k = min(neighbours, q.shape[0])
    distance, index = cKDTree(q).query(target, k=k)
    distance = distance.reshape(target.shape[0], k)
    index = index.reshape(target.shape[0], k)
    exact = distance[:, 0] == 0.0
    weight = 1.0 / np.maximum(distance**2, 1e-300)
    out = np.sum(weight * released[index], axis=1) / np.sum(weight, axis=1)
    out[exact] = released[index[exact, 0]]
    return out
