"""A model's ``model_dim`` (the d of C = bias^2 + (d / n) Var), measured on its features alone.

Benchmark helper, not served: the accuracy benchmark measures the papers' network with it and
passes the result as the release parameter ``model_dim`` (``bench.accuracy.runner``). The
criterion itself is ``shared.selection``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from shared.errors import InvalidParameterError
from shared.selection import MAX_MODEL_DIM

# Noise scale of :func:`noise_model_dim` as a share of the label range: about the standard
# deviation of a uniform label (0.29 of the range), the scale of the randomizers' noise at the
# small epsilons where the choice matters.
NOISE_SHARE = 0.25


def noise_model_dim(
    fit_predict: Callable[[np.ndarray], np.ndarray],
    n: int,
    *,
    scale: float,
    rng: np.random.Generator,
    repeats: int = 2,
) -> int:
    """The d of C for a given model, measured on features alone: n E[f^2] / sigma^2 on pure noise.

    ``fit_predict(targets)`` trains the receiver's model on n targets and returns its
    predictions at held-out feature rows. Trained on pure noise t = sigma z (z standard normal,
    sigma = ``NOISE_SHARE`` * ``scale``, ``scale`` the label range), a model whose error grows by
    (d / n) sigma^2 for label noise of variance sigma^2 (the variance term of C; d = the number
    of parameters for least squares) predicts with mean square (d / n) sigma^2, so d = n mean(f^2)
    / sigma^2, averaged over ``repeats`` noise draws. No label enters: a publisher measures its
    own model this way and passes the result as the release parameter ``model_dim``. For the
    papers' 128-64 network it is 63-117 on Crime (99 features) and 138-208 on Housing (8), by
    split, where the default (10) suits ridge and boosting (bench/results/accuracy_*.md).
    """
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
        raise InvalidParameterError(f"n ({n!r}) must be an integer >= 1")
    if not (isinstance(scale, int | float) and math.isfinite(scale) and scale > 0):
        raise InvalidParameterError(f"scale ({scale!r}) must be a finite number > 0")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise InvalidParameterError(f"repeats ({repeats!r}) must be an integer >= 1")
    sigma = NOISE_SHARE * float(scale)
    shares = []
    for _ in range(repeats):
        prediction = np.asarray(fit_predict(sigma * rng.standard_normal(int(n))), dtype=np.float64)
        shares.append(float(np.mean(prediction**2)) / sigma**2)
    return int(min(MAX_MODEL_DIM, max(1, round(int(n) * float(np.mean(shares))))))
