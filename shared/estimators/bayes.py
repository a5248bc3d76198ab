"""Private Gaussian Bayes classifier by ePTR (class priors and class means).

Implements Shen, Tong & Wang, "Efficient Propose-Test-Release", Algorithm 3 (ePTR-Bayes) with
the SaLBo (13) and the probability revision of step 5.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from shared.errors import InvalidParameterError
from shared.estimators._checks import epsilon_delta, features, positives, project_rows
from shared.estimators.eptr import EPTROutcome, eptr_release
from shared.rng import Rng


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
    if isinstance(n_classes, bool) or not isinstance(n_classes, int | np.integer) or n_classes < 2:
        raise InvalidParameterError(f"n_classes ({n_classes!r}) must be an integer >= 2")
    k = int(n_classes)
    labels = np.asarray(y)
    if labels.shape != (n,):
        raise InvalidParameterError(f"y must be 1-D with {n} values, got shape {labels.shape}")
    if not np.issubdtype(labels.dtype, np.integer):
        if not (np.issubdtype(labels.dtype, np.floating) and np.all(labels == np.round(labels))):
            raise InvalidParameterError("y must hold integer class labels")
    labels = labels.astype(np.int64)
    if labels.min() < 0 or labels.max() >= k:
        raise InvalidParameterError(f"y must hold class labels in 0..{k - 1}")
    eps, dlt = epsilon_delta(epsilon, delta)
    rx, c = positives(r_x=r_x, c0=c0)
    if c * k >= 1.0:
        raise InvalidParameterError(f"c0 ({c0!r}) must be < 1 / n_classes ({1.0 / k:.4g})")

    counts, priors, means = bayes_statistics(project_rows(x, rx), labels, k)
    gamma = bayes_gamma(counts, n=n, c0=c)
    alpha = 2.0 / n * math.sqrt(2.0 * rx**2 / c**2 + 2.0)
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
