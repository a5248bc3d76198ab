"""Numba kernels turning raw CSPRNG words into uniform draws in one pass (``shared.rng``)."""

from __future__ import annotations

import numpy as np
from numba import njit

_TWO_POW_MINUS_53 = 2.0**-53


@njit(cache=True)
def doubles_from_words(words: np.ndarray) -> np.ndarray:
    """Each 64-bit word's top 53 bits as k 2^-53: uniform on the 2^-53 grid of [0, 1)."""
    out = np.empty(words.size, dtype=np.float64)
    for i in range(words.size):
        out[i] = np.float64(words[i] >> np.uint64(11)) * _TWO_POW_MINUS_53
    return out


@njit(cache=True)
def accept_words(
    words: np.ndarray, limit: np.uint64, span: np.uint64, out: np.ndarray, filled: int
) -> int:
    """Rejection sampling: each word below ``limit`` (a multiple of ``span``; 0 = keep every
    word) gives ``word % span``, written to ``out`` from ``filled`` on until ``out`` is full.
    Returns how many of ``out`` are filled. Every kept residue is equally likely."""
    for i in range(words.size):
        if filled == out.size:
            break
        word = np.uint64(words[i])
        if limit == 0 or word < limit:
            out[filled] = np.int64(word % span)
            filled += 1
    return filled
