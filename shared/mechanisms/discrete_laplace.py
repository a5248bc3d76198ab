"""Exact discrete Laplace (two-sided geometric) sampling with integer arithmetic only.

Implements Canonne, Kamath & Steinke, "The Discrete Gaussian for Differential Privacy"
(NeurIPS 2020), Algorithm 1 (Bernoulli(exp(-gamma)) for rational gamma) and Algorithm 2
(discrete Laplace with rational scale t/s). Every decision is a comparison of an exactly
uniform integer with a rational threshold, so the sampled distribution is exactly
P(Z = z) proportional to exp(-|z| s / t): no floating-point rounding can leak anything.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from shared.errors import InvalidParameterError
from shared.rng import Rng, randbelow


def _bernoulli(rng: Rng, p: Fraction) -> bool:
    """Exactly Bernoulli(p) for rational p in [0, 1]."""
    return randbelow(rng, p.denominator) < p.numerator


def _bernoulli_exp_le1(rng: Rng, gamma: Fraction) -> bool:
    """Exactly Bernoulli(exp(-gamma)) for rational gamma in [0, 1] (CKS Algorithm 1, case 1)."""
    k = 1
    while _bernoulli(rng, gamma / k):
        k += 1
    return k % 2 == 1


def bernoulli_exp(rng: Rng, gamma: Fraction) -> bool:
    """Exactly Bernoulli(exp(-gamma)) for rational gamma >= 0 (CKS Algorithm 1)."""
    if gamma < 0:
        raise InvalidParameterError(f"gamma ({gamma}) must be >= 0")
    whole = math.floor(gamma)
    for _ in range(whole):
        if not _bernoulli_exp_le1(rng, Fraction(1)):
            return False
    return _bernoulli_exp_le1(rng, gamma - whole)


def sample_discrete_laplace(rng: Rng, scale: Fraction) -> int:
    """One exact draw with P(z) proportional to exp(-|z| / scale) (CKS Algorithm 2)."""
    if scale <= 0:
        raise InvalidParameterError(f"scale ({scale}) must be > 0")
    t, s = scale.numerator, scale.denominator  # scale = t / s
    one = Fraction(1)
    while True:
        u = randbelow(rng, t)
        if not bernoulli_exp(rng, Fraction(u, t)):
            continue
        v = 0
        while bernoulli_exp(rng, one):
            v += 1
        y = (u + t * v) // s
        negative = randbelow(rng, 2) == 1
        if negative and y == 0:
            continue
        return -y if negative else y


def discrete_laplace_noise(rng: Rng, *, scale: float, size: int) -> np.ndarray:
    """``size`` i.i.d. exact discrete Laplace draws for the float ``scale`` taken exactly."""
    exact = Fraction(scale)
    return np.array([sample_discrete_laplace(rng, exact) for _ in range(size)], dtype=np.int64)
