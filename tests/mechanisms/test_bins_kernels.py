"""RR-on-Bins' fused randomization kernels against a pure-numpy reference, draw for draw.

The reference is Algorithm 1 as ``RROnBins.randomize`` computed it before the kernels were
fused: ``searchsorted(thresholds, y, side="right")``, one draw v uniform on [0, D) per label from
``rng.integers(0, D)`` (``SystemRandom``: 64-bit words, rejection below the largest multiple of
D, word % D), keep the bin if v < K, else the ((v - K) // O)-th other bin, then the output value.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import chisquare

import shared.rng
from shared.errors import InvalidParameterError
from shared.mechanisms import _bins_kernels as kernels
from shared.mechanisms import rr_on_bins
from shared.mechanisms.rr_on_bins import RROnBins, response_weights
from shared.rng import SystemRandom
from tests.fresh_draws import assert_fits


def reference_outputs(mechanism: RROnBins, labels: np.ndarray, draws: np.ndarray) -> np.ndarray:
    """Algorithm 1 in numpy (object integers: no overflow anywhere)."""
    keep, other, _ = response_weights(mechanism.d, mechanism.epsilon)
    index = np.searchsorted(mechanism.thresholds, labels, side="right").astype(object)
    v = np.asarray(draws).astype(object)
    chosen = (v - keep) // other if mechanism.d > 1 else np.zeros_like(index)
    chosen = chosen + (chosen >= index)
    final = np.where(v < keep, index, chosen).astype(np.int64)
    return mechanism.output_values[final]


def accepted_draws(words: np.ndarray, total: int) -> list[int]:
    """``SystemRandom.integers(0, total)`` on given 64-bit words, by brute force."""
    limit = (2**64 // total) * total
    return [int(w) % total for w in words.tolist() if int(w) < limit]


def mechanism_with(d: int, epsilon: float = 0.7) -> RROnBins:
    return RROnBins(
        thresholds=np.arange(1, d, dtype=np.float64) * 10.0,
        output_values=np.arange(d, dtype=np.float64) * 10.0 + 5.0,
        epsilon=epsilon,
    )


def probe_labels(mechanism: RROnBins, n: int, seed: int) -> np.ndarray:
    """Labels spread over every bin, exactly on and just below every threshold."""
    gen = np.random.default_rng(seed)
    t = mechanism.thresholds
    spread = gen.uniform(-20.0, 10.0 * mechanism.d + 20.0, n)
    return np.concatenate([spread, t, np.nextafter(t, -np.inf)])


def boundary_draws(d: int, epsilon: float, n: int, seed: int) -> np.ndarray:
    """Uniform draws on [0, D) plus every decision boundary (K - 1, K, K + j O - 1, K + j O)."""
    keep, other, total = response_weights(d, epsilon)
    edges = [0, keep - 1, keep, total - 1]
    for j in range(1, d):
        edges += [keep + j * other - 1, keep + j * other]
    edges = [e for e in edges if 0 <= e < total]
    uniform = np.random.default_rng(seed).integers(0, total, n - len(edges))
    return np.concatenate([np.array(edges, dtype=np.int64), uniform])


@pytest.mark.parametrize("d", [1, 2, 3, 5, 64, 129, 130, 1000])  # 129: 128 thresholds
@pytest.mark.parametrize("epsilon", [0.05, 0.95, 8.0])
def test_respond_draws_matches_the_reference_at_every_boundary(d: int, epsilon: float) -> None:
    mechanism = mechanism_with(d, epsilon)
    labels = probe_labels(mechanism, 3000, seed=d)
    draws = boundary_draws(d, epsilon, labels.size, seed=d + 1)
    keep, other, _ = response_weights(d, epsilon)
    got = kernels.respond_draws(
        labels, mechanism.thresholds, mechanism.output_values, draws, np.uint64(keep),
        np.uint64(other),
    )  # fmt: skip
    assert np.array_equal(got, reference_outputs(mechanism, labels, draws))


@settings(max_examples=60, deadline=None)
@given(
    thresholds=st.lists(
        st.floats(-1e6, 1e6, allow_nan=False), min_size=0, max_size=40, unique=True
    ),
    labels=st.lists(st.floats(-2e6, 2e6, allow_nan=False), min_size=1, max_size=60),
    epsilon=st.floats(1e-3, 30.0),
    seed=st.integers(0, 2**32 - 1),
)
def test_respond_draws_property(
    thresholds: list[float], labels: list[float], epsilon: float, seed: int
) -> None:
    """Any thresholds, labels (also on a threshold) and epsilon: the kernel is the reference."""
    t = np.sort(np.array(thresholds, dtype=np.float64))
    mechanism = RROnBins(thresholds=t, output_values=np.arange(t.size + 1.0), epsilon=epsilon)
    y = np.concatenate([np.array(labels), t])
    keep, other, total = response_weights(mechanism.d, epsilon)
    draws = np.random.default_rng(seed).integers(0, total, y.size)
    got = mechanism.randomize(y, np.random.default_rng(seed))
    assert np.array_equal(got, reference_outputs(mechanism, y, draws))


@pytest.mark.parametrize("d", [2, 3, 7, 4096])
def test_respond_words_is_rejection_sampling_then_the_reference(d: int) -> None:
    """Raw words with rejected ones planted (every limit edge): the kept words, in order, as
    word % D, randomize the labels in order; calls resume where the last one stopped."""
    mechanism = mechanism_with(d, 0.95)
    keep, other, total = response_weights(d, 0.95)
    limit = (2**64 // total) * total
    gen = np.random.default_rng(d)
    labels = probe_labels(mechanism, 2000, seed=d)
    words = gen.integers(0, 2**64, labels.size + 300, dtype=np.uint64, endpoint=False)
    planted = [2**64 - 1, limit % 2**64, limit - 1, 0, total - 1, total, keep - 1, keep]
    words[: len(planted)] = np.array(planted, dtype=np.uint64)
    rejected_at = gen.choice(np.arange(10, words.size), size=40, replace=False)
    if limit < 2**64:
        words[rejected_at] = np.uint64(limit) + gen.integers(0, 2**64 - limit, 40, dtype=np.uint64)
    want = reference_outputs(mechanism, labels, accepted_draws(words, total)[: labels.size])
    out = np.full(labels.size, np.nan)
    args = (np.uint64(limit % 2**64), np.uint64(total), np.uint64(keep), np.uint64(other))
    filled, start = 0, 0
    for size in (1, 7, 500, 2**20):  # uneven chunks; the last is more than is left
        chunk = words[start : start + size]
        filled = kernels.respond_words(
            labels, mechanism.thresholds, mechanism.output_values, chunk, *args, out, filled
        )
        start += size
    assert filled == labels.size
    assert np.array_equal(out, want)


class SequentialBytes:
    """A stand-in for ``os`` in ``shared.rng``: ``urandom`` serves one fixed byte string in order,
    so two ways of drawing the same number of bytes see the same bytes."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.position = 0
        self.calls: list[int] = []

    def urandom(self, size: int) -> bytes:
        chunk = self.data[self.position : self.position + size]
        assert len(chunk) == size, "the test stream ran out"
        self.position += size
        self.calls.append(size)
        return chunk


def old_csprng_randomize(mechanism: RROnBins, labels: np.ndarray) -> np.ndarray:
    """The pre-fusion ``randomize`` for ``SystemRandom``: ``integers(0, D)``, then Algorithm 1."""
    keep, other, total = response_weights(mechanism.d, mechanism.epsilon)
    index = mechanism.phi(labels)
    draws = np.ascontiguousarray(SystemRandom().integers(0, total, size=labels.size))
    kernels.apply_response(index, draws, keep, other)
    return mechanism.output_values[index]


def stream(words: np.ndarray, spare: int = 4096) -> bytes:
    return words.tobytes() + np.random.default_rng(99).bytes(8 * spare)


@pytest.mark.parametrize("d", [2, 3, 9])
def test_csprng_path_is_bit_for_bit_the_old_one_and_draws_exactly_its_words(
    d: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Same bytes in, same outputs out, as the old integers-then-respond code; small chunks
    force many ``os.urandom`` calls and planted words force rejections across chunk edges."""
    mechanism = mechanism_with(d, 0.95)
    labels = probe_labels(mechanism, 5000, seed=7)
    _, _, total = response_weights(d, 0.95)
    limit = (2**64 // total) * total
    words = np.random.default_rng(d).integers(0, 2**64, labels.size + 200, dtype=np.uint64)
    if limit < 2**64:
        words[63::64] = np.uint64(2**64 - 1)  # every 64th word is rejected
    kept_at = np.flatnonzero(words.astype(object) < limit)
    needed = int(kept_at[labels.size - 1]) + 1  # the shortest prefix holding n kept words
    data = stream(words)

    old_source = SequentialBytes(data)
    monkeypatch.setattr(shared.rng, "os", old_source)
    want = old_csprng_randomize(mechanism, labels)

    new_source = SequentialBytes(data)
    monkeypatch.setattr(shared.rng, "os", new_source)
    monkeypatch.setattr(rr_on_bins, "WORDS_PER_DRAW", 100)
    got = mechanism.randomize(labels, SystemRandom())

    assert np.array_equal(got, want)
    assert new_source.position == 8 * needed  # exactly the words it reads, no spare
    assert (needed > labels.size) == (limit < 2**64)
    assert max(new_source.calls) <= 8 * 100


def test_csprng_path_draws_exactly_eight_bytes_per_label_with_two_bins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    mechanism = mechanism_with(2, 0.95)
    labels = probe_labels(mechanism, 100_000, seed=3)
    source = SequentialBytes(np.random.default_rng(4).bytes(8 * labels.size))
    monkeypatch.setattr(shared.rng, "os", source)
    mechanism.randomize(labels, SystemRandom())
    assert source.position == 8 * labels.size


@pytest.mark.parametrize("d", [2, 5])
def test_csprng_path_has_exactly_the_published_output_probabilities(d: int) -> None:
    """Chi-square of the real OS-CSPRNG path against K / D and O / D, for a label in each bin."""
    mechanism = mechanism_with(d, 0.95)
    n = 60_000
    for b in range(d):
        label = float(mechanism.output_values[b])
        expected = mechanism.output_probabilities(label) * n

        def pvalue(label: float = label, expected: np.ndarray = expected) -> float:
            out = mechanism.randomize(np.full(n, label), SystemRandom())
            counts = np.array([np.count_nonzero(out == v) for v in mechanism.output_values])
            assert counts.sum() == n
            return float(chisquare(counts, expected).pvalue)

        assert_fits(pvalue)


def test_csprng_path_refuses_non_finite_labels_and_handles_a_single_bin() -> None:
    mechanism = mechanism_with(3)
    with pytest.raises(InvalidParameterError, match="finite"):
        mechanism.randomize(np.array([1.0, np.nan]), SystemRandom())
    single = mechanism_with(1)
    assert np.array_equal(single.randomize(np.array([-3.0, 99.0]), SystemRandom()), [5.0, 5.0])


def test_respond_words_two_bins_with_a_non_power_of_two_total() -> None:
    """The two-bin shortcut needs D a power of two (RR-on-Bins' D = 2^62); any other D of two
    bins goes the general way, with rejection, and still matches the reference."""
    mechanism = mechanism_with(2, 0.95)
    total = 2**62 + 12345  # not a power of two, above 2^64 / 5: limit 3 D, 2^64 - 3 D rejected
    keep = total - (total // 3)
    other = total - keep
    limit = (2**64 // total) * total
    gen = np.random.default_rng(12)
    labels = probe_labels(mechanism, 3000, seed=12)
    words = gen.integers(0, 2**64, 2 * labels.size, dtype=np.uint64)  # a quarter rejected
    words[::50] = np.uint64(2**64 - 1)
    kept = [int(w) % total for w in words.tolist() if int(w) < limit][: labels.size]
    index = np.searchsorted(mechanism.thresholds, labels, side="right")
    want = mechanism.output_values[np.where(np.array(kept, dtype=object) < keep, index, 1 - index)]
    out = np.empty(labels.size)
    args = (np.uint64(limit), np.uint64(total), np.uint64(keep), np.uint64(other))
    filled = kernels.respond_words(
        labels, mechanism.thresholds, mechanism.output_values, words, *args, out, 0
    )
    assert filled == labels.size and np.array_equal(out, want)
