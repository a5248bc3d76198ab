"""Public segments: one prior, one DP mean and one randomizer per segment group, charged once.

An advertiser knows a public attribute of every example (campaign, product category, country)
whose label distribution differs between its values. A segmented release partitions the
examples by that attribute into groups (each sizeable segment alone, the small ones pooled),
and runs the whole two-step LabelRandomizer (Ghazi et al. 2022, Algorithm 3; Liu & Huang,
Algorithm 4) inside each group: epsilon1 on the group's noisy histogram and DP label mean,
epsilon2 on a randomizer built from the group's own prior. Issue 25, item 3.

Privacy (parallel composition; McSherry 2009, Theorem 4). The segment of every example is
public and fixed before any label is read (registered with the example universe and declared
public by the dataset; the service refuses to change it once registered, and the publisher
gives it without seeing any label), so the partition
into groups is the same on any two neighbouring label vectors. The grouping reads only the
public per-segment counts, the bounds and the request (:func:`segment_groups`); each group's
plan is :func:`shared.plan.plan_release` of its public size with the SAME charges. Group g's
output (histogram, mean, randomized labels) is a function of group g's labels alone and is
(epsilon1 + epsilon2)-label-DP in them (``shared.randomizer``). Changing one label changes the
input of exactly one group; every other group's output has the same distribution. So the whole
message is (epsilon1 + epsilon2)-label-DP and the ledger charges epsilon1 and epsilon2 once,
whatever the number of groups.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

import numpy as np

from shared import epsilon as amounts
from shared.domain import LabelDomain, check_labels
from shared.errors import InvalidParameterError
from shared.mechanisms.histogram import Prior
from shared.mechanisms.private_mean import private_mean_variance
from shared.plan import (
    ReleasePlan,
    ReleaseRequest,
    check_mean_share,
    default_epsilon1,
    plan_release,
)
from shared.randomizer import NoisyPrior, Release, clip, measure, randomize_measured
from shared.rng import Rng
from shared.selection import adaptive_bins

# A segment value: 1-64 characters of letters, digits and "_.:- " (a campaign id, a country).
SEGMENT_PATTERN = r"^[A-Za-z0-9_.:\- ]{1,64}$"
_SEGMENT_RE = re.compile(SEGMENT_PATTERN)
# The name of the public attribute (a column of the publisher's features).
SEGMENT_COLUMN_PATTERN = r"^[A-Za-z][A-Za-z0-9_]{0,63}$"
_COLUMN_RE = re.compile(SEGMENT_COLUMN_PATTERN)
# At most this many distinct segment values in one dataset (the message lists them all).
MAX_SEGMENTS = 10_000
# The share of a segmented release's epsilon1 that buys each group's DP mean (the histogram
# gets the rest). Why 4/5: the group means carry most of what segments add where they add
# anything (synthetic ads at epsilon 1: the DP campaign means alone are 0.855x the DP constant's
# test MSE; Housing at epsilon 0.1: 0.865x where the ordinary release is the constant), and the
# split rule (``segmented_split``) and this share were chosen side by side against three other
# rules (bench/results/segments.md).
SEGMENT_MEAN_SHARE = 0.8
# A segment is a group of its own when its DP mean's noise standard deviation is at most this
# share of the label range; smaller segments are pooled into one group.
SEGMENT_MEAN_SD_SHARE = 0.02


def check_segment(value: str) -> str:
    """A segment value: 1-64 characters of ``[A-Za-z0-9_.:- ]``."""
    if not isinstance(value, str) or not _SEGMENT_RE.fullmatch(value):
        raise InvalidParameterError(
            f"segment {value!r} must be 1-64 characters of letters, digits, space or '_.:-'"
        )
    return value


def check_segment_column(name: str) -> str:
    """A segment column name: a letter, then up to 63 letters, digits or '_'."""
    if not isinstance(name, str) or not _COLUMN_RE.fullmatch(name):
        raise InvalidParameterError(
            f"segment_column {name!r} must be a letter then up to 63 letters, digits or '_'"
        )
    return name


@dataclass(frozen=True, kw_only=True)
class SegmentGroup:
    """One group of a segmented release: its segments, its public size and its plan."""

    segments: tuple[str, ...]
    pooled: bool  # True: the small segments merged together
    plan: ReleasePlan

    @property
    def n(self) -> int:
        return self.plan.n


@dataclass(frozen=True, kw_only=True)
class SegmentedPlan:
    """A release run group by group, each group charged the same (epsilon1, epsilon2)."""

    column: str  # the dataset's public attribute (e.g. "campaign")
    groups: tuple[SegmentGroup, ...]
    mean_share: float

    @property
    def n(self) -> int:
        return sum(group.n for group in self.groups)

    @property
    def first(self) -> ReleasePlan:
        """The first group's plan: every group's charges are the same."""
        return self.groups[0].plan

    @property
    def epsilon(self) -> Decimal:
        return self.first.epsilon

    @property
    def mechanism(self) -> str:
        return self.first.mechanism

    def charged(self) -> ReleasePlan:
        """The plan whose amounts the ledger charges once: every group's (epsilon1, epsilon2,
        histogram and mean parts), with the whole release's n."""
        return replace(self.first, n=self.n)

    def group_index(self, segments: Sequence[str] | np.ndarray) -> np.ndarray:
        """The group of each example from its segment (every segment must be planned)."""
        where = {segment: g for g, group in enumerate(self.groups) for segment in group.segments}
        try:
            return np.fromiter((where[s] for s in segments), dtype=np.int64, count=len(segments))
        except KeyError as exc:
            raise InvalidParameterError(f"segment {exc.args[0]!r} is not in the plan") from None

    def public(self) -> dict[str, Any]:
        """The plan as the API shows it: the shared charges, then one line per group."""
        shared = self.first.public()
        for key in ("n", "bins", "explanation"):
            shared.pop(key)
        return {
            **shared,
            "n": self.n,
            "bins": max(group.plan.bins for group in self.groups),
            "split": "segmented",
            "segments": {
                "column": self.column,
                "groups": [
                    {
                        "segments": list(group.segments),
                        "pooled": group.pooled,
                        "n": group.n,
                        "bins": group.plan.bins,
                    }
                    for group in self.groups
                ],
            },
            "explanation": [
                f"segmented by {self.column!r}: {len(self.groups)} groups, each its own "
                "histogram, DP mean and randomizer (parallel composition: charged once)",
                f"epsilon1 {amounts.text(self.first.epsilon1)} (of which "
                f"{self.mean_share:.0%} buys each group's DP mean), epsilon2 "
                f"{amounts.text(self.first.epsilon2)} on each group's randomizer",
            ],
        }


def segment_groups(
    counts: Mapping[str, int], *, lo: float, hi: float, mean_epsilon: float
) -> list[tuple[tuple[str, ...], bool]]:
    """(segments, pooled) per group: each segment whose DP mean at ``mean_epsilon`` has a noise
    standard deviation of at most ``SEGMENT_MEAN_SD_SHARE (hi - lo)`` alone (sorted by name),
    the others pooled last. Reads only public counts, the bounds and epsilon."""
    limit = (SEGMENT_MEAN_SD_SHARE * (hi - lo)) ** 2
    alone: list[str] = []
    pooled: list[str] = []
    for segment in sorted(counts):
        count = int(counts[segment])
        if count < 1:
            continue
        variance = private_mean_variance(lo=lo, hi=hi, epsilon=mean_epsilon, n=count)
        (alone if variance <= limit else pooled).append(segment)
    groups = [((segment,), False) for segment in alone]
    if pooled:
        groups.append((tuple(pooled), True))
    return groups


def typical_size(counts: Mapping[str, int]) -> int:
    """The size of the segment a typical example is in: the example-weighted median count."""
    sizes = sorted(int(c) for c in counts.values() if int(c) > 0)
    if not sizes:
        return 1
    half, seen = sum(sizes) / 2.0, 0
    for size in sizes:
        seen += size
        if seen >= half:
            return size
    return sizes[-1]


def segmented_split(
    total: Decimal, counts: Mapping[str, int], *, mechanism: str
) -> tuple[Decimal, float]:
    """(epsilon1, the DP means' share of it) of a segmented release: the ordinary default
    epsilon1 (``shared.plan.default_epsilon1``) for a release of the typical segment's size,
    of which ``SEGMENT_MEAN_SHARE`` buys each group's mean. Public: counts and the request."""
    first = default_epsilon1(total, n=typical_size(counts), mechanism=mechanism)
    return first, SEGMENT_MEAN_SHARE


def plan_segmented(
    request: ReleaseRequest,
    counts: Mapping[str, int],
    *,
    column: str,
    lo: float,
    hi: float,
) -> SegmentedPlan | None:
    """The segmented plan of ``request`` over public per-segment ``counts``; None when the
    rule leaves fewer than two groups (the release is then an ordinary one).

    epsilon1 from :func:`segmented_split` unless the request gives it; each group's mean gets
    ``SEGMENT_MEAN_SHARE`` of epsilon1. Public inputs only.
    """
    domain = LabelDomain(lo=lo, hi=hi)
    total = amounts.exact(request.epsilon)
    if request.epsilon_histogram is not None:
        first = amounts.exact(request.epsilon_histogram, name="epsilon_histogram")
        share = SEGMENT_MEAN_SHARE
    else:
        first, share = segmented_split(total, counts, mechanism=request.mechanism)
    if not first < total:
        raise InvalidParameterError(
            f"epsilon_histogram ({amounts.text(first)}) must be < epsilon ({amounts.text(total)})"
        )
    second = amounts.subtract(total, first)
    share = check_mean_share(share)
    mean_epsilon = amounts.float_at_most(first) * share
    if not (mean_epsilon > 0.0 and math.isfinite(mean_epsilon)):
        return None
    layout = segment_groups(counts, lo=domain.lo, hi=domain.hi, mean_epsilon=mean_epsilon)
    if len(layout) < 2:
        return None
    # One grid for every group (their histograms are pooled: ``shrunk_priors``), sized for all
    # the labels as an ordinary release's would be.
    histogram = float(first) * (1.0 - share)
    bins = request.bins or adaptive_bins(sum(int(c) for c in counts.values()), histogram)
    groups = []
    for segments, pooled in layout:
        n = sum(int(counts[s]) for s in segments)
        plan = plan_release(
            n=n,
            lo=domain.lo,
            hi=domain.hi,
            epsilon1=first,
            epsilon2=second,
            mechanism=request.mechanism,
            bins=bins,
            model_dim=request.model_dim,
            mean_share=share,
            options=request.options,
        )
        groups.append(
            SegmentGroup(segments=segments, pooled=pooled, plan=replace(plan, split="segmented"))
        )
    return SegmentedPlan(column=column, groups=tuple(groups), mean_share=share)


@dataclass(frozen=True, kw_only=True)
class SegmentedRelease:
    """Every group's release, and the noisy labels in the examples' own order."""

    plan: SegmentedPlan
    releases: tuple[Release, ...]  # one per group, in plan order
    group: np.ndarray  # the group index of every example
    noisy_labels: np.ndarray  # aligned with the examples

    @property
    def expected_label_mse(self) -> float:
        """The groups' expected label MSE under their noisy priors, weighted by size."""
        sizes = [release.n for release in self.releases]
        errors = [release.expected_label_mse for release in self.releases]
        return float(np.dot(sizes, errors) / max(sum(sizes), 1))

    @property
    def order(self) -> np.ndarray:
        """The message's example order: group by group, the examples' order within each."""
        return np.argsort(self.group, kind="stable")


def shrunk_priors(plan: SegmentedPlan, measured: Sequence[NoisyPrior]) -> list[NoisyPrior]:
    """Each group's noisy histogram shrunk towards the pooled one: empirical Bayes on DP outputs.

    The groups' histograms share one grid; their size-weighted sum P is a noisy histogram of
    every label (post-processing). Group g's prior is w_g p_g + (1 - w_g) P with w_g = n_g /
    (n_g + tau), tau = 2 k / epsilon_h: the expected total |noise| of a k-cell histogram (each
    cell's discrete Laplace of scale 2 / epsilon_h has mean absolute value about 2 / epsilon_h),
    so a group's own shape counts for as much as its labels outweigh its noise. Post-processing
    of the epsilon1 outputs: no privacy cost.
    """
    total = sum(group.n for group in plan.groups)
    pooled = sum(
        (group.n / total) * one.prior.probs
        for group, one in zip(plan.groups, measured, strict=True)
    )
    out = []
    for group, one in zip(plan.groups, measured, strict=True):
        eps = group.plan.histogram_float
        tau = 0.0 if math.isinf(eps) else 2.0 * one.prior.k / eps
        weight = group.n / (group.n + tau)
        probs = weight * one.prior.probs + (1.0 - weight) * pooled
        prior = Prior(edges=one.prior.edges, probs=probs / probs.sum())
        out.append(replace(one, prior=prior))
    return out


def execute_segmented(
    plan: SegmentedPlan, labels: np.ndarray, segments: Sequence[str] | np.ndarray, rng: Rng
) -> SegmentedRelease:
    """Measure every group (``shared.randomizer.measure``: histogram, then DP mean, group by
    group), shrink the groups' priors towards the pooled one (:func:`shrunk_priors`), then
    randomize each group's labels with the randomizer built from its own shrunk prior.

    The only label access is ``measure`` and the randomizer on each group's own labels: the
    parallel composition of the module docstring.
    """
    values = check_labels(labels)
    if len(segments) != values.size:
        raise InvalidParameterError(f"{len(segments)} segments for {values.size} labels")
    group = plan.group_index(segments)
    rows = [np.flatnonzero(group == g) for g in range(len(plan.groups))]
    for g, planned in enumerate(plan.groups):
        if rows[g].size != planned.n:
            raise InvalidParameterError(
                f"group {g} is planned for {planned.n} examples, got {rows[g].size}"
            )
    clipped = [
        clip(planned.plan, values[at]) for planned, at in zip(plan.groups, rows, strict=True)
    ]
    measured = [
        measure(planned.plan, own, rng) for planned, own in zip(plan.groups, clipped, strict=True)
    ]
    noisy = np.empty(values.size, dtype=np.float64)
    releases = []
    for planned, at, own, prior in zip(
        plan.groups, rows, clipped, shrunk_priors(plan, measured), strict=True
    ):
        release = randomize_measured(planned.plan, prior, own, rng)
        noisy[at] = release.noisy_labels
        releases.append(release)
    return SegmentedRelease(plan=plan, releases=tuple(releases), group=group, noisy_labels=noisy)


def segment_counts(segments: Sequence[str] | np.ndarray) -> dict[str, int]:
    """How many examples each segment has (public: the segments are)."""
    values, counts = np.unique(np.asarray(segments, dtype=object).astype(str), return_counts=True)
    return {str(v): int(c) for v, c in zip(values, counts, strict=True)}
