"""features_party.segments: per-group targets, per-group anchors, the offset lookup, the fit."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import numpy as np
import pytest

from features_party.mean_anchor import mean_anchor
from features_party.segments import (
    SegmentOffsets,
    group_anchors,
    group_index,
    part_affine,
    part_label_mean,
    segment_offsets,
    segment_targets,
)
from features_party.training import fit_encoder, fit_segmented, train_on_message
from shared.errors import InvalidParameterError
from shared.message import body_sha256, header_for
from shared.plan import ReleaseRequest
from shared.segments import execute_segmented, plan_segmented, segment_counts

LO, HI = 0.0, 100.0
MEANS = {"north": 80.0, "south": 20.0, "east": 50.0}


def _message(n: int = 6000, epsilon: str = "2", seed: int = 0):  # noqa: ANN202
    """A segmented release of region-driven labels, its header, rows in body order."""
    rng = np.random.default_rng(seed)
    region = rng.choice(np.array(list(MEANS)), size=n, p=[0.45, 0.45, 0.1])
    x1 = rng.normal(size=n)
    y = np.clip(np.array([MEANS[r] for r in region]) + 10 * x1 + rng.normal(0, 3, n), LO, HI)
    plan = plan_segmented(
        ReleaseRequest(epsilon=Decimal(epsilon)),
        segment_counts(region),
        column="region",
        lo=LO,
        hi=HI,
    )
    assert plan is not None
    release = execute_segmented(plan, y, region, np.random.default_rng(seed + 1))
    order = release.order
    ids = [f"e{i}" for i in order]
    noisy = release.noisy_labels[order]
    header = header_for(
        release,
        release_id="rel_t",
        dataset="d",
        default_label=LO,
        n=n,
        body_sha256=body_sha256(ids, noisy),
        created=datetime.now(UTC),
    )
    columns = {"x1": x1[order], "region": region[order]}
    return header, noisy, columns, y[order]


def test_targets_are_debiased_with_each_groups_own_randomizer() -> None:
    header, noisy, _, _ = _message()
    parts = header.parts()
    group = group_index(header)
    targets, transforms = segment_targets(noisy, group, parts, transform="debiased")
    assert transforms == ("debiased",) * len(parts)
    for g, part in enumerate(parts):
        a, b = part_affine(part)
        np.testing.assert_allclose(targets[group == g], (noisy[group == g] - b) / a)
    raw, kinds = segment_targets(noisy, group, parts, transform="auto")
    assert kinds == tuple(p.recommended_transform or "raw" for p in parts)
    np.testing.assert_array_equal(
        raw[group == 0], noisy[group == 0] if kinds[0] == "raw" else targets[group == 0]
    )
    with pytest.raises(InvalidParameterError):
        segment_targets(noisy[:-1], group, parts, transform="raw")


def test_each_group_is_anchored_on_its_own_mean() -> None:
    header, noisy, _, _ = _message()
    parts = header.parts()
    group = group_index(header)
    predictions = np.full(noisy.size, 50.0)
    anchors = group_anchors(predictions, noisy, group, parts, lo=LO, hi=HI)
    for g, part in enumerate(parts):
        mean = part_label_mean(part, lo=LO, hi=HI)
        at = group == g
        want = mean_anchor(mean, predictions=predictions[at], targets=noisy[at])
        assert anchors[g] == want


def test_offsets_are_looked_up_by_the_encoded_segment() -> None:
    header, _, columns, _ = _message()
    parts = header.parts()
    encoder = fit_encoder([("x1", "numeric"), ("region", "categorical")], columns)
    codes = {s: float(c) for s, c in encoder.vocab["region"].items()}
    offsets = [10.0 * (g + 1) for g in range(len(parts))]
    lookup = segment_offsets(
        column="region", names=encoder.names, encode=codes, parts=parts, offsets=offsets
    )
    X = encoder.encode_columns({"x1": [0.0] * 4, "region": ["north", "south", "east", "west"]})
    where = {s: g for g, p in enumerate(parts) for s in p.segments}
    expected = [offsets[where[r]] for r in ("north", "south", "east")] + [0.0]
    np.testing.assert_allclose(lookup.of(X), expected)
    with pytest.raises(InvalidParameterError, match="features need a column"):
        segment_offsets(column="zone", names=encoder.names, encode={}, parts=parts, offsets=[])
    assert SegmentOffsets(column="c", index=0, table={}, default=1.5).of(np.zeros((2, 1)))[0] == 1.5


def test_the_fit_learns_the_regions_and_the_feature() -> None:
    header, noisy, columns, y = _message()
    encoder = fit_encoder([("x1", "numeric"), ("region", "categorical")], columns)
    X = encoder.encode_columns(columns)
    fitted = train_on_message(
        header, X, noisy, encoder=encoder, positions=np.arange(noisy.size), model="ridge"
    )
    prediction = fitted.predict_columns(columns)
    # At epsilon 2 on 6,000 labels: far better than the mean, each region's mean recovered.
    assert np.mean((prediction - y) ** 2) < 0.5 * np.var(y)
    for region, mean in MEANS.items():
        rows = columns["region"] == region
        assert abs(prediction[rows].mean() - mean) < 5, region
    assert set(fitted.metrics["segments"]["anchors"]) == set(MEANS)
    with pytest.raises(InvalidParameterError, match="positions"):
        train_on_message(header, X, noisy, encoder=encoder)
    numeric_only = fit_encoder([("x1", "numeric")], columns)
    with pytest.raises(InvalidParameterError, match="features need a column"):
        fit_segmented(
            numeric_only.encode_columns(columns),
            noisy,
            group=group_index(header),
            header=header,
            encoder=numeric_only,
        )
