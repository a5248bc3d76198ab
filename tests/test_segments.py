"""shared.segments: the grouping rule, the plan, the parallel composition, the message."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from decimal import Decimal

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared import segments as seg
from shared.errors import InvalidParameterError
from shared.mechanisms.histogram import Prior
from shared.mechanisms.private_mean import private_mean_variance
from shared.message import (
    SEGMENTED,
    body_sha256,
    decode_binary,
    encode_binary,
    header_for,
)
from shared.plan import ReleaseRequest
from shared.randomizer import NoisyPrior, clip, measure, randomize_measured

LO, HI = 0.0, 400.0
COUNTS = {"big-a": 3000, "big-b": 2500, "small-c": 30, "small-d": 20}


def _plan(epsilon: str = "1", counts: dict[str, int] | None = None) -> seg.SegmentedPlan:
    plan = seg.plan_segmented(
        ReleaseRequest(epsilon=Decimal(epsilon)), counts or COUNTS, column="c", lo=LO, hi=HI
    )
    assert plan is not None
    return plan


counts_strategy = st.dictionaries(
    st.text(alphabet="abcdefgh", min_size=1, max_size=4),
    st.integers(min_value=1, max_value=20_000),
    min_size=1,
    max_size=12,
)


@settings(max_examples=200, deadline=None)
@given(counts=counts_strategy, mean_epsilon=st.floats(min_value=1e-3, max_value=10.0))
def test_groups_partition_the_segments_by_the_public_rule(
    counts: dict[str, int], mean_epsilon: float
) -> None:
    groups = seg.segment_groups(counts, lo=LO, hi=HI, mean_epsilon=mean_epsilon)
    listed = [s for segments, _ in groups for s in segments]
    assert sorted(listed) == sorted(counts)  # each segment in exactly one group
    limit = (seg.SEGMENT_MEAN_SD_SHARE * (HI - LO)) ** 2
    for segments, pooled in groups:
        variances = [
            private_mean_variance(lo=LO, hi=HI, epsilon=mean_epsilon, n=counts[s]) for s in segments
        ]
        if pooled:
            assert all(v > limit for v in variances)
        else:
            assert len(segments) == 1 and variances[0] <= limit
    assert [pooled for _, pooled in groups] == sorted(pooled for _, pooled in groups)


@settings(max_examples=100, deadline=None)
@given(counts=counts_strategy, epsilon=st.sampled_from(["0.05", "0.3", "1", "2", "8"]))
def test_every_group_is_charged_the_same_amounts_adding_up_to_the_request(
    counts: dict[str, int], epsilon: str
) -> None:
    plan = seg.plan_segmented(
        ReleaseRequest(epsilon=Decimal(epsilon)), counts, column="c", lo=LO, hi=HI
    )
    if plan is None:
        return
    assert len(plan.groups) >= 2
    for group in plan.groups:
        charged = group.plan
        assert charged.epsilon == Decimal(epsilon) == plan.epsilon
        assert (charged.epsilon1, charged.epsilon2) == (plan.first.epsilon1, plan.first.epsilon2)
        assert charged.histogram_epsilon + (charged.label_mean_epsilon or 0) == charged.epsilon1
        assert charged.n == sum(counts[s] for s in group.segments)
    assert plan.n == sum(counts.values()) == plan.charged().n


def test_the_plan_reads_no_label_and_pools_small_segments() -> None:
    plan = _plan()
    assert [g.segments for g in plan.groups] == [("big-a",), ("big-b",), ("small-c", "small-d")]
    assert [g.pooled for g in plan.groups] == [False, False, True]
    assert plan.public()["split"] == "segmented"
    # One group left: an ordinary release.
    assert (
        seg.plan_segmented(
            ReleaseRequest(epsilon=Decimal(1)), {"a": 10, "b": 10}, column="c", lo=LO, hi=HI
        )
        is None
    )


def test_each_group_runs_the_ordinary_steps_on_its_own_labels_only() -> None:
    """Exactness: the segmented release IS, with the same generator and draws, the epsilon1
    step of each group on its own labels (in plan order), the priors shrunk towards the pooled
    one, then each group's epsilon2 step on its own labels."""
    plan = _plan()
    rng = np.random.default_rng(5)
    segments = np.array(sum(([s] * n for s, n in COUNTS.items()), []))
    order = rng.permutation(segments.size)
    segments = segments[order]
    labels = np.where(segments == "big-a", 200.0, 20.0) + rng.normal(0, 10, segments.size)
    got = seg.execute_segmented(plan, labels, segments, np.random.default_rng(11))
    again = np.random.default_rng(11)
    rows = [np.flatnonzero(np.isin(segments, group.segments)) for group in plan.groups]
    measured = [
        measure(group.plan, clip(group.plan, labels[at]), again)
        for group, at in zip(plan.groups, rows, strict=True)
    ]
    priors = seg.shrunk_priors(plan, measured)
    for g, group in enumerate(plan.groups):
        want = randomize_measured(group.plan, priors[g], clip(group.plan, labels[rows[g]]), again)
        np.testing.assert_array_equal(got.noisy_labels[rows[g]], want.noisy_labels)
        np.testing.assert_array_equal(got.releases[g].prior.probs, want.prior.probs)
        assert got.releases[g].label_mean == measured[g].label_mean
        assert np.all(got.group[rows[g]] == g)
    # The message order lists group 0's examples first, each group in the examples' order.
    assert np.all(np.diff(got.group[got.order]) >= 0)


def test_priors_shrink_towards_the_pooled_histogram_by_size_against_noise() -> None:
    """w_g = n_g / (n_g + 2 k / eps_h): closed form on hand-made noisy priors."""
    plan = _plan()
    k = plan.first.bins
    edges = np.linspace(LO, HI, k + 1)
    own = [np.eye(k)[g % k] for g in range(len(plan.groups))]
    measured = [NoisyPrior(prior=Prior(edges=edges, probs=p)) for p in own]
    pooled = sum(g.n / plan.n * p for g, p in zip(plan.groups, own, strict=True))
    for group, p, shrunk in zip(plan.groups, own, seg.shrunk_priors(plan, measured), strict=True):
        weight = group.n / (group.n + 2 * k / group.plan.histogram_float)
        np.testing.assert_allclose(shrunk.prior.probs, weight * p + (1 - weight) * pooled)
    assert all(g.plan.bins == k for g in plan.groups)  # one grid for every group


def test_changing_one_label_changes_only_its_own_group() -> None:
    """Parallel composition, structurally: every label is read by exactly one group's
    release, so a neighbour (one label changed) changes one group's input only."""
    plan = _plan()
    segments = np.array(sum(([s] * n for s, n in COUNTS.items()), []))
    labels = np.full(segments.size, 50.0)
    seen: list[np.ndarray] = []

    def spy(group_plan, group_labels, rng):  # noqa: ANN001, ANN202
        seen.append(np.array(group_labels))
        return measure(group_plan, group_labels, rng)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(seg, "measure", spy)
        seg.execute_segmented(plan, labels, segments, np.random.default_rng(0))
        first = [s.copy() for s in seen]
        seen.clear()
        neighbour = labels.copy()
        neighbour[np.flatnonzero(segments == "small-d")[3]] = 400.0
        seg.execute_segmented(plan, neighbour, segments, np.random.default_rng(0))
    pairs = enumerate(zip(first, seen, strict=True))
    changed = [g for g, (a, b) in pairs if not np.array_equal(a, b)]
    assert changed == [2]
    assert sum(s.size for s in first) == segments.size


def test_segments_must_be_planned_and_aligned() -> None:
    plan = _plan()
    with pytest.raises(InvalidParameterError, match="not in the plan"):
        seg.execute_segmented(plan, np.zeros(1), ["zzz"], np.random.default_rng(0))
    with pytest.raises(InvalidParameterError, match="segments for"):
        seg.execute_segmented(plan, np.zeros(2), ["big-a"], np.random.default_rng(0))
    for bad in ("", "a/b", "x" * 65, "é"):
        with pytest.raises(InvalidParameterError):
            seg.check_segment(bad)
    with pytest.raises(InvalidParameterError):
        seg.check_segment_column("1x")


def test_typical_size_is_the_example_weighted_median() -> None:
    assert seg.typical_size({"a": 1, "b": 1, "c": 100}) == 100
    assert seg.typical_size({"a": 10, "b": 10, "c": 10}) == 10
    assert seg.typical_size({}) == 1


def test_the_message_carries_every_group_and_round_trips() -> None:
    plan = _plan()
    segments = np.array(sum(([s] * n for s, n in COUNTS.items()), []))
    labels = np.where(segments == "big-a", 200.0, 20.0)
    release = seg.execute_segmented(plan, labels, segments, np.random.default_rng(2))
    order = release.order
    ids = [f"e{i:05d}" for i in range(segments.size)]
    ids = [ids[i] for i in order]
    noisy = release.noisy_labels[order]
    header = header_for(
        release,
        release_id="rel_x",
        dataset="d",
        default_label=0.0,
        n=len(ids),
        body_sha256=body_sha256(ids, noisy),
        created=datetime.now(UTC),
    )
    assert header.format_version == 5 and header.mechanism == SEGMENTED
    assert header.histogram is None and header.params == {}
    back, got_ids, got = decode_binary(b"".join(encode_binary(header, ids, noisy)))
    assert back == header and got_ids == ids and np.array_equal(got, noisy)
    parts = back.parts()
    assert [p.n for p in parts] == [g.n for g in plan.groups]
    assert [p.segments for p in parts] == [list(g.segments) for g in plan.groups]
    # The pooled mean: the groups' means weighted by size (post-processing).
    pooled = sum(p.n * p.label_mean for p in parts) / len(ids)
    assert math.isclose(back.label_mean, pooled)
    with pytest.raises(ValueError, match="read parts"):
        _ = back.prior


def test_a_segmented_header_cannot_pose_as_an_ordinary_one() -> None:
    plan = _plan()
    segments = np.array(sum(([s] * n for s, n in COUNTS.items()), []))
    release = seg.execute_segmented(
        plan, np.zeros(segments.size), segments, np.random.default_rng(2)
    )
    header = header_for(
        release,
        release_id="rel_x",
        dataset="d",
        default_label=0.0,
        n=segments.size,
        body_sha256="0" * 64,
        created=datetime.now(UTC),
    )
    data = header.model_dump()
    for change in (
        {"format_version": 4},
        {"mechanism": "rr_on_bins"},
        {"histogram": header.segments.groups[0].histogram.model_dump()},
        {"n": segments.size + 1},
        {"segments": None},
    ):
        with pytest.raises(ValueError):
            type(header).model_validate({**data, **change})
