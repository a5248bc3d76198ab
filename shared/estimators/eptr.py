"""Efficient Propose-Test-Release: release an estimate whose local sensitivity is certified.

Implements Shen, Tong & Wang, "Efficient Propose-Test-Release for Optimal Differentially Private
Estimation", Algorithm 2 (ePTR) with Theorem 2.2. The estimators that feed it (OLS, Nadaraya-
Watson, Bayes) live in :mod:`.ols`, :mod:`.kernel` and :mod:`.bayes`; each supplies its alpha
(a local-sensitivity level) and its alpha-SaLBo gamma (Definition 2.1: 1-Lipschitz in the
Hamming distance between data sets, and gamma > 0 only where the local sensitivity is <= alpha).
"""

from __future__ import annotations

import functools
import math
import sys
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from scipy.optimize import minimize_scalar
from scipy.special import expit, log_expit, log_ndtr

from shared.errors import InvalidParameterError
from shared.estimators._checks import epsilon_delta, positive
from shared.mechanisms.discrete_laplace import bernoulli_sigmoid
from shared.mechanisms.gaussian import gaussian_mechanism
from shared.rng import Rng, below_sampler


@dataclass(frozen=True, kw_only=True, slots=True)
class EPTRRelease:
    """The output of Algorithm 2 plus the data owner's diagnostics.

    Only ``value`` (and ``released``, which ``value`` reveals anyway when ``no_reply`` is a
    fixed point) is the (epsilon, delta)-DP output. ``release_probability`` and ``gamma`` are
    functions of the private data: show them to the data's owner only, never publish them.
    ``threshold`` (M) and ``noise_scale`` are public; where alpha times the unit noise scale
    is beyond the doubles (no finite noise covers alpha), ``noise_scale`` is the largest double
    and the output is the "no reply".
    """

    value: np.ndarray
    released: bool
    release_probability: float
    noise_scale: float
    threshold: float
    gamma: float


@dataclass(frozen=True, kw_only=True, slots=True)
class EPTROutcome:
    """What every ePTR estimator's result reports besides its values: whether Algorithm 2
    released, its probability of doing so, the noise scale, gamma and alpha. ``gamma`` and
    ``release_probability`` depend on the private data (owner's diagnostics only)."""

    released: bool
    release_probability: float
    noise_scale: float
    gamma: float
    alpha: float

    @staticmethod
    def of(out: EPTRRelease, *, alpha: float) -> dict[str, float | bool]:
        """The outcome fields of Algorithm 2's output ``out`` run at ``alpha``."""
        return {
            "released": out.released,
            "release_probability": out.release_probability,
            "noise_scale": out.noise_scale,
            "gamma": out.gamma,
            "alpha": alpha,
        }


def eptr_threshold(*, epsilon: float, delta: float) -> float:
    """M = 1 + (2 / epsilon) log(max(1/delta, 1/epsilon)) (Algorithm 2, step 3)."""
    return 1.0 + (2.0 / epsilon) * math.log(max(1.0 / delta, 1.0 / epsilon))


def _release_log_odds(*, gamma: float, epsilon: float, threshold: float) -> Fraction:
    """epsilon / 2 (gamma - M) in exact rationals (M = ``threshold``): the log-odds of Algorithm
    2's release test (step 4). Exact, so neighbours' log-odds differ by exactly epsilon / 2
    |gamma - gamma'| (doubles added up to 1e-7 relative of it at gamma ~ 1e9) and nothing
    overflows."""
    return Fraction(epsilon) / 2 * (Fraction(gamma) - Fraction(threshold))


def eptr_release_probability(*, gamma: float, epsilon: float, delta: float) -> float:
    """p(X) = sigmoid(epsilon / 2 (gamma - M)) (Algorithm 2, step 4), computed without overflow."""
    return float(expit(0.5 * epsilon * (gamma - eptr_threshold(epsilon=epsilon, delta=delta))))


# The release test's values of gamma where the whole step's delta is searched (in units of the
# test's scale 2 / epsilon around M), how finely, and the relative precision of the calibrated
# noise (rounded UP to it: a larger noise only lowers the delta).
_GAMMA_SPAN = 80.0
_GAMMA_POINTS = 4001
_SCALE_PRECISION = 1e-9


def _hockey_stick(
    log_p: np.ndarray,
    log_1mp: np.ndarray,
    log_q: np.ndarray,
    log_1mq: np.ndarray,
    *,
    shift: float,
    epsilon: float,
) -> np.ndarray:
    """sup_E P(E | X) - e^eps P(E | X') for the output "no reply w.p. 1 - p, else the estimate
    plus N(0, 1)" on X against the same with q on X', estimates ``shift`` apart (in noise
    standard deviations). Closed form: the atom's max(0, (1 - p) - e^eps (1 - q)) plus the
    Gaussian part p Phi(t) - e^eps q Phi(t - shift), t = (shift^2 / 2 - eps - log(q / p)) /
    shift (the set where p phi(y) > e^eps q phi(y - shift)); in logs, so nothing overflows."""

    def positive_part(log_a: np.ndarray, log_b: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore"):  # -inf - -inf: both parts 0, and so is the result
            gap = np.minimum(log_b - log_a, 0.0)
        return np.where(log_a > log_b, np.exp(log_a) * -np.expm1(gap), 0.0)

    atom = positive_part(log_1mp, epsilon + log_1mq)
    if shift == 0.0:
        return atom + positive_part(log_p, epsilon + log_q)
    t = (0.5 * shift * shift - epsilon - (log_q - log_p)) / shift
    gauss = positive_part(log_p + log_ndtr(t), epsilon + log_q + log_ndtr(t - shift))
    return atom + gauss


def eptr_step_delta(*, noise_scale: float, alpha: float, epsilon: float, delta: float) -> float:
    """The exact delta, at the step's whole epsilon, of Algorithm 2 (test plus noise).

    Neighbours X, X' have alpha-SaLBo values gamma, gamma' with |gamma - gamma'| <= 1, and
    estimates at most alpha apart wherever gamma > 0 or gamma' > 0 (Definition 2.1: gamma > 0
    certifies a local sensitivity <= alpha). The output is "no reply" with probability
    1 - p(gamma), else the estimate plus N(0, s^2) per coordinate; alpha bounds the L2
    distance, so the worst pair of Gaussians is one-dimensional at distance alpha / s. The
    delta is the supremum over such pairs of the hockey-stick divergence at epsilon, in both
    directions: over gamma on a grid of ``_GAMMA_POINTS`` points covering [0, M + 80 / eps]
    (where the release probabilities saturate) refined by a bounded search around the worst
    grid point, the pairs (gamma, gamma + 1) and (gamma, 0) for gamma < 1, and the limit
    gamma -> infinity (p = q = 1: the Gaussian mechanism alone). Where gamma = gamma' = 0 the
    estimates may differ arbitrarily, but both release with p(0) <= e^(-eps/2) min(delta, eps)
    <= delta, which bounds that pair's delta.
    """
    a = positive(alpha, name="alpha")
    s = positive(noise_scale, name="noise_scale")
    eps, dlt = epsilon_delta(epsilon, delta)
    m = eptr_threshold(epsilon=eps, delta=dlt)
    shift = a / s

    def log_probs(gamma: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        z = 0.5 * eps * (gamma - m)
        return log_expit(z), log_expit(-z)

    def worst(gamma: np.ndarray) -> np.ndarray:
        gamma = np.asarray(gamma, dtype=np.float64)
        lp, l1p = log_probs(gamma)
        up, l1up = log_probs(gamma + 1.0)
        down, l1down = log_probs(np.zeros_like(gamma))
        below = gamma < 1.0  # neighbours at gamma' = 0 (a gap of gamma < 1) only exist there
        pairs = [
            _hockey_stick(lp, l1p, up, l1up, shift=shift, epsilon=eps),
            _hockey_stick(up, l1up, lp, l1p, shift=shift, epsilon=eps),
            np.where(below, _hockey_stick(lp, l1p, down, l1down, shift=shift, epsilon=eps), 0.0),
            np.where(below, _hockey_stick(down, l1down, lp, l1p, shift=shift, epsilon=eps), 0.0),
        ]
        return np.maximum.reduce(pairs)

    grid = np.linspace(0.0, m + _GAMMA_SPAN / eps, _GAMMA_POINTS)
    values = worst(grid)
    best = int(np.argmax(values))
    low, high = grid[max(best - 1, 0)], grid[min(best + 1, grid.size - 1)]
    refined = minimize_scalar(
        lambda g: -float(worst(np.array([g]))[0]), bounds=(low, high), method="bounded"
    )
    zero = np.zeros(1)
    gaussian = _hockey_stick(
        zero, np.array([-np.inf]), zero, np.array([-np.inf]), shift=shift, epsilon=eps
    )
    both_zero = float(np.exp(log_probs(np.zeros(1))[0][0]))
    return float(max(values[best], -refined.fun, gaussian[0], both_zero))


@functools.lru_cache(maxsize=256)
def _unit_noise_scale(epsilon: float, delta: float) -> float:
    """The smallest noise scale (for alpha = 1, to ``_SCALE_PRECISION``, rounded up) whose
    whole-step delta is at most ``delta``: bisection, the delta falling as the noise grows."""
    low, high = 1e-6, 1.0
    while eptr_step_delta(noise_scale=high, alpha=1.0, epsilon=epsilon, delta=delta) > delta:
        low, high = high, high * 2.0
        if high > 1e12:
            raise InvalidParameterError(
                f"epsilon ({epsilon!r}) and delta ({delta!r}) need an unbounded noise"
            )
    while high - low > _SCALE_PRECISION * high:
        middle = 0.5 * (low + high)
        if eptr_step_delta(noise_scale=middle, alpha=1.0, epsilon=epsilon, delta=delta) > delta:
            low = middle
        else:
            high = middle
    return high


def eptr_noise_scale(*, alpha: float, epsilon: float, delta: float) -> float:
    """The Gaussian standard deviation of step 7, calibrated so the WHOLE step is (epsilon,
    delta)-DP exactly (:func:`eptr_step_delta`), not by the classic (2 alpha / eps)
    sqrt(2 log(1.25 / delta)), which is proven only for eps / 2 < 1 and exceeds the charge
    above eps ~ 20 (0.013 for a charged 0.01 at eps 20). The step's delta scales with alpha / s
    only, so the scale is alpha times the calibrated unit scale."""
    a = positive(alpha, name="alpha")
    eps, dlt = epsilon_delta(epsilon, delta)
    return a * _unit_noise_scale(eps, dlt)


def _is_inf(value: object) -> bool:
    """+inf as a number (an alpha that overflowed), bools refused elsewhere."""
    return (
        not isinstance(value, bool)
        and isinstance(value, int | float | np.integer | np.floating)
        and float(value) == math.inf
    )


def eptr_covers(*, alpha: float, epsilon: float, delta: float) -> bool:
    """Whether :func:`eptr_release` at ``alpha`` can release at all: alpha a positive double
    whose noise scale (alpha times the unit scale at (epsilon, delta)) is a double too. Where
    it is not, the release is the "no reply" whatever the data (alpha +inf or the scale beyond
    the doubles) or refused (alpha 0: no noise certifies nothing)."""
    if _is_inf(alpha) or isinstance(alpha, bool):
        return False
    if not (isinstance(alpha, int | float | np.integer | np.floating) and float(alpha) > 0.0):
        return False
    eps, dlt = epsilon_delta(epsilon, delta)
    return math.isfinite(float(alpha) * _unit_noise_scale(eps, dlt))


def eptr_release(
    estimate: np.ndarray | float,
    *,
    gamma: float,
    alpha: float,
    epsilon: float,
    delta: float,
    no_reply: np.ndarray | float,
    rng: Rng,
) -> EPTRRelease:
    """Release ``estimate`` + Gaussian noise with probability p(X), else ``no_reply``.

    Implements Shen, Tong & Wang, Algorithm 2: M = 1 + (2/eps) log(max(1/delta, 1/eps));
    I ~ Bernoulli(sigmoid(eps/2 (gamma - M))); if I = 1 the estimate plus N(0, s^2) per
    coordinate, else the data-independent "no reply" (Remark 1). s is calibrated so that the
    whole step's exact delta at eps is at most delta (:func:`eptr_noise_scale`), where the paper
    uses (2 alpha / eps) sqrt(2 log(1.25/delta)). The test adds no separate noise to gamma: the
    Bernoulli draw IS the randomized test (equivalently, gamma plus standard logistic noise of
    scale 2/eps compared with M), exactly as step 5 of Algorithm 2 writes it.

    Privacy: gamma is 1-Lipschitz, so the test's log-odds move by at most eps/2 between
    neighbours; where gamma > 0 on either side the estimates are at most alpha apart; where
    gamma = 0 on both the release probability is at most sigmoid(-eps M / 2) <= exp(-eps/2)
    min(delta, eps) <= delta. :func:`eptr_step_delta` computes the exact delta of the whole
    step over every such pair (no composition bound, no eps < 1 condition), and the noise is
    the smallest whose delta is at most the charge. An alpha so large that no finite noise
    covers it (alpha times the unit scale beyond the doubles, or alpha itself +inf) gives the
    "no reply" without a test: a function of alpha alone (public, or of the product's DP-chosen
    constants), so post-processing. The guarantee rests on ``gamma`` being
    an alpha-SaLBo: the caller's duty (the estimators of this package prove theirs).
    Sampling is exact: the test is exactly Bernoulli(sigmoid(z)) for z = eps/2 (gamma - M) in
    exact rationals (:func:`shared.mechanisms.discrete_laplace.bernoulli_sigmoid`), and the
    noise is the exact real estimate + N(0, s^2) rounded to a grid of s alone
    (:func:`shared.mechanisms.gaussian.gaussian_mechanism`): the released doubles are
    post-processing of the ideal mechanism, whose set of outputs does not depend on the estimate
    (the float noise this replaced, ``estimate + s ndtri(u)``, gave neighbouring estimates apart
    from one output: Mironov 2012). What stays floating point is the estimator's computation of
    the estimate and gamma themselves, as for any sensitivity analysis run on doubles.
    """
    values = np.asarray(estimate, dtype=np.float64)
    if values.size == 0 or not np.all(np.isfinite(values)):
        raise InvalidParameterError("estimate must be a non-empty array of finite numbers")
    if isinstance(gamma, bool) or not isinstance(gamma, int | float | np.integer | np.floating):
        raise InvalidParameterError(f"gamma ({gamma!r}) must be a number")
    g = float(gamma)
    if not (math.isfinite(g) and g >= 0.0):
        raise InvalidParameterError(f"gamma ({gamma!r}) must be finite and >= 0 (a SaLBo)")
    a = math.inf if _is_inf(alpha) else positive(alpha, name="alpha")
    eps, dlt = epsilon_delta(epsilon, delta)
    fallback = np.asarray(no_reply, dtype=np.float64)
    try:
        fallback = np.broadcast_to(fallback, values.shape).copy()
    except ValueError:
        raise InvalidParameterError(
            f"no_reply has shape {fallback.shape}, the estimate {values.shape}"
        ) from None
    if not np.all(np.isfinite(fallback)):
        raise InvalidParameterError("no_reply must be finite")

    threshold = eptr_threshold(epsilon=eps, delta=dlt)
    scale = a * _unit_noise_scale(eps, dlt)
    if not math.isfinite(scale):
        # No finite noise covers this alpha: the data-independent "no reply", always. alpha is
        # public or a function of the product's DP-chosen constants, so this branch is
        # post-processing; raising here instead was an uncharged, repeatable signal about the
        # labels that chose them (an r_x or c0 given at an extreme).
        return EPTRRelease(
            value=fallback, released=False, release_probability=0.0,
            noise_scale=sys.float_info.max, threshold=threshold, gamma=g,
        )  # fmt: skip
    log_odds = _release_log_odds(gamma=g, epsilon=eps, threshold=threshold)
    probability = eptr_release_probability(gamma=g, epsilon=eps, delta=dlt)
    below = below_sampler(rng)
    released = bernoulli_sigmoid(below, log_odds)
    value = gaussian_mechanism(values, scale=scale, rng=below) if released else fallback
    return EPTRRelease(
        value=value,
        released=released,
        release_probability=probability,
        noise_scale=scale,
        threshold=threshold,
        gamma=g,
    )
