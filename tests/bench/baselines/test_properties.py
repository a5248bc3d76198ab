"""Properties shared by every baseline: output range, determinism, validation, public params."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.baselines import (
    BASELINES,
    DiscreteStaircase,
    ExponentialMechanism,
    Gaussian,
    Laplace,
    RRWithPrior,
    Staircase,
    Unbiased,
    build_baseline,
)
from shared.errors import InvalidParameterError
from shared.mechanisms.histogram import Prior

LO, HI = -2.0, 5.0
PRIOR = Prior.from_samples(np.random.default_rng(0).normal(1.0, 1.5, 3000), lo=LO, hi=HI, bins=10)
UNBIASED = Unbiased.from_prior(PRIOR, epsilon=0.7)

FACTORIES: dict[str, Callable[[], Any]] = {
    "laplace": lambda: Laplace(epsilon=0.7, lo=LO, hi=HI),
    "laplace_unclipped": lambda: Laplace(epsilon=0.7, lo=LO, hi=HI, clip_output=False),
    "gaussian": lambda: Gaussian(epsilon=0.7, delta=1e-5, lo=LO, hi=HI),
    "gaussian_unclipped": lambda: Gaussian(
        epsilon=0.7, delta=1e-5, lo=LO, hi=HI, clip_output=False
    ),
    "staircase": lambda: Staircase(epsilon=0.7, lo=LO, hi=HI),
    "staircase_unclipped": lambda: Staircase(epsilon=0.7, lo=LO, hi=HI, clip_output=False),
    "discrete_staircase": lambda: DiscreteStaircase(epsilon=0.7, lo=-2, hi=5),
    "discrete_staircase_unclipped": lambda: DiscreteStaircase(
        epsilon=0.7, lo=-2, hi=5, clip_output=False
    ),
    "exponential": lambda: ExponentialMechanism(epsilon=0.7, lo=LO, hi=HI),
    "exponential_inverse_cdf": lambda: ExponentialMechanism(
        epsilon=0.7, lo=LO, hi=HI, sampler="inverse_cdf", calibration="tight"
    ),
    "rr_with_prior": lambda: RRWithPrior(prior=PRIOR, epsilon=0.7),
    "unbiased": lambda: UNBIASED,
}

labels_strategy = st.lists(
    st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False),
    min_size=1,
    max_size=40,
)


@pytest.mark.parametrize("name", sorted(FACTORIES))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(labels=labels_strategy, seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_outputs_in_range_and_deterministic(name: str, labels: list[float], seed: int) -> None:
    mech = FACTORIES[name]()
    out = mech.randomize(np.array(labels), np.random.default_rng(seed))
    again = mech.randomize(np.array(labels), np.random.default_rng(seed))
    assert out.shape == (len(labels),) and out.dtype == np.float64
    assert np.array_equal(out, again)  # determinism under a seeded rng
    lower, upper = mech.output_range
    assert np.all(np.isfinite(out))
    assert np.all((out >= lower) & (out <= upper))
    if hasattr(mech, "output_values"):
        assert np.all(np.isin(out, mech.output_values))


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_public_params_json_safe(name: str) -> None:
    mech = FACTORIES[name]()
    params = mech.public_params()
    text = json.dumps(params, allow_nan=False)
    assert json.loads(text)["epsilon"] == pytest.approx(mech.epsilon)
    assert "labels" not in text


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_works_with_system_rng(name: str) -> None:
    from shared.rng import SystemRandom

    mech = FACTORIES[name]()
    out = mech.randomize(np.linspace(LO - 1, HI + 1, 500), SystemRandom())
    lower, upper = mech.output_range
    assert np.all((out >= lower) & (out <= upper))


@pytest.mark.perf
def test_large_batch_is_vectorised() -> None:
    """10^6 labels in well under a few seconds for the one-pass samplers."""
    import time

    labels = np.random.default_rng(0).uniform(LO, HI, 1_000_000)
    for name in ("laplace", "gaussian", "staircase", "rr_with_prior", "unbiased"):
        start = time.perf_counter()
        FACTORIES[name]().randomize(labels, np.random.default_rng(1))
        assert time.perf_counter() - start < 3.0, name


# ---------------------------------------------------------------- invalid inputs

BAD_EPSILONS = [0.0, -1.0, math.nan, math.inf, -math.inf, "1", None, True]
CONSTRUCTORS: dict[str, Callable[..., Any]] = {
    "laplace": lambda **kw: Laplace(**{"epsilon": 1.0, "lo": LO, "hi": HI, **kw}),
    "gaussian": lambda **kw: Gaussian(**{"epsilon": 1.0, "delta": 1e-5, "lo": LO, "hi": HI, **kw}),
    "staircase": lambda **kw: Staircase(**{"epsilon": 1.0, "lo": LO, "hi": HI, **kw}),
    "discrete_staircase": lambda **kw: DiscreteStaircase(
        **{"epsilon": 1.0, "lo": 0, "hi": 5, **kw}
    ),
    "exponential": lambda **kw: ExponentialMechanism(**{"epsilon": 1.0, "lo": LO, "hi": HI, **kw}),
    "rr_with_prior": lambda **kw: RRWithPrior(**{"prior": PRIOR, "epsilon": 1.0, **kw}),
    "unbiased": lambda **kw: Unbiased.from_prior(PRIOR, **{"epsilon": 1.0, **kw}),
}


@pytest.mark.parametrize("name", sorted(CONSTRUCTORS))
@pytest.mark.parametrize("epsilon", BAD_EPSILONS)
def test_bad_epsilon_refused(name: str, epsilon: Any) -> None:
    with pytest.raises(InvalidParameterError, match="epsilon"):
        CONSTRUCTORS[name](epsilon=epsilon)


@pytest.mark.parametrize("name", ["laplace", "gaussian", "staircase", "exponential"])
@pytest.mark.parametrize(
    ("lo", "hi"), [(1.0, 1.0), (2.0, 1.0), (math.nan, 1.0), (0.0, math.inf), ("0", 1.0)]
)
def test_bad_bounds_refused(name: str, lo: Any, hi: Any) -> None:
    with pytest.raises(InvalidParameterError):
        CONSTRUCTORS[name](lo=lo, hi=hi)


@pytest.mark.parametrize("name", sorted(FACTORIES))
@pytest.mark.parametrize("labels", [[], [1.0, math.nan], [math.inf], [[1.0, 2.0]], ["a"]], ids=str)
def test_bad_labels_refused(name: str, labels: Any) -> None:
    mech = FACTORIES[name]()
    with pytest.raises(InvalidParameterError):
        mech.randomize(np.array(labels, dtype=object), np.random.default_rng(0))


@pytest.mark.parametrize(
    ("name", "kwargs"),
    [
        ("laplace", {"clip_output": "yes"}),
        ("laplace", {"clip_output": 1}),
        ("gaussian", {"delta": 0.0}),
        ("gaussian", {"delta": 1.0}),
        ("gaussian", {"delta": math.nan}),
        ("gaussian", {"calibration": "magic"}),
        ("gaussian", {"calibration": "classic", "epsilon": 2.0}),
        ("staircase", {"gamma": 0.0}),
        ("staircase", {"gamma": 1.0}),
        ("staircase", {"gamma": math.nan}),
        ("staircase", {"cost": "l3"}),
        ("discrete_staircase", {"r": 0}),
        ("discrete_staircase", {"r": 6}),
        ("discrete_staircase", {"r": 2.5}),
        ("discrete_staircase", {"lo": 0.5}),
        ("discrete_staircase", {"hi": 0}),
        ("exponential", {"sampler": "magic"}),
        ("exponential", {"calibration": "loose"}),
        ("rr_with_prior", {"prior": {"edges": [0, 1], "probs": [1]}}),
        ("unbiased", {"grid": "corners"}),
        ("unbiased", {"grid": [1.0]}),
        ("unbiased", {"grid": [2.0, 1.0]}),
        ("unbiased", {"rounding": "up"}),
        ("unbiased", {"n_outputs": 1}),
        ("unbiased", {"refine": -1}),
        ("unbiased", {"epsilon": 701.0}),
    ],
    ids=str,
)
def test_bad_parameters_refused(name: str, kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidParameterError):
        CONSTRUCTORS[name](**kwargs)


def test_unbiased_prior_argument_checked() -> None:
    with pytest.raises(InvalidParameterError, match="Prior"):
        Unbiased.from_prior({"edges": [0, 1]}, epsilon=1.0)  # type: ignore[arg-type]


# ---------------------------------------------------------------- the factory


@pytest.mark.parametrize("name", BASELINES)
def test_build_baseline_every_name(name: str) -> None:
    kwargs: dict[str, Any] = {}
    if name.startswith("gaussian"):
        kwargs["delta"] = 1e-5
    if name in ("rr_with_prior", "unbiased"):
        kwargs["prior"] = PRIOR
    lo, hi = (0, 5) if name == "discrete_staircase" else (LO, HI)
    mech = build_baseline(name, epsilon=1.0, lo=lo, hi=hi, **kwargs)
    assert mech.epsilon == 1.0
    unclipped = name.endswith("unclipped")
    assert (mech.affine_expectation() == (1.0, 0.0)) == (unclipped or name == "unbiased")
    out = mech.randomize(np.array([lo, hi]), np.random.default_rng(0))
    assert out.shape == (2,)


@pytest.mark.parametrize(
    ("name", "kwargs"),
    [
        ("nope", {}),
        ("gaussian", {}),  # delta missing
        ("laplace", {"zeta": 1.0}),  # unknown parameter
        ("rr_with_prior", {}),  # prior missing
        ("laplace", {"prior": PRIOR}),  # prior not taken
        ("unbiased", {"prior": Prior.from_samples(np.array([0.5]), lo=0, hi=1, bins=4)}),
    ],
    ids=str,
)
def test_build_baseline_refuses(name: str, kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidParameterError):
        build_baseline(name, epsilon=1.0, lo=LO, hi=HI, **kwargs)
