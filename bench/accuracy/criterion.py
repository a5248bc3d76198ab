"""PROPOSED rule for the labels party's ``mechanism="auto"``: minimise bias^2 + k Var / n.

The library's ``auto`` picks the randomizer with the lower expected label MSE = bias^2 + Var.
A model fitted on n noisy targets averages the variance away (roughly like k / n for a model
with k effective parameters) but not the bias, so what predicts its test MSE is

    C = E_y[(E[t | y] - y)^2] + k / n * E_y[Var(t | y)],

with t the training target (the noisy label, or its debiased version (noisy - b) / a). This
module evaluates C exactly under the (noisy, public) histogram prior for RPWithPrior and
RR-on-Bins candidates, raw and debiased, and returns the minimiser. Everything here is a
function of the epsilon1-DP prior, n and k (public), so the choice costs no privacy.

Closed forms (y inside the bounds; p(y) = clip(y, a1, a2), rule (3.12)):
* RPWithPrior: a mixture of U[a1 - zeta, a2 + zeta] with weight w = delta W / gamma and
  U[p - zeta, p + zeta] with weight 1 - w (W = a2 - a1 + 2 zeta, gamma = 2 zeta +
  delta (a2 - a1)): mean w c + (1 - w) p, second moment w (c^2 + W^2/12) + (1 - w)(p^2 +
  zeta^2/3), c the interval centre;
* RR-on-Bins: output v_phi(y) with probability keep, every other output with probability
  other: mean other * sum(v) + (keep - other) v_phi, second moment other * sum(v^2) +
  (keep - other) v_phi^2.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from shared.mechanisms import rp_with_prior, rr_on_bins
from shared.mechanisms.histogram import Prior

POINTS_PER_CELL = 16
RR_CAPS: tuple[int | None, ...] = (None, 1, 2, 4, 8, 16, 32)


@dataclass(frozen=True, kw_only=True)
class Choice:
    name: str
    randomizer: Any
    transform: str
    bias2: float
    variance: float
    criterion: float


def _quadrature(prior: Prior) -> tuple[np.ndarray, np.ndarray]:
    """Points and weights integrating against the piecewise-uniform prior (midpoint rule)."""
    t = (np.arange(POINTS_PER_CELL) + 0.5) / POINTS_PER_CELL
    left, width = prior.edges[:-1], np.diff(prior.edges)
    points = (left[:, None] + width[:, None] * t[None, :]).ravel()
    weights = np.repeat(prior.probs / POINTS_PER_CELL, POINTS_PER_CELL)
    return points, weights


def rp_moments(m: rp_with_prior.RPWithPrior, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """E[noisy | y] and Var(noisy | y) of RPWithPrior (continuous density, projection rule)."""
    delta = math.exp(-m.epsilon)
    width = m.a2 - m.a1 + 2.0 * m.zeta
    gamma = 2.0 * m.zeta + delta * (m.a2 - m.a1)
    w = delta * width / gamma
    centre = 0.5 * (m.a1 + m.a2)
    p = np.clip(y, m.a1, m.a2)
    mean = w * centre + (1.0 - w) * p
    second = w * (centre**2 + width**2 / 12.0) + (1.0 - w) * (p**2 + m.zeta**2 / 3.0)
    return mean, np.maximum(second - mean**2, 0.0)


def rr_moments(m: rr_on_bins.RROnBins, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """E[noisy | y] and Var(noisy | y) of RR-on-Bins."""
    v = m.output_values
    keep, other = m.keep_probability, m.other_probability
    chosen = v[m.phi(y)]
    mean = other * v.sum() + (keep - other) * chosen
    second = other * np.dot(v, v) + (keep - other) * chosen**2
    return mean, np.maximum(second - mean**2, 0.0)


def _score(
    name: str,
    randomizer: Any,
    mean: np.ndarray,
    var: np.ndarray,
    affine: tuple[float, float],
    y: np.ndarray,
    w: np.ndarray,
    scale: float,
) -> list[Choice]:
    out = []
    a, b = affine
    transforms = [("raw", mean, var)]
    if a > 1e-12 and not (abs(a - 1.0) < 1e-12 and abs(b) < 1e-12):
        transforms.append(("debiased", (mean - b) / a, var / (a * a)))
    for transform, m, v in transforms:
        bias2 = float(np.dot(w, (m - y) ** 2))
        variance = float(np.dot(w, v))
        out.append(
            Choice(
                name=name,
                randomizer=randomizer,
                transform=transform,
                bias2=bias2,
                variance=variance,
                criterion=bias2 + scale * variance,
            )
        )
    return out


def candidates(prior: Prior, *, epsilon: float, n: int, k: float) -> list[Choice]:
    """Every RPWithPrior / RR-on-Bins candidate with its criterion C (see module docstring)."""
    y, w = _quadrature(prior)
    scale = k / n
    out: list[Choice] = []
    for zeta in rp_with_prior.zeta_grid(prior):
        for select in ("paper", "mse"):
            m = rp_with_prior.choose_parameters(
                prior, epsilon=epsilon, select=select, zeta=float(zeta)
            )
            mean, var = rp_moments(m, y)
            out += _score("rpwithprior", m, mean, var, m.affine_expectation(), y, w, scale)
    for cap in RR_CAPS:
        m = rr_on_bins.optimal_bins_for_prior(prior, epsilon=epsilon, max_bins=cap)
        mean, var = rr_moments(m, y)
        out += _score("rr_on_bins", m, mean, var, m.affine_expectation(), y, w, scale)
    return out


def choose(prior: Prior, *, epsilon: float, n: int, k: float) -> Choice:
    """The candidate (mechanism, parameters, transform) with the lowest C."""
    return min(candidates(prior, epsilon=epsilon, n=n, k=k), key=lambda c: c.criterion)
