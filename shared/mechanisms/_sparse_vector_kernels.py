"""Numba kernel deciding the sparse vector's comparisons exactly from raw 64-bit words.

Every draw is an exactly uniform integer taken from the words by rejection (the top
bit-length(n - 1) bits of the next word, kept if below n), and every decision compares such
integers: the law is exactly the one ``shared.mechanisms.sparse_vector`` describes. The kernel
is a deterministic function of its words; when it runs out it says so, and the caller runs it
again on the same words extended by fresh ones (so the result is what an endless stream of
words gives).
"""

from __future__ import annotations

import numpy as np
from numba import njit

OUT_OF_WORDS = -2  # the words ran out before a decision: run again with more
NONE_FIRED = -1


@njit(cache=True)
def _below(words: np.ndarray, pos: int, n: int) -> tuple[int, int]:
    """(an exactly uniform integer in [0, n), the next position) for 1 <= n <= 2^62; the
    position is -1 if the words ran out."""
    if n == 1:
        return 0, pos
    bits = 0
    rest = n - 1
    while rest:
        bits += 1
        rest >>= 1
    shift = np.uint64(64 - bits)
    while pos < words.size:
        candidate = np.int64(words[pos] >> shift)
        pos += 1
        if candidate < n:
            return candidate, pos
    return 0, -1


@njit(cache=True)
def _exp_le1(words: np.ndarray, pos: int, num: int, den: int) -> tuple[bool, int]:
    """Bernoulli(exp(-num / den)), 0 <= num <= den (Canonne, Kamath & Steinke 2020, Algorithm
    1, case 1): round k succeeds with probability num / (den k), drawn as below(k) == 0 and
    below(den) < num (u = below(k) den + below(den) is uniform on [0, den k), and u < num iff
    both); the first failed round is odd with probability exp(-num / den)."""
    k = 1
    while True:
        if k > 1:
            u, pos = _below(words, pos, k)
            if pos < 0 or u != 0:
                return k % 2 == 1, pos
        u, pos = _below(words, pos, den)
        if pos < 0 or u >= num:
            return k % 2 == 1, pos
        k += 1


@njit(cache=True)
def _exp(words: np.ndarray, pos: int, num: int, den: int) -> tuple[bool, int]:
    """Bernoulli(exp(-num / den)) for num >= 0 (CKS Algorithm 1): one Bernoulli(exp(-1)) per
    whole unit, stopping at the first failure, then the remainder's."""
    for _ in range(num // den):
        ok, pos = _exp_le1(words, pos, 1, 1)
        if pos < 0 or not ok:
            return False, pos
    return _exp_le1(words, pos, num % den, den)


@njit(cache=True)
def _sigmoid(words: np.ndarray, pos: int, num: int, den: int) -> tuple[bool, int]:
    """Bernoulli(1 / (1 + exp(-num / den))), num >= 0: rounds of a fair coin (heads: True) and,
    on tails, a Bernoulli(exp(-num / den)) (True: False), until one decides."""
    while True:
        coin, pos = _below(words, pos, 2)
        if pos < 0 or coin == 0:
            return True, pos
        ok, pos = _exp(words, pos, num, den)
        if pos < 0 or ok:
            return False, pos


@njit(cache=True)
def first_firing(thresholds: np.ndarray, num: int, den: int, words: np.ndarray) -> int:
    """The first j whose noise nu_j (discrete Laplace, r = exp(-num / den)) reaches m_j =
    ``thresholds[j]``, or :data:`NONE_FIRED`, or :data:`OUT_OF_WORDS`.

    P(nu >= m) is r^m / (1 + r) for m >= 1 and 1 - r^(1-m) / (1 + r) for m <= 0: Bernoulli(
    r^g) AND Bernoulli(sigmoid(num / den)) with g = m or 1 - m, negated for m <= 0. The caller
    guarantees |m_j| num + num <= 2^62 and den <= 2^62.
    """
    pos = 0
    for j in range(thresholds.size):
        m = thresholds[j]
        g = m if m >= 1 else 1 - m
        both, pos = _exp(words, pos, g * num, den)
        if both and pos >= 0:
            both, pos = _sigmoid(words, pos, num, den)
        if pos < 0:
            return OUT_OF_WORDS
        if both == (m >= 1):
            return j
    return NONE_FIRED
