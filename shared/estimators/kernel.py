"""Private Nadaraya-Watson regression released as ONE vector at public query points.

Implements Shen, Tong & Wang, "Efficient Propose-Test-Release", Algorithm 5 (ePTR-NW, SaLBo
(21)) and a label-DP counterpart with the exact sensitivity. The paper evaluates one point x0
per release; predicting at m points that way spends m releases. Here the estimate at all m
query points (a public grid, or points the caller names) is one vector release with that
vector's sensitivity, and predictions elsewhere interpolate the released values
(:func:`interpolate`, or the Gaussian smoother :func:`smooth_interpolate`: post-processing).
ePTR-NW's test constant c0 may be one public value per query (:func:`eptr_nw`), with the
noise scaled per query accordingly.
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
    queries_for,
)
from shared.estimators._linear import linear_label_release
from shared.estimators.eptr import EPTROutcome, eptr_release
from shared.rng import Rng

_ROWS_PER_BLOCK = 2048


def kernel_bound(dim: int, bandwidth: float) -> float:
    """sigma^-d C_K with C_K = (2 pi)^(-d/2): the Gaussian kernel's maximum K(x, x)."""
    return (2.0 * math.pi) ** (-dim / 2.0) * bandwidth ** (-dim)


def gaussian_kernel(
    queries: np.ndarray, x: np.ndarray, *, bandwidth: float, unit: bool = False
) -> np.ndarray:
    """K_sigma(x_q, x_i) = (2 pi)^(-d/2) sigma^-d exp(-||x_q - x_i||^2 / (2 sigma^2)), (m, n);
    ``unit``: divided by its peak K_max (the exponential alone, in [0, 1])."""
    # Points near the doubles' top (1e308) overflow to inf or NaN here: their weights are then
    # 0 or NaN, which every caller refuses publicly (zero degree, a non-finite c0).
    with np.errstate(over="ignore", invalid="ignore"):
        sq = np.sum(queries**2, axis=1)[:, None] + np.sum(x**2, axis=1)[None, :]
        sq -= 2.0 * queries @ x.T
        np.maximum(sq, 0.0, out=sq)  # cancellation can leave tiny negatives
        shape = np.exp(-sq / (2.0 * bandwidth**2))
    return shape if unit else kernel_bound(x.shape[1], bandwidth) * shape


def nw_estimate(
    queries: np.ndarray, x: np.ndarray, y: np.ndarray, *, bandwidth: float, unit: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """(sum_i K y_i, d(x_q) = sum_i K) at every query, in blocks of queries (memory-bounded);
    ``unit``: with K divided by its peak (:func:`gaussian_kernel`)."""
    sums = np.empty(queries.shape[0])
    degree = np.empty(queries.shape[0])
    for start in range(0, queries.shape[0], _ROWS_PER_BLOCK):
        k = gaussian_kernel(
            queries[start : start + _ROWS_PER_BLOCK], x, bandwidth=bandwidth, unit=unit
        )
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
    # tau_q: query q's noise is N(0, (noise_scale tau_q)^2) (public; 1 for one c0).
    noise_factors: np.ndarray

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


def nw_gammas(degree: np.ndarray, *, n: int, c0: float, k_max: float) -> np.ndarray:
    """The SaLBo of each query on its own: (d(x_q) - c0 n)_+ / K_max.

    A tightening of the paper's (21), gamma = (d - c0 n - 2 K_max)_+ / (2 K_max), for a
    NONNEGATIVE kernel with 0 <= K <= K_max (the Gaussian): replacing one example moves
    d(x_q) by |K(x_q, x_i) - K(x_q, x_i')| <= K_max, not the 2 K_max of (20), so d / K_max is
    already 1-Lipschitz; and the sensitivity bound of :func:`eptr_nw` needs d(x_q) >= c0 n on
    the data set itself only (not on every neighbour), so the 2 K_max margin is not needed.
    """
    d = np.asarray(degree, dtype=np.float64)
    return np.maximum(d - c0 * n, 0.0) / k_max


def nw_gamma(degree: np.ndarray, *, n: int, c0: float, k_max: float) -> float:
    """The alpha-SaLBo of the whole query vector: min_q (d(x_q) - c0 n)_+ / K_max.

    Each term is 1-Lipschitz (:func:`nw_gammas`) and a minimum of 1-Lipschitz functions is
    1-Lipschitz; gamma > 0 gives d(x_q) > c0 n at EVERY query, which is what the vector's
    sensitivity bound (:func:`eptr_nw`) needs.
    """
    return float(nw_gammas(degree, n=n, c0=c0, k_max=k_max).min())


def query_overlap(
    queries: np.ndarray, *, bandwidth: float, weights: np.ndarray | None = None
) -> float:
    """A public bound G >= sup_x sum_q w_q exp(-||x - x_q||^2 / sigma^2), over EVERY x in R^d.

    G = min(sum_q w_q, max_q sum_r w_r exp(-||x_q - x_r||^2 / (4 sigma^2))) for weights
    w_q >= 0 (all 1 when ``weights`` is None: min(m, ...)). Proof: for any x let q* be the
    query nearest to x; for every r, ||x_r - x_q*|| <= ||x_r - x|| + ||x - x_q*|| <=
    2 ||x_r - x||, so exp(-||x - x_r||^2 / sigma^2) <= exp(-||x_r - x_q*||^2 / (4 sigma^2));
    summing with the weights bounds the sum at x by the row of q*, hence by the largest row;
    each exponential is <= 1, hence also <= sum_q w_q. A function of the public queries,
    weights and bandwidth only.
    """
    points = np.asarray(queries, dtype=np.float64)
    sigma = positive(bandwidth, name="bandwidth")
    w = np.ones(points.shape[0]) if weights is None else np.asarray(weights, dtype=np.float64)
    best = 0.0
    for start in range(0, points.shape[0], _ROWS_PER_BLOCK):
        block = points[start : start + _ROWS_PER_BLOCK]
        sq = (
            np.sum(block**2, axis=1)[:, None]
            + np.sum(points**2, axis=1)[None, :]
            - 2.0 * block @ points.T
        )
        np.maximum(sq, 0.0, out=sq)
        near = np.exp(-sq / (4.0 * sigma * sigma))
        rows = near.sum(axis=1) if weights is None else near @ w
        best = max(best, float(rows.max()))
    return min(float(w.sum()), best)


def nw_alpha(*, span: float, k_max: float, c0: float, n: int, overlap: float = 1.0) -> float:
    """L2 local-sensitivity level of the NW vector where every d(x_q) >= c0 n.

    alpha = span K_max sqrt(min(m, 2 G)) / (c0 n) with ``overlap`` = min(m, 2 G) (1 for one
    query): see :func:`eptr_nw` for the proof. The paper's per-point alpha is 4 R_f K_max /
    (c0 n) with span = 2 R_f: this one is half of it for one query.
    """
    return span * k_max * math.sqrt(overlap) / (c0 * n)


def nw_thresholds(c0: object, m: int) -> np.ndarray:
    """The release test's per-query constants c_q (a positive number for every query, or one
    for all): public values, refused (naming c0) when not finite and positive."""
    if isinstance(c0, bool):
        raise InvalidParameterError(f"c0 ({c0!r}) must be a positive number or one per query")
    try:
        values = np.asarray(c0, dtype=np.float64)
    except (TypeError, ValueError):
        raise InvalidParameterError(
            f"c0 ({c0!r}) must be a positive number or one per query"
        ) from None
    if values.ndim == 0:
        return np.full(m, positive(float(values), name="c0"))
    if values.shape != (m,):
        raise InvalidParameterError(f"c0 has shape {values.shape}: one value per query ({m},)")
    if not np.all(np.isfinite(values) & (values > 0.0)):
        raise InvalidParameterError("c0 must be finite and > 0 at every query")
    return values


def nw_noise_factors(c0: np.ndarray, *, power: float) -> np.ndarray:
    """tau_q = (min_r c_r / c_q)^power in (0, 1]: query q's share of the release's noise scale
    (1 for every query when c0 is one number). A function of the public c0 only."""
    if isinstance(power, bool) or not (isinstance(power, int | float) and 0.0 <= power <= 1.0):
        raise InvalidParameterError(f"noise_power ({power!r}) must be a number in [0, 1]")
    return (c0.min() / c0) ** float(power)


def eptr_nw(
    X: np.ndarray,
    y: np.ndarray,
    queries: np.ndarray,
    *,
    epsilon: float,
    delta: float,
    bandwidth: float,
    c0: float | np.ndarray,
    rng: Rng,
    r_f: float | None = None,
    lo: float | None = None,
    hi: float | None = None,
    no_reply: np.ndarray | float | None = None,
    noise_power: float = 0.5,
) -> EPTRNW:
    """(epsilon, delta)-DP Nadaraya-Watson at the m public ``queries``, one ePTR release.

    Implements Shen, Tong & Wang, Algorithm 5 (Gaussian kernel, K_max = sigma^-d C_K with
    C_K = (2 pi)^(-d/2)): labels projected to [lo, hi] (the paper's Pi_{R_f}: [-r_f, r_f]
    when only ``r_f`` is given), f(x_q) = sum_i K y_i / d(x_q), then Algorithm 2 with

        alpha = (hi - lo) K_max sqrt(min(m, 2 G)) / (c0 n),  gamma = min_q (d(x_q) - c0 n)_+ / K_max

    (G: :func:`query_overlap`). For one query and [-R_f, R_f] this alpha is 2 R_f K_max /
    (c0 n), half the paper's 4 R_f C_K / (sigma^d c0 n), and gamma is the paper's (21) with
    its 2 K_max terms replaced by K_max (:func:`nw_gammas`); both are proved below.

    ``c0`` may also be one PUBLIC constant per query (c_q, e.g. from the density of public
    reference features at q, never from the private data): the test then asks d(x_q) >= c_q n
    at every query, gamma = min_q (d(x_q) - c_q n)_+ / K_max, and query q's noise is scaled by
    tau_q = (c_min / c_q)^``noise_power`` (:func:`nw_noise_factors`): queries certified denser
    get less noise. With one c0 every tau_q = 1 and everything below is the scalar case.

    ``no_reply``: the value of every query when the test answers "no reply" (Algorithm 2's
    bottom: any data-independent constant); by default the middle of the public label interval,
    so a model that was not released predicts that middle rather than 0.

    Privacy (for all data sets; features need no projection, the Gaussian kernel is in
    [0, K_max] everywhere). Let X, X' differ in example i, and at query q let D = sum_{j != i}
    K_j, k = K(x_q, x_i), k' = K(x_q, x_i'). f = f0 + w (y_i - f0) with f0 = S / D in [lo, hi]
    and w = k / (D + k), likewise f' with w' = k' / (D + k'); so |f - f'| <= (hi - lo)
    max(w, w') (the two label terms have opposite worst signs), and max(w, w') <=
    max(k, k') / (c_q n) whenever d(x_q) = D + k >= c_q n (if k' > k then D + k' > D + k; if
    D = 0 the same bound holds with f = y_i). gamma > 0 gives d(x_q) > c_q n at every query.
    The released vector is u = f / tau (tau public); u moves by at most (hi - lo) sqrt(sum_q
    max(k_q, k_q')^2 / (c_q n tau_q)^2) <= (hi - lo) K_max sqrt(min(sum_q w_q, 2 G_w)) /
    (c_min n) = alpha in L2, with w_q = (c_min / (c_q tau_q))^2 (the weighted overlap G_w of
    :func:`query_overlap`: max(k, k')^2 <= k^2 + k'^2 and sum_q w_q k_q^2 <= K_max^2 G_w for
    any x_i); for one c0 this is the alpha above. gamma is 1-Lipschitz (:func:`nw_gamma`): it
    is an alpha-SaLBo for u (Definition 2.1), and Algorithm 2 (:func:`.eptr.eptr_release`,
    noise calibrated to the exact delta of the whole step) releases u (epsilon, delta)-DP; the
    values tau_q u~_q are post-processing. The final clip of the paper's step 4 is a no-op
    here (a weighted mean of labels in [lo, hi] stays in [lo, hi]).
    """
    x = features(X)
    target = labels_for(y, x.shape[0])
    points = queries_for(queries, x.shape[1])
    eps, dlt = epsilon_delta(epsilon, delta)
    sigma = positive(bandwidth, name="bandwidth")
    c = nw_thresholds(c0, points.shape[0])
    tau = nw_noise_factors(c, power=noise_power)
    low, high = label_interval(r_f=r_f, lo=lo, hi=hi)
    n, dim = x.shape
    k_max = kernel_bound(dim, sigma)
    # The weighted mean in units of the kernel's peak and of the interval's magnitude, so no
    # sum overflows for any public constants: K_max r_f summed over n rows was inf - inf = NaN
    # for labels of both signs, and a NaN estimate a refusal decided by the labels, uncharged.
    span = max(abs(low), abs(high))
    sums, weight = nw_estimate(
        points, x, np.clip(target, low, high) / span, bandwidth=sigma, unit=True
    )
    with np.errstate(over="ignore"):  # features only: d(x_q) = inf gives a public refusal
        degree = k_max * weight
        safe = np.where(weight > 0.0, weight, 1.0)
        mean = np.where(weight > 0.0, span * (sums / safe), 0.5 * (low + high))
    estimate = np.clip(mean, low, high)
    gamma = float(nw_gammas(degree, n=n, c0=c, k_max=k_max).min())
    alpha = eptr_nw_alpha(points, n=n, bandwidth=sigma, c0=c, low=low, high=high, tau=tau)
    out = eptr_release(
        estimate / tau, gamma=gamma, alpha=alpha, epsilon=eps, delta=dlt,
        no_reply=0.5 * (low + high) if no_reply is None else no_reply, rng=rng,
    )  # fmt: skip
    values = out.value * tau if out.released else out.value
    return EPTRNW(
        queries=points, values=values, noise_factors=tau, **EPTROutcome.of(out, alpha=alpha)
    )


def eptr_nw_alpha(
    points: np.ndarray,
    *,
    n: int,
    bandwidth: float,
    c0: np.ndarray,
    low: float,
    high: float,
    tau: np.ndarray,
) -> float:
    """:func:`eptr_nw`'s alpha at the public query ``points``: (high - low) K_max sqrt(min(sum_q
    w_q, 2 G_w)) / (c_min n) with w_q = (c_min / (c_q tau_q))^2 (its docstring proves it). A
    function of public values only (the request, the dataset's bounds, n)."""
    k_max = kernel_bound(points.shape[1], bandwidth)
    c_min = float(c0.min())
    weights = (c_min / (c0 * tau)) ** 2
    uniform = bool(np.all(weights == 1.0))  # one c0: the unweighted bound, as before
    overlap = min(
        float(weights.sum()),
        2.0 * query_overlap(points, bandwidth=bandwidth, weights=None if uniform else weights),
    )
    return nw_alpha(span=high - low, k_max=k_max, c0=c_min, n=n, overlap=overlap)


def label_interval(
    *, r_f: float | None = None, lo: float | None = None, hi: float | None = None
) -> tuple[float, float]:
    """The public label interval: [lo, hi] when both are given, else [-r_f, r_f]."""
    if lo is not None or hi is not None:
        if lo is None or hi is None:
            raise InvalidParameterError("lo and hi must be given together")
        domain = LabelDomain(lo=lo, hi=hi)
        return float(domain.lo), float(domain.hi)
    if r_f is None:
        raise InvalidParameterError("r_f (or lo and hi) is required")
    radius = positive(r_f, name="r_f")
    return -radius, radius


def nw_map(
    X: np.ndarray, queries: np.ndarray, *, bandwidth: float, name: str = "queries"
) -> np.ndarray:
    """The public map W[q, i] = K(x_q, x_i) / d(x_q); refuses queries with zero degree. The
    kernel's peak K_max cancels in the ratio, so it is computed in units of it (K_max itself
    overflows a double for a small bandwidth in many dimensions: sigma 0.01, d 200)."""
    x = features(X)
    points = queries_for(queries, x.shape[1], name=name)
    sigma = positive(bandwidth, name="bandwidth")
    k = gaussian_kernel(points, x, bandwidth=sigma, unit=True)
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
    # A distance beyond the doubles (a point at 1e308) finds no neighbour (index m): NaN there,
    # which the caller refuses as a prediction that is not a number.
    lost = np.any(index >= q.shape[0], axis=1)
    index = np.where(index >= q.shape[0], 0, index)
    exact = distance[:, 0] == 0.0
    with np.errstate(over="ignore", invalid="ignore"):  # far points: weights 0, then NaN
        weight = 1.0 / np.maximum(distance**2, 1e-300)
        out = np.sum(weight * released[index], axis=1) / np.sum(weight, axis=1)
    out[exact] = released[index[exact, 0]]
    out[lost] = np.nan
    return out


def smooth_interpolate(
    queries: np.ndarray, values: np.ndarray, points: np.ndarray, *, bandwidth: float
) -> np.ndarray:
    """Gaussian-kernel (Nadaraya-Watson) average of the released values at ``points``.

    sum_q K_h(x, x_q) v_q / sum_q K_h(x, x_q) with bandwidth h; a point whose every weight
    underflows gets the nearest query's value. Post-processing of a released vector: it reads
    only the public query points, the released values and h, so it costs no privacy. Unlike
    :func:`interpolate` it averages the noise of every query within a few h.
    """
    q = features(queries, name="queries")
    target = queries_for(points, q.shape[1], name="points")
    released = np.asarray(values, dtype=np.float64)
    if released.shape != (q.shape[0],):
        raise InvalidParameterError(f"values must have shape ({q.shape[0]},), got {released.shape}")
    h = positive(bandwidth, name="bandwidth")
    out = np.empty(target.shape[0])
    for start in range(0, target.shape[0], _ROWS_PER_BLOCK):
        block = target[start : start + _ROWS_PER_BLOCK]
        sq = np.sum(block**2, axis=1)[:, None] + np.sum(q**2, axis=1)[None, :] - 2.0 * block @ q.T
        np.maximum(sq, 0.0, out=sq)
        k = np.exp(-sq / (2.0 * h * h))
        total = k.sum(axis=1)
        nearest = released[np.argmin(sq, axis=1)]
        safe = np.where(total > 0.0, total, 1.0)
        out[start : start + block.shape[0]] = np.where(total > 0.0, k @ released / safe, nearest)
    return out
