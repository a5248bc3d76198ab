"""The mean anchor: closed form, shrinkage risk, header plumbing, and the fitted model's shift."""

from __future__ import annotations

import pickle
from datetime import UTC, datetime

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from features_party.mean_anchor import LabelMean, mean_anchor, message_label_mean
from features_party.training import fit_encoder, fit_model
from shared.mechanisms.private_mean import private_mean_variance
from shared.message import MessageHeader, NoisyHistogram

values = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)


def test_closed_form_of_the_shrunk_shift() -> None:
    predictions = np.array([1.0, 2.0, 3.0])  # mean 2
    anchor = mean_anchor(LabelMean(value=4.0, variance=1.0), predictions=predictions)
    gap = 2.0
    assert anchor.weight == pytest.approx(1 - 1.0 / gap**2)
    assert anchor.offset == pytest.approx(gap * (1 - 1.0 / gap**2))
    # Within one standard error of the model's mean: the evidence says nothing, no shift.
    assert mean_anchor(LabelMean(value=2.5, variance=1.0), predictions=predictions).offset == 0.0
    # An exact mean (epsilon inf) moves the model all the way.
    assert mean_anchor(LabelMean(value=4.0, variance=0.0), predictions=predictions).offset == 2.0
    # An infinitely noisy mean (absurdly small epsilon) moves nothing.
    infinite = LabelMean(value=4.0, variance=float("inf"))
    assert mean_anchor(infinite, predictions=predictions).offset == 0.0


@settings(max_examples=300, deadline=None)
@given(values, st.floats(min_value=0.0, max_value=1e6), st.lists(values, min_size=1, max_size=20))
def test_the_shift_goes_towards_the_mean_and_never_past_it(
    value: float, variance: float, predictions: list[float]
) -> None:
    label_mean = LabelMean(value=value, variance=variance)
    anchor = mean_anchor(label_mean, predictions=np.array(predictions))
    gap = value - float(np.mean(predictions))
    assert 0.0 <= anchor.weight <= 1.0
    assert abs(anchor.offset) <= abs(gap) * (1 + 1e-12)
    assert anchor.offset * gap >= 0.0


@pytest.mark.parametrize("error", [0.0, 0.5, 1.0, 3.0, 10.0])
def test_risk_never_much_above_the_noise_and_far_below_a_large_error(error: float) -> None:
    """Monte Carlo of the model-mean error after the shift, label mean ~ N(truth, V = 1).

    Positive-part shrinkage of one coordinate: the risk is below V + something small when the
    model's mean is right, and close to V (not error^2) when it is far off.
    """
    rng = np.random.default_rng(0)
    truth, variance = 0.0, 1.0
    risks = []
    for noise in rng.normal(0.0, 1.0, 20_000):
        model_mean = truth + error
        anchor = mean_anchor(
            LabelMean(value=truth + noise, variance=variance), predictions=np.array([model_mean])
        )
        risks.append((model_mean + anchor.offset - truth) ** 2)
    risk = float(np.mean(risks))
    assert risk <= max(error**2, variance) * 1.05
    if error >= 3.0:
        assert risk < 0.2 * error**2


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
        value=21.5, variance=private_mean_variance(lo=0.0, hi=400.0, epsilon=0.03, n=1000)
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
    anchored = fit_model(X, noisy, label_mean=LabelMean(value=5.0, variance=1e-6), **kwargs)
    assert np.mean(plain.predict_matrix(X)) == pytest.approx(4.5, abs=0.01)
    assert np.mean(anchored.predict_matrix(X)) == pytest.approx(5.0, abs=1e-3)
    assert anchored.metrics["mean_anchor"]["weight"] == pytest.approx(1.0, abs=1e-3)
    assert "mean_anchor" not in plain.metrics and plain.offset == 0.0
    restored = pickle.loads(pickle.dumps(anchored))
    np.testing.assert_allclose(restored.predict_matrix(X), anchored.predict_matrix(X))
