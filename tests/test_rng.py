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
