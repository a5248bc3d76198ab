"""Constants chosen by the product for ePTR-OLS (issue 22, item 3).

Algorithm 4 (Shen, Tong & Wang) needs the feature radius R_x, the coefficient radius R_theta and
the SaLBo constant c0, which the paper leaves to "domain knowledge or another DP scale
estimator". When a request omits them, the product chooses each from public quantities (n, p,
the public label bounds, epsilon, delta) and one small DP estimate, charged out of the request's
own epsilon by a fixed rule (:data:`SHARES`; no delta), ePTR running on the rest:

* ``r_x``: a DP tail quantile of the row norms (the sparse vector technique on a public
  geometric grid, :func:`dp_norm_quantile`): about 1/40 of the rows are clipped.
* ``c0``: a DP estimate of lambda_min(X^T X) of the projected design (Laplace,
  :func:`noisy_lambda_min`) minus the margin that makes ePTR's release test fail with
  probability at most :data:`NO_REPLY` (:func:`release_margin`, :func:`choose_c0`).
* ``r_theta``: the bound ||theta-hat|| <= ||y|| / sqrt(lambda_min), with a DP estimate of the
  labels' mean square (Laplace, :func:`noisy_second_moment`) and of lambda_min, each
  :data:`CONFIDENCE` noise scales to the safe side (:func:`choose_r_theta`).

Privacy of the whole (proof): each estimate is DP on its own (its docstring), with the earlier
estimates as fixed inputs; ePTR-OLS is (epsilon_e, delta)-DP for ANY fixed positive constants
(Theorem 4.1: with R_x, R_theta, c0 fixed, (18) is an alpha-SaLBo for alpha = 4 R_x^2 R_theta /
(c0 n), which is all Algorithm 2 needs), and the constants handed to it are functions of DP
outputs and public values only (post-processing). By basic composition, valid for adaptively
chosen mechanisms (Dwork & Roth 2014, Theorem 3.16), the release is (sum of the estimates'
epsilons + epsilon_e, delta)-DP = (epsilon, delta)-DP, the request's charge exactly
(:class:`ConstantsSplit`). Every step protects a whole example (features and label), as ePTR does.
Every noisy value and comparison is drawn exactly: :func:`exact_laplace` (discrete Laplace on
a grid), the sparse vector's comparisons (:func:`dp_norm_quantile`), ePTR's Bernoulli and
Gaussian.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np
from scipy import integrate
from scipy.special import expit

from shared import epsilon as amounts
from shared.domain import LabelDomain, check_epsilon
from shared.errors import InvalidParameterError
from shared.estimators._checks import features, labels_for, positive, row_norms
from shared.estimators.eptr import eptr_threshold
from shared.estimators.ols import EPTROLS, eptr_design, eptr_ols
from shared.mechanisms.discrete_laplace import discrete_laplace_samples
from shared.mechanisms.sparse_vector import first_at_or_below
from shared.rng import Rng

# The constants of ePTR-OLS the product can choose, in the order it estimates them.
OLS_CONSTANTS = ("r_x", "c0", "r_theta")
# The share of the request's epsilon each chosen constant costs (no delta): 25% for all three.
SHARES = {"r_x": 0.05, "c0": 0.15, "r_theta": 0.05}
# r_x: the grid of candidate radii 2^(j/16), 2^-128 .. 2^128 (public); the target number of rows
# above r_x is n / 40, at least TAIL_RANKS / epsilon_r_x (the sparse vector's noise is about
# 2 / epsilon_r_x ranks), at most n / 4.
NORM_GRID = 2.0 ** (np.arange(-128 * 16, 128 * 16 + 1) / 16.0)
CLIPPED_SHARE = 1.0 / 40.0
TAIL_RANKS = 10.0
MAX_CLIPPED_SHARE = 0.25
# c0: the probability that ePTR's test answers "no reply" on a design whose true lambda_min is
# as large as the estimate says, over the estimate's noise and the test's own randomness.
NO_REPLY = 1e-5
# ... and never less than one example's worth of SaLBo: at a huge epsilon the exact margin
# tends to 0 and the test's outcome would be decided by the rounding of lambda_min.
MIN_MARGIN = 1.0
# r_theta: noise scales of each estimate taken to the safe side (one-sided miss e^-3 / 2 each).
CONFIDENCE = 3.0
# No part's epsilon below this (its noise scale 1 / epsilon stays a finite double).
MIN_PART = 1e-300
# r_theta is clamped into [2^-256, 2^256] (public): alpha <= 4 r_theta stays finite.
_LOG_RADIUS_LIMIT = 256.0 * math.log(2.0)


# ---- the budget rule -----------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ConstantsSplit:
    """How a request's (epsilon, delta) is split: each chosen constant's exact epsilon share
    (``parts``, summing to ``constants_epsilon``) and ePTR's rest, all the delta.
    ``constants_epsilon + eptr_epsilon == epsilon`` exactly; each step runs at the largest
    float not above its share."""

    chosen: tuple[str, ...]
    epsilon: Decimal
    delta: Decimal
    parts: Mapping[str, Decimal]
    constants_epsilon: Decimal
    eptr_epsilon: Decimal

    def part_float(self, name: str) -> float:
        return amounts.float_at_most(self.parts[name])

    @property
    def eptr_float(self) -> float:
        return amounts.float_at_most(self.eptr_epsilon)

    @property
    def delta_float(self) -> float:
        return amounts.float_at_most(self.delta)

    def public(self) -> dict[str, Any]:
        """The split as the preview and the ledger entry show it (exact decimal strings)."""
        return {
            "chosen": list(self.chosen),
            "constants": {
                "epsilon": amounts.text(self.constants_epsilon),
                "delta": "0",
                "parts": {name: amounts.text(part) for name, part in self.parts.items()},
            },
            "eptr": {"epsilon": amounts.text(self.eptr_epsilon), "delta": amounts.text(self.delta)},
        }

    def explanation(self) -> list[str]:
        """One sentence per chosen constant: how it is chosen and what it costs."""
        how = {
            "r_x": "a DP tail quantile of the row norms (sparse vector on a public grid): about "
            "1/40 of the rows are clipped",
            "c0": "a DP estimate of lambda_min(X^T X) (Laplace) less the margin that keeps the "
            f"release test's 'no reply' below {NO_REPLY:g}",
            "r_theta": "||y|| / sqrt(lambda_min) from a DP mean square of the labels (Laplace) "
            "and the lambda_min estimate",
        }
        lines = [
            f"{name}: {how[name]}; epsilon {amounts.text(self.parts[name])}" for name in self.chosen
        ]
        return lines + [
            f"ePTR-OLS: epsilon {amounts.text(self.eptr_epsilon)}, delta "
            f"{amounts.text(self.delta)} (the constants spend no delta)"
        ]


def ols_split(
    *, epsilon: amounts.AmountLike, delta: amounts.AmountLike, chosen: Iterable[str]
) -> ConstantsSplit:
    """The documented rule: each chosen constant costs ``SHARES[name]`` of epsilon (a short
    decimal, :func:`shared.epsilon.short_part`), ePTR the exact rest and all of delta.

    Public: reads the request only. Refuses (naming epsilon) an epsilon whose parts would not
    be usable doubles."""
    names = set(chosen)
    unknown = sorted(names - set(OLS_CONSTANTS))
    if unknown or not names:
        raise InvalidParameterError(f"chosen ({sorted(names)}) must be some of {OLS_CONSTANTS}")
    order = tuple(name for name in OLS_CONSTANTS if name in names)
    return split_shares(epsilon=epsilon, delta=delta, chosen=order, shares=SHARES)


def split_shares(
    *,
    epsilon: amounts.AmountLike,
    delta: amounts.AmountLike,
    chosen: tuple[str, ...],
    shares: Mapping[str, float],
    kind: type[ConstantsSplit] = ConstantsSplit,
) -> ConstantsSplit:
    """The one budget rule of every estimator's chosen constants: constant ``name`` costs
    ``shares[name]`` of epsilon as a short decimal (:func:`shared.epsilon.short_part`), ePTR
    the exact rest and all of delta, so the parts add up to the request exactly. Refuses delta
    outside (0, 1) and (naming epsilon) an epsilon whose parts would not be usable doubles (no
    part below ``MIN_PART``: its noise scale stays finite). ``kind``: the estimator's subclass
    of :class:`ConstantsSplit` (its own ``explanation``), built with the same fields."""
    eps = amounts.exact(epsilon)
    dlt = amounts.exact(delta, name="delta")
    if not dlt < 1:
        raise InvalidParameterError(f"delta ({amounts.text(dlt)}) must be in (0, 1)")
    parts = {name: amounts.short_part(shares[name] * float(eps), whole=eps) for name in chosen}
    spent = amounts.add(*parts.values()) if parts else amounts.ZERO
    rest = amounts.subtract(eps, spent)
    floats = [amounts.float_at_most(part) for part in parts.values()]
    if rest <= 0 or min(floats, default=1.0) < MIN_PART or not amounts.float_at_most(rest) > 0:
        them = "them" if len(chosen) > 1 else "it"
        raise InvalidParameterError(
            f"epsilon ({amounts.text(eps)}) is too small for the product to choose "
            f"{', '.join(chosen)}: give {them}"
        )
    return kind(
        chosen=chosen, epsilon=eps, delta=dlt, parts=parts, constants_epsilon=spent,
        eptr_epsilon=rest,
    )  # fmt: skip


# ---- the DP estimates ----------------------------------------------------------------------


# Grid steps per sensitivity of :func:`exact_laplace`: rounding to the grid adds at most one step
# to the sensitivity (1025 steps instead of 1024: 0.1% more noise).
LAPLACE_RESOLUTION = 1024


def exact_laplace(value: float, *, sensitivity: float, epsilon: float, rng: Rng) -> float:
    """``value`` + Laplace-like noise of scale ~ ``sensitivity`` / ``epsilon``, drawn EXACTLY:
    epsilon-DP for any ``value`` of that sensitivity, with no floating-point sampling.

    The value is rounded, in exact rationals, to the grid of step h = sensitivity / 1024
    (k = round(value / h)); exact discrete Laplace noise (Canonne, Kamath & Steinke, Algorithm
    2) of scale S / epsilon is added to k, with S = floor(sensitivity / h) + 1 = 1025; the
    output is (k + Z) h. Privacy (proof): |value - value'| <= sensitivity gives |value / h -
    value' / h| <= 1024 and, each rounded by at most 1/2, |k - k'| <= 1025 = S (an integer);
    the discrete Laplace mechanism of scale S / epsilon on an integer query of sensitivity S is
    epsilon-DP exactly (P(k + Z = m) / P(k' + Z = m) <= exp(|k - k'| epsilon / S)); multiplying
    by h is post-processing. Unlike a float Laplace by the inverse CDF (what this replaced), the
    set of possible outputs does not depend on the value (Mironov 2012)."""
    eps = Fraction(check_epsilon(epsilon))
    step = Fraction(positive(sensitivity, name="sensitivity")) / LAPLACE_RESOLUTION
    k = round(Fraction(float(value)) / step)
    scale = Fraction(LAPLACE_RESOLUTION + 1) / eps
    return float((k + discrete_laplace_samples(rng, scale, 1)[0]) * step)


def target_above(n: int, epsilon: float) -> float:
    """How many rows r_x should leave outside: n / 40, at least 10 / epsilon (the sparse
    vector's threshold noise is 2 / epsilon ranks: a target below a few of those would often
    overshoot to the largest norm), at most n / 4. Public: n and epsilon only."""
    return min(max(CLIPPED_SHARE * n, TAIL_RANKS / epsilon), MAX_CLIPPED_SHARE * n)


def dp_norm_quantile(norms: np.ndarray, *, epsilon: float, above: float, rng: Rng) -> float:
    """The first radius r of :data:`NORM_GRID` (ascending) at which the noisy count of norms
    above r falls to the noisy target ``above`` (the top of the grid if none): the sparse vector
    technique with exact noise (``sparse_vector.first_at_or_below``), epsilon-DP.

    Privacy (proof): the queries are c_j = #{i : ||x_i|| > r_j}, each of sensitivity 1, and
    MONOTONE: changing one example moves one norm, so every c_j changes by the same sign (+1
    for the r_j between the old and the new norm if it grew, -1 if it shrank, 0 elsewhere),
    which is what ``first_at_or_below``'s proof needs; only an index of the public grid is
    released. Infinite norms (overflowed) count as above every radius.
    """
    values = np.sort(np.asarray(norms, dtype=np.float64))
    counts = values.size - np.searchsorted(values, NORM_GRID, side="right")
    fired = first_at_or_below(counts, threshold=above, epsilon=epsilon, rng=rng)
    return float(NORM_GRID[-1] if fired is None else NORM_GRID[fired])


def noisy_lambda_min(design: np.ndarray, *, r_x: float, epsilon: float, rng: Rng) -> float:
    """lambda_min(Z^T Z) / r_x^2 + Lap(1 / epsilon) for rows of Z with norm <= r_x:
    epsilon-DP, in units of r_x^2 (so no overflow for any radius).

    Privacy (proof): changing one example replaces a row z by z', so Z^T Z moves by
    E = z' z'^T - z z^T, whose eigenvalues lie in [-||z||^2, ||z'||^2] subset of
    [-r_x^2, r_x^2]; by Weyl, lambda_min(Z^T Z + E) lies in [lambda_min - r_x^2,
    lambda_min + r_x^2]. The sensitivity is r_x^2 (half the paper's 2 r_x^2 of (17), which
    bounds |E|'s two eigenvalues together), 1 in these units: :func:`exact_laplace` with
    sensitivity 1 is epsilon-DP. The rows must already be projected (``eptr_design``)."""
    eps = check_epsilon(epsilon)
    radius = positive(r_x, name="r_x")
    scaled = design / radius
    if not np.all(row_norms(scaled) <= 1.0 + 1e-9):
        raise InvalidParameterError(f"design rows must have norm <= r_x ({r_x!r})")
    smallest = float(np.linalg.eigvalsh(scaled.T @ scaled)[0])
    return exact_laplace(smallest, sensitivity=1.0, epsilon=eps, rng=rng)


def noisy_second_moment(y: np.ndarray, *, bound: float, epsilon: float, rng: Rng) -> float:
    """mean((y / bound)^2) + Lap(1 / (n epsilon)) for labels clipped into [-bound, bound]:
    epsilon-DP.

    Privacy (proof): each (y_i / bound)^2 lies in [0, 1], so changing one example moves the
    mean by at most 1 / n (n public); :func:`exact_laplace` with sensitivity 1 / n is
    epsilon-DP."""
    eps = check_epsilon(epsilon)
    scale = positive(bound, name="bound")
    values = np.clip(np.asarray(y, dtype=np.float64) / scale, -1.0, 1.0)
    second = float(np.mean(values * values))
    return exact_laplace(second, sensitivity=1.0 / values.size, epsilon=eps, rng=rng)


# ---- from the estimates to the constants (post-processing) ---------------------------------


def no_reply_probability(margin: float, *, eptr_epsilon: float, lambda_epsilon: float) -> float:
    """P(L + T >= margin) for L ~ Laplace(1 / (2 lambda_epsilon)) (the lambda_min estimate's
    error over 2 r_x^2, in SaLBo units) and T ~ Logistic(2 / eptr_epsilon) (Algorithm 2's test
    answers "no reply" iff gamma - M < T, with probability sigmoid(-(eps / 2)(gamma - M))):
    E[sigmoid((L - margin) / sigma)] by adaptive quadrature on the pieces where the integrand
    is smooth. Public."""
    s = 1.0 / (2.0 * check_epsilon(lambda_epsilon, name="lambda_epsilon"))
    sigma = 2.0 / check_epsilon(eptr_epsilon, name="eptr_epsilon")

    def integrand(ell: float) -> float:
        return math.exp(-abs(ell) / s) / (2.0 * s) * float(expit((ell - margin) / sigma))

    reach = abs(margin) + 80.0 * (s + sigma)
    cuts = sorted({-reach, 0.0, margin, reach})
    return sum(
        integrate.quad(integrand, a, b, epsabs=0.0, epsrel=1e-10, limit=200)[0]
        for a, b in zip(cuts, cuts[1:], strict=False)
    )


@functools.lru_cache(maxsize=256)
def release_margin(*, eptr_epsilon: float, lambda_epsilon: float, no_reply: float) -> float:
    """The smallest margin g (SaLBo units, to 1e-6 relative, rounded up) with
    :func:`no_reply_probability` (g) <= ``no_reply``, at least :data:`MIN_MARGIN`.

    If c0 n = lambda-tilde - 2 r_x^2 (1 + M + g), then gamma - M = g - L on the data set whose
    lambda_min the estimate missed by 2 r_x^2 L, so the test answers "no reply" with
    probability P(L + T >= g). Bisection between 0 and the Chernoff bound exp(-t g) / (1 - s^2
    t^2) * pi sigma t / sin(pi sigma t) (0 < t < min(1 / s, 1 / sigma), s and sigma the two
    scales), where the probability is at most ``no_reply``. Public; cached."""
    s = 1.0 / (2.0 * check_epsilon(lambda_epsilon, name="lambda_epsilon"))
    sigma = 2.0 / check_epsilon(eptr_epsilon, name="eptr_epsilon")
    t = np.linspace(1e-4, 1.0 - 1e-4, 4000) * min(1.0 / s, 1.0 / sigma)
    log_mgf = -np.log1p(-((s * t) ** 2)) + np.log(np.pi * sigma * t / np.sin(np.pi * sigma * t))
    low, high = 0.0, float(np.min((log_mgf - math.log(no_reply)) / t))

    def too_small(margin: float) -> bool:
        found = no_reply_probability(
            margin, eptr_epsilon=eptr_epsilon, lambda_epsilon=lambda_epsilon
        )
        return found > no_reply

    if not too_small(low):
        return MIN_MARGIN
    while high - low > 1e-6 * high:
        middle = 0.5 * (low + high)
        low, high = (middle, high) if too_small(middle) else (low, middle)
    return max(high, MIN_MARGIN)


def choose_c0(
    lambda_units: float,
    *,
    r_x: float,
    n: int,
    eptr_epsilon: float,
    delta: float,
    lambda_epsilon: float,
    no_reply: float = NO_REPLY,
) -> float:
    """c0 from the noisy lambda_min (units of r_x^2): c0 n = lambda-tilde - 2 r_x^2 (1 + M + g),
    M the test's threshold and g :func:`release_margin`, so on a design as good as estimated
    the release test fails with probability <= ``no_reply``. A design too weak for that margin
    gets c0 n = lambda-tilde / 2 (the test may then answer "no reply"), never less than r_x^2
    (so alpha <= 4 R_theta) nor more than n r_x^2 (lambda_min can be no larger). Finite and
    positive for any input; a function of DP outputs and public values (post-processing)."""
    m = eptr_threshold(epsilon=eptr_epsilon, delta=delta)
    g = release_margin(eptr_epsilon=eptr_epsilon, lambda_epsilon=lambda_epsilon, no_reply=no_reply)
    units = min(max(lambda_units - 2.0 * (1.0 + m + g), lambda_units / 2.0, 1.0), float(n))
    c0 = units / n * r_x * r_x
    if not (math.isfinite(c0) and c0 > 0.0):
        raise InvalidParameterError(f"r_x ({r_x!r}) is out of range for the product to choose c0")
    return c0


def choose_r_theta(
    moment: float,
    *,
    bound: float,
    r_x: float,
    n: int,
    lambda_low_units: float,
    moment_epsilon: float,
) -> float:
    """r_theta = bound / r_x * sqrt(n m / lambda_low): ||theta-hat|| <= ||y|| / sqrt(lambda_min)
    (theta-hat = (X^T X)^-1 X^T y = A^-1/2 (A^-1/2 X^T y), and ||A^-1/2 X^T|| <= 1, so
    ||theta-hat|| <= ||A^-1/2|| ||y||), with m the noisy mean square (units of bound^2) raised by
    :data:`CONFIDENCE` noise scales and lambda_low a lower estimate of lambda_min (units of
    r_x^2). It bounds ||theta-hat|| unless an estimate misses by more than that, so the
    projection of Algorithm 4 rarely binds. Clamped into [2^-256, 2^256]: finite and positive
    for any input. Post-processing of DP outputs and public values."""
    scale = 1.0 / (n * moment_epsilon)
    upper = max(moment + CONFIDENCE * scale, scale)
    low = max(lambda_low_units, 1e-300)
    log_r = math.log(bound) - math.log(r_x) + 0.5 * (math.log(n) + math.log(upper) - math.log(low))
    return math.exp(min(max(log_r, -_LOG_RADIUS_LIMIT), _LOG_RADIUS_LIMIT))


@dataclass(frozen=True, kw_only=True)
class ChosenConstants:
    """The constants ePTR-OLS ran with (given or chosen; the chosen ones are DP outputs, public
    to the recipient) and which were chosen."""

    r_x: float
    r_theta: float
    c0: float
    chosen: tuple[str, ...]

    def params(self) -> dict[str, float]:
        return {"r_x": self.r_x, "r_theta": self.r_theta, "c0": self.c0}


def choose_r_x(x: np.ndarray, epsilon: float, *, intercept: bool, rng: Rng) -> float:
    """r_x from the DP quantile of the feature rows' norms (:func:`dp_norm_quantile` at the
    target :func:`target_above`): epsilon-DP for whole examples (it reads the features only,
    one example moves one norm). With an intercept the ones column joins after the projection
    (``eptr_design``), so r_x = sqrt(q^2 + 1) > 1. Shared by every estimator whose r_x the
    product chooses (ePTR-OLS, ePTR-Bayes)."""
    norms = row_norms(x)
    q = dp_norm_quantile(norms, epsilon=epsilon, above=target_above(x.shape[0], epsilon), rng=rng)
    return max(math.hypot(q, 1.0), math.nextafter(1.0, 2.0)) if intercept else q


def choose_ols_constants(
    x: np.ndarray,
    y: np.ndarray,
    *,
    bound: float,
    split: ConstantsSplit,
    given: Mapping[str, float],
    intercept: bool,
    rng: Rng,
) -> ChosenConstants:
    """The constants of ePTR-OLS: those in ``given`` as given, the others (``split.chosen``)
    estimated in the order r_x, c0, r_theta, each at its share of ``split`` (module
    docstring). ``y`` lies in [-bound, bound] (the public label bounds)."""
    n = x.shape[0]
    r_x = (
        choose_r_x(x, split.part_float("r_x"), intercept=intercept, rng=rng)
        if "r_x" in split.chosen
        else positive(given["r_x"], name="r_x")
    )
    if "c0" in split.chosen:
        lambda_epsilon = split.part_float("c0")
        design = eptr_design(x, r_x, intercept=intercept)
        noisy = noisy_lambda_min(design, r_x=r_x, epsilon=lambda_epsilon, rng=rng)
        c0 = choose_c0(
            noisy, r_x=r_x, n=n, eptr_epsilon=split.eptr_float, delta=split.delta_float,
            lambda_epsilon=lambda_epsilon,
        )  # fmt: skip
        low = max(noisy - CONFIDENCE / lambda_epsilon, c0 * n / (r_x * r_x))
    else:
        c0 = positive(given["c0"], name="c0")
        low = c0 * n / (r_x * r_x) + 2.0  # a release (gamma > 0) implies lambda_min above this
    if "r_theta" in split.chosen:
        epsilon = split.part_float("r_theta")
        moment = noisy_second_moment(y, bound=bound, epsilon=epsilon, rng=rng)
        r_theta = choose_r_theta(
            moment, bound=bound, r_x=r_x, n=n, lambda_low_units=low, moment_epsilon=epsilon
        )
    else:
        r_theta = positive(given["r_theta"], name="r_theta")
    return ChosenConstants(r_x=r_x, r_theta=r_theta, c0=c0, chosen=split.chosen)


@dataclass(frozen=True, kw_only=True)
class ChosenEPTROLS:
    """ePTR-OLS with constants chosen by the product: the fit (``fit.coef`` and
    ``fit.released`` are the DP output), the constants (public) and the split (public)."""

    fit: EPTROLS
    constants: ChosenConstants
    split: ConstantsSplit

    def header_params(self) -> dict[str, Any]:
        """What the model header adds to the request's parameters: the chosen constants' values
        and the split (exact decimal strings; the header's epsilon and delta are the totals)."""
        values = self.constants.params()
        return {
            **{name: values[name] for name in self.split.chosen},
            "constants_chosen": ",".join(self.split.chosen),
            "constants_epsilon": amounts.text(self.split.constants_epsilon),
            "eptr_epsilon": amounts.text(self.split.eptr_epsilon),
        }


def eptr_ols_chosen(
    X: np.ndarray,
    y: np.ndarray,
    *,
    split: ConstantsSplit,
    lo: float,
    hi: float,
    rng: Rng,
    given: Mapping[str, float] | None = None,
    intercept: bool = False,
    no_reply: np.ndarray | float = 0.0,
) -> ChosenEPTROLS:
    """ePTR-OLS (Algorithm 4) with the constants in ``split.chosen`` chosen by the product and
    the rest ``given``: (split.epsilon, split.delta)-DP for whole examples (module docstring).

    Labels are clipped into the public bounds [lo, hi] first (a public map); the constants'
    estimates run at their shares, then ``ols.eptr_ols`` at the rest of epsilon and all of
    delta. Inputs are validated before anything is drawn."""
    x = features(X)
    target = LabelDomain(lo=lo, hi=hi).clip(labels_for(y, x.shape[0]))
    n, p = x.shape
    if n < p + int(intercept):
        raise InvalidParameterError(f"X has fewer rows ({n}) than columns ({p + int(intercept)})")
    values = dict(given or {})
    missing = [name for name in OLS_CONSTANTS if name not in split.chosen and name not in values]
    if missing:
        raise InvalidParameterError(f"{missing[0]} must be given or chosen by the product")
    bound = max(abs(float(lo)), abs(float(hi)))
    constants = choose_ols_constants(
        x, target, bound=bound, split=split, given=values, intercept=intercept, rng=rng
    )
    fit = eptr_ols(
        x, target, epsilon=split.eptr_float, delta=split.delta_float, r_x=constants.r_x,
        r_theta=constants.r_theta, c0=constants.c0, rng=rng, no_reply=no_reply,
        intercept=intercept,
    )  # fmt: skip
    return ChosenEPTROLS(fit=fit, constants=constants, split=split)


def eptr_ols_product(
    X: np.ndarray,
    y: np.ndarray,
    *,
    epsilon: amounts.AmountLike,
    delta: amounts.AmountLike,
    lo: float,
    hi: float,
    rng: Rng,
    intercept: bool = False,
    no_reply: np.ndarray | float = 0.0,
) -> ChosenEPTROLS:
    """ePTR-OLS with every constant (r_x, r_theta, c0) chosen by the product (the benchmark's
    "ePTR-OLS (product)"): (epsilon, delta)-DP in all, 25% of epsilon on the constants."""
    split = ols_split(epsilon=epsilon, delta=delta, chosen=OLS_CONSTANTS)
    return eptr_ols_chosen(
        X, y, split=split, lo=lo, hi=hi, rng=rng, intercept=intercept, no_reply=no_reply
    )
