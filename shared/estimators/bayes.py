"""Private Gaussian Bayes classifier by ePTR (class priors and class means).

Implements Shen, Tong & Wang, "Efficient Propose-Test-Release", Algorithm 3 (ePTR-Bayes) with
the SaLBo (13) and the probability revision of step 5 (:func:`eptr_bayes`).

Constants chosen by the product (issue 22, item 3; :func:`eptr_bayes_chosen`). Algorithm 3
needs the feature radius R_x and the SaLBo constant c0 (the test asks min_k |I_k| > c0 n + 1),
which the paper leaves to the analyst (Theorem 3.3 assumes min_k mu_k > 2 c0 for the POPULATION
shares). When a request omits them, the product chooses each from public values (n, K,
epsilon, delta) and one small DP estimate, charged out of the request's own epsilon by a fixed
rule (:data:`SHARES`, no delta; ``constants.split_shares``, the rule of ePTR-OLS and ePTR-NW),
ePTR-Bayes running on the exact rest and all of delta:

* ``r_x``: the DP tail quantile of the feature rows' norms of ePTR-OLS
  (``constants.choose_r_x``: the sparse vector on a public geometric grid, about 1/40 of the
  rows clipped). It reads the FEATURES only: one changed example (features and label) moves one
  norm, each count #{||x_i|| > r} by at most 1, in the same direction (monotone queries):
  epsilon_r_x-DP for whole examples (proof in ``constants.dp_norm_quantile``).
* ``c0``: from a DP estimate of the smallest class count, min_k |I_k| + Laplace(1 /
  epsilon_c0) (:func:`noisy_min_count`), less the margin that makes the release test answer
  "no reply" with probability at most ``constants.NO_REPLY`` on data whose smallest class is as
  large as estimated, never below half the estimate (Theorem 3.3's c0 = pi_min / 2 for the
  estimated share), :func:`choose_bayes_c0`. It reads the LABELS only (the classes): one
  changed example changes at most one class, moving one count down by 1 and another up by 1,
  so min_k |I_k| moves by at most 1 (n is public: neighbours replace an example). Sensitivity
  1 for a changed label (label DP) and for a changed whole example alike: epsilon_c0-DP.

Privacy of the whole (proof): each estimate is DP on its own (above), the features' estimate
with no input from the labels' and the other way round; ePTR-Bayes is (epsilon_e, delta)-DP
for ANY fixed R_x > 0 and c0 in (0, 1 / K) (Theorem 3.1: with them fixed, (13) is 1-Lipschitz
and an alpha-SaLBo for alpha = (2 / n) sqrt(2 R_x^2 / c0^2 + 2), which is all Algorithm 2
needs), and the constants handed to it are functions of DP outputs and public values
(post-processing). By basic composition, valid for adaptively chosen mechanisms (Dwork & Roth
2014, Theorem 3.16), the release is (epsilon_r_x + epsilon_c0 + epsilon_e, delta)-DP = the
request's (epsilon, delta), exactly (:class:`BayesConstantsSplit`), for whole examples (hence
also for labels alone). Every noisy value is drawn exactly (no floating-point sampler whose
outputs depend on the value, Mironov 2012): the constants' as :mod:`.constants` draws them,
ePTR's test and Gaussian as :func:`.eptr.eptr_release` does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from shared import epsilon as amounts
from shared.domain import check_epsilon
from shared.errors import InvalidParameterError
from shared.estimators import constants
from shared.estimators._checks import epsilon_delta, features, positive, positives, project_rows
from shared.estimators.eptr import EPTROutcome, eptr_release, eptr_threshold
from shared.mechanisms.discrete_laplace import discrete_laplace_samples
from shared.rng import Rng

# The constants of ePTR-Bayes the product can choose, in the order it estimates them.
BAYES_CONSTANTS = ("r_x", "c0")
# The share of the request's epsilon each chosen constant costs (no delta): 15% for both.
SHARES = {"r_x": 0.05, "c0": 0.1}


@dataclass(frozen=True, kw_only=True, slots=True)
class EPTRBayes(EPTROutcome):
    """ePTR-Bayes output. ``priors``, ``means`` and ``released`` are the DP output;
    ``gamma`` and ``release_probability`` depend on the private data (owner only)."""

    priors: np.ndarray
    means: np.ndarray

    def predict(self, x: np.ndarray) -> np.ndarray:
        """y~(x) = argmax_k log mu~_k - ||x - m~_k||^2 / 2 (Algorithm 3, step 6)."""
        points = features(x)
        if points.shape[1] != self.means.shape[1]:
            raise InvalidParameterError(
                f"x has dimension {points.shape[1]}, the classifier {self.means.shape[1]}"
            )
        sq = (
            np.sum(points**2, axis=1)[:, None]
            + np.sum(self.means**2, axis=1)[None, :]
            - 2.0 * points @ self.means.T
        )
        return np.argmax(np.log(self.priors)[None, :] - 0.5 * sq, axis=1)


def bayes_statistics(x: np.ndarray, y: np.ndarray, n_classes: int) -> tuple[np.ndarray, ...]:
    """(counts |I_k|, mu-hat_k = |I_k| / n, m-hat_k = class means; 0 for an empty class) (11)."""
    counts = np.bincount(y, minlength=n_classes).astype(np.float64)
    sums = np.zeros((n_classes, x.shape[1]))
    np.add.at(sums, y, x)
    means = sums / np.maximum(counts, 1.0)[:, None]
    return counts, counts / y.size, means


def bayes_gamma(counts: np.ndarray, *, n: int, c0: float) -> float:
    """SaLBo (13): (min_k |I_k| - c0 n - 1)_+, the Hamming distance to G^c (1-Lipschitz)."""
    return max(float(counts.min()) - c0 * n - 1.0, 0.0)


def revise_priors(priors: np.ndarray, *, c0: float) -> np.ndarray:
    """Step 5: mu~_k <- max(mu~_k, c0) / sum_j max(mu~_j, c0) (a probability vector)."""
    floored = np.maximum(priors, c0)
    return floored / floored.sum()


def _n_classes(n_classes: object) -> int:
    """K: an integer >= 2 (bools refused)."""
    if isinstance(n_classes, bool) or not isinstance(n_classes, int | np.integer) or n_classes < 2:
        raise InvalidParameterError(f"n_classes ({n_classes!r}) must be an integer >= 2")
    return int(n_classes)


def _classes(y: object, *, n: int, k: int) -> np.ndarray:
    """The class labels as int64: 1-D, n values, integers in 0..k - 1."""
    labels = np.asarray(y)
    if labels.shape != (n,):
        raise InvalidParameterError(f"y must be 1-D with {n} values, got shape {labels.shape}")
    if not np.issubdtype(labels.dtype, np.integer):
        if not (np.issubdtype(labels.dtype, np.floating) and np.all(labels == np.round(labels))):
            raise InvalidParameterError("y must hold integer class labels")
    labels = labels.astype(np.int64)
    if labels.min() < 0 or labels.max() >= k:
        raise InvalidParameterError(f"y must hold class labels in 0..{k - 1}")
    return labels


def _check_c0(c0: float, *, k: int, given: object) -> None:
    """c0 K < 1 (the step-5 floor c0 on every prior must leave a probability vector)."""
    if c0 * k >= 1.0:
        raise InvalidParameterError(f"c0 ({given!r}) must be < 1 / n_classes ({1.0 / k:.4g})")


def bayes_alpha(*, r_x: float, c0: float, n: int) -> float:
    """ePTR-Bayes' alpha = (2 / n) sqrt(2 r_x^2 / c0^2 + 2) (Theorem 3.1), +inf where it is
    beyond the doubles (never an exception: :func:`.eptr.eptr_release` answers "no reply")."""
    with np.errstate(over="ignore"):
        ratio = np.float64(r_x) / np.float64(c0)
        return float(2.0 / n * np.sqrt(2.0 * ratio * ratio + 2.0))


def eptr_bayes(
    X: np.ndarray,
    y: np.ndarray,
    *,
    n_classes: int,
    epsilon: float,
    delta: float,
    r_x: float,
    c0: float,
    rng: Rng,
) -> EPTRBayes:
    """(epsilon, delta)-DP Gaussian Bayes classifier (priors and means), Algorithm 3.

    Steps: x_i <- Pi_{r_x}(x_i); (mu-hat, m-hat) by (11); Algorithm 2 on the K + K p vector
    with gamma (13) and alpha = (2/n) sqrt(2 r_x^2 / c0^2 + 2); the priors revised by step 5.
    The "no reply" is uniform priors and zero means (data-independent, Remark 1).

    Privacy (Theorem 3.1): one changed example moves two priors by 1/n each and, where
    min_k |I_k| > c0 n + 1 (gamma > 0), at most two class means by 2 r_x / (|I_k| - 1) <=
    2 r_x / (c0 n) each (12); the L2 change is at most (1/n) sqrt(2 + 8 r_x^2 / c0^2) <= alpha.
    gamma is 1-Lipschitz, so Algorithm 2 applies; step 5 is post-processing.
    """
    x = features(X)
    n, p = x.shape
    k = _n_classes(n_classes)
    labels = _classes(y, n=n, k=k)
    eps, dlt = epsilon_delta(epsilon, delta)
    rx, c = positives(r_x=r_x, c0=c0)
    _check_c0(c, k=k, given=c0)

    counts, priors, means = bayes_statistics(project_rows(x, rx), labels, k)
    gamma = bayes_gamma(counts, n=n, c0=c)
    alpha = bayes_alpha(r_x=rx, c0=c, n=n)
    no_reply = np.concatenate([np.full(k, 1.0 / k), np.zeros(k * p)])
    out = eptr_release(
        np.concatenate([priors, means.ravel()]),
        gamma=gamma,
        alpha=alpha,
        epsilon=eps,
        delta=dlt,
        no_reply=no_reply,
        rng=rng,
    )
    return EPTRBayes(
        priors=revise_priors(out.value[:k], c0=c),
        means=out.value[k:].reshape(k, p),
        **EPTROutcome.of(out, alpha=alpha),
    )


# ---- constants chosen by the product (module docstring) ------------------------------------


@dataclass(frozen=True, kw_only=True)
class BayesConstantsSplit(constants.ConstantsSplit):
    """:class:`.constants.ConstantsSplit` for ePTR-Bayes (the same fields, ``public()`` and
    budget rule); only the explanation of each constant is its own."""

    def explanation(self) -> list[str]:
        """One sentence per chosen constant: how it is chosen and what it costs."""
        how = {
            "r_x": "a DP tail quantile of the feature rows' norms (sparse vector on a public "
            "grid, as for ePTR-OLS): about 1/40 of the rows are clipped",
            "c0": "a DP estimate of the smallest class count (Laplace, sensitivity 1) less the "
            f"margin that keeps the release test's 'no reply' below {constants.NO_REPLY:g}, "
            "never below half the estimated smallest class share",
        }
        lines = [
            f"{name}: {how[name]}; epsilon {amounts.text(self.parts[name])}" for name in self.chosen
        ]
        return lines + [
            f"ePTR-Bayes: epsilon {amounts.text(self.eptr_epsilon)}, delta "
            f"{amounts.text(self.delta)} (the constants spend no delta)"
        ]


def bayes_split(
    *, epsilon: amounts.AmountLike, delta: amounts.AmountLike, chosen: Iterable[str]
) -> BayesConstantsSplit:
    """The documented rule: each chosen constant costs ``SHARES[name]`` of epsilon (a short
    decimal), ePTR-Bayes the exact rest and all of delta (``constants.split_shares``, the rule
    of every estimator's chosen constants). Public: reads the request only. Refuses (naming
    epsilon) an epsilon whose parts would not be usable doubles."""
    names = set(chosen)
    unknown = sorted(names - set(BAYES_CONSTANTS))
    if unknown or not names:
        raise InvalidParameterError(f"chosen ({sorted(names)}) must be some of {BAYES_CONSTANTS}")
    order = tuple(name for name in BAYES_CONSTANTS if name in names)
    split = constants.split_shares(
        epsilon=epsilon, delta=delta, chosen=order, shares=SHARES, kind=BayesConstantsSplit
    )
    assert isinstance(split, BayesConstantsSplit)
    return split


def noisy_min_count(classes: np.ndarray, *, n_classes: int, epsilon: float, rng: Rng) -> float:
    """min_k |I_k| + exact discrete Laplace(1 / epsilon) on the integers, the smallest class
    count (an empty class counts 0): epsilon-DP.

    Privacy (proof): the counts depend on the class labels only. Replacing one example (its
    features and its label, or its label alone) takes one unit from the count of its old class
    and gives one to its new class (nothing if the class is unchanged); n is public. Every
    count moves by at most 1, hence their minimum too (|min a - min b| <= max_k |a_k - b_k|):
    sensitivity 1 under label DP and under whole-example DP alike, so the discrete Laplace of
    scale 1 / epsilon (Canonne, Kamath & Steinke, Algorithm 2: exact, no floating-point
    sampling) on this integer is epsilon-DP. ``classes`` must already hold classes in
    0..n_classes - 1 (the public map from labels is applied per example, before)."""
    eps = check_epsilon(epsilon)
    counts = np.bincount(np.asarray(classes, dtype=np.int64), minlength=n_classes)
    noise = discrete_laplace_samples(rng, 1 / Fraction(eps), 1)[0]
    return float(int(counts.min()) + noise)


def choose_bayes_c0(
    count: float,
    *,
    n: int,
    n_classes: int,
    eptr_epsilon: float,
    delta: float,
    c0_epsilon: float,
    no_reply: float = constants.NO_REPLY,
) -> float:
    """c0 from the noisy smallest class count m~: c0 n = max(m~ - (1 + M + g), m~ / 2), M the
    test's threshold and g the margin with P(L + T >= g) <= ``no_reply`` for L ~ Laplace(1 /
    c0_epsilon) (the estimate's error: on the data set whose smallest count m the estimate
    missed by L, gamma = m - c0 n - 1 = M + g - L) and T ~ Logistic(2 / eptr_epsilon) (the
    test answers "no reply" iff gamma - M < T): ``constants.release_margin``, whose Laplace
    scale is 1 / (2 lambda_epsilon), so lambda_epsilon = c0_epsilon / 2. An estimate too small
    for that margin gets m~ / 2 (Theorem 3.3's c0 = pi_min / 2 at the estimated share; the test
    may then answer "no reply"). Clamped into [1, floor(n / K) - 1] counts: at least one
    example's worth, and below the largest smallest count floor(n / K) less the test's 1, so
    c0 K <= 1 - K / n < 1 (step 5's floor stays a probability). Finite and positive for any
    input with n >= 2 K; a function of a DP output and public values (post-processing)."""
    k = _n_classes(n_classes)
    top = n // k - 1
    if top < 1:
        raise InvalidParameterError(f"n ({n}) must be at least 2 x n_classes ({2 * k})")
    m = eptr_threshold(epsilon=eptr_epsilon, delta=delta)
    g = constants.release_margin(
        eptr_epsilon=eptr_epsilon, lambda_epsilon=c0_epsilon / 2.0, no_reply=no_reply
    )
    units = min(max(count - (1.0 + m + g), count / 2.0, 1.0), float(top))
    return units / n


@dataclass(frozen=True, kw_only=True)
class ChosenEPTRBayes:
    """ePTR-Bayes with constants chosen by the product: the fit (``priors``, ``means`` and
    ``released`` are the DP output), the constants it ran with (public: given, or DP outputs)
    and the split (public)."""

    fit: EPTRBayes
    r_x: float
    c0: float
    split: BayesConstantsSplit

    def header_params(self) -> dict[str, Any]:
        """What the model header adds to the request's parameters: the chosen constants' values
        and the split (exact decimal strings; the header's epsilon and delta are the totals)."""
        values = {"r_x": self.r_x, "c0": self.c0}
        return {
            **{name: values[name] for name in self.split.chosen},
            "constants_chosen": ",".join(self.split.chosen),
            "constants_epsilon": amounts.text(self.split.constants_epsilon),
            "eptr_epsilon": amounts.text(self.split.eptr_epsilon),
        }


def eptr_bayes_chosen(
    X: np.ndarray,
    y: np.ndarray,
    *,
    n_classes: int,
    split: BayesConstantsSplit,
    rng: Rng,
    given: Mapping[str, float] | None = None,
) -> ChosenEPTRBayes:
    """ePTR-Bayes (Algorithm 3) with the constants in ``split.chosen`` chosen by the product and
    the rest ``given``: (split.epsilon, split.delta)-DP for whole examples (module docstring).

    r_x by ``constants.choose_r_x`` on the raw features at its share, c0 by
    :func:`noisy_min_count` and :func:`choose_bayes_c0` at its share, then :func:`eptr_bayes`
    at the rest of epsilon and all of delta. Inputs (features, classes, n >= 2 K, the given
    constants) are validated before anything is drawn."""
    x = features(X)
    n = x.shape[0]
    k = _n_classes(n_classes)
    classes = _classes(y, n=n, k=k)
    if n < 2 * k:
        raise InvalidParameterError(f"X has fewer rows ({n}) than 2 x n_classes ({2 * k})")
    values = dict(given or {})
    missing = [name for name in BAYES_CONSTANTS if name not in split.chosen and name not in values]
    if missing:
        raise InvalidParameterError(f"{missing[0]} must be given or chosen by the product")
    if "r_x" not in split.chosen:
        positive(values["r_x"], name="r_x")
    if "c0" not in split.chosen:
        _check_c0(positive(values["c0"], name="c0"), k=k, given=values["c0"])
    if "r_x" in split.chosen:
        r_x = constants.choose_r_x(x, split.part_float("r_x"), intercept=False, rng=rng)
    else:
        r_x = float(values["r_x"])
    if "c0" in split.chosen:
        c0_epsilon = split.part_float("c0")
        count = noisy_min_count(classes, n_classes=k, epsilon=c0_epsilon, rng=rng)
        c0 = choose_bayes_c0(
            count, n=n, n_classes=k, eptr_epsilon=split.eptr_float, delta=split.delta_float,
            c0_epsilon=c0_epsilon,
        )  # fmt: skip
    else:
        c0 = float(values["c0"])
    fit = eptr_bayes(
        x, classes, n_classes=k, epsilon=split.eptr_float, delta=split.delta_float, r_x=r_x,
        c0=c0, rng=rng,
    )  # fmt: skip
    return ChosenEPTRBayes(fit=fit, r_x=r_x, c0=c0, split=split)


def eptr_bayes_product(
    X: np.ndarray,
    y: np.ndarray,
    *,
    n_classes: int,
    epsilon: amounts.AmountLike,
    delta: amounts.AmountLike,
    rng: Rng,
) -> ChosenEPTRBayes:
    """ePTR-Bayes with r_x and c0 both chosen by the product (the benchmark's "ePTR-Bayes
    (product)"): (epsilon, delta)-DP in all, 15% of epsilon on the constants."""
    split = bayes_split(epsilon=epsilon, delta=delta, chosen=BAYES_CONSTANTS)
    return eptr_bayes_chosen(X, y, n_classes=n_classes, split=split, rng=rng)
