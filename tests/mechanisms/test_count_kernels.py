"""The one-pass counting kernel against the numpy definitions it replaces, bit for bit."""

from __future__ import annotations

import numpy as np
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from shared.domain import MAX_LABEL_MAGNITUDE
from shared.errors import InvalidParameterError
from shared.mechanisms._count_kernels import label_statistics
from shared.mechanisms.histogram import bin_counts, bin_edges
from shared.mechanisms.private_mean import MEAN_LEVELS, level_sum
from shared.plan import plan_release
from shared.randomizer import LabelCounts

finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
# Bounds as every door allows them (shared.domain.MAX_LABEL_MAGNITUDE); labels anywhere.
bound = st.floats(-MAX_LABEL_MAGNITUDE, MAX_LABEL_MAGNITUDE, width=64)


def _kernel(labels: np.ndarray, lo: float, hi: float, bins: int) -> tuple[np.ndarray, int]:
    counts, total = label_statistics(
        np.ascontiguousarray(labels, dtype=np.float64), lo, hi, bins, bins / (hi - lo),
        MEAN_LEVELS, True,
    )  # fmt: skip
    return counts, int(total)


@settings(max_examples=300, deadline=None)
@given(
    bounds=st.tuples(bound, bound).map(sorted).filter(lambda b: b[0] < b[1]),
    bins=st.integers(1, 300),
    data=st.data(),
)
def test_counts_and_level_sum_equal_the_numpy_definitions(bounds, bins, data):
    """Labels anywhere (inside, outside, on every edge and between edges): the same cells and
    the same level sum as ``histogram.bin_counts`` and ``private_mean.level_sum``."""
    lo, hi = float(bounds[0]), float(bounds[1])
    try:
        with np.errstate(all="ignore"):
            edges = bin_edges(lo=lo, hi=hi, bins=bins).tolist()  # the grid the product allows
    except InvalidParameterError:
        assume(False)
    assume(np.isfinite(hi - lo))
    with np.errstate(over="ignore"):
        near = [float(np.nextafter(e, s)) for e in edges for s in (-np.inf, np.inf)]
    picks = data.draw(
        st.lists(st.one_of(finite, st.sampled_from([*edges, *near, lo, hi])), max_size=60)
    )
    labels = np.array(picks, dtype=np.float64)
    counts, total = _kernel(labels, lo, hi, bins)
    with np.errstate(all="ignore"):  # numpy's linspace warns inside bin_edges at huge bounds
        reference = bin_counts(labels, lo=lo, hi=hi, bins=bins).tolist()
        reference_sum = level_sum(labels, lo=lo, hi=hi)
    assert counts.tolist() == reference
    assert total == reference_sum


def test_a_million_labels_and_label_counts_of_a_plan(rng):
    labels = rng.lognormal(2.0, 1.5, 1_000_000) - 3.0
    plan = plan_release(n=labels.size, lo=0.0, hi=400.0, mechanism="auto", epsilon=0.5)
    got = LabelCounts.of(plan, labels)
    assert got.cells.tolist() == bin_counts(labels, lo=0.0, hi=400.0, bins=plan.bins).tolist()
    assert got.level_sum == level_sum(labels, lo=0.0, hi=400.0)
    assert got.n == labels.size
    no_mean = plan_release(n=labels.size, lo=0.0, hi=400.0, mechanism="rpwithprior", epsilon=4)
    assert no_mean.label_mean_float is None and LabelCounts.of(no_mean, labels).level_sum is None
