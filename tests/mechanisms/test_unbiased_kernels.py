"""The exact unbiased randomizer's fused kernel (``_unbiased_kernels.respond_words``) against a
numpy description, draw for draw, and its CSPRNG path on a fixed byte stream.

The description is the law the privacy check verifies: label y is clipped to the grid, l is the
lower grid index (``searchsorted(side="right") - 1`` clipped to [0, K - 2]), it rounds up to
l + 1 iff the rounding draw is below R = ceil(t 2^53), and the response is the first output
whose cumulative weight in that row exceeds the response draw (``searchsorted(side="right")``).
The kernel's lookup tables only choose where its searches start; these tests pick grids and
weights where the tables are least helpful (points crowded into one bucket, runs of weight-1
outputs, spans at the float extremes) and labels and draws exactly on every boundary.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shared.rng as rng_module
from shared.mechanisms import _unbiased_kernels as kernels
from shared.mechanisms import unbiased as U
from shared.mechanisms.histogram import Prior
from shared.rng import SystemRandom

D = U.WEIGHT_TOTAL
MASK = np.uint64(D - 1)


def described(
    grid: np.ndarray, weights: np.ndarray, outputs: np.ndarray, y: np.ndarray, words: np.ndarray
) -> np.ndarray:
    """The outputs the law gives for labels ``y`` and 2 n words (rounding words first), in
    numpy and Python integers (no kernel code)."""
    n = y.size
    up = (words[:n] & MASK).astype(np.int64)
    draw = (words[n:] & MASK).astype(np.int64)
    clipped = np.clip(y, grid[0], grid[-1])
    low = np.clip(np.searchsorted(grid, clipped, side="right") - 1, 0, grid.size - 2)
    t = np.clip((clipped - grid[low]) / (grid[low + 1] - grid[low]), 0.0, 1.0)
    threshold = np.ceil(np.ldexp(t, 53)).astype(np.int64)
    row = low + (up < threshold)
    cumulative = np.cumsum(weights, axis=1)
    index = [
        int(np.searchsorted(cumulative[r], v, side="right")) for r, v in zip(row, draw, strict=True)
    ]
    return outputs[index]


def kernel(
    grid: np.ndarray, weights: np.ndarray, outputs: np.ndarray, y: np.ndarray, words: np.ndarray
) -> np.ndarray:
    """``respond_words`` with the tables ``ExactUnbiased`` builds, one chunk."""
    offsets = np.arange(grid.size, dtype=np.int64)[:, None] * D
    cumulative = np.ascontiguousarray((np.cumsum(weights, axis=1) + offsets).ravel())
    lookup = U._lookup_tables(grid, cumulative, outputs.size)
    out = np.full(y.size, np.nan)
    kernels.respond_words(
        np.ascontiguousarray(y, dtype=np.float64),
        0,
        grid,
        lookup["interior"],
        lookup["cells"],
        lookup["scale"],
        cumulative,
        lookup["draws"],
        lookup["shift"],
        outputs,
        words,
        out,
    )
    return out


@st.composite
def grids(draw: st.DrawFn) -> np.ndarray:
    """Increasing grids: even, crowded into one spot (many points per lookup bucket), random,
    and at float extremes (spans that overflow, or are a few ulps wide)."""
    k = draw(st.integers(2, 40))
    shape = draw(st.sampled_from(["even", "crowded", "random", "huge", "tiny", "far"]))
    if shape == "even":
        return np.linspace(-3.0, 7.0, k)
    if shape == "crowded":
        # Every interior point within a 1e-9 wide spot next to the low end.
        return np.concatenate([[0.0], 0.5 + np.arange(k - 2) * 1e-12, [1.0]])
    if shape == "huge":
        return np.linspace(-1.5, 1.5, k) * 1e308  # hi - lo overflows to inf
    if shape == "tiny":
        start = 1.0
        return np.array([start + i * np.spacing(start) for i in range(k)])
    if shape == "far":
        return 1e6 + np.linspace(0.0, 1e-3, k)
    gaps = draw(st.lists(st.floats(1e-6, 10.0), min_size=k - 1, max_size=k - 1))
    return np.concatenate([[0.0], np.cumsum(gaps)])


def weight_rows(gen: np.random.Generator, k: int, m: int) -> np.ndarray:
    """Rows of integer weights >= 1 summing to D, with runs of 1s (outputs crowding one draw
    bucket) next to large entries."""
    w = np.ones((k, m), dtype=np.int64)
    for i in range(k):
        big = gen.choice(m, size=max(1, m // 3), replace=False)
        share = gen.dirichlet(np.ones(big.size))
        w[i, big] = np.maximum(1, np.floor(share * (D - m)).astype(np.int64))
        w[i, big[0]] += D - w[i].sum()
    assert np.all(w >= 1) and np.all(w.sum(axis=1) == D)
    return w


def probe(grid: np.ndarray, gen: np.random.Generator, n: int) -> np.ndarray:
    """Labels on, just below and just above every grid point, outside the grid, and random."""
    with np.errstate(over="ignore", invalid="ignore"):
        spread = grid[0] + (grid[-1] - grid[0]) * gen.uniform(-0.2, 1.2, n)
    inside = grid[np.clip(np.searchsorted(grid, np.sort(gen.uniform(0, 1, n))), 0, grid.size - 1)]
    labels = np.concatenate(
        [
            spread,
            inside,
            grid,
            np.nextafter(grid, -np.inf),
            np.nextafter(grid, np.inf),
            [-1e308, 1e308, grid[0], grid[-1]],
        ]
    )
    return labels[np.isfinite(labels)]


def probe_words(weights: np.ndarray, gen: np.random.Generator, n: int) -> np.ndarray:
    """2 n words: random, plus (in the response half) every row's cumulative weights and the
    values just below them, with random high bits above the 53 the kernel keeps."""
    cumulative = np.cumsum(weights, axis=1).ravel()
    edges = np.concatenate([cumulative - 1, cumulative, [0, D - 1]]) % D
    up = gen.integers(0, 2**64, n, dtype=np.uint64)
    draw = gen.integers(0, 2**64, n, dtype=np.uint64)
    draw[: min(n, edges.size)] = edges[: min(n, edges.size)].astype(np.uint64) | (
        gen.integers(0, 2**11, min(n, edges.size), dtype=np.uint64) << np.uint64(53)
    )
    return np.concatenate([up, gen.permutation(draw)])


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(grid=grids(), m=st.integers(1, 45), seed=st.integers(0, 2**32 - 1))
def test_the_kernel_is_the_law_on_adversarial_grids_and_weights(
    grid: np.ndarray, m: int, seed: int
) -> None:
    gen = np.random.default_rng(seed)
    weights = weight_rows(gen, grid.size, m)
    outputs = np.arange(m, dtype=np.float64) * 3.0 - 7.0
    y = probe(grid, gen, 300)
    words = probe_words(weights, gen, y.size)
    with np.errstate(over="ignore", invalid="ignore"):
        want = described(grid, weights, outputs, y, words)
    assert np.array_equal(kernel(grid, weights, outputs, y, words), want)


def test_a_rounding_draw_just_below_r_rounds_up_and_r_itself_does_not() -> None:
    """The kernel compares the draw with t 2^53 in float64; for an integer draw that is the
    integer comparison with R = ceil(t 2^53): checked on both sides of R for many t."""
    grid = np.array([0.0, 1.0, 3.0])
    weights = np.array([[D - 1, 1], [1, D - 1]], dtype=np.int64)
    weights = np.vstack([weights, [[1, D - 1]]])
    outputs = np.array([-5.0, 5.0])
    gen = np.random.default_rng(3)
    y = np.concatenate([gen.uniform(0.0, 1.0, 2000), [0.0, 1e-300, 0.5, np.nextafter(1.0, 0)]])
    threshold = np.ceil(np.ldexp(np.clip(y / 1.0, 0, 1), 53)).astype(np.int64)
    for shift, rounds_up in ((-1, True), (0, False)):
        up = np.clip(threshold + shift, 0, D - 1).astype(np.uint64)
        # A response draw of 1 picks output 0 in row 0 and output 1 in row 1: the row shows.
        words = np.concatenate([up, np.ones(y.size, dtype=np.uint64)])
        got = kernel(grid, weights, outputs, y, words)
        want = described(grid, weights, outputs, y, words)
        assert np.array_equal(got, want)
        valid = (threshold + shift >= 0) & (threshold + shift < D)
        assert np.all((got[valid] == outputs[1]) == rounds_up)


def test_the_csprng_path_reads_each_chunk_as_rounding_then_response_words(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """From the OS CSPRNG, labels go in chunks of ``LABELS_PER_DRAW``: one ``os.urandom`` of
    16 c bytes per chunk of c, its first c words the chunk's rounding draws and the next c its
    response draws (low 53 bits), nothing else drawn; on a fixed byte stream the outputs are
    the law's, chunk by chunk (bit for bit)."""
    prior = Prior(edges=np.linspace(0.0, 10.0, 9), probs=np.array([4, 1, 1, 0, 0, 2, 1, 1]) / 10)
    mech = U.build(prior, epsilon=1.5)
    size = U.LABELS_PER_DRAW
    n = 2 * size + 777
    gen = np.random.default_rng(11)
    y = gen.uniform(-1.0, 11.0, n)
    stream = gen.integers(0, 2**64, 2 * n, dtype=np.uint64).tobytes()
    served: list[int] = []

    class FixedBytes:
        def urandom(self, count: int) -> bytes:
            start = sum(served)
            served.append(count)
            return stream[start : start + count]

    monkeypatch.setattr(rng_module, "os", FixedBytes())
    got = mech.randomize(y, SystemRandom())
    assert served == [16 * size, 16 * size, 16 * 777]
    words = np.frombuffer(stream, dtype=np.uint64)
    want = np.concatenate(
        [
            described(
                mech.input_grid,
                mech.weights,
                mech.output_values,
                y[first : first + count],
                words[2 * first : 2 * (first + count)],
            )
            for first, count in ((0, size), (size, size), (2 * size, 777))
        ]
    )
    assert np.array_equal(got, want)


@pytest.mark.parametrize("k", [2, 3, 17, 1000])
def test_the_cell_table_is_a_lower_bound_of_every_labels_count(k: int) -> None:
    """``cell_table`` never starts a search past its answer: for labels in every bucket, the
    table's count is at most the number of interior points <= the label."""
    gen = np.random.default_rng(k)
    grid = np.sort(np.unique(np.concatenate([[0.0, 1.0], gen.beta(0.3, 0.3, k - 2)])))
    buckets = kernels.CELL_BUCKETS * (grid.size - 1)
    scale = buckets / (grid[-1] - grid[0])
    table = kernels.cell_table(grid, scale, buckets)
    y = np.concatenate([gen.uniform(0, 1, 20_000), grid, np.nextafter(grid, 2.0)])
    y = np.clip(y, grid[0], grid[-1])
    bucket = np.minimum(((y - grid[0]) * scale).astype(np.int64), buckets - 1)
    counts = np.searchsorted(grid[1:-1], y, side="right")
    assert np.all(table[bucket] <= counts)


def test_the_kernel_and_the_mechanism_agree_on_53_bit_draws() -> None:
    """The kernel keeps the low 53 bits of each word and shifts row i's cumulative weights by
    i 2^53: both of the mechanism's draw spans must be 2^53."""
    assert U.WEIGHT_BITS == U.ROUNDING_BITS == 53
    assert int(kernels._LOW_53) == D - 1 and kernels._TWO_53 == float(D)
