"""Randomness: the operating system's CSPRNG in production, a seeded numpy Generator in tests.

Every mechanism takes ``rng`` explicitly. Both accepted kinds expose the two numpy-Generator
methods the engine uses, ``random(size)`` (uniform doubles in [0, 1)) and
``integers(low, high, size)``, plus :func:`randbelow` for exact big-integer draws and
:func:`below_sampler` for many of them. A numpy PRNG merely *seeded* from the OS is not used in
production: its state would be the single secret protecting every label, so production draws
come from ``os.urandom`` directly.
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

    def words(self, count: int) -> np.ndarray:
        """``count`` raw uniform 64-bit words (8 bytes each of ``os.urandom``), for kernels that
        do their own exact rejection sampling on them (``rr_on_bins``)."""
        if count < 0:
            raise InvalidParameterError(f"count ({count}) must be >= 0")
        return np.frombuffer(os.urandom(8 * count), dtype=np.uint64)

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


class BufferedBelow:
    """Exact uniform integers in [0, n) from a buffer of ``os.urandom`` bytes (the OS CSPRNG).

    For the many small draws of exact samplers (discrete Laplace: a dozen per sample), where one
    ``secrets.randbelow`` per draw costs a system call and a Python-level bit loop. Each draw
    takes the next ceil(log2 n) / 8 whole bytes of the buffer, masks them to the bit length of
    n - 1 and keeps the value if it is below n, else tries the next bytes: rejection sampling,
    so every value in [0, n) is exactly equally likely (acceptance >= 1/2 per try). Bytes are
    used once, in order; the buffer refills from ``os.urandom`` in blocks that double from
    256 bytes up to 4 KiB, so a single sample draws little more than it needs.

    Privacy: the bytes are the OS CSPRNG's, each used at most once. Use one instance per
    call that needs it and let it go (never shared across threads or kept across a fork):
    leftover bytes are discarded, never reused.
    """

    __slots__ = ("_buffer", "_position", "_block")

    _FIRST_BLOCK = 256
    _MAX_BLOCK = 4096

    def __init__(self) -> None:
        self._buffer = b""
        self._position = 0
        self._block = self._FIRST_BLOCK

    def _take(self, nbytes: int) -> int:
        """The next ``nbytes`` bytes of the stream as a little-endian integer."""
        end = self._position + nbytes
        if end > len(self._buffer):
            rest = self._buffer[self._position :]
            fresh = os.urandom(max(self._block, nbytes - len(rest)))
            self._block = min(2 * self._block, self._MAX_BLOCK)
            self._buffer, self._position, end = rest + fresh, 0, nbytes
        value = int.from_bytes(self._buffer[self._position : end], "little")
        self._position = end
        return value

    def __call__(self, n: int) -> int:
        """An exactly uniform integer in [0, n), n >= 1 (n = 1 draws nothing)."""
        if n <= 1:
            if n < 1:
                raise InvalidParameterError(f"randbelow: n ({n}) must be >= 1")
            return 0
        bits = (n - 1).bit_length()
        nbytes = (bits + 7) // 8
        mask = (1 << bits) - 1
        while True:
            candidate = self._take(nbytes) & mask
            if candidate < n:
                return candidate


class GeneratorBelow:
    """:func:`randbelow` on a seeded numpy Generator (tests, benchmarks): each draw consumes the
    Generator exactly as a direct ``randbelow(rng, n)`` call does, so seeded runs repeat."""

    __slots__ = ("rng",)

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def __call__(self, n: int) -> int:
        """An exactly uniform integer in [0, n), n >= 1."""
        return randbelow(self.rng, n)


Below: TypeAlias = BufferedBelow | GeneratorBelow


def below_sampler(rng: Rng | Below) -> Below:
    """A function n -> exactly uniform integer in [0, n), for many draws from ``rng``.

    The OS CSPRNG: a fresh :class:`BufferedBelow` (discard it after use). A numpy Generator:
    a :class:`GeneratorBelow`. A sampler this function made is returned as it is, so callers
    can share one buffer across the draws of one computation by passing the sampler where an
    rng is expected.
    """
    if isinstance(rng, SystemRandom):
        return BufferedBelow()
    if isinstance(rng, np.random.Generator):
        return GeneratorBelow(rng)
    if isinstance(rng, BufferedBelow | GeneratorBelow):
        return rng
    raise InvalidParameterError(
        f"rng must be a numpy Generator, SystemRandom or a below_sampler, got {rng!r}"
    )


def random_words(rng: Rng, count: int) -> np.ndarray:
    """``count`` uniform 64-bit words (uint64) for kernels that draw exact integers from them
    by rejection: ``os.urandom`` bytes in production, the Generator's draws in tests."""
    if isinstance(rng, SystemRandom):
        return rng.words(count)
    return rng.integers(0, 2**64 - 1, size=count, dtype=np.uint64, endpoint=True)


def uniforms(rng: Rng, n: int) -> np.ndarray:
    """``n`` uniform doubles in [0, 1) as a contiguous float64 array (for numba kernels)."""
    return np.ascontiguousarray(rng.random(n), dtype=np.float64)
