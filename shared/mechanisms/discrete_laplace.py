"""Exact discrete Laplace (two-sided geometric) sampling with integer arithmetic only.

Implements Canonne, Kamath & Steinke, "The Discrete Gaussian for Differential Privacy"
(NeurIPS 2020), Algorithm 1 (Bernoulli(exp(-gamma)) for rational gamma, and from it
Bernoulli(sigmoid(z)): ePTR's release test) and Algorithm 2 (discrete Laplace with rational
scale t/s). Every decision is a comparison of an exactly
uniform integer with a rational threshold, so the sampled distribution is exactly
P(Z = z) proportional to exp(-|z| s / t): no floating-point rounding can leak anything.

Rationals are carried as reduced (numerator, denominator) pairs of Python integers, and every
Bernoulli(p) draws ``below(denominator) < numerator`` with p in lowest terms, exactly as the
``fractions.Fraction`` formulation would: a seeded Generator gives the same draws as before.
``below`` is :func:`shared.rng.below_sampler` of the rng: buffered ``os.urandom`` bytes in
production (one buffer per call, no system call per draw), :func:`shared.rng.randbelow` for a
seeded Generator.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from shared.errors import InvalidParameterError
from shared.rng import Below, Rng, below_sampler


def _bernoulli_exp_le1(below: Below, num: int, den: int) -> bool:
    """Exactly Bernoulli(exp(-num/den)) for num/den in [0, 1] in lowest terms (0 as 0/1).

    CKS Algorithm 1, case 1: draw Bernoulli(gamma / k) for k = 1, 2, ... until one fails; the
    index k it fails at is odd with probability exp(-gamma). gamma / k = num / (den k) in lowest
    terms is (num / g) / (den k / g) with g = gcd(num, k), since gcd(num, den) = 1.
    """
    k = 1
    while True:
        g = math.gcd(num, k)
        if not below(den * k // g) < num // g:
            return k % 2 == 1
        k += 1


def _bernoulli_exp(below: Below, num: int, den: int) -> bool:
    """Exactly Bernoulli(exp(-num/den)) for num/den >= 0 in lowest terms (CKS Algorithm 1).

    exp(-gamma) = exp(-1)^floor(gamma) exp(-(gamma - floor(gamma))): one Bernoulli(exp(-1))
    per whole unit, then the fractional part, stopping at the first failure.
    """
    whole, rest = divmod(num, den)
    for _ in range(whole):
        if not _bernoulli_exp_le1(below, 1, 1):
            return False
    return _bernoulli_exp_le1(below, rest, den if rest else 1)


def bernoulli_exp(rng: Rng | Below, gamma: Fraction) -> bool:
    """Exactly Bernoulli(exp(-gamma)) for rational gamma >= 0 (CKS Algorithm 1)."""
    if gamma < 0:
        raise InvalidParameterError(f"gamma ({gamma}) must be >= 0")
    return _bernoulli_exp(below_sampler(rng), gamma.numerator, gamma.denominator)


def bernoulli_sigmoid(rng: Rng | Below, z: Fraction) -> bool:
    """Exactly Bernoulli(1 / (1 + exp(-z))) for rational z, from CKS Algorithm 1.

    For z >= 0, with r = exp(-z): rounds of a fair coin (heads: True) and, on tails, a
    Bernoulli(r) (True: False), repeated while neither decides; P(True) = (1/2) / (1/2 + r/2)
    = 1 / (1 + r). For z < 0, 1 - sigmoid(-z).
    """
    below = below_sampler(rng)
    magnitude = abs(z)
    num, den = magnitude.numerator, magnitude.denominator
    while True:
        if below(2) == 0:
            return z >= 0
        if _bernoulli_exp(below, num, den):
            return z < 0


def _laplace(below: Below, t: int, s: int) -> int:
    """One exact draw with P(z) proportional to exp(-|z| s / t), t / s in lowest terms.

    CKS Algorithm 2: U uniform on [0, t) kept with probability exp(-U / t), V ~ Geometric
    (failures before the first failure of Bernoulli(exp(-1))), so U + t V is geometric with
    ratio exp(-1 / t); Y = (U + t V) // s is geometric with ratio exp(-s / t); a fair sign, with
    the negative zero rejected so that 0 is not counted twice.
    """
    while True:
        u = below(t)
        g = math.gcd(u, t)  # u / t in lowest terms (0 as 0 / 1)
        if not _bernoulli_exp(below, u // g, t // g):
            continue
        v = 0
        while _bernoulli_exp(below, 1, 1):
            v += 1
        y = (u + t * v) // s
        negative = below(2) == 1
        if negative and y == 0:
            continue
        return -y if negative else y


def discrete_laplace_samples(rng: Rng | Below, scale: Fraction, size: int) -> list[int]:
    """``size`` i.i.d. exact draws with P(z) proportional to exp(-|z| / scale), in order.

    One :func:`shared.rng.below_sampler` serves them all (one ``os.urandom`` buffer in
    production); ``rng`` may be such a sampler already, to share its buffer with other draws.
    Privacy: each draw is CKS Algorithm 2, exact for the rational ``scale``.
    """
    if scale <= 0:
        raise InvalidParameterError(f"scale ({scale}) must be > 0")
    below = below_sampler(rng)
    t, s = scale.numerator, scale.denominator  # scale = t / s, in lowest terms
    return [_laplace(below, t, s) for _ in range(size)]


def sample_discrete_laplace(rng: Rng | Below, scale: Fraction) -> int:
    """One exact draw with P(z) proportional to exp(-|z| / scale) (CKS Algorithm 2).

    ``rng``: a Generator, ``SystemRandom``, or a :func:`shared.rng.below_sampler` shared by
    several draws (``histogram.noisy_histogram`` passes one for all its cells).
    """
    return discrete_laplace_samples(rng, scale, 1)[0]


def discrete_laplace_noise(rng: Rng, *, scale: float, size: int) -> np.ndarray:
    """``size`` i.i.d. exact discrete Laplace draws for the float ``scale`` taken exactly."""
    return np.array(discrete_laplace_samples(rng, Fraction(scale), size), dtype=np.int64)
