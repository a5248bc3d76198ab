"""Anchor a fitted model's mean prediction on the message's DP label mean.

Why: at small epsilon the noisy labels carry almost no signal, the chosen model is nearly a
constant, and that constant is the mean of its training targets. Raw targets have mean
a * mean(y) + b (the randomizer's affine expectation, ``shared.debias``): at small epsilon
a ~ 0 and b is set by the epsilon1-DP histogram, whose own mean is biased on sparse or skewed
labels (bench/results/prior_mean_bias.md). Debiased targets are unbiased only for the labels
projected onto the RPWithPrior interval (or for their RR-on-Bins bin values), so their mean
misses the tail the interval cuts. The message carries an unbiased DP mean m of the clipped
labels with a known variance V (``shared.mechanisms.private_mean``).

The shift. The model's mean error e = mean(prediction) - mean(y) is unknown; g = m -
mean(prediction) estimates -e with error variance V. Shifting by w g with the positive-part
shrinkage w = max(0, 1 - c V / g^2) (James & Stein 1961; Efron & Morris 1973) moves the mean
only as far as the evidence says it is off. c = ``SHRINKAGE`` = 2 rather than 1 because the
noise is Laplace, not Gaussian: simulated with Laplace noise (risk in units of V, e in units of
sqrt(V)), c = 2 costs 0.29 V where e = 0 and 0.5 V where e = 0.5 (the model alone: 0 and
0.25 V), and 1.8 V where e = 3 (the model alone: 9 V).

The gate. The anchor is applied only where sqrt(V) <= ``MAX_RELATIVE_SD`` (0.1) times the
largest standard deviation labels in [lo, hi] with mean m can have, sqrt((hi - m)(m - lo))
(Bhatia & Davis 2000): a public scale that needs no histogram (at tiny epsilon the histogram
can be degenerate, and a gate on its spread shut the anchor exactly where the raw targets' mean
was furthest off). With few labels a Laplace tail draw of m can cost more than the bias it
corrects (measured on Crime, n = 1,595, with 30% of epsilon1 = 0.045 on the mean: one split
went from 1.0x to 3.6x the constant's test MSE): the release therefore spends most of epsilon1
on the mean at small epsilon (``shared.plan.default_mean_share``), and the gate refuses a
mean too noisy to be worth it.

The pooled floor. The shrinkage above treats the model's mean as fixed and asks only whether m
shows it to be biased. But the model's mean is itself a noisy estimate of mean(y): fitted to
targets t with noise of variance s^2, it carries the noise's mean, of variance U = s^2 / n
(least squares with an intercept predicts exactly mean(t) on its training rows; boosting
preserves it too). Debiased targets at small epsilon can be very noisy (RPWithPrior's divide by
its a < 1), so U can match or exceed V while the gap g stays within sqrt(2 V) of 0, and the
shrinkage then moves little or nothing. Two independent unbiased estimates of variances U and V
combine best with weight U / (U + V) on m (inverse-variance pooling), and a biased model mean
only raises the optimal weight ((beta^2 + U) / (beta^2 + U + V)), so w = max(shrinkage,
U / (U + V)). The floor needs no gate: where U > V the model's own mean is the noisier of the
two whatever m's tail. Measured (product pipeline, Crime, 10 splits): at epsilon 0.3, where the
release picks RPWithPrior, 1.018x -> 0.996x the DP constant (8 splits better, none worse); at
0.1 no change (RR-on-Bins' 2-cell debiased targets are nearly noiseless there: their mean's
error is bias, which the shrinkage handles). U is estimated by the mean squared residual of the
model on its training rows over n. For a model that does not fit the noise it is an upper bound
of the noise's share (the residual also holds the labels' unexplained spread), which errs
towards m by at most w^2 V where that spread dominates: below 1e-3 of the label variance in
every benchmark data set. A model that fits part of the noise (deep boosting) shows a smaller
residual, and the floor then errs the other way, towards the shrinkage alone.

Everything here reads the message, the model's targets and its own predictions on its training
features: post-processing, no privacy cost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from shared.mechanisms.private_mean import ANCHOR_MAX_RELATIVE_SD, private_mean_variance
from shared.message import MessageHeader

SHRINKAGE = 2.0
MAX_RELATIVE_SD = ANCHOR_MAX_RELATIVE_SD


@dataclass(frozen=True, kw_only=True)
class LabelMean:
    """The message's DP label mean, its (public) noise variance, and the public label bounds."""

    value: float
    variance: float
    lo: float
    hi: float

    def max_label_variance(self) -> float:
        """(hi - m)(m - lo): no labels in [lo, hi] with mean m vary more (Bhatia-Davis)."""
        m = min(max(float(self.value), self.lo), self.hi)
        return (self.hi - m) * (m - self.lo)


def message_label_mean(header: MessageHeader, *, n_joined: int) -> LabelMean | None:
    """The header's DP label mean with its variance, if it describes the joined rows.

    None when the message carries no mean (format < 3, or a release that spent nothing on it)
    or when not every labelled example joined a feature row: the mean is over all n labels,
    and the joined subset's mean may differ from it by more than the noise.
    """
    if header.label_mean is None or header.label_mean_epsilon is None:
        return None
    if n_joined != header.n:
        return None
    return LabelMean(
        value=header.label_mean,
        # Carried by messages of format >= 4; derived the same way for older ones.
        variance=header.label_mean_variance
        if header.label_mean_variance is not None
        else private_mean_variance(
            lo=header.label_min, hi=header.label_max, epsilon=header.label_mean_epsilon, n=header.n
        ),
        lo=header.label_min,
        hi=header.label_max,
    )


@dataclass(frozen=True, kw_only=True)
class MeanAnchor:
    """The offset added to every prediction, and how it was obtained."""

    offset: float
    label_mean: float  # m, the message's DP label mean
    label_mean_variance: float  # V
    prediction_mean: float  # the model's mean prediction on its training features
    prediction_mean_variance: float  # U: its noise, estimated from its training residuals
    weight: float  # w in [0, 1]: the share of the gap m - prediction_mean applied
    gated: bool  # True: V too large for the shrinkage (the pooled floor still applies)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def shrinkage_weight(gap: float, variance: float) -> float:
    """max(0, 1 - SHRINKAGE V / g^2), written with sqrt so that tiny gaps cannot underflow."""
    if variance == 0.0:
        return 1.0
    ratio = math.sqrt(SHRINKAGE * variance) / abs(gap) if gap != 0.0 else math.inf
    return 0.0 if ratio >= 1.0 else 1.0 - ratio**2


def pooled_weight(model_variance: float, variance: float) -> float:
    """U / (U + V): the weight on m that pools two independent unbiased estimates best."""
    if math.isinf(variance):
        return 0.0
    if variance == 0.0 or math.isinf(model_variance):
        return 1.0
    return model_variance / (model_variance + variance)


def prediction_mean_variance(predictions: np.ndarray, targets: np.ndarray | None) -> float:
    """U: mean squared training residual / n, a bound on the variance of the model's mean."""
    if targets is None or predictions.size < 2:
        return 0.0
    targets = np.asarray(targets, dtype=np.float64)
    if targets.shape != predictions.shape:
        raise ValueError(f"targets {targets.shape} do not match predictions {predictions.shape}")
    residual = targets - predictions
    return float(np.mean(residual**2) / predictions.size)


def mean_anchor(
    label_mean: LabelMean,
    *,
    predictions: np.ndarray,
    targets: np.ndarray | None = None,
    exact: bool = False,
) -> MeanAnchor:
    """The shift of ``predictions``' mean towards the DP label mean: gated shrinkage, floored
    by inverse-variance pooling; ``exact``: all the way (weight 1) unless gated, for the model
    that is the DP constant itself (``features_party.training.model_for_message``).

    ``predictions``: the fitted model on the features of the rows it was fitted on, which must
    be the labels the mean was computed over (all of the message's examples); ``targets``: what
    it was fitted to there (None: the model's mean is taken as noiseless, shrinkage only).
    Module docstring: the rule, its constants and why.
    """
    fitted = np.asarray(predictions, dtype=np.float64)
    prediction_mean = float(np.mean(fitted))
    variance = max(float(label_mean.variance), 0.0)
    model_variance = prediction_mean_variance(fitted, targets)
    gap = float(label_mean.value) - prediction_mean
    gated = not math.sqrt(variance) <= MAX_RELATIVE_SD * math.sqrt(label_mean.max_label_variance())
    shrunk = 0.0 if gated else shrinkage_weight(gap, variance)
    weight = 1.0 if exact and not gated else max(shrunk, pooled_weight(model_variance, variance))
    offset = weight * gap
    if not math.isfinite(offset):
        offset, weight = 0.0, 0.0
    return MeanAnchor(
        offset=offset,
        label_mean=float(label_mean.value),
        label_mean_variance=variance,
        prediction_mean=prediction_mean,
        prediction_mean_variance=model_variance,
        weight=weight,
        gated=gated,
    )
