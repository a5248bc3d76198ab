"""The counts-based epsilon1 step (what the Spark job runs) equals the label-vector path.

``_reference_*`` are the pre-refactor ``private_histogram`` / ``private_mean`` bodies, verbatim:
on the same seed both paths must give bit-identical outputs and leave the generator in the same
state (the same draws, in the same order).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.domain import LabelDomain, check_labels
from shared.errors import InvalidParameterError
from shared.mechanisms.discrete_laplace import sample_discrete_laplace
from shared.mechanisms.histogram import (
    Prior,
    bin_counts,
    bin_edges,
    noisy_histogram,
    private_histogram,
    project_to_simplex,
)
from shared.mechanisms.private_mean import (
    MEAN_LEVELS,
    level_sum,
    mean_levels,
    noisy_mean,
    private_mean,
)
from shared.plan import plan_release
from shared.randomizer import LabelCounts, execute, measure, noisy_prior_from_counts

_SATURATE = 2**1000


def _reference_histogram(labels, *, lo, hi, bins, epsilon, rng):  # type: ignore[no-untyped-def]
    values = check_labels(labels)
    edges = bin_edges(lo=lo, hi=hi, bins=bins)
    counts = bin_counts(values, lo=lo, hi=hi, bins=len(edges) - 1)
    scale = Fraction(2) / Fraction(epsilon)
    noisy = np.array(
        [
            float(min(max(int(count) + sample_discrete_laplace(rng, scale), -_SATURATE), _SATURATE))
            for count in counts
        ]
    )
    return Prior.from_counts(project_to_simplex(noisy, total=values.size), edges=edges)


def _reference_mean(labels, *, lo, hi, epsilon, rng):  # type: ignore[no-untyped-def]
    domain = LabelDomain(lo=lo, hi=hi)
    values = domain.clip(check_labels(labels))
    width = domain.hi - domain.lo
    levels = np.rint((values - domain.lo) / width * MEAN_LEVELS).astype(np.int64)
    noise = sample_discrete_laplace(rng, Fraction(MEAN_LEVELS) / Fraction(epsilon))
    total = min(max(int(levels.sum()) + int(noise), -_SATURATE), _SATURATE)
    share = min(max(total / (MEAN_LEVELS * values.size), 0.0), 1.0)
    return float(min(max(domain.lo + width * share, domain.lo), domain.hi))


def _labels(seed: int, n: int = 2000) -> np.ndarray:
    gen = np.random.default_rng(1000 + seed)
    return np.concatenate([gen.exponential(20.0, n - 10), [-5.0, 0.0, 100.0, 250.0, 1e9] * 2])


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("epsilon", [0.01, 0.3, 2.0])
def test_histogram_and_mean_match_the_reference_bit_for_bit(seed: int, epsilon: float) -> None:
    labels = _labels(seed)
    old, new = np.random.default_rng(seed), np.random.default_rng(seed)
    for _ in range(2):  # two rounds: the generators must stay in step
        a = _reference_histogram(labels, lo=0.0, hi=100.0, bins=16, epsilon=epsilon, rng=old)
        b = private_histogram(labels, lo=0.0, hi=100.0, bins=16, epsilon=epsilon, rng=new)
        assert a.probs.tobytes() == b.probs.tobytes() and a.edges.tobytes() == b.edges.tobytes()
        ma = _reference_mean(labels, lo=0.0, hi=100.0, epsilon=epsilon, rng=old)
        mb = private_mean(labels, lo=0.0, hi=100.0, epsilon=epsilon, rng=new)
        assert ma == mb
    assert old.random() == new.random()


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("mechanism", ["auto", "rr_on_bins", "rpwithprior"])
def test_partitioned_counts_give_the_same_noisy_prior_and_release(
    seed: int, mechanism: str
) -> None:
    labels = LabelDomain(lo=0.0, hi=100.0).clip(_labels(seed))
    plan = plan_release(n=labels.size, lo=0.0, hi=100.0, epsilon="0.5", mechanism=mechanism)
    whole = measure(plan, labels, np.random.default_rng(seed))
    parts = [LabelCounts.of(plan, piece) for piece in np.array_split(labels, 7)]
    parts.append(LabelCounts.of(plan, labels[:0]))  # an empty partition adds nothing
    total = parts[0]
    for part in parts[1:]:
        total = total + part
    assert total.n == labels.size
    split = noisy_prior_from_counts(plan, total, np.random.default_rng(seed))
    assert split.prior.probs.tobytes() == whole.prior.probs.tobytes()
    assert split.label_mean == whole.label_mean
    # The release through execute draws the same prior first.
    release = execute(plan, labels, np.random.default_rng(seed))
    assert release.prior.probs.tobytes() == whole.prior.probs.tobytes()
    assert release.label_mean == whole.label_mean


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.floats(-50.0, 150.0, allow_nan=False), min_size=1, max_size=200),
    st.integers(0, 2**32 - 1),
)
def test_level_sum_matches_the_reference_levels(values: list[float], seed: int) -> None:
    array = np.array(values)
    clipped = np.clip(array, 0.0, 100.0)
    reference = np.rint((clipped - 0.0) / 100.0 * MEAN_LEVELS).astype(np.int64)
    assert np.array_equal(mean_levels(array, lo=0.0, hi=100.0), reference)
    assert level_sum(array, lo=0.0, hi=100.0) == int(reference.sum())
    a = private_mean(array, lo=0.0, hi=100.0, epsilon=0.7, rng=np.random.default_rng(seed))
    b = _reference_mean(array, lo=0.0, hi=100.0, epsilon=0.7, rng=np.random.default_rng(seed))
    assert a == b


def test_noisy_mean_at_huge_epsilon_is_the_level_mean() -> None:
    labels = np.array([0.0, 50.0, 100.0, 25.0])
    total = level_sum(labels, lo=0.0, hi=100.0)
    mean = noisy_mean(total, n=4, lo=0.0, hi=100.0, epsilon=1e12, rng=np.random.default_rng(0))
    assert math.isclose(mean, 43.75, abs_tol=1e-9)


@pytest.mark.parametrize(
    ("counts", "n", "message"),
    [
        (np.array([1.0, 2.0]), 3, "integers"),
        (np.array([1, -1]), 0, ">= 0"),
        (np.array([1, 2]), 4, "add up to 3"),
    ],
)
def test_noisy_histogram_refuses_bad_counts(counts: np.ndarray, n: int, message: str) -> None:
    with pytest.raises(InvalidParameterError, match=message):
        noisy_histogram(counts, n=n, lo=0.0, hi=1.0, epsilon=1.0, rng=np.random.default_rng(0))


@pytest.mark.parametrize(
    ("total", "n", "message"),
    [(-1, 3, "must lie in"), (MEAN_LEVELS * 3 + 1, 3, "must lie in"), (1.5, 3, "integer"),
     (1, 0, "n ")],
)  # fmt: skip
def test_noisy_mean_refuses_bad_sums(total: object, n: int, message: str) -> None:
    with pytest.raises(InvalidParameterError, match=message):
        noisy_mean(total, n=n, lo=0.0, hi=1.0, epsilon=1.0, rng=np.random.default_rng(0))  # type: ignore[arg-type]


def test_counts_for_another_n_are_refused() -> None:
    plan = plan_release(n=10, lo=0.0, hi=1.0, epsilon="1")
    counts = LabelCounts.of(plan, np.zeros(9))
    with pytest.raises(InvalidParameterError, match="n = 10"):
        noisy_prior_from_counts(plan, counts, np.random.default_rng(0))
