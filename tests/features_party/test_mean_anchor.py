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
    pooled_weight,
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


def test_pooled_floor_closed_form() -> None:
    """A constant model fitted to targets whose mean has noise variance U = s^2 / n = 9 V: the
    gap is within sqrt(2 V), so shrinkage alone moves nothing, and the floor U / (U + V) = 0.9
    applies, gate or no gate."""
    n = 400
    targets = np.where(np.arange(n) % 2 == 0, 2.0 - 60.0, 2.0 + 60.0)  # mean 2, s^2 = 3600
    predictions = np.full(n, 2.0)
    variance = 3600.0 / n / 9.0  # U = 9, V = 1
    label_mean = LabelMean(value=3.0, variance=variance, lo=-WIDE, hi=WIDE)
    anchor = mean_anchor(label_mean, predictions=predictions, targets=targets)
    assert anchor.prediction_mean_variance == pytest.approx(9.0)
    assert anchor.weight == pytest.approx(0.9) and anchor.offset == pytest.approx(0.9)
    assert mean_anchor(label_mean, predictions=predictions).offset == 0.0  # shrinkage only
    gated_mean = LabelMean(value=3.0, variance=variance, lo=2.5, hi=3.5)  # sd 1 > 0.1 * 0.5
    gated = mean_anchor(gated_mean, predictions=predictions, targets=targets)
    assert gated.gated and gated.weight == pytest.approx(0.9)
    # Where shrinkage asks for more than the floor, shrinkage wins.
    far = LabelMean(value=12.0, variance=variance, lo=-WIDE, hi=WIDE)
    assert mean_anchor(far, predictions=predictions, targets=targets).weight == pytest.approx(
        1 - SHRINKAGE / 100.0
    )


def test_targets_must_match_the_predictions() -> None:
    label_mean = LabelMean(value=1.0, variance=1.0, lo=-WIDE, hi=WIDE)
    with pytest.raises(ValueError, match="do not match"):
        mean_anchor(label_mean, predictions=np.zeros(3), targets=np.zeros(1))


def test_pooled_weight_edges() -> None:
    assert pooled_weight(3.0, 1.0) == pytest.approx(0.75)
    assert pooled_weight(0.0, 1.0) == 0.0  # a noiseless model mean: m adds nothing
    assert pooled_weight(0.0, 0.0) == 1.0  # an exact m
    assert pooled_weight(float("inf"), 1.0) == 1.0
    assert pooled_weight(1.0, float("inf")) == 0.0
    assert pooled_weight(float("inf"), float("inf")) == 0.0


@settings(max_examples=300, deadline=None)
@given(
    values,
    st.floats(min_value=0.0, max_value=1e6),
    st.lists(st.tuples(values, values), min_size=1, max_size=20),
)
def test_with_targets_the_shift_still_goes_towards_the_mean_and_never_past_it(
    value: float, variance: float, rows: list[tuple[float, float]]
) -> None:
    predictions, targets = (np.array(column) for column in zip(*rows, strict=True))
    label_mean = LabelMean(value=value, variance=variance, lo=-WIDE, hi=WIDE)
    anchor = mean_anchor(label_mean, predictions=predictions, targets=targets)
    gap = value - float(np.mean(predictions))
    assert 0.0 <= anchor.weight <= 1.0 and anchor.prediction_mean_variance >= 0.0
    assert abs(anchor.offset) <= abs(gap) * (1 + 1e-12)
    assert anchor.offset * gap >= 0.0


@pytest.mark.parametrize(
    ("model_variance", "error", "bound"),
    [(1.0, 0.0, 0.7), (1.0, 2.0, 1.25), (10.0, 0.0, 1.0), (10.0, 3.0, 1.05), (0.1, 0.0, 0.4)],
)
def test_risk_of_a_noisy_model_mean_is_cut_by_the_floor(
    model_variance: float, error: float, bound: float
) -> None:
    """Monte Carlo, in units of V (Laplace noise on m, as ``private_mean``'s): a model mean with
    noise of variance U and bias ``error`` ends below ``bound``, and below the model alone
    wherever U >= V (inverse-variance pooling would give U V / (U + V) without bias)."""
    rng = np.random.default_rng(0)
    n = 50
    risks, alone = [], []
    for _ in range(6_000):
        targets = rng.normal(0.0, 1.0, n)
        targets = (targets - targets.mean()) / targets.std() * np.sqrt(model_variance * n)
        model_mean = error + rng.normal(0.0, np.sqrt(model_variance))
        label_mean = LabelMean(
            value=rng.laplace(0.0, 1.0 / np.sqrt(2.0)), variance=1.0, lo=-WIDE, hi=WIDE
        )
        anchor = mean_anchor(
            label_mean, predictions=np.full(n, model_mean), targets=targets + model_mean
        )
        risks.append((model_mean + anchor.offset) ** 2)
        alone.append(model_mean**2)
    risk = float(np.mean(risks))
    assert risk <= bound
    if model_variance >= 1.0:
        assert risk < float(np.mean(alone))


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


def test_fit_model_pools_a_noisy_debiased_mean_with_the_label_mean() -> None:
    """Debiased targets of a very noisy randomizer (a = 0.05): the model's own mean is off by
    its noise (U = s^2 / n >> V); the anchored mean is within a few sqrt(V) of the truth."""
    rng = np.random.default_rng(3)
    n = 500
    columns = {"x": rng.normal(size=n)}
    y = np.full(n, 5.0)
    noisy = 0.05 * y + 1.0 + rng.normal(0.0, 0.5, n)  # debiased: y + N(0, 10^2)
    encoder = fit_encoder([("x", "numeric")], columns)
    X = encoder.encode_columns(columns)
    label_mean = LabelMean(value=5.01, variance=1e-4, lo=0.0, hi=10.0)
    fitted = fit_model(
        X,
        noisy,
        encoder=encoder,
        affine=(0.05, 1.0),
        model="ridge",
        label_transform="debiased",
        label_mean=label_mean,
    )
    anchor = fitted.metrics["mean_anchor"]
    assert anchor["prediction_mean_variance"] == pytest.approx(100.0 / n, rel=0.2)
    assert anchor["weight"] > 0.99
    assert np.mean(fitted.predict_matrix(X)) == pytest.approx(5.01, abs=0.01)


def test_the_constant_model_is_the_dp_mean_itself_unless_gated():
    """exact=True (the model named "constant"): weight 1, whatever the targets' own mean."""
    label_mean = LabelMean(value=10.0, variance=0.01, lo=0.0, hi=100.0)
    predictions = np.full(50, 12.0)
    targets = np.linspace(-100.0, 124.0, 50)  # very noisy: pooling alone would not move far
    exact = mean_anchor(label_mean, predictions=predictions, targets=targets, exact=True)
    assert (exact.weight, exact.offset) == (1.0, -2.0)
    gated = LabelMean(value=10.0, variance=1e6, lo=0.0, hi=100.0)
    assert mean_anchor(gated, predictions=predictions, targets=targets, exact=True).weight < 1.0
