"""Private linear regression: ePTR-OLS (full DP) and exact label-DP OLS (public features).

Implements Shen, Tong & Wang, "Efficient Propose-Test-Release", Algorithm 4 with the SaLBo
(18), and a label-DP counterpart: with the features public, OLS is a public linear map of the
labels, so its sensitivity to one label is known exactly and needs no test, no delta and has no
"no reply".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from shared.domain import LabelDomain, check_epsilon
from shared.errors import InvalidParameterError
from shared.estimators._checks import (
    epsilon_delta,
    features,
    full_column_rank,
    labels_for,
    positives,
    project_rows,
    project_vector,
)
from shared.estimators._linear import linear_label_release
from shared.estimators.eptr import EPTROutcome, eptr_release
from shared.rng import Rng


@dataclass(frozen=True, kw_only=True, slots=True)
class EPTROLS(EPTROutcome):
    """ePTR-OLS output. ``coef`` and ``released`` are the DP output; ``gamma`` and
    ``release_probability`` depend on the private data (owner's diagnostics only)."""

    coef: np.ndarray


@dataclass(frozen=True, kw_only=True, slots=True)
class LabelDPOLS:
    """Label-DP OLS output: ``coef`` is the release; ``sensitivity`` (exact L1, public)."""

    coef: np.ndarray
    sensitivity: float
    noise_scale: float
    epsilon: float

    def predict(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(x, dtype=np.float64) @ self.coef


def ols_gamma(x: np.ndarray, *, r_x: float, c0: float) -> float:
    """SaLBo (18): (lambda_p(X^T X) - c0 n - 2 r_x^2)_+ / (2 r_x^2), rows already projected.

    1-Lipschitz: one changed row moves X^T X by x x^T - x' x'^T, of spectral norm <= 2 r_x^2,
    so lambda_p moves by at most 2 r_x^2 (Weyl, (17)).
    """
    n = x.shape[0]
    smallest = float(np.linalg.eigvalsh(x.T @ x)[0])
    spread = 2.0 * r_x * r_x  # a product, not **: +inf (gamma 0) where r_x^2 overflows
    return max(smallest - c0 * n - spread, 0.0) / spread


def _unrepresentable(xp: np.ndarray, *, c0_n: float) -> np.ndarray:
    """A least-squares solution beyond the doubles (extreme feature scales) is replaced by 0,
    which only matters where lambda_min(X^T X) < c0 n: then this data set and every neighbour
    (lambda_min moves by at most r_x^2) have gamma = 0, where Algorithm 2 releases with
    probability <= delta whatever the estimate (the both-zero case of its proof). Anywhere
    else the refusal stands (the estimate must be finite)."""
    if float(np.linalg.eigvalsh(xp.T @ xp)[0]) < c0_n:
        return np.zeros(xp.shape[1])
    raise InvalidParameterError("the least-squares estimate overflows a double")


def ols_alpha(*, r_x: float, r_theta: float, c0: float, n: int) -> float:
    """ePTR-OLS's alpha = 4 r_x^2 r_theta / (c0 n) (16), +inf where it is beyond the doubles
    (never an exception: :func:`.eptr.eptr_release` answers "no reply" there)."""
    with np.errstate(over="ignore"):
        return float(np.float64(4.0) * r_x * r_x * r_theta / (np.float64(c0) * n))


def eptr_design(x: np.ndarray, r_x: float, *, intercept: bool = False) -> np.ndarray:
    """The rows Algorithm 4 fits on: each projected onto the ball of radius ``r_x``, or, with an
    ``intercept``, the features onto the ball of radius sqrt(r_x^2 - 1) and a column of ones
    after, so every row has norm <= r_x either way (needs r_x > 1 with an intercept)."""
    if not intercept:
        return project_rows(x, r_x)
    if not r_x > 1.0:
        raise InvalidParameterError(
            f"r_x ({r_x!r}) must be > 1 with an intercept (its column has norm 1)"
        )
    # sqrt(r_x^2 - 1) without squaring r_x (inf, and a NaN projection, above ~1.3e154)
    shrunk = project_rows(x, math.sqrt(r_x - 1.0) * math.sqrt(r_x + 1.0))
    return np.column_stack([shrunk, np.ones(x.shape[0])])


def ols_no_reply(p: int, *, intercept: bool, lo: float, hi: float) -> np.ndarray:
    """ePTR-OLS's "no reply" (Algorithm 2's data-independent bottom) for ``p`` feature columns:
    zero slopes and, with an ``intercept``, the middle of the public label interval [lo, hi],
    so an unreleased model predicts that middle rather than 0 (which may lie outside the
    labels' range). Public: reads only p and the public bounds, so any choice is as private."""
    coef = np.zeros(p + int(intercept))
    if intercept:
        coef[-1] = LabelDomain(lo=lo, hi=hi).middle
    return coef


def eptr_ols(
    X: np.ndarray,
    y: np.ndarray,
    *,
    epsilon: float,
    delta: float,
    r_x: float,
    r_theta: float,
    c0: float,
    rng: Rng,
    no_reply: np.ndarray | float = 0.0,
    intercept: bool = False,
) -> EPTROLS:
    """(epsilon, delta)-DP OLS coefficients by ePTR (whole examples, features and label, private).

    Implements Shen, Tong & Wang, Algorithm 4: x_i <- Pi_{r_x}(x_i), y_i <- Pi_{r_x r_theta}(y_i),
    theta-hat = Pi_{r_theta}((X^T X)^-1 X^T y), then Algorithm 2 with gamma as in (18) and
    alpha = 4 r_x^2 r_theta / (c0 n) (16).

    Privacy (Theorem 4.1): if gamma > 0, lambda_p(X^T X) >= c0 n + 2 r_x^2, so every neighbour has
    lambda_p >= c0 n (17) and (16) bounds the change of theta-hat by alpha; gamma is 1-Lipschitz
    (:func:`ols_gamma`), so Algorithm 2 is (epsilon, delta)-DP. A singular or ill-conditioned
    design is NOT refused (that refusal would itself depend on the private features): gamma is 0
    there and the minimum-norm least-squares solution stands in for theta-hat. Inputs validated
    first; rows with fewer examples than columns are refused (n and p are public).

    ``intercept``: fit an intercept too (its coefficient last). The features are projected onto
    the ball of radius sqrt(r_x^2 - 1) FIRST and the column of ones added after, so every row
    still has norm <= r_x (the proof above is unchanged) and no row loses part of its
    intercept, as it would if the ones were projected with the features. Needs r_x > 1.
    """
    x = features(X)
    target = labels_for(y, x.shape[0])
    eps, dlt = epsilon_delta(epsilon, delta)
    rx, rt, c = positives(r_x=r_x, r_theta=r_theta, c0=c0)
    n, p = x.shape
    if n < p + int(intercept):
        raise InvalidParameterError(f"X has fewer rows ({n}) than columns ({p + int(intercept)})")
    xp = eptr_design(x, rx, intercept=intercept)
    yp = np.clip(target, -rx * rt, rx * rt)
    with np.errstate(over="ignore", invalid="ignore"):
        theta, *_ = np.linalg.lstsq(xp, yp, rcond=None)
    if not np.all(np.isfinite(theta)):
        theta = _unrepresentable(xp, c0_n=c * n)
    theta = project_vector(theta, rt)
    gamma = ols_gamma(xp, r_x=rx, c0=c)
    alpha = ols_alpha(r_x=rx, r_theta=rt, c0=c, n=n)
    out = eptr_release(
        theta, gamma=gamma, alpha=alpha, epsilon=eps, delta=dlt, no_reply=no_reply, rng=rng
    )
    return EPTROLS(coef=out.value, **EPTROutcome.of(out, alpha=alpha))


def ols_map(X: np.ndarray) -> np.ndarray:
    """The public map A = (X^T X)^-1 X^T (p, n), after refusing a rank-deficient X."""
    x = features(X)
    full_column_rank(x)
    return np.linalg.solve(x.T @ x, x.T)


def label_dp_ols(
    X: np.ndarray, y: np.ndarray, *, lo: float, hi: float, epsilon: float, rng: Rng
) -> LabelDPOLS:
    """Pure epsilon-label-DP OLS coefficients for public features X and labels clipped to [lo, hi].

    Exact L1 sensitivity (proof): theta-hat = A y with A = (X^T X)^-1 X^T public. Neighbouring
    label vectors differ in one entry i, so theta-hat moves by A[:, i] (y_i - y_i') =
    (X^T X)^-1 x_i (y_i - y_i'), of L1 norm ||(X^T X)^-1 x_i||_1 |y_i - y_i'|
    <= ||(X^T X)^-1 x_i||_1 (hi - lo); the maximum over i is reached (move that label from lo to
    hi), so Delta_1 = max_i ||(X^T X)^-1 x_i||_1 (hi - lo) exactly. Laplace noise of scale
    Delta_1 / epsilon per coordinate is then epsilon-label-DP (Dwork et al. 2006).

    Sampled exactly on integers (see :mod:`._linear`): labels on 2^16 + 1 public levels, A
    rounded once to 31-bit integers, integer noise from the exact discrete Laplace sampler; the
    reported ``sensitivity`` is that of the rounded map, equal to Delta_1 up to 2^-31 relative.
    Only public arithmetic (A from X, the final scaling) is floating-point. Refuses a singular
    X^T X and fewer rows than columns (X is public: refusing reveals nothing about labels).
    """
    x = features(X)
    target = labels_for(y, x.shape[0])
    domain = LabelDomain(lo=lo, hi=hi)
    eps = check_epsilon(epsilon)
    release = linear_label_release(
        ols_map(x), target, lo=domain.lo, hi=domain.hi, epsilon=eps, rng=rng
    )
    return LabelDPOLS(
        coef=release.value,
        sensitivity=release.sensitivity,
        noise_scale=release.noise_scale,
        epsilon=eps,
    )
