"""The exact sparse vector (shared.mechanisms.sparse_vector): the kernel's Bernoulli pieces
against their closed forms, the output law against the exact sum over the threshold noise
(kernel and Python paths, seeded and fresh draws), the privacy ratio analytically, replay on
more words, extremes and bad input."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

import shared.mechanisms.sparse_vector as sv
from shared.errors import InvalidParameterError
from shared.mechanisms import _sparse_vector_kernels as kernels
from shared.rng import SystemRandom, random_words
from tests.fresh_draws import assert_fits


def tail(m: np.ndarray, r: float) -> np.ndarray:
    """h(m) = P(nu >= m) for the discrete Laplace with P(k) proportional to r^|k|."""
    return np.where(
        m >= 1, r ** np.maximum(m, 1) / (1 + r), 1 - r ** np.maximum(1 - m, 1) / (1 + r)
    )


def svt_distribution(counts: np.ndarray, *, threshold: float, epsilon: float) -> np.ndarray:
    """P(output = j) for every j, and "none" as the last entry, as the exact sum over the
    threshold noise rho = z of f(z) prod_{i<j} (1 - h(m_i)) h(m_j), m_i = c_i - T + z (the sum
    cut where f < 1e-25)."""
    half = float(sv.dyadic_floor(epsilon) / 2)
    r = math.exp(-half)
    reach = math.ceil(58 / half)
    z = np.arange(-reach, reach + 1)
    f = (1 - r) / (1 + r) * r ** np.abs(z)
    m = np.asarray(counts)[:, None] - math.floor(threshold) + z[None, :]
    stop = tail(m, r)
    log_not_yet = np.cumsum(np.log(np.maximum(1.0 - stop, 1e-300)), axis=0)
    before = np.vstack([np.zeros((1, z.size)), log_not_yet[:-1]])
    probs = (np.exp(before) * stop) @ f
    return np.append(probs, np.exp(log_not_yet[-1]) @ f)


def draws(counts: np.ndarray, *, threshold: float, epsilon: float, rng, size: int) -> np.ndarray:
    """``size`` outputs, "none" as len(counts)."""
    out = [sv.first_at_or_below(counts, threshold=threshold, epsilon=epsilon, rng=rng)
           for _ in range(size)]  # fmt: skip
    return np.array([counts.size if j is None else j for j in out])


def chi_square_p(observed: np.ndarray, probs: np.ndarray) -> float:
    """p-value of observed indices against probs, cells below 5 expected draws pooled."""
    counts = np.bincount(observed, minlength=probs.size).astype(float)
    expected = probs * observed.size
    big = expected >= 5
    obs = np.append(counts[big], counts[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    keep = exp > 0
    return float(stats.chisquare(obs[keep], exp[keep] * obs[keep].sum() / exp[keep].sum()).pvalue)


# Descending counts of a monotone query (norms above a rising radius), long runs included.
COUNTS = np.array([30] * 20 + [29, 27, 24, 20, 15, 11, 8, 5, 3, 2, 1] + [0] * 20)


def test_the_kernel_bernoulli_pieces_have_their_closed_form_probabilities() -> None:
    """_exp: exp(-num / den) (whole units and remainders); _sigmoid: 1 / (1 + exp(-num / den))."""
    words = random_words(np.random.default_rng(1), 2_000_000)
    cases = [(kernels._exp, 0, 1), (kernels._exp, 1, 3), (kernels._exp, 3, 3),
             (kernels._exp, 7, 2), (kernels._exp, 5, 2**40), (kernels._sigmoid, 1, 2),
             (kernels._sigmoid, 0, 1), (kernels._sigmoid, 9, 4)]  # fmt: skip
    pos = 0
    for piece, num, den in cases:
        trials, hits = 20_000, 0
        for _ in range(trials):
            ok, pos = piece(words, pos, num, den)
            assert pos >= 0
            hits += ok
        p = math.exp(-num / den) if piece is kernels._exp else 1 / (1 + math.exp(-num / den))
        assert abs(hits / trials - p) <= 5 * math.sqrt(p * (1 - p) / trials) + 1e-9, (num, den)


@pytest.mark.parametrize("epsilon", [0.4, 1.0, 3.0])
def test_outputs_follow_the_exact_distribution(epsilon: float) -> None:
    rng = np.random.default_rng(int(epsilon * 10))
    probs = svt_distribution(COUNTS, threshold=5.5, epsilon=epsilon)
    assert probs.sum() == pytest.approx(1.0, abs=1e-9)
    observed = draws(COUNTS, threshold=5.5, epsilon=epsilon, rng=rng, size=20_000)
    assert chi_square_p(observed, probs) > 1e-4


def test_fresh_draws_follow_the_exact_distribution() -> None:
    probs = svt_distribution(COUNTS, threshold=5.5, epsilon=1.0)
    assert_fits(
        lambda: chi_square_p(
            draws(COUNTS, threshold=5.5, epsilon=1.0, rng=SystemRandom(), size=10_000), probs
        )
    )


def test_the_python_path_follows_the_same_distribution(monkeypatch: pytest.MonkeyPatch) -> None:
    """Beyond the kernel's integers (epsilon below ~1e-12) the comparisons run in Python
    integers; forced here at a usual epsilon, against the same exact law."""
    monkeypatch.setattr(sv, "_KERNEL_LIMIT", 1)
    monkeypatch.setattr(kernels, "first_firing", None)  # the kernel must not run
    probs = svt_distribution(COUNTS, threshold=5.5, epsilon=1.0)
    observed = draws(COUNTS, threshold=5.5, epsilon=1.0, rng=np.random.default_rng(9), size=6_000)
    assert chi_square_p(observed, probs) > 1e-4


@pytest.mark.parametrize("epsilon", [0.3, 1.0, 3.0])
def test_every_output_ratio_is_within_epsilon_for_monotone_neighbours(epsilon: float) -> None:
    """Analytic privacy check: one record moved up or down shifts a contiguous block of counts
    by +1 or -1 (monotone); every output's probability ratio stays within e^epsilon, and the
    worst pair comes close to it (the bound is not loose by a factor)."""
    base = COUNTS
    p = svt_distribution(base, threshold=5.5, epsilon=epsilon)
    worst = 0.0
    for lo in (0, 10, 20, 25, 31):
        for hi in (lo + 1, lo + 6, base.size):
            for sign in (1, -1):
                other = base.copy()
                other[lo:hi] += sign
                q = svt_distribution(other, threshold=5.5, epsilon=epsilon)
                seen = (p > 1e-12) | (q > 1e-12)
                worst = max(worst, float(np.abs(np.log(p[seen] / q[seen])).max()))
    assert worst <= epsilon * (1 + 1e-9), worst
    assert worst > 0.4 * epsilon


def test_the_kernel_answer_does_not_depend_on_the_word_supply() -> None:
    """Run on a prefix of the words, the kernel either runs out or answers as on all of them:
    extending the supply replays the same draws (the answer is the endless stream's)."""
    rng = np.random.default_rng(5)
    for _ in range(40):
        m = np.sort(rng.integers(-5, 40, size=60))[::-1].copy()
        words = random_words(rng, 2000)
        full = kernels.first_firing(m, 1, 2, words)
        assert full != kernels.OUT_OF_WORDS
        for cut in (0, 1, 5, 50, 200, 1000):
            part = kernels.first_firing(m, 1, 2, words[:cut])
            assert part in (kernels.OUT_OF_WORDS, full)


@settings(max_examples=100, deadline=None)
@given(value=st.floats(min_value=5e-324, max_value=1e300))
def test_dyadic_floor_is_the_largest_short_dyadic_below(value: float) -> None:
    q = sv.dyadic_floor(value)
    assert 0 < q <= Fraction(value)
    mantissa = q / Fraction(2) ** math.frexp(value)[1] * 2**sv.EPSILON_BITS
    assert mantissa.denominator == 1 and 2 ** (sv.EPSILON_BITS - 1) <= mantissa < 2**sv.EPSILON_BITS
    step = Fraction(2) ** (math.frexp(value)[1] - sv.EPSILON_BITS)
    assert Fraction(value) < q + step


@pytest.mark.parametrize("epsilon", [5e-324, 1e-300, 1e-12, 1e-6, 1e6, 1e300])
def test_extreme_epsilons_and_counts_answer(epsilon: float) -> None:
    rng = np.random.default_rng(3)
    extremes = np.array([2**63 - 1, 0, -(2**63)], dtype=np.int64)  # |min| wraps in int64
    big = np.array([2**64 - 1, 5], dtype=np.uint64)
    for counts in (COUNTS, np.array([2**50, 2**40, 3, 0]), np.array([7]), extremes, big):
        fired = sv.first_at_or_below(counts, threshold=1e15, epsilon=epsilon, rng=rng)
        assert fired is None or 0 <= fired < counts.size
    # a huge epsilon is almost noiseless: the first count at or below the threshold
    if epsilon >= 1e6:
        assert sv.first_at_or_below(COUNTS, threshold=5.5, epsilon=epsilon, rng=rng) == 27


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"counts": np.array([])}, "counts"),
        ({"counts": np.array([1.5, 2.0])}, "counts"),
        ({"counts": np.ones((2, 2), dtype=int)}, "counts"),
        ({"threshold": math.inf}, "threshold"),
        ({"threshold": math.nan}, "threshold"),
        ({"epsilon": 0.0}, "epsilon"),
        ({"epsilon": math.inf}, "epsilon"),
    ],
)
def test_bad_input_is_refused_naming_it(kwargs: dict, match: str) -> None:
    args = {"counts": COUNTS, "threshold": 5.0, "epsilon": 1.0, "rng": np.random.default_rng(0)}
    with pytest.raises(InvalidParameterError, match=match):
        sv.first_at_or_below(**(args | kwargs))
