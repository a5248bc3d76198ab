"""Training on a segmented message: each group's own debiasing, and its DP mean as the baseline.

A segmented message (``shared.segments``, format 5) carries one randomizer, one noisy prior and
one DP label mean per group of public segments, with the body ordered group by group. The
features party

1. maps each noisy label to its training target with ITS group's randomizer (raw, or
   debiased by the group's affine expectation E[noisy | y] = a_g y + b_g, ``shared.debias``);
2. takes as baseline of group g the DP mean m_g shrunk towards the pooled mean M = sum(n_g m_g)
   / n by the same gated James-Stein rule as the single mean anchor
   (``features_party.mean_anchor``): b_g = M + w_g (m_g - M), w_g = max(0, 1 - 2 V_g /
   (m_g - M)^2), 0 where V_g is too large for the gate; a noisy small group stays at M;
3. fits its model to the targets centred within each group (t - mean_g(t)), so that what the
   randomizer's per-group bias moved (raw targets shrink towards each group's prior) is
   replaced by the group's DP mean, and the model only learns the variation inside groups;
4. predicts f(x) + b_(segment of x): the segment is a feature column of the publisher's data,
   and an unknown segment value gets M.

Where the noisy labels carry no signal the model is a constant 0 and the prediction is the
groups' shrunk DP means: at worst the DP-constant model per group. Everything here reads the
message's public values and the model's own targets: post-processing, no privacy cost.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from features_party.mean_anchor import LabelMean, mean_anchor
from shared.debias import mechanism_from_params
from shared.errors import InvalidParameterError
from shared.message import NO_MECHANISM, MessageHeader, MessagePart


def group_index(header: MessageHeader) -> np.ndarray:
    """The group of every body position (the body is ordered group by group)."""
    parts = header.parts()
    return np.repeat(np.arange(len(parts)), [part.n for part in parts])


def part_affine(part: MessagePart) -> tuple[float, float]:
    """(a, b) with E[noisy | y] = a y + b for one part (a = 1, b = 0 un-randomized)."""
    if part.mechanism == NO_MECHANISM:
        return 1.0, 0.0
    a, b = mechanism_from_params(part.mechanism, part.params).affine_expectation()
    a, b = float(a), float(b)
    if not (math.isfinite(a) and math.isfinite(b)) or a <= 0.0:
        raise InvalidParameterError(
            f"mechanism {part.mechanism!r} has affine expectation a={a!r}, b={b!r}: "
            "its output carries no information to debias (a must be finite and > 0)"
        )
    return a, b


def part_label_mean(part: MessagePart, *, lo: float, hi: float) -> LabelMean | None:
    """The part's DP label mean with its public variance (None when it bought none)."""
    if part.label_mean is None or part.label_mean_variance is None:
        return None
    return LabelMean(value=part.label_mean, variance=part.label_mean_variance, lo=lo, hi=hi)


@dataclass(frozen=True, kw_only=True)
class SegmentTargets:
    """The centred training targets of a segmented message and each group's baseline."""

    centred: np.ndarray  # t - mean_g(t), aligned with the rows
    baseline: np.ndarray  # b_g per group
    pooled_mean: float  # M: the baseline of an unknown segment
    transforms: tuple[str, ...]  # the target of each group: "raw" or "debiased"
    weights: tuple[float, ...]  # w_g: how far each group's baseline moved from M


def segment_targets(
    noisy: np.ndarray,
    group: np.ndarray,
    parts: Sequence[MessagePart],
    *,
    transform: str,
    lo: float,
    hi: float,
) -> SegmentTargets:
    """Steps 1-3 of the module docstring for rows ``noisy`` in groups ``group``.

    ``transform``: "raw", "debiased", or "auto" (each group its message's recommendation,
    "raw" where it has none). Every group must have a DP mean (a segmented plan buys one).
    """
    values = np.asarray(noisy, dtype=np.float64)
    rows = np.asarray(group)
    if values.shape != rows.shape:
        raise InvalidParameterError(f"{values.size} labels for {rows.size} group indices")
    means = [part_label_mean(part, lo=lo, hi=hi) for part in parts]
    if any(mean is None for mean in means):
        raise InvalidParameterError("every group of a segmented message needs its DP mean")
    sizes = np.array([part.n for part in parts], dtype=np.float64)
    pooled = float(sum(s * m.value for s, m in zip(sizes, means, strict=True) if m) / sizes.sum())
    centred = np.empty_like(values)
    baseline = np.empty(len(parts))
    transforms: list[str] = []
    weights: list[float] = []
    for g, (part, mean) in enumerate(zip(parts, means, strict=True)):
        assert mean is not None
        chosen = transform if transform != "auto" else (part.recommended_transform or "raw")
        if chosen not in ("raw", "debiased"):
            raise InvalidParameterError(f"label_transform ({transform!r}) is not raw or debiased")
        at = np.flatnonzero(rows == g)
        targets = values[at]
        if chosen == "debiased":
            a, b = part_affine(part)
            targets = (targets - b) / a
        centred[at] = targets - targets.mean() if at.size else targets
        anchor = mean_anchor(mean, predictions=np.full(max(at.size, 1), pooled))
        baseline[g] = pooled + anchor.offset
        transforms.append(chosen)
        weights.append(anchor.weight)
    return SegmentTargets(
        centred=centred,
        baseline=baseline,
        pooled_mean=pooled,
        transforms=tuple(transforms),
        weights=tuple(weights),
    )


@dataclass(frozen=True, kw_only=True)
class SegmentOffsets:
    """Step 4: the baseline added to a prediction, looked up by the row's segment value.

    ``index``: the segment column in the encoded feature matrix; ``table``: its encoded value
    (a category code, or the number of a numeric column) -> baseline; anything else -> M.
    """

    column: str
    index: int
    table: Mapping[float, float]
    default: float

    def of(self, X: np.ndarray) -> np.ndarray:
        """The baseline of every row of the encoded matrix ``X``."""
        codes = np.asarray(X, dtype=np.float64)[:, self.index]
        out = np.full(codes.shape, self.default)
        for code, value in self.table.items():
            out[codes == code] = value
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"column": self.column, "groups": len(set(self.table.values())) + 1}


def segment_offsets(
    *,
    column: str,
    names: Sequence[str],
    encode: Mapping[str, float],
    parts: Sequence[MessagePart],
    targets: SegmentTargets,
) -> SegmentOffsets:
    """The lookup of step 4: each segment of each part -> its group's baseline.

    ``names``: the encoded matrix's columns; ``encode``: segment value -> its encoded value in
    the ``column`` (values the encoder cannot tell apart share the pooled mean).
    """
    if column not in names:
        raise InvalidParameterError(
            f"the message is segmented by {column!r}: the features need a column {column!r}"
        )
    table: dict[float, float] = {}
    shared: set[float] = set()
    for g, part in enumerate(parts):
        for segment in part.segments:
            code = encode.get(segment)
            if code is None:
                continue
            if code in table and table[code] != targets.baseline[g]:
                shared.add(code)
            table[code] = float(targets.baseline[g])
    for code in shared:
        del table[code]
    return SegmentOffsets(
        column=column, index=list(names).index(column), table=table, default=targets.pooled_mean
    )
