"""bench.model_dim: a model's model_dim measured on pure noise (least squares gives its d)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bench import model_dim
from shared.errors import InvalidParameterError


def _least_squares(x_train: np.ndarray, x_eval: np.ndarray):
    def fit_predict(targets: np.ndarray) -> np.ndarray:
        coef, *_ = np.linalg.lstsq(x_train, targets, rcond=None)
        return x_eval @ coef

    return fit_predict


@pytest.mark.parametrize("d", [1, 5, 40])
def test_noise_model_dim_of_least_squares_is_its_parameter_count(d: int) -> None:
    """Least squares on d features absorbs (d / n) sigma^2 of pure noise: the measure gives d
    (in expectation d n / (n - d - 1) at new rows; 30 draws keep the estimate within 15%)."""
    rng = np.random.default_rng(100 + d)  # not the noise's seed: z would equal a feature
    n = 4000
    x_train, x_eval = rng.standard_normal((n, d)), rng.standard_normal((2000, d))
    got = model_dim.noise_model_dim(
        _least_squares(x_train, x_eval), n, scale=3.0, rng=np.random.default_rng(1), repeats=30
    )
    assert abs(got - d * n / (n - d - 1)) <= max(1.0, 0.15 * d)


def test_noise_model_dim_orders_models_by_how_much_noise_they_fit() -> None:
    rng = np.random.default_rng(0)
    n = 2000
    x_train, x_eval = rng.standard_normal((n, 60)), rng.standard_normal((500, 60))

    def mean_only(targets: np.ndarray) -> np.ndarray:
        return np.full(500, targets.mean())

    dims = [
        model_dim.noise_model_dim(f, n, scale=1.0, rng=np.random.default_rng(2), repeats=20)
        for f in (
            mean_only,
            _least_squares(x_train[:, :6], x_eval[:, :6]),
            _least_squares(x_train, x_eval),
        )
    ]
    assert dims[0] <= 2 and dims[0] < dims[1] < dims[2]
    # Scale-free: the measure does not depend on the label range for a linear fit.
    again = model_dim.noise_model_dim(
        _least_squares(x_train, x_eval), n, scale=1000.0, rng=np.random.default_rng(2), repeats=20
    )
    assert again == dims[2]


@pytest.mark.parametrize(
    ("n", "scale", "repeats"),
    [(0, 1.0, 1), (True, 1.0, 1), (10, 0.0, 1), (10, math.inf, 1), (10, 1.0, 0), (10, "1", 1)],
)
def test_noise_model_dim_rejects_bad_arguments(n: object, scale: object, repeats: int) -> None:
    with pytest.raises(InvalidParameterError):
        model_dim.noise_model_dim(
            lambda t: t, n, scale=scale, rng=np.random.default_rng(0), repeats=repeats
        )
