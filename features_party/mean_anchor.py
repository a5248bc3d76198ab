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
mean(prediction) estimates -e with error variance V, so E[g^2] = e^2 + V. Shifting by w g with
the positive-part shrinkage w = max(0, 1 - V / g^2) (James & Stein 1961; Efron & Morris 1973,
one coordinate with known variance) moves the mean only as far as the evidence says it is off:
a model whose mean is already right stays nearly where it is. Everything here reads the message
and the model's own predictions on its training features: post-processing, no privacy cost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from shared.mechanisms.private_mean import private_mean_variance
from shared.message import MessageHeader


@dataclass(frozen=True, kw_only=True)
class LabelMean:
    """The message's DP label mean and its (public) noise variance."""

    value: float
    variance: float


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
    )


@dataclass(frozen=True, kw_only=True)
class MeanAnchor:
    """The offset added to every prediction, and how it was obtained."""

    offset: float
    label_mean: float  # m, the message's DP label mean
    label_mean_variance: float  # V
    prediction_mean: float  # the model's mean prediction on its training features
    weight: float  # w in [0, 1]: the share of the gap m - prediction_mean applied

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def mean_anchor(label_mean: LabelMean, *, predictions: np.ndarray) -> MeanAnchor:
    """The shrunk shift of ``predictions``' mean towards the DP label mean (module docstring).

    ``predictions``: the fitted model on the features of the rows it was fitted on, which must
    be the labels the mean was computed over (all of the message's examples).
    """
    prediction_mean = float(np.mean(np.asarray(predictions, dtype=np.float64)))
    variance = max(float(label_mean.variance), 0.0)
    gap = float(label_mean.value) - prediction_mean
    # max(0, 1 - V / g^2), written with sqrt(V) / |g| so that tiny gaps cannot underflow g^2.
    if variance == 0.0:
        weight = 1.0
    elif abs(gap) <= math.sqrt(variance):
        weight = 0.0
    else:
        weight = 1.0 - (math.sqrt(variance) / abs(gap)) ** 2
    offset = weight * gap
    if not math.isfinite(offset):
        offset, weight = 0.0, 0.0
    return MeanAnchor(
        offset=offset,
        label_mean=float(label_mean.value),
        label_mean_variance=variance,
        prediction_mean=prediction_mean,
        weight=weight,
    )
