"""Randomness: the operating system's CSPRNG in production, a seeded numpy Generator in tests.

Every mechanism takes ``rng`` explicitly. Both accepted kinds expose the two numpy-Generator
methods the engine uses, ``random(size)`` (uniform doubles in [0, 1)) and
``integers(low, high, size)``, plus :func:`randbelow` for exact big-integer draws. A numpy PRNG
merely *seeded* from the OS is not used in production: its state would be the single secret
protecting every label, so production draws come from ``os.urandom`` directly.
"""

from __future__ import annotations

import math
import os
import secrets
from typing import TypeAlias

import numpy as np

from shared._rng_kernels import accept_words, doubles_from_words
from shared.errors import InvalidParameterError


class SystemRandom:
    """Uniform doubles and integers drawn in bulk from ``os.urandom`` (the OS CSPRNG)."""

    def random(self, size: int | None = None) -> np.ndarray:
        """Uniform doubles on the 2^-53 grid of [0, 1), like ``Generator.random``."""
        n = 1 if size is None else int(size)
        if n < 0:
            raise InvalidParameterError(f"size ({n}) must be >= 0")
        raw = np.frombuffer(os.urandom(8 * n), dtype=np.uint64)
        # Top 53 bits -> exactly representable doubles k * 2^-53, every one equally likely.
        return doubles_from_words(raw)

    def integers(self, low: int, high: int, size: int | None = None) -> np.ndarray:
        """Uniform integers in [low, high) without modulo bias (rejection on 64-bit words)."""
        span = int(high) - int(low)
        if span <= 0:
            raise InvalidParameterError(f"integers: high ({high}) must exceed low ({low})")
        n = 1 if size is None else int(size)
        if span > 2**63:
            return np.array([low + secrets.randbelow(span) for _ in range(n)], dtype=object)
        # Words as narrow as the span allows: half the urandom bytes for spans below 2^32
        # (a span of exactly 2^32 takes 64-bit words: uint32 cannot hold it for the modulo).
        word_bits, dtype = (32, np.uint32) if span < 2**32 else (64, np.uint64)
        limit = (2**word_bits // span) * span  # accept words below the largest multiple of span
        rejected = 1.0 - limit / 2**word_bits  # the share of words rejection throws away
        out = np.empty(n, dtype=np.int64)
        filled = 0
        while filled < n:
            need = n - filled
            # Enough words for the expected rejections twice over (rarely a second round).
            count = need + math.ceil(2.0 * rejected * need) + 16
            words = np.frombuffer(os.urandom(word_bits // 8 * count), dtype=dtype)
            keep_all = np.uint64(0 if limit == 2**word_bits else limit)
            filled = accept_words(words, keep_all, np.uint64(span), out, filled)
        return out + int(low) if low else out

    def __repr__(self) -> str:
        return "SystemRandom(os.urandom)"


Rng: TypeAlias = np.random.Generator | SystemRandom


def resolve_rng(rng: Rng | int | None) -> Rng:
    """``None`` -> OS CSPRNG; an int -> seeded Generator (tests and benchmarks only)."""
    if rng is None:
        return SystemRandom()
    if isinstance(rng, np.random.Generator | SystemRandom):
        return rng
    if isinstance(rng, int) and not isinstance(rng, bool):
        return np.random.default_rng(rng)
    raise InvalidParameterError(
        f"rng must be a numpy Generator, SystemRandom or int seed, got {rng!r}"
    )


def randbelow(rng: Rng, n: int) -> int:
    """An exactly uniform integer in [0, n) for arbitrary-precision ``n`` >= 1."""
    if n < 1:
        raise InvalidParameterError(f"randbelow: n ({n}) must be >= 1")
    if isinstance(rng, SystemRandom):
        return secrets.randbelow(n)
    if n <= 2**62:
        return int(rng.integers(0, n))
    nbytes = (n.bit_length() + 7) // 8
    excess = 8 * nbytes - n.bit_length()
    while True:  # rejection sampling on whole bytes: exact for any n
        candidate = int.from_bytes(rng.bytes(nbytes), "little") >> excess
        if candidate < n:
            return candidate


def uniforms(rng: Rng, n: int) -> np.ndarray:
    """``n`` uniform doubles in [0, 1) as a contiguous float64 array (for numba kernels)."""
    return np.ascontiguousarray(rng.random(n), dtype=np.float64)
