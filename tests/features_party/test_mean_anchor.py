"""The mean anchor: closed form, shrinkage risk, header plumbing, and the fitted model's shift."""

from __future__ import annotations

import pickle
from datetime import UTC, datetime

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from features_party.mean_anchor import (
    MAX_RELATIVE_SD,
    SHRINKAGE,
    LabelMean,
    MeanAnchor,
    mean_anchor,
    message_label_mean,
)
from features_party.training import fit_encoder, fit_model
from shared.mechanisms.private_mean import anchor_can_use, private_mean_variance
from shared.message import MessageHeader, NoisyHistogram

values = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)


WIDE = 1e12  # bounds so wide that the gate never shuts


def anchor_of(
    value: float, variance: float, predictions: list[float], lo: float = -WIDE, hi: float = WIDE
) -> MeanAnchor:
    label_mean = LabelMean(value=value, variance=variance, lo=lo, hi=hi)
    return mean_anchor(label_mean, predictions=np.array(predictions))


def test_closed_form_of_the_shrunk_shift() -> None:
    predictions = [1.0, 2.0, 3.0]  # mean 2
    anchor = anchor_of(4.0, 1.0, predictions)
    gap = 2.0
    assert anchor.weight == pytest.approx(1 - SHRINKAGE * 1.0 / gap**2)
    assert anchor.offset == pytest.approx(gap * (1 - SHRINKAGE / gap**2))
    # Within sqrt(SHRINKAGE) standard errors of the model's mean: no shift.
    assert anchor_of(3.4, 1.0, predictions).offset == 0.0
    # An exact mean (epsilon inf) moves the model all the way.
    assert anchor_of(4.0, 0.0, predictions).offset == 2.0
    # An infinitely noisy mean (absurdly small epsilon) moves nothing.
    assert anchor_of(4.0, float("inf"), predictions).offset == 0.0


def test_the_gate_refuses_a_mean_noisier_than_a_tenth_of_the_largest_possible_spread() -> None:
    """Labels in [0, 1] with mean 0.2 have a standard deviation of at most sqrt(0.8 * 0.2) = 0.4
    (Bhatia-Davis); sqrt(V) above MAX_RELATIVE_SD of that: nothing is applied."""
    sd = 0.4
    below, above = (0.99 * MAX_RELATIVE_SD * sd) ** 2, (1.01 * MAX_RELATIVE_SD * sd) ** 2
    inside = anchor_of(0.2, below, [0.9], lo=0.0, hi=1.0)
    outside = anchor_of(0.2, above, [0.9], lo=0.0, hi=1.0)
    assert LabelMean(value=0.2, variance=0.0, lo=0.0, hi=1.0).max_label_variance() == (
        pytest.approx(sd**2)
    )
    assert not inside.gated and inside.offset == pytest.approx(-0.7, rel=0.01)
    assert outside.gated and outside.offset == 0.0 and outside.weight == 0.0
    # A mean at a bound leaves no spread at all: always gated unless exact.
    assert anchor_of(0.0, 1e-12, [0.5], lo=0.0, hi=1.0).gated


@settings(max_examples=300, deadline=None)
@given(values, st.floats(min_value=0.0, max_value=1e6), st.lists(values, min_size=1, max_size=20))
def test_the_shift_goes_towards_the_mean_and_never_past_it(
    value: float, variance: float, predictions: list[float]
) -> None:
    anchor = anchor_of(value, variance, predictions)
    gap = value - float(np.mean(predictions))
    assert 0.0 <= anchor.weight <= 1.0
    assert abs(anchor.offset) <= abs(gap) * (1 + 1e-12)
    assert anchor.offset * gap >= 0.0


@pytest.mark.parametrize(
    ("error", "bound"), [(0.0, 0.35), (0.5, 0.6), (1.0, 1.15), (3.0, 2.1), (10.0, 1.2)]
)
def test_risk_under_laplace_noise_matches_the_documented_figures(
    error: float, bound: float
) -> None:
    """Monte Carlo of the model-mean error after the shift, label mean = truth + Laplace noise
    of variance V = 1 (as ``private_mean``'s): the module docstring's figures, in units of V."""
    rng = np.random.default_rng(0)
    risks = []
    for noise in rng.laplace(0.0, 1.0 / np.sqrt(2.0), 20_000):
        anchor = anchor_of(noise, 1.0, [error])
        risks.append((error + anchor.offset) ** 2)
    risk = float(np.mean(risks))
    assert risk <= bound
    if error >= 3.0:
        assert risk < 0.25 * error**2


def header(**overrides: object) -> MessageHeader:
    fields: dict[str, object] = {
        "release_id": "r1",
        "dataset": "clicks",
        "created": datetime(2026, 11, 22, tzinfo=UTC),
        "mechanism": "rpwithprior",
        "params": {},
        "epsilon1": 0.1,
        "epsilon2": 0.9,
        "label_min": 0.0,
        "label_max": 400.0,
        "default_label": 0.0,
        "histogram": NoisyHistogram(edges=[0.0, 200.0, 400.0], probs=[0.9, 0.1]),
        "n": 1000,
        "body_sha256": "0" * 64,
        "label_mean": 21.5,
        "label_mean_epsilon": 0.03,
    }
    fields.update(overrides)
    return MessageHeader.model_validate(fields)


def test_message_label_mean_needs_the_mean_and_every_label_joined() -> None:
    got = message_label_mean(header(), n_joined=1000)
    assert got == LabelMean(
        value=21.5,
        variance=private_mean_variance(lo=0.0, hi=400.0, epsilon=0.03, n=1000),
        lo=0.0,
        hi=400.0,
    )
    assert message_label_mean(header(), n_joined=999) is None
    without = header(label_mean=None, label_mean_epsilon=None)
    assert message_label_mean(without, n_joined=1000) is None


def test_fit_model_anchors_a_shrunk_model_on_the_label_mean() -> None:
    """Raw labels 0.1 y + 4 (a randomizer that shrinks to 4, mean 4.5): the fitted model's mean
    is 4.5; with the exact label mean 5 it becomes 5, and the pickled model keeps the shift."""
    rng = np.random.default_rng(1)
    n = 400
    columns = {"x": rng.normal(size=n)}
    y = 5.0 + columns["x"]
    noisy = 0.1 * y + 4.0 + rng.normal(0.0, 0.01, n)
    encoder = fit_encoder([("x", "numeric")], columns)
    X = encoder.encode_columns(columns)
    kwargs = {"encoder": encoder, "model": "ridge", "label_transform": "raw"}
    plain = fit_model(X, noisy, **kwargs)
    label_mean = LabelMean(value=5.0, variance=1e-6, lo=0.0, hi=10.0)
    anchored = fit_model(X, noisy, label_mean=label_mean, **kwargs)
    assert np.mean(plain.predict_matrix(X)) == pytest.approx(4.5, abs=0.01)
    assert np.mean(anchored.predict_matrix(X)) == pytest.approx(5.0, abs=1e-3)
    assert anchored.metrics["mean_anchor"]["weight"] == pytest.approx(1.0, abs=1e-3)
    assert "mean_anchor" not in plain.metrics and plain.offset == 0.0
    restored = pickle.loads(pickle.dumps(anchored))
    np.testing.assert_allclose(restored.predict_matrix(X), anchored.predict_matrix(X))


@settings(max_examples=300, deadline=None)
@given(
    st.floats(min_value=1e-4, max_value=10.0),
    st.integers(min_value=1, max_value=10**6),
    st.floats(min_value=0.0, max_value=1.0),
)
def test_a_mean_the_labels_party_would_not_buy_is_always_gated(
    epsilon: float, n: int, position: float
) -> None:
    """``anchor_can_use`` False -> the features party's gate shuts for every possible m: the
    labels party's skip never throws away a mean the anchor would have used."""
    lo, hi = -3.0, 400.0
    if anchor_can_use(lo=lo, hi=hi, epsilon=epsilon, n=n):
        return
    variance = private_mean_variance(lo=lo, hi=hi, epsilon=epsilon, n=n)
    value = lo + position * (hi - lo)
    assert anchor_of(value, variance, [value + 1.0], lo=lo, hi=hi).gated
