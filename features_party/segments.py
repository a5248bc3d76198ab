"""Training on a segmented message: each group's own debiasing, and its own DP mean anchor.

A segmented message (``shared.segments``, format 5) carries one randomizer, one noisy prior and
one DP label mean per group of public segments, with the body ordered group by group. The
features party

1. maps each noisy label to its training target with ITS group's randomizer (raw, or
   debiased by the group's affine expectation E[noisy | y] = a_g y + b_g, ``shared.debias``);
2. fits one model to all the targets (the segment is one of its features);
3. anchors the model's mean on the groups' pooled DP mean (the header's ``label_mean``: the
   most precise one), then each group's mean prediction on the group's own DP mean m_g, both
   exactly as a single release's model is anchored on its mean (``features_party.mean_anchor``:
   gated James-Stein shrinkage of the gap, floored by inverse-variance pooling with the model's
   own noisy mean): the sum o_g of the two shifts is added to the predictions of the group's
   segments;
4. predicts f(x) + o_(segment of x): the segment column of the publisher's features says which
   offset applies (an unknown segment value gets none).

Where the noisy labels carry no signal the model is a constant and the predictions are the
groups' DP means, shrunk by their noise towards the pooled one. Measured against centring the
targets within each group (and against anchoring the groups without the pooled step) in
bench/results/segments.md. Everything here reads the message's public values and the model's
own targets and predictions: post-processing, no privacy cost.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from features_party.mean_anchor import LabelMean, MeanAnchor, mean_anchor
from shared.debias import affine_of, debias_by
from shared.errors import InvalidParameterError
from shared.message import MessageHeader, MessagePart


def group_index(header: MessageHeader) -> np.ndarray:
    """The group of every body position (the body is ordered group by group)."""
    parts = header.parts()
    return np.repeat(np.arange(len(parts)), [part.n for part in parts])


def part_affine(part: MessagePart) -> tuple[float, float]:
    """(a, b) with E[noisy | y] = a y + b for one part (``shared.debias.affine_of``)."""
    return affine_of(part.mechanism, part.params)


def part_label_mean(part: MessagePart, *, lo: float, hi: float) -> LabelMean | None:
    """The part's DP label mean with its public variance (None when it bought none)."""
    if part.label_mean is None or part.label_mean_variance is None:
        return None
    return LabelMean(value=part.label_mean, variance=part.label_mean_variance, lo=lo, hi=hi)


def segment_targets(
    noisy: np.ndarray, group: np.ndarray, parts: Sequence[MessagePart], *, transform: str
) -> tuple[np.ndarray, tuple[str, ...]]:
    """Step 1: each row's training target by its group's randomizer, and each group's target
    kind. ``transform``: "raw", "debiased", or "auto" (each group its message's
    recommendation, "raw" where it has none)."""
    values = np.asarray(noisy, dtype=np.float64)
    rows = np.asarray(group)
    if values.shape != rows.shape:
        raise InvalidParameterError(f"{values.size} labels for {rows.size} group indices")
    targets = values.copy()
    transforms: list[str] = []
    for g, part in enumerate(parts):
        chosen = transform if transform != "auto" else (part.recommended_transform or "raw")
        if chosen not in ("raw", "debiased"):
            raise InvalidParameterError(f"label_transform ({transform!r}) is not raw or debiased")
        if chosen == "debiased":
            at = rows == g
            targets[at] = debias_by(part_affine(part), values[at])
        transforms.append(chosen)
    return targets, tuple(transforms)


def group_anchors(
    predictions: np.ndarray,
    targets: np.ndarray,
    group: np.ndarray,
    parts: Sequence[MessagePart],
    *,
    lo: float,
    hi: float,
) -> list[MeanAnchor | None]:
    """Step 3: each group's anchor on its DP mean (None: the group bought no mean)."""
    out: list[MeanAnchor | None] = []
    for g, part in enumerate(parts):
        mean = part_label_mean(part, lo=lo, hi=hi)
        at = np.asarray(group) == g
        if mean is None or not at.any():
            out.append(None)
            continue
        out.append(mean_anchor(mean, predictions=predictions[at], targets=targets[at]))
    return out


@dataclass(frozen=True, kw_only=True)
class SegmentOffsets:
    """Step 4: the offset added to a prediction, looked up by the row's segment value.

    ``index``: the segment column in the encoded feature matrix; ``table``: its encoded value
    (a category code, or the number of a numeric column) -> offset; anything else -> default.
    """

    column: str
    index: int
    table: Mapping[float, float]
    default: float

    def of(self, X: np.ndarray) -> np.ndarray:
        """The offset of every row of the encoded matrix ``X``."""
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
    offsets: Sequence[float],
) -> SegmentOffsets:
    """The lookup of step 4: each segment of each part -> its group's offset.

    ``names``: the encoded matrix's columns; ``encode``: segment value -> its encoded value in
    the ``column`` (values the encoder cannot tell apart get no offset).
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
            if code in table and table[code] != offsets[g]:
                shared.add(code)
            table[code] = float(offsets[g])
    for code in shared:
        del table[code]
    return SegmentOffsets(column=column, index=list(names).index(column), table=table, default=0.0)
