"""Training as pure functions: encoding, ridge path, noisy-label selection, the join."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.linear_model import Ridge

from features_party.jobs import join_on_example_id
from features_party.training import (
    MAX_CV_EXAMPLES,
    OTHER_CODE,
    RidgePath,
    candidates_for,
    fit_encoder,
    fit_model,
    fold_indices,
    select_one_se,
    split_indices,
)
from shared.errors import InvalidParameterError
from shared.mechanisms.rr_on_bins import RROnBins

KINDS = [("x1", "numeric"), ("x2", "numeric"), ("colour", "categorical")]


def make_data(n: int, rng: np.random.Generator) -> tuple[dict[str, np.ndarray], np.ndarray]:
    x1, x2 = rng.normal(size=n), rng.normal(size=n)
    colour = rng.choice(np.array(["red", "green", "blue"]), size=n)
    y = np.clip(
        50 + 15 * x1 + 8 * np.sin(2 * x2) + 20 * (colour == "red") + rng.normal(0, 5, n), 0, 100
    )
    return {"x1": x1, "x2": x2, "colour": colour}, y


def test_encoder_codes_unknown_and_missing_categories():
    data = {"n": np.array([1.0, np.nan, 3.0]), "c": np.array(["a", "b", "a"], dtype=object)}
    encoder = fit_encoder([("n", "numeric"), ("c", "categorical")], data)
    assert encoder.vocab["c"] == {"a": 0, "b": 1}  # most frequent first
    X = encoder.encode_rows([[2.0, "a"], [None, "zzz"], [1.5, None]])
    np.testing.assert_array_equal(X[:, 1][:2], [0.0, OTHER_CODE])
    assert np.isnan(X[1, 0]) and np.isnan(X[2, 1])
    # 3, 3.0 and "3" are one category, as in the upload.
    encoder = fit_encoder([("c", "categorical")], {"c": np.array([3, 4])})
    np.testing.assert_array_equal(encoder.encode_columns({"c": ["3", 3.0]})[:, 0], [0, 0])
    with pytest.raises(InvalidParameterError, match="missing feature"):
        encoder.encode_columns({})


def test_ridge_path_equals_sklearn_ridge(rng):
    Z, V = rng.normal(size=(300, 12)), rng.normal(size=(40, 12))
    y = Z @ rng.normal(size=12) + 3.0 + rng.normal(size=300)
    path = RidgePath(Z, V)
    for alpha in (1e-4, 0.3, 50.0, 1e6):
        np.testing.assert_allclose(
            path.predict(y, alpha=alpha), Ridge(alpha=alpha).fit(Z, y).predict(V), atol=1e-9
        )


def test_one_se_rule_prefers_the_simplest_candidate_within_noise():
    rng = np.random.default_rng(3)
    base = rng.exponential(size=500)
    losses = {
        # mean 0.001 worse, paired SE 0.5 / sqrt(500) = 0.022: not significantly worse
        "simple": base + np.tile([0.5, -0.5], 250) + 0.001,
        "complex": base,
        "bad": base + 1.0,
    }
    complexity = {"simple": 0.0, "complex": 5.0, "bad": 1.0}
    chosen, ses = select_one_se(losses, complexity)
    assert chosen == "simple" and ses["complex"] == 0.0
    losses["simple"] = base + 0.5
    assert select_one_se(losses, complexity)[0] == "complex"


@pytest.mark.parametrize("n", [20, 1595, 10_001])
def test_folds_validate_every_example_once_on_data_held_out_of_their_fit(n):
    folds = fold_indices(n, seed=7)
    assert len(folds) == 5
    held = np.concatenate([val for _, val in folds])
    np.testing.assert_array_equal(np.sort(held), np.arange(n))  # each example exactly once
    for train, val in folds:
        assert np.intersect1d(train, val).size == 0 and train.size + val.size == n
    assert fold_indices(n, seed=7)[2][1].tolist() == folds[2][1].tolist()  # seeded


def test_above_the_cross_validation_size_one_split_validates():
    (train, val), *rest = fold_indices(MAX_CV_EXAMPLES + 1, seed=3)
    assert not rest
    expected = split_indices(MAX_CV_EXAMPLES + 1, seed=3)
    np.testing.assert_array_equal(train, expected[0])
    np.testing.assert_array_equal(val, expected[1])


def test_selection_scores_every_example_out_of_fold(rng):
    """A job on 400 noisy labels reports 5 folds and 400 validated examples (one split: 80)."""
    columns, y = make_data(400, rng)
    encoder = fit_encoder(KINDS, columns)
    noisy = y + rng.normal(0, 30, y.size)
    fitted = fit_model(encoder.encode_columns(columns), noisy, encoder=encoder, model="auto")
    assert fitted.metrics["folds"] == 5
    assert fitted.metrics["n_validation"] == 400 and fitted.metrics["n_train"] == 320


def test_progress_never_goes_back(rng):
    """Every fold's step, then the refit: the fractions a job reports only grow (the last fold
    of a model with many candidates once reported above the refit's 0.95)."""
    columns, y = make_data(300, rng)
    encoder = fit_encoder(KINDS, columns)
    seen: list[float] = []
    fit_model(
        encoder.encode_columns(columns),
        y + rng.normal(0, 5, y.size),
        encoder=encoder,
        model="auto",
        progress=lambda _stage, fraction: seen.append(fraction),
    )
    assert len(seen) > 10 and seen == sorted(seen) and 0 <= seen[0] and seen[-1] <= 1


def test_cross_validation_picks_better_models_than_one_split(rng, monkeypatch):
    """Heavy label noise (sd 80 on labels of sd ~20), 600 examples, 20 noisy draws: the models
    five folds choose predict the true labels clearly better than those one 80/20 split
    chooses on the same draws (measured: 0.40 vs 0.70 of the label variance)."""
    columns, y = make_data(600, rng)
    test_columns, y_test = make_data(4000, rng)
    encoder = fit_encoder(KINDS, columns)
    X = encoder.encode_columns(columns)

    def mean_test_mse() -> float:
        mses = []
        for draw in range(20):
            noisy = y + np.random.default_rng(draw).normal(0, 80, y.size)
            fitted = fit_model(X, noisy, encoder=encoder, model="auto", seed=draw)
            mses.append(np.mean((fitted.predict_columns(test_columns) - y_test) ** 2))
        return float(np.mean(mses))

    folds = mean_test_mse()
    monkeypatch.setattr("features_party.training.MAX_CV_EXAMPLES", 0)  # one split
    one_split = mean_test_mse()
    assert folds < 0.8 * one_split and folds < 0.6 * np.var(y_test)


def test_exact_labels_learn_the_signal(rng):
    columns, y = make_data(3000, rng)
    encoder = fit_encoder(KINDS, columns)
    fitted = fit_model(encoder.encode_columns(columns), y, encoder=encoder, model="auto", seed=1)
    assert fitted.candidate.family in ("ridge", "gbm")
    test_columns, y_test = make_data(2000, rng)
    mse = np.mean((fitted.predict_columns(test_columns) - y_test) ** 2)
    assert mse < 0.3 * np.var(y_test)
    # exact labels: one transform only
    assert {c["transform"] for c in fitted.metrics["candidates"]} == {"raw"}


def test_tiny_epsilon_ends_at_an_almost_constant_model(rng):
    """RR-on-Bins at epsilon 0.02 on few labels: no signal survives; auto must not fit noise."""
    columns, y = make_data(600, rng)
    mechanism = RROnBins(
        thresholds=np.array([25.0, 50.0, 75.0]),
        output_values=np.array([12.5, 37.5, 62.5, 87.5]),
        epsilon=0.02,
    )
    noisy = mechanism.randomize(y, rng)
    encoder = fit_encoder(KINDS, columns)
    fitted = fit_model(
        encoder.encode_columns(columns),
        noisy,
        encoder=encoder,
        affine=mechanism.affine_expectation(),
        model="auto",
        label_transform="auto",
        seed=2,
    )
    metrics = fitted.metrics
    assert fitted.candidate.family in ("constant", "ridge"), metrics["chosen"]
    if fitted.candidate.family == "ridge":
        assert fitted.candidate.params["lambda"] >= 1.0
    assert metrics["prediction_std"] < 0.1 * np.std(y)
    assert metrics["validation_mse_noisy"] > 0 and metrics["validation_mse_unbiased"] > 0


def test_unbiased_validation_ranks_models_like_the_true_mse(rng):
    """E[(f - z')^2] - E[(f - y)^2] is the same constant for every model f (module docstring)."""
    n = 200_000
    y = rng.uniform(0, 100, n)
    mechanism = RROnBins(
        thresholds=np.linspace(10, 90, 9), output_values=np.linspace(5, 95, 10), epsilon=1.0
    )
    a, b = mechanism.affine_expectation()
    bin_value = mechanism.output_values[mechanism.phi(y)]
    z = (mechanism.randomize(y, rng) - b) / a
    gaps = []
    for prediction in (np.full(n, 50.0), bin_value + rng.normal(0, 10, n), 0.5 * bin_value):
        true_mse = np.mean((prediction - bin_value) ** 2)
        gaps.append(np.mean((prediction - z) ** 2) - true_mse)
    # The gap is the noise variance E[Var(z'|y)], identical for all three models.
    assert np.ptp(gaps) < 0.02 * np.mean(gaps)


def test_candidates_and_bad_arguments():
    names = [c.name for c in candidates_for("ridge", "debiased", identity=False)]
    assert all(name.startswith("ridge(") and name.endswith("/debiased") for name in names)
    assert [c.family for c in candidates_for("mlp", "raw", identity=False)] == ["mlp"]
    with pytest.raises(InvalidParameterError, match="model"):
        candidates_for("forest", "raw", identity=False)
    with pytest.raises(InvalidParameterError, match="label_transform"):
        candidates_for("gbm", "log", identity=False)
    encoder = fit_encoder([("x", "numeric")], {"x": np.arange(5.0)})
    with pytest.raises(InvalidParameterError, match="at least 20"):
        fit_model(np.zeros((5, 1)), np.zeros(5), encoder=encoder)
    with pytest.raises(InvalidParameterError, match="a > 0"):
        fit_model(np.zeros((50, 1)), np.zeros(50), encoder=encoder, affine=(0.0, 1.0))


@pytest.mark.slow
def test_mlp_is_the_papers_network(rng):
    columns, y = make_data(400, rng)
    encoder = fit_encoder(KINDS, columns)
    fitted = fit_model(encoder.encode_columns(columns), y, encoder=encoder, model="mlp", seed=0)
    mlp = fitted.estimator.regressor_.named_steps["mlp"]
    assert mlp.hidden_layer_sizes == (128, 64) and mlp.solver == "adam"
    assert (mlp.learning_rate_init, mlp.alpha, mlp.batch_size) == (1e-3, 1e-4, 256)


def test_join_counts_both_sides():
    rows, labels, stats, _positions = join_on_example_id(
        ["a", "b", "c", "d"], np.array([1.0, 2.0, 3.0, 4.0]), ["c", "a", "z"], [["C"], ["A"], ["Z"]]
    )
    assert rows == [["A"], ["C"]]
    np.testing.assert_array_equal(labels, [1.0, 3.0])
    assert stats == {
        "n_message": 4,
        "n_features": 3,
        "n_joined": 2,
        "n_labels_without_features": 2,
        "n_features_without_label": 1,
    }


def test_resolve_label_transform_is_the_headers_criterion():
    """ "auto" becomes the header's recommended transform; explicit choices pass through."""
    from datetime import UTC, datetime

    from features_party.training import resolve_label_transform
    from shared.debias import recommended_transform
    from shared.mechanisms.rp_with_prior import RPWithPrior
    from shared.message import MessageHeader, NoisyHistogram

    params = RPWithPrior(a1=0.0, a2=100.0, zeta=20.0, epsilon=1.0).public_params()
    edges, probs = [0.0, 50.0, 100.0], [0.5, 0.5]
    answers = set()
    for n in (20, 1_000_000):
        header = MessageHeader(
            release_id="r",
            dataset="d",
            created=datetime(2026, 1, 1, tzinfo=UTC),
            mechanism="rpwithprior",
            params=params,
            epsilon1=0.1,
            epsilon2=1.0,
            label_min=0.0,
            label_max=100.0,
            default_label=0.0,
            histogram=NoisyHistogram(edges=edges, probs=probs),
            n=n,
            body_sha256="0" * 64,
        )
        got = resolve_label_transform("auto", header, model_dim=10)
        assert got == recommended_transform(header, model_dim=10)
        answers.add(got)
        for explicit in ("raw", "debiased"):
            assert resolve_label_transform(explicit, header, model_dim=10) == explicit
    assert answers == {"raw", "debiased"}  # the test can tell the two apart
    unrandomized = header.model_copy(update={"mechanism": "none", "params": {}, "n": 5})
    assert resolve_label_transform("auto", unrandomized, model_dim=3) == "raw"


@pytest.mark.parametrize(
    ("header", "columns", "expected"), [(115, 99, 115), (None, 99, 99), (None, 0, 1), (1, 5, 1)]
)
def test_criterion_model_dim_is_the_headers_else_the_column_count(
    header: int | None, columns: int, expected: int
) -> None:
    from features_party.training import criterion_model_dim

    assert criterion_model_dim(header, columns) == expected


@pytest.mark.parametrize(
    ("model", "transform", "n", "epsilon2", "expected"),
    [
        ("auto", "auto", 1595, 0.225, ("constant", "debiased")),  # 1595 x 0.225^2 = 80.7 < 200
        ("auto", "raw", 1595, 0.225, ("constant", "raw")),  # a transform asked for by name
        ("auto", "auto", 1595, 0.375, ("auto", "auto")),  # 224 >= 200
        ("gbm", "auto", 1595, 0.002, ("gbm", "auto")),  # a model asked for by name is fitted
        ("ridge", "raw", 10, 0.001, ("ridge", "raw")),
    ],
)
def test_model_for_message_narrows_auto_by_the_plans_rule(model, transform, n, epsilon2, expected):
    from features_party.training import model_for_message

    assert model_for_message(model, transform, n=n, epsilon2=epsilon2, model_dim=10) == expected


def test_a_mean_first_release_trains_the_dp_constant(rng):
    """auto's mean-first release (labels that cannot train a model): the features party's auto
    fits the constant and anchors it on the DP mean bought with 99% of epsilon."""
    from datetime import UTC, datetime

    from features_party.training import train_on_message
    from shared.message import header_for
    from shared.plan import plan_release
    from shared.randomizer import execute

    columns, y = make_data(1500, rng)
    plan = plan_release(n=y.size, lo=0.0, hi=100.0, epsilon="0.3")
    assert plan.split == "mean_first"
    release = execute(plan, y, rng)
    header = header_for(
        release,
        release_id="rel_x",
        dataset="d",
        default_label=0.0,
        n=y.size,
        body_sha256="0" * 64,
        created=datetime(2026, 1, 1, tzinfo=UTC),
    )
    assert header.label_mean is not None and header.label_mean_epsilon == 0.297
    encoder = fit_encoder(KINDS, columns)
    fitted = train_on_message(
        header, encoder.encode_columns(columns), release.noisy_labels, encoder=encoder
    )
    assert fitted.candidate.family == "constant"
    assert {c["family"] for c in fitted.metrics["candidates"]} == {"constant"}
    prediction = fitted.predict_columns(columns)
    assert np.ptp(prediction) == 0.0
    # Pooled with the constant's own (very noisy) mean, the anchor lands on the DP mean.
    assert abs(prediction[0] - header.label_mean) < 0.05 * np.sqrt(header.label_mean_variance)
    # Asked for by name, a model is fitted on the same message.
    named = train_on_message(
        header,
        encoder.encode_columns(columns),
        release.noisy_labels,
        encoder=encoder,
        model="ridge",
    )
    assert named.candidate.family == "ridge"
