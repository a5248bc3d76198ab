"""Debiasing from the message's public parameters: E[debiased | y] by Monte Carlo."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest

from shared.debias import (
    affine_coefficients,
    affine_debias,
    debias_by,
    mechanism_from_header,
    recommended_transform,
)
from shared.errors import InvalidParameterError
from shared.mechanisms.rp_with_prior import RPWithPrior
from shared.mechanisms.rr_on_bins import RROnBins
from shared.message import MessageHeader, NoisyHistogram

DRAWS = 400_000


def header_for(mechanism: str, params: dict[str, Any]) -> MessageHeader:
    """A message header carrying ``params`` (the debiasing reads nothing else)."""
    return MessageHeader(
        release_id="r",
        dataset="d",
        created=datetime(2026, 1, 1, tzinfo=UTC),
        mechanism=mechanism,
        params=params,
        epsilon1=0.1,
        epsilon2=1.0,
        label_min=0.0,
        label_max=100.0,
        default_label=0.0,
        histogram=NoisyHistogram(edges=[0.0, 50.0, 100.0], probs=[0.5, 0.5]),
        n=0,
        body_sha256="0" * 64,
    )


def assert_unbiased(draws: np.ndarray, target: float) -> None:
    """The Monte Carlo mean is within 5 standard errors of ``target``."""
    se = draws.std(ddof=1) / np.sqrt(draws.size)
    assert abs(draws.mean() - target) < 5 * se, (draws.mean(), target, se)


@pytest.mark.parametrize("epsilon", [0.5, 2.0])
def test_rpwithprior_debiased_mean_is_y_inside_the_interval(rng, epsilon):
    mechanism = RPWithPrior(a1=10.0, a2=60.0, zeta=5.0, epsilon=epsilon)
    header = header_for("rpwithprior", mechanism.public_params())
    for y in (10.0, 23.7, 60.0):
        noisy = mechanism.randomize(np.full(DRAWS, y), rng)
        # The raw noisy labels are biased towards the interval's centre ...
        raw_se = noisy.std(ddof=1) / np.sqrt(DRAWS)
        assert abs(noisy.mean() - y) > 10 * raw_se
        # ... the debiased ones are not.
        assert_unbiased(affine_debias(header, noisy), y)


def test_rpwithprior_outside_the_interval_estimates_the_projection(rng):
    mechanism = RPWithPrior(a1=10.0, a2=60.0, zeta=5.0, epsilon=1.0, outside="project")
    header = header_for("rpwithprior", mechanism.public_params())
    for y, projected in ((0.0, 10.0), (95.0, 60.0)):
        noisy = mechanism.randomize(np.full(DRAWS, y), rng)
        assert_unbiased(affine_debias(header, noisy), projected)


@pytest.mark.parametrize("epsilon", [0.3, 3.0])
def test_rr_on_bins_debiased_mean_is_the_bin_value(rng, epsilon):
    mechanism = RROnBins(
        thresholds=np.array([5.0, 20.0, 50.0]),
        output_values=np.array([1.0, 12.0, 30.0, 80.0]),
        epsilon=epsilon,
    )
    header = header_for("rr_on_bins", mechanism.public_params())
    for y in (0.0, 7.0, 49.0, 99.0):
        noisy = mechanism.randomize(np.full(DRAWS, y), rng)
        bin_value = float(mechanism.output_values[mechanism.phi(np.array([y]))[0]])
        assert_unbiased(affine_debias(header, noisy), bin_value)


def test_coefficients_come_from_the_header_alone():
    mechanism = RROnBins(
        thresholds=np.array([5.0]), output_values=np.array([1.0, 12.0]), epsilon=1.0
    )
    header = header_for("rr_on_bins", mechanism.public_params())
    assert affine_coefficients(header) == pytest.approx(mechanism.affine_expectation())
    rebuilt = mechanism_from_header(header)
    assert rebuilt == mechanism
    a, b = mechanism.affine_expectation()
    noisy = np.array([1.0, 12.0])
    np.testing.assert_allclose(affine_debias(header, noisy), (noisy - b) / a)


def test_debias_by_inverts_the_affine_expectation():
    # E[a*y + b + noise] = a*y + b, so the map returns y exactly on the mean and accepts lists.
    y = np.array([-2.0, 0.0, 3.25])
    np.testing.assert_allclose(debias_by((0.25, 4.0), 0.25 * y + 4.0), y)
    assert debias_by((2.0, 1.0), [3, 5]).dtype == np.float64


def test_unrandomized_message_is_left_unchanged():
    header = header_for("none", {})
    values = np.array([0.0, 3.5, 100.0])
    np.testing.assert_array_equal(affine_debias(header, values), values)


def test_single_bin_release_debiases_to_its_value():
    mechanism = RROnBins(thresholds=np.array([]), output_values=np.array([7.5]), epsilon=0.01)
    header = header_for("rr_on_bins", mechanism.public_params())
    np.testing.assert_allclose(affine_debias(header, np.full(3, 7.5)), 7.5)


def test_bad_parameters_are_refused():
    with pytest.raises(InvalidParameterError):
        affine_debias(header_for("rpwithprior", {"a1": 1.0}), np.zeros(2))


def test_recommended_transform_follows_bias_against_variance_over_n() -> None:
    """Many examples: unbiased targets win; few: the low-variance raw ones (exact criterion)."""
    wide = RPWithPrior(a1=0.0, a2=100.0, zeta=20.0, epsilon=1.0).public_params()
    many = header_for("rpwithprior", wide).model_copy(update={"n": 1_000_000})
    few = header_for("rpwithprior", wide).model_copy(update={"n": 20})
    assert recommended_transform(many, model_dim=10) == "debiased"
    assert recommended_transform(few, model_dim=10) == "raw"
    tiny = RPWithPrior(a1=0.0, a2=100.0, zeta=20.0, epsilon=0.01).public_params()
    assert recommended_transform(header_for("rpwithprior", tiny), model_dim=10) == "raw"


def test_recommended_transform_of_an_unrandomized_message_is_raw() -> None:
    assert recommended_transform(header_for("none", {}), model_dim=3) == "raw"


@pytest.mark.parametrize("n", [20, 1_000, 1_000_000])
@pytest.mark.parametrize("model_dim", [1, 10, 99])
def test_recommended_transform_reads_only_the_public_randomizer(n: int, model_dim: int) -> None:
    """Any object with a header's mechanism, params, prior and n gets the header's answer."""
    from dataclasses import dataclass

    from shared.mechanisms.histogram import Prior

    @dataclass(frozen=True)
    class Public:
        mechanism: str
        params: dict
        prior: Prior
        n: int

    prior = Prior(edges=np.array([0.0, 50.0, 100.0]), probs=np.array([0.5, 0.5]))
    cases = {
        "rpwithprior": RPWithPrior(a1=0.0, a2=100.0, zeta=20.0, epsilon=1.0).public_params(),
        "rr_on_bins": RROnBins(
            thresholds=np.array([50.0]), output_values=np.array([25.0, 75.0]), epsilon=1.0
        ).public_params(),
    }
    for name, params in cases.items():
        header = header_for(name, params).model_copy(update={"n": n})
        got = recommended_transform(Public(name, params, prior, n), model_dim=model_dim)
        assert got == recommended_transform(header, model_dim=model_dim)
    assert recommended_transform(Public("none", {}, prior, n), model_dim=model_dim) == "raw"
    with pytest.raises(InvalidParameterError, match="laplace"):
        recommended_transform(Public("laplace", {}, prior, n), model_dim=model_dim)
