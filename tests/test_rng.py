"""The OS-CSPRNG randomness source."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

import shared.rng as shared_rng
from shared.errors import InvalidParameterError
from shared.rng import SystemRandom, randbelow, resolve_rng
from tests.fresh_draws import assert_fits


def test_system_random_uniforms_are_on_the_53_bit_grid() -> None:
    def pvalue() -> float:
        draws = SystemRandom().random(100_000)
        assert draws.dtype == np.float64
        assert np.all((draws >= 0) & (draws < 1))
        assert np.all(draws * 2.0**53 == np.floor(draws * 2.0**53))
        return float(stats.kstest(draws, "uniform").pvalue)

    assert_fits(pvalue)


@pytest.mark.parametrize("high", [1, 3, 1000, 2**40 + 7])
def test_system_random_integers_are_uniform(high: int) -> None:
    def pvalue() -> float:
        draws = SystemRandom().integers(0, high, 60_000)
        assert draws.min() >= 0 and draws.max() < high
        if not 1 < high <= 1000:
            return 1.0  # the range alone
        return float(stats.chisquare(np.bincount(draws, minlength=high)).pvalue)

    assert_fits(pvalue)


def test_randbelow_big_integers_with_both_sources(rng: np.random.Generator) -> None:
    big = 3**80
    for source in (SystemRandom(), rng):
        values = [randbelow(source, big) for _ in range(200)]
        assert all(0 <= v < big for v in values)
        assert len(set(values)) == 200
    small = [randbelow(rng, 3) for _ in range(3000)]
    assert stats.chisquare(np.bincount(small)).pvalue > 1e-4


def test_resolve_rng() -> None:
    assert isinstance(resolve_rng(None), SystemRandom)
    assert isinstance(resolve_rng(5), np.random.Generator)
    with pytest.raises(InvalidParameterError):
        resolve_rng("seed")  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError):
        SystemRandom().integers(3, 3)


def test_accept_words_is_rejection_sampling_by_brute_force() -> None:
    """The kernel keeps exactly the words below the limit, in order, as word % span."""
    from shared._rng_kernels import accept_words

    gen = np.random.default_rng(3)
    for dtype, bits in ((np.uint32, 32), (np.uint64, 64)):
        for span in (1, 3, 7, 2**31 + 1, 2**32 - 5, 2**40 + 7):
            if span >= 2**bits:
                continue
            limit = (2**bits // span) * span
            words = gen.integers(0, 2**bits, 500, dtype=np.uint64).astype(dtype)
            words[:5] = [0, limit - 1, min(limit, 2**bits - 1), 2**bits - 1, span]
            expected = [int(w) % span for w in words.tolist() if int(w) < limit][:300]
            out = np.full(300, -1, dtype=np.int64)
            keep_all = np.uint64(0 if limit == 2**bits else limit)
            filled = accept_words(words, keep_all, np.uint64(span), out, 0)
            assert filled == len(expected)
            assert out[:filled].tolist() == expected


@pytest.mark.parametrize("low, high", [(5, 5 + 2**31 + 1), (-3, 2**32 - 3), (0, 2**63)])
def test_system_random_integers_under_heavy_rejection_and_wide_spans(low: int, high: int) -> None:
    """span 2^31 + 1 on 32-bit words rejects about half of them: every draw still lands, in
    range, and ten equal slices of the span are equally likely."""
    span = high - low

    def pvalue() -> float:
        draws = SystemRandom().integers(low, high, 50_000)
        assert draws.size == 50_000 and draws.min() >= low and draws.max() < high
        slices = ((draws - low).astype(object) * 10 // span).astype(np.int64)
        return float(stats.chisquare(np.bincount(slices, minlength=10)).pvalue)

    assert_fits(pvalue)


class _Bytes:
    """``shared.rng.os`` serving a fixed byte string in order."""

    def __init__(self, data: bytes) -> None:
        self.data, self.position = data, 0

    def urandom(self, size: int) -> bytes:
        chunk = self.data[self.position : self.position + size]
        assert len(chunk) == size
        self.position += size
        return chunk


def test_buffered_below_is_rejection_on_masked_whole_bytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """By brute force on a known byte stream: each draw reads ceil(bits / 8) little-endian
    bytes, masks them to the bit length of n - 1 and keeps the value iff it is below n;
    n = 1 reads nothing; a draw straddling a refill reads the bytes in stream order."""
    from shared.rng import BufferedBelow

    data = np.random.default_rng(8).bytes(1 << 16)
    monkeypatch.setattr(shared_rng, "os", _Bytes(data))
    below = BufferedBelow()
    position = 0
    for n in [3, 1, 256, 257, 2**16 + 1, 3**80, 5, 2**64, 1, 7] * 40:
        got = below(n)
        bits = (n - 1).bit_length()
        nbytes = (bits + 7) // 8
        while True:
            value = int.from_bytes(data[position : position + nbytes], "little")
            position += nbytes
            if value & ((1 << bits) - 1) < n or n == 1:
                break
        assert got == (0 if n == 1 else value & ((1 << bits) - 1))  # n = 1: nbytes 0
    with pytest.raises(InvalidParameterError):
        below(0)


@pytest.mark.parametrize("n", [2, 3, 5, 200, 256, 257])
def test_buffered_below_from_the_csprng_is_uniform(n: int) -> None:
    from shared.rng import BufferedBelow

    def pvalue() -> float:
        below = BufferedBelow()
        draws = np.array([below(n) for _ in range(40 * n + 4000)])
        assert draws.min() >= 0 and draws.max() < n
        return float(stats.chisquare(np.bincount(draws, minlength=n)).pvalue)

    assert_fits(pvalue)


def test_below_sampler_keeps_seeded_generators_on_randbelow() -> None:
    from shared.rng import BufferedBelow, below_sampler

    buffered = below_sampler(SystemRandom())
    assert isinstance(buffered, BufferedBelow) and below_sampler(buffered) is buffered
    with pytest.raises(InvalidParameterError):
        below_sampler(42)  # type: ignore[arg-type]
    seeded = below_sampler(np.random.default_rng(4))
    reference = np.random.default_rng(4)
    for n in (1, 2, 3, 2**62, 2**62 + 1, 3**80):
        assert seeded(n) == randbelow(reference, n)


def test_system_random_words_are_raw_urandom(monkeypatch: pytest.MonkeyPatch) -> None:
    data = bytes(range(256)) * 2
    monkeypatch.setattr(shared_rng, "os", _Bytes(data))
    words = SystemRandom().words(3)
    assert words.dtype == np.uint64 and words.tobytes() == data[:24]
    with pytest.raises(InvalidParameterError):
        SystemRandom().words(-1)
