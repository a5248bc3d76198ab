"""Constants chosen by the product for ePTR-NW (issue 22, items 3 and 5).

Algorithm 5 (Shen, Tong & Wang, ePTR-NW) needs the kernel's bandwidth sigma and the SaLBo
constant c0 (the release test checks d(x_q) >= c0 n), which the paper leaves to "domain
knowledge or another DP scale estimator". When a model release omits them, the product chooses:

* ``bandwidth``: a PUBLIC rule, no privacy cost: sigma = :data:`BANDWIDTH_FACTOR` s_q
  n^(-1/(d+4)), the rate n^(-1/(d+2s)) of the paper's theory (Section 5.1) for twice
  differentiable regression functions (s = 2), i.e. Scott's rule, with the query points'
  spread s_q (root of the mean per-coordinate variance of the public queries the caller names)
  standing in for the features' spread, which under ePTR is private. Reads n, d and the
  queries only (:func:`rule_bandwidth`).
* ``c0``: from a DP estimate of the smallest kernel degree over the queries, min_q d(x_q) plus
  Laplace(K_max / epsilon_c0) (:func:`noisy_min_degree`), less the margin that makes the
  release test answer "no reply" with probability at most :data:`NO_REPLY` on data as dense
  as estimated (:func:`choose_nw_c0`); it costs :data:`SHARES` ["c0"] of the request's epsilon
  (no delta), ePTR-NW running on the exact rest and all of delta (:func:`nw_split`).

Privacy of the whole (proof): the bandwidth is a function of public values (n, d, the request's
queries), so K_max and every degree below are computed with a public sigma. The degree estimate
is epsilon_c0-DP (:func:`noisy_min_degree`). ePTR-NW (``kernel.eptr_nw``) is (epsilon_e,
delta)-DP for ANY fixed sigma > 0 and c0 > 0 (its docstring: gamma is an alpha-SaLBo for the
alpha it computes from them), and the c0 handed to it is a function of the DP estimate and
public values (post-processing). By basic composition, valid for adaptively chosen mechanisms
(Dwork & Roth 2014, Theorem 3.16), the release is (epsilon_c0 + epsilon_e, delta)-DP = the
request's (epsilon, delta), exactly (:class:`NWConstantsSplit`). Every step protects a whole
example (features and label). Every noisy value is drawn exactly (no floating-point sampler
whose outputs depend on the value, Mironov 2012), as in :mod:`.constants` and
:func:`.eptr.eptr_release`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from decimal import Decimal
from typing import Any

import numpy as np

from shared import epsilon as amounts
from shared.errors import InvalidParameterError
from shared.estimators import kernel
from shared.estimators._checks import (
    epsilon_delta,
    features,
    labels_for,
    positive,
    queries_for,
)
from shared.estimators.constants import (
    ConstantsSplit,
    exact_laplace,
    release_margin,
    split_shares,
)
from shared.estimators.eptr import eptr_threshold
from shared.rng import Rng

# The constants of ePTR-NW the product can choose: the bandwidth by a public rule (free), c0 by
# a DP estimate (its share of epsilon).
NW_CONSTANTS = ("bandwidth", "c0")
SHARES = {"c0": 0.1}
# sigma = BANDWIDTH_FACTOR s_q n^(-1/(d+4)) (Scott's rule on the queries' spread).
BANDWIDTH_FACTOR = 1.0
# c0: the probability that the release test answers "no reply" on data whose smallest degree
# is as large as estimated, over the estimate's noise and the test's own randomness.
NO_REPLY = 1e-3


@dataclass(frozen=True, kw_only=True)
class NWConstantsSplit(ConstantsSplit):
    """:class:`.constants.ConstantsSplit` for ePTR-NW: ``chosen`` are the constants estimated
    on the data (each with its part of epsilon), ``by_rule`` those chosen by a public rule
    (no part: the bandwidth)."""

    by_rule: tuple[str, ...] = ()

    def public(self) -> dict[str, Any]:
        """The split as the preview and the ledger entry show it (exact decimal strings)."""
        return {**super().public(), "chosen": [*self.by_rule, *self.chosen]}

    def explanation(self) -> list[str]:
        """One sentence per chosen constant: how it is chosen and what it costs."""
        lines = []
        if "bandwidth" in self.by_rule:
            lines.append(
                f"bandwidth: {BANDWIDTH_FACTOR:g} x the query points' spread x n^(-1/(d+4)) "
                "(a public rule on the request, n and d); epsilon 0"
            )
        if "c0" in self.by_rule:
            lines.append(
                "c0: one public value per query point from the kernel density of the request's "
                "reference points (reference_c0: a public rule on the request, n, epsilon and "
                "delta), the noise scaled per query; epsilon 0"
            )
        if "c0" in self.chosen:
            lines.append(
                "c0: a DP estimate of the smallest kernel degree over the query points "
                "(Laplace) less the margin that keeps the release test's 'no reply' below "
                f"{NO_REPLY:g}; epsilon {amounts.text(self.parts['c0'])}"
            )
        return lines + [
            f"ePTR-NW: epsilon {amounts.text(self.eptr_epsilon)}, delta "
            f"{amounts.text(self.delta)} (the constants spend no delta)"
        ]


def nw_split(
    *,
    epsilon: amounts.AmountLike,
    delta: amounts.AmountLike,
    omitted: tuple[str, ...],
    c0_by_rule: bool = False,
) -> NWConstantsSplit:
    """The documented rule: c0, when omitted, costs ``SHARES["c0"]`` of epsilon (a short
    decimal, :func:`shared.epsilon.short_part`); the bandwidth nothing; ePTR-NW the exact rest
    and all of delta. With ``c0_by_rule`` an omitted c0 is chosen by a public rule instead
    (per query, :func:`reference_c0`) and costs nothing either. Public: reads the request only.
    Refuses (naming epsilon) an epsilon whose parts would not be usable doubles."""
    unknown = sorted(set(omitted) - set(NW_CONSTANTS))
    if unknown or not omitted:
        raise InvalidParameterError(f"omitted ({sorted(omitted)}) must be some of {NW_CONSTANTS}")
    chosen = ("c0",) if "c0" in omitted and not c0_by_rule else ()
    split = split_shares(epsilon=epsilon, delta=delta, chosen=chosen, shares=SHARES)
    by_rule = tuple(name for name in NW_CONSTANTS if name in omitted and name not in chosen)
    shared = {field.name: getattr(split, field.name) for field in fields(split)}
    return NWConstantsSplit(**shared, by_rule=by_rule)


def rule_bandwidth(queries: np.ndarray, *, n: int) -> float:
    """sigma = BANDWIDTH_FACTOR s_q n^(-1/(d+4)), s_q = sqrt(mean_j var_j(queries)): a function
    of the public queries, n and d (module docstring). Refuses (naming bandwidth) queries
    without spread (one point, or all equal) and a sigma that is not a positive double."""
    points = features(queries, name="queries")
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise InvalidParameterError(f"n ({n!r}) must be an integer >= 1")
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        # Scaled by the largest deviation, so finite queries never overflow midway.
        centred = points - (points / 2.0).mean(axis=0) * 2.0
        scale = float(np.max(np.abs(centred)))
        spread = scale * math.sqrt(float(np.mean((centred / scale) ** 2))) if scale > 0 else 0.0
    dim = points.shape[1]
    sigma = BANDWIDTH_FACTOR * spread * n ** (-1.0 / (dim + 4))
    if not (math.isfinite(sigma) and sigma > 0.0):
        raise InvalidParameterError(
            f"bandwidth (omitted): the product's rule needs query points that differ (their "
            f"spread is {spread!r}): give bandwidth"
        )
    return sigma


def noisy_min_degree(
    x: np.ndarray, queries: np.ndarray, *, bandwidth: float, epsilon: float, rng: Rng
) -> float:
    """min_q d(x_q) + Laplace noise of scale K_max / epsilon (exact: :func:`exact_laplace`), in
    units of K_max: epsilon-DP.

    Privacy (proof): d(x_q) = sum_i K(x_q, x_i) with 0 <= K <= K_max (the Gaussian kernel), so
    replacing one example (features and label) moves every d(x_q) by at most K_max, hence their
    minimum too (if |f_q - g_q| <= c for every q then |min f - min g| <= c): sensitivity K_max,
    1 in units of K_max, and :func:`constants.exact_laplace` with sensitivity 1 is epsilon-DP.
    The bandwidth, K_max and the queries are public."""
    sigma = positive(bandwidth, name="bandwidth")
    eps = positive(epsilon, name="epsilon")
    k_max = kernel.kernel_bound(x.shape[1], sigma)
    _, degree = kernel.nw_estimate(queries, x, np.zeros(x.shape[0]), bandwidth=sigma)
    return exact_laplace(float(degree.min() / k_max), sensitivity=1.0, epsilon=eps, rng=rng)


def choose_nw_c0(
    degree_units: float,
    *,
    n: int,
    k_max: float,
    eptr_epsilon: float,
    delta: float,
    c0_epsilon: float,
) -> float:
    """c0 from the noisy smallest degree D~ (units of K_max): c0 n = K_max (D~ - M - g), M the
    test's threshold and g the margin with P(L + T >= g) <= :data:`NO_REPLY` for L ~
    Laplace(1 / c0_epsilon) (the estimate's error in SaLBo units: gamma = (d_min - c0 n) / K_max
    = M + g - L) and T ~ Logistic(2 / eptr_epsilon) (``constants.release_margin``, whose
    Laplace scale is 1 / (2 lambda_epsilon): lambda_epsilon = c0_epsilon / 2). Data too sparse
    for that margin get D~ / 2 (the test may then answer "no reply"), never less than one
    example's worth (c0 n = K_max) nor more than n K_max (no degree can be larger). Finite and
    positive for any input; a function of a DP output and public values (post-processing)."""
    m = eptr_threshold(epsilon=eptr_epsilon, delta=delta)
    g = release_margin(
        eptr_epsilon=eptr_epsilon, lambda_epsilon=c0_epsilon / 2.0, no_reply=NO_REPLY
    )
    units = min(max(degree_units - m - g, degree_units / 2.0, 1.0), float(n))
    c0 = units * k_max / n
    if not (math.isfinite(c0) and c0 > 0.0):
        raise InvalidParameterError(f"bandwidth: K_max ({k_max!r}) is out of range for c0")
    return c0


@dataclass(frozen=True, kw_only=True)
class ChosenEPTRNW:
    """ePTR-NW with constants chosen by the product: the fit (``fit.values`` and
    ``fit.released`` are the DP output), the constants it ran with (public) and the split."""

    fit: kernel.EPTRNW
    bandwidth: float
    c0: float
    split: NWConstantsSplit

    def header_params(self) -> dict[str, Any]:
        """What the model header adds to the request's parameters: the chosen constants' values
        and the split (exact decimal strings; the header's epsilon and delta are the totals)."""
        names = (*self.split.by_rule, *self.split.chosen)
        values = {"bandwidth": self.bandwidth, "c0": self.c0}
        return {
            **{name: values[name] for name in names},
            "constants_chosen": ",".join(names),
            "constants_epsilon": amounts.text(self.split.constants_epsilon),
            "eptr_epsilon": amounts.text(self.split.eptr_epsilon),
        }


def eptr_nw_chosen(
    X: np.ndarray,
    y: np.ndarray,
    queries: np.ndarray,
    *,
    split: NWConstantsSplit,
    rng: Rng,
    given: Mapping[str, float] | None = None,
    r_f: float | None = None,
    lo: float | None = None,
    hi: float | None = None,
    no_reply: np.ndarray | float | None = None,
) -> ChosenEPTRNW:
    """ePTR-NW (Algorithm 5, ``kernel.eptr_nw``) with the bandwidth and/or c0 chosen by the
    product (``split``) and the rest ``given``: (split.epsilon, split.delta)-DP for whole
    examples (module docstring). The labels' interval is as ``kernel.eptr_nw`` takes it."""
    x = features(X)
    target = labels_for(y, x.shape[0])
    points = queries_for(queries, x.shape[1])
    values = dict(given or {})
    n, dim = x.shape
    if "bandwidth" in split.by_rule:
        bandwidth = rule_bandwidth(points, n=n)
    else:
        bandwidth = positive(values.get("bandwidth"), name="bandwidth")
    if "c0" in split.chosen:
        c0_epsilon = split.part_float("c0")
        noisy = noisy_min_degree(x, points, bandwidth=bandwidth, epsilon=c0_epsilon, rng=rng)
        c0 = choose_nw_c0(
            noisy, n=n, k_max=kernel.kernel_bound(dim, bandwidth), eptr_epsilon=split.eptr_float,
            delta=split.delta_float, c0_epsilon=c0_epsilon,
        )  # fmt: skip
    else:
        c0 = positive(values.get("c0"), name="c0")
    fit = kernel.eptr_nw(
        x, target, points, epsilon=split.eptr_float, delta=split.delta_float, bandwidth=bandwidth,
        c0=c0, rng=rng, r_f=r_f, lo=lo, hi=hi, no_reply=no_reply,
    )  # fmt: skip
    return ChosenEPTRNW(fit=fit, bandwidth=bandwidth, c0=c0, split=split)


def split_epsilon(split: NWConstantsSplit) -> Decimal:
    """The split's total epsilon (its parts plus ePTR-NW's rest): the request's, exactly."""
    return amounts.add(split.constants_epsilon, split.eptr_epsilon)


# Per-query c0 from public reference features (:func:`reference_c0`): the release test's
# margin over the reference's prediction, in standard deviations of the difference between
# the private degree and its prediction, and the release probability asked of the test at
# that margin.
REFERENCE_SDS = 3.0
REFERENCE_RELEASE = 0.95
# The product's floor of c_q, in effective neighbours (bench/results/estimators.md, "per-query
# c0": floor 20).
REFERENCE_FLOOR = 20.0


def reference_c0(
    queries: np.ndarray,
    reference: np.ndarray,
    *,
    n: int,
    bandwidth: float,
    epsilon: float,
    delta: float,
    floor: float = REFERENCE_FLOOR,
) -> np.ndarray:
    """One c0 per query from PUBLIC reference features (no privacy cost): the test asks every
    query's degree to be what the reference predicts, less a margin.

    The reference must be public with respect to the private data set (features the caller
    owns, e.g. the points it will predict at; never rows of the data set): under ePTR the
    training features are private, and this rule reads only the reference, the queries, n,
    the bandwidth, epsilon and delta. The reference's degree at q, rescaled to n rows,
    D^_q = (n / n_ref) sum_j exp(-||x_q - r_j||^2 / (2 sigma^2)) (units of K_max), predicts
    the data's d(x_q) / K_max when both are samples of one population; the degree is a sum of
    n terms in [0, 1] (variance <= its mean) and so is the prediction (rescaled), so their
    difference has standard deviation <= sqrt(D^_q (1 + n / n_ref)). Then

        c_q n / K_max = max(D^_q - M - g - REFERENCE_SDS sqrt(D^_q (1 + n / n_ref)), floor)

    with M the release test's threshold and g = (2 / epsilon) log(p / (1 - p)), p =
    :data:`REFERENCE_RELEASE`: where every degree is within REFERENCE_SDS deviations of its
    prediction, gamma >= M + g and the test releases with probability >= p. ``floor`` (in
    units of K_max, > 0) keeps the sparse queries' c_q, hence their noise, bounded; a
    reference that does not resemble the data only makes "no reply" likelier (the privacy
    proof of ``kernel.eptr_nw`` holds for any public c_q > 0).
    """
    points = features(queries, name="queries")
    ref = queries_for(reference, points.shape[1], name="reference")
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise InvalidParameterError(f"n ({n!r}) must be an integer >= 1")
    sigma = positive(bandwidth, name="bandwidth")
    lowest = positive(floor, name="floor")
    eps, dlt = epsilon_delta(epsilon, delta)
    k_max = kernel.kernel_bound(points.shape[1], sigma)
    _, degree = kernel.nw_estimate(points, ref, np.zeros(ref.shape[0]), bandwidth=sigma)
    ratio = n / ref.shape[0]
    predicted = degree / k_max * ratio
    margin = 2.0 / eps * math.log(REFERENCE_RELEASE / (1.0 - REFERENCE_RELEASE))
    units = predicted - eptr_threshold(epsilon=eps, delta=dlt) - margin
    units -= REFERENCE_SDS * np.sqrt(predicted * (1.0 + ratio))
    return np.maximum(units, lowest) * k_max / n
