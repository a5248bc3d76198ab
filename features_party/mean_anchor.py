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
on the mean at small epsilon (``shared.randomizer.default_mean_share``), and the gate refuses a
mean too noisy to be worth it. Everything here reads the message and the model's own
predictions on its training features: post-processing, no privacy cost.
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
        variance=private_mean_variance(
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
    weight: float  # w in [0, 1]: the share of the gap m - prediction_mean applied
    gated: bool  # True: V too large against the labels' largest possible variance: none applied

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def shrinkage_weight(gap: float, variance: float) -> float:
    """max(0, 1 - SHRINKAGE V / g^2), written with sqrt so that tiny gaps cannot underflow."""
    if variance == 0.0:
        return 1.0
    ratio = math.sqrt(SHRINKAGE * variance) / abs(gap) if gap != 0.0 else math.inf
    return 0.0 if ratio >= 1.0 else 1.0 - ratio**2


def mean_anchor(label_mean: LabelMean, *, predictions: np.ndarray) -> MeanAnchor:
    """The gated, shrunk shift of ``predictions``' mean towards the DP label mean.

    ``predictions``: the fitted model on the features of the rows it was fitted on, which must
    be the labels the mean was computed over (all of the message's examples). Module docstring:
    the rule, its constants and why.
    """
    prediction_mean = float(np.mean(np.asarray(predictions, dtype=np.float64)))
    variance = max(float(label_mean.variance), 0.0)
    gap = float(label_mean.value) - prediction_mean
    gated = not math.sqrt(variance) <= MAX_RELATIVE_SD * math.sqrt(label_mean.max_label_variance())
    weight = 0.0 if gated else shrinkage_weight(gap, variance)
    offset = weight * gap
    if not math.isfinite(offset):
        offset, weight = 0.0, 0.0
    return MeanAnchor(
        offset=offset,
        label_mean=float(label_mean.value),
        label_mean_variance=variance,
        prediction_mean=prediction_mean,
        weight=weight,
        gated=gated,
    )
