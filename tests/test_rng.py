"""The OS-CSPRNG randomness source."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from shared.errors import InvalidParameterError
from shared.rng import SystemRandom, randbelow, resolve_rng


def test_system_random_uniforms_are_on_the_53_bit_grid() -> None:
    draws = SystemRandom().random(100_000)
    assert draws.dtype == np.float64
    assert np.all((draws >= 0) & (draws < 1))
    assert np.all(draws * 2.0**53 == np.floor(draws * 2.0**53))
    assert stats.kstest(draws, "uniform").pvalue > 1e-4


@pytest.mark.parametrize("high", [1, 3, 1000, 2**40 + 7])
def test_system_random_integers_are_uniform(high: int) -> None:
    draws = SystemRandom().integers(0, high, 60_000)
    assert draws.min() >= 0 and draws.max() < high
    if 1 < high <= 1000:
        counts = np.bincount(draws, minlength=high)
        assert stats.chisquare(counts).pvalue > 1e-4


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
    draws = SystemRandom().integers(low, high, 50_000)
    assert draws.size == 50_000 and draws.min() >= low and draws.max() < high
    slices = ((draws - low).astype(object) * 10 // span).astype(np.int64)
    assert stats.chisquare(np.bincount(slices, minlength=10)).pvalue > 1e-4
