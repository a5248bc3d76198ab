"""The release plan: exact charges, floats never above them, one place for every split rule."""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from shared import epsilon as amounts
from shared.errors import InvalidParameterError
from shared.plan import (
    LABEL_SIGNAL_MIN,
    MEAN_FIRST_EPSILON1_SHARE,
    MEAN_FIRST_MEAN_SHARE,
    ReleaseRequest,
    default_split,
    labels_can_train,
    mechanism_options,
    mechanisms,
    plan_release,
    release_mean_share,
    split_prior_amounts,
    split_prior_epsilon,
)
from shared.randomizer import execute, label_randomizer
from shared.selection import default_model_dim

epsilons = st.one_of(
    st.decimals(min_value=Decimal("1e-6"), max_value=Decimal(50), places=6),
    st.floats(min_value=1e-6, max_value=50.0),
)


@settings(max_examples=300, deadline=None)
@given(
    total=epsilons,
    n=st.integers(min_value=1, max_value=10**8),
    mechanism=st.sampled_from(mechanisms()),
)
def test_charges_add_up_exactly_and_no_step_runs_above_its_charge(total, n, mechanism) -> None:
    plan = plan_release(n=n, lo=0.0, hi=10.0, epsilon=total, mechanism=mechanism)
    assert plan.epsilon == amounts.exact(total)
    assert amounts.add(plan.epsilon1, plan.epsilon2) == plan.epsilon
    mean = plan.label_mean_epsilon or Decimal(0)
    assert amounts.add(plan.histogram_epsilon, mean) == plan.epsilon1
    # Each float a step runs at is at most its exact charge.
    assert Decimal(plan.histogram_float) <= plan.histogram_epsilon
    assert Decimal(plan.randomizer_float) <= plan.epsilon2
    assert Decimal(plan.epsilon1_float) <= plan.epsilon1
    if plan.label_mean_float is not None:
        assert Decimal(plan.label_mean_float) <= plan.label_mean_epsilon
    assert plan.histogram_float > 0 and plan.randomizer_float > 0


@settings(max_examples=200, deadline=None)
@given(
    total=st.floats(min_value=1e-4, max_value=20.0),
    n=st.integers(min_value=1, max_value=10**7),
    mechanism=st.sampled_from(mechanisms()),
)
def test_a_float_total_runs_at_the_default_split_floats_exactly(total, n, mechanism) -> None:
    """The plan of a float total reproduces the engine's float split bit for bit (auto's
    mean-first plans are tested below)."""
    plan = plan_release(n=n, lo=0.0, hi=1.0, epsilon=total, mechanism=mechanism)
    assume(plan.split == "default")
    assert (plan.epsilon1_float, plan.randomizer_float) == default_split(
        total, n=n, mechanism=mechanism
    )
    share = release_mean_share(
        plan.epsilon1_float, plan.randomizer_float, n=n, lo=0.0, hi=1.0, mechanism=mechanism
    )
    hist, mean = split_prior_amounts(plan.epsilon1, share)
    assert (plan.histogram_epsilon, plan.label_mean_epsilon) == (hist, mean)
    assert plan.histogram_float == amounts.float_at_most(hist)
    # The engine's float path splits the float epsilon1 the same way, up to the short decimal's
    # last digit (the float just below 0.1 rounds at the 7th decimal, 0.1 at the 6th).
    hist_float, mean_float = split_prior_epsilon(plan.epsilon1_float, share)
    assert abs(hist_float - plan.histogram_float) <= 1e-5 * plan.epsilon1_float
    assert (mean_float is None) == (plan.label_mean_float is None)


def significant_digits(amount: Decimal) -> int:
    return len(amount.normalize().as_tuple().digits)


@settings(max_examples=300, deadline=None)
@given(
    total=st.decimals(min_value=Decimal("1e-6"), max_value=Decimal(50), places=6).filter(
        lambda d: d > 0 and significant_digits(d) <= 6
    ),
    n=st.integers(min_value=1, max_value=10**9),
    mechanism=st.sampled_from(mechanisms()),
)
def test_the_plan_charges_short_decimals_that_add_up(total, n, mechanism) -> None:
    """Issue 25.7: a total a person typed splits into parts a person can read (<= 6 digits)."""
    plan = plan_release(n=n, lo=0.0, hi=10.0, epsilon=total, mechanism=mechanism)
    parts = [plan.epsilon1, plan.epsilon2, plan.histogram_epsilon]
    parts += [plan.label_mean_epsilon] if plan.label_mean_epsilon is not None else []
    assert all(significant_digits(part) <= 6 for part in parts), parts
    assert amounts.add(plan.epsilon1, plan.epsilon2) == total
    assert all(len(text) <= 12 for text in plan.public().values() if isinstance(text, str))


def test_one_and_a_tenth_split_as_a_person_would_write_them() -> None:
    """The issue's two examples: 1 and 0.1 at n = 22,524 (RR-on-Bins split with a DP mean)."""
    one = plan_release(n=22_524, lo=0.0, hi=4000.0, epsilon="1")
    assert (one.epsilon1, one.epsilon2) == (Decimal("0.0533"), Decimal("0.9467"))
    assert one.public()["histogram_epsilon"] == "0.03731"
    assert one.public()["label_mean_epsilon"] == "0.01599"
    tenth = plan_release(n=22_524, lo=0.0, hi=4000.0, epsilon="0.1", mechanism="rr_on_bins")
    assert tenth.public()["label_mean_epsilon"] == "0.045"
    assert amounts.add(tenth.histogram_epsilon, tenth.label_mean_epsilon) == tenth.epsilon1
    # auto releases 0.1 mean first there (22,524 x 0.05^2 = 56 < 20 x 10).
    first = plan_release(n=22_524, lo=0.0, hi=4000.0, epsilon="0.1").public()
    assert (first["epsilon1"], first["epsilon2"]) == ("0.0995", "0.0005")
    assert (first["histogram_epsilon"], first["label_mean_epsilon"]) == ("0.0005", "0.099")


@given(
    value=st.floats(min_value=0.0, max_value=100.0),
    whole=st.decimals(min_value=Decimal("1e-300"), max_value=Decimal(1000), places=None).filter(
        lambda d: d.is_finite() and d > 0
    ),
)
def test_a_short_part_lies_strictly_inside_its_whole(value, whole) -> None:
    part = amounts.short_part(value, whole=whole)
    assert 0 < part < whole or whole.adjusted() - whole.normalize().as_tuple().exponent == 0
    assert significant_digits(part) <= 6


def test_a_decimal_total_is_that_decimal() -> None:
    plan = plan_release(n=1000, lo=0.0, hi=1.0, epsilon="0.1")
    assert plan.epsilon == Decimal("0.1") and plan.public()["epsilon"] == "0.1"
    # ten of them make exactly 1
    assert amounts.add(*[plan.epsilon] * 10) == 1


def test_an_explicit_epsilon1_is_charged_as_given() -> None:
    plan = plan_release(n=500, lo=0.0, hi=1.0, epsilon="1", epsilon1="0.1", mechanism="rr_on_bins")
    assert (plan.epsilon1, plan.epsilon2, plan.split) == (Decimal("0.1"), Decimal("0.9"), "given")
    assert plan.epsilon1_float == math.nextafter(0.1, 0)  # the float 0.1 is above 0.1


@pytest.mark.parametrize(
    ("mechanism", "option"),
    [
        (m, option)
        for m in mechanisms()
        for option in ("select", "zeta", "outside", "loss", "max_bins")
        if option not in mechanism_options(m)
    ],
)
def test_an_option_that_does_not_apply_is_refused_by_name(mechanism: str, option: str) -> None:
    value = {"select": "mse", "zeta": 1.0, "outside": "project", "loss": "squared", "max_bins": 4}
    with pytest.raises(InvalidParameterError, match=rf"params\.{option} does not apply"):
        plan_release(
            n=100, lo=0.0, hi=1.0, epsilon=1.0, mechanism=mechanism, options={option: value[option]}
        )


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"epsilon": 0}, "epsilon"),
        ({"epsilon": -1}, "epsilon"),
        ({"epsilon": "NaN"}, "epsilon"),
        ({"epsilon": "1x"}, "epsilon"),
        ({"epsilon": math.inf}, "finite"),
        ({"epsilon": 1, "epsilon1": 1}, "epsilon1"),
        ({"epsilon": 1, "epsilon1": 2}, "epsilon1"),
        ({"epsilon1": 0.5}, "epsilon"),
        ({"epsilon1": math.inf, "epsilon2": 1.0}, "finite"),
        ({"epsilon": 1, "mechanism": "laplace"}, "mechanism"),
        ({"epsilon": 1, "n": 0}, "n"),
        ({"epsilon": 1, "options": {"mystery": 1}}, "unknown mechanism parameter"),
        ({"epsilon": "1e-400"}, "smallest positive float"),
    ],
)
def test_bad_input_is_refused_naming_the_value(kwargs, match) -> None:
    args = {"n": 100, "lo": 0.0, "hi": 1.0, **kwargs}
    with pytest.raises(InvalidParameterError, match=match):
        plan_release(**args)


def test_non_private_plans_need_the_explicit_flag() -> None:
    labels = np.linspace(0.0, 1.0, 50)
    for eps1, eps2 in ((math.inf, 1.0), (1.0, math.inf)):
        with pytest.raises(InvalidParameterError, match="finite"):
            label_randomizer(
                labels, lo=0, hi=1, epsilon1=eps1, epsilon2=eps2, mechanism="auto", rng=None
            )
    plan = plan_release(
        n=50, lo=0.0, hi=1.0, epsilon1=1.0, epsilon2=math.inf, allow_nonprivate=True
    )
    assert plan.nonprivate
    release = execute(plan, labels, np.random.default_rng(0))
    np.testing.assert_array_equal(release.noisy_labels, labels)


def test_the_explanation_says_what_each_part_buys() -> None:
    plan = plan_release(n=5000, lo=0.0, hi=400.0, epsilon="0.5")
    text = " ".join(plan.explanation)
    assert "default split" in text and "DP label mean" in text and "histogram cells" in text
    public = plan.public()
    assert public["randomizer_epsilon"] == public["epsilon2"]
    assert Decimal(public["epsilon1"]) + Decimal(public["epsilon2"]) == Decimal("0.5")


def test_execute_runs_the_plan_it_was_given() -> None:
    labels = np.random.default_rng(3).uniform(0, 10, size=400)
    plan = plan_release(n=400, lo=0.0, hi=10.0, epsilon=2, mechanism="rr_on_bins")
    release = execute(plan, labels, np.random.default_rng(1))
    assert release.plan is plan and release.prior.k == plan.bins
    assert (release.epsilon1, release.epsilon2) == (plan.epsilon1_float, plan.randomizer_float)
    with pytest.raises(InvalidParameterError, match="n = 400"):
        execute(plan, labels[:10], np.random.default_rng(1))


def test_a_request_plans_what_plan_release_plans_and_splits_its_params() -> None:
    params = {"bins": 12, "model_dim": 4, "zeta": 2.5}
    request = ReleaseRequest.from_params(
        params, epsilon=Decimal("0.7"), mechanism="rpwithprior", epsilon_histogram=Decimal("0.2")
    )
    assert (request.bins, request.model_dim, dict(request.options)) == (12, 4, {"zeta": 2.5})
    direct = plan_release(
        n=900,
        lo=0.0,
        hi=50.0,
        epsilon=Decimal("0.7"),
        epsilon1=Decimal("0.2"),
        mechanism="rpwithprior",
        bins=12,
        model_dim=4,
        options={"zeta": 2.5},
    )
    assert request.plan(n=900, lo=0.0, hi=50.0) == direct
    assert request.public() == {
        "epsilon": "0.7",
        "epsilon_histogram": "0.2",
        "mechanism": "rpwithprior",
        "bins": 12,
        "model_dim": 4,
        "options": {"zeta": 2.5},
    }
    assert ReleaseRequest(epsilon=Decimal(1)).public()["epsilon_histogram"] is None


@settings(max_examples=300, deadline=None)
@given(
    total=st.decimals(min_value=Decimal("1e-4"), max_value=Decimal(20), places=4),
    n=st.integers(min_value=1, max_value=10**7),
    model_dim=st.integers(min_value=1, max_value=1000),
)
def test_auto_releases_mean_first_exactly_where_its_labels_could_not_train(
    total, n, model_dim
) -> None:
    """Mean first iff the ordinary split's randomizer fails n eps2^2 >= 20 d and the mean it
    buys passes the features party's gate; then 99% of the total buys the mean."""
    assume(total > 0)
    plan = plan_release(n=n, lo=0.0, hi=1.0, epsilon=total, model_dim=model_dim)
    ordinary = plan_release(
        n=n, lo=0.0, hi=1.0, epsilon=total, model_dim=model_dim, mechanism="rr_on_bins"
    )
    can_train = ordinary.randomizer_float**2 * n >= LABEL_SIGNAL_MIN * model_dim
    assert labels_can_train(n=n, epsilon2=ordinary.randomizer_float, model_dim=model_dim) is (
        can_train
    )
    if plan.split == "default":
        assert (plan.epsilon1, plan.label_mean_epsilon) == (
            ordinary.epsilon1,
            ordinary.label_mean_epsilon,
        )
        if not can_train:  # only a mean too noisy to use keeps the ordinary split
            hopeless = plan_release(
                n=n, lo=0.0, hi=1.0, epsilon1=total * Decimal("0.995"), epsilon2=total * Decimal(
                    "0.005"), mean_share=MEAN_FIRST_MEAN_SHARE,
            )  # fmt: skip
            assert hopeless.label_mean_variance > (0.1 * 0.5) ** 2
        return
    assert plan.split == "mean_first" and not can_train
    assert abs(float(plan.epsilon1) / float(total) - MEAN_FIRST_EPSILON1_SHARE) < 1e-4
    assert plan.label_mean_epsilon is not None
    assert plan.histogram_epsilon + plan.label_mean_epsilon == plan.epsilon1
    assert plan.epsilon1 + plan.epsilon2 == plan.epsilon
    assert float(plan.label_mean_epsilon) / float(total) > 0.99 - 1e-4
    # The features party reads the same rule from the header and fits the constant.
    assert not labels_can_train(n=n, epsilon2=plan.randomizer_float, model_dim=model_dim)


@pytest.mark.parametrize(
    ("n", "epsilon", "split"),
    [
        # Crime (1,595 training labels): eps2 0.225 at 0.3 -> 1595 * 0.225^2 = 80.7 < 200.
        (1595, "0.05", "mean_first"),
        (1595, "0.3", "mean_first"),
        (1595, "0.5", "default"),  # eps2 0.375: 224 >= 200
        # Housing (16,512): eps2 0.05 at 0.1 -> 41 < 200; at 0.3 eps2 0.2377 -> 933.
        (16512, "0.1", "mean_first"),
        (16512, "0.3", "default"),
    ],
)
def test_the_mean_first_rule_at_the_benchmark_sizes(n: int, epsilon: str, split: str) -> None:
    plan = plan_release(n=n, lo=0.0, hi=1.0, epsilon=epsilon)
    assert plan.split == split
    assert any(line.startswith("mean first") for line in plan.explanation) is (
        split == "mean_first"
    )


def test_only_auto_with_its_default_split_releases_mean_first() -> None:
    """A named mechanism, a given epsilon_histogram or mean share keep what was asked for."""
    assert plan_release(n=1595, lo=0.0, hi=1.0, epsilon="0.1").split == "mean_first"
    for mechanism in ("rr_on_bins", "rpwithprior"):
        plan = plan_release(n=1595, lo=0.0, hi=1.0, epsilon="0.1", mechanism=mechanism)
        assert plan.split == "default"
    given = plan_release(n=1595, lo=0.0, hi=1.0, epsilon="0.1", epsilon1="0.05")
    assert given.split == "given" and given.epsilon1 == Decimal("0.05")
    shared = plan_release(n=1595, lo=0.0, hi=1.0, epsilon="0.1", mean_share=0.5)
    assert shared.split == "default"
    # A model the features party declares smaller needs fewer labels: d = 1 at eps 0.3.
    assert plan_release(n=1595, lo=0.0, hi=1.0, epsilon="0.3", model_dim=1).split == "default"


def test_mean_first_does_not_depend_on_the_bounds() -> None:
    """The gate it checks (anchor_can_use) scales with hi - lo like the mean's noise."""
    for lo, hi in ((0.0, 1.0), (-1e6, 1e6), (3.0, 3.5)):
        assert plan_release(n=500, lo=lo, hi=hi, epsilon="0.3").split == "mean_first"
        assert plan_release(n=20, lo=lo, hi=hi, epsilon="0.3").split == "default"


@pytest.mark.parametrize("mechanism", ["rpwithprior", "auto"])
@pytest.mark.parametrize(("zeta", "ok"), [(1e-10, False), (1e-8, True), (1e9, True), (2e9, False)])
def test_zeta_must_lie_within_its_ratio_of_the_label_range(mechanism, zeta, ok) -> None:
    """RPWithPrior's family checks its zeta against the public range, in the plan itself, so
    the service and the Spark job refuse the same requests (it was a service-only check)."""

    def plan() -> Any:
        return plan_release(
            n=100, lo=0.0, hi=1.0, epsilon="1", mechanism=mechanism, options={"zeta": zeta}
        )

    if ok:
        assert plan().options["zeta"] == zeta
    else:
        with pytest.raises(InvalidParameterError, match=r"^zeta \("):
            plan()


@pytest.mark.parametrize(("n", "epsilon"), [(8000, "1"), (8000, "2"), (1595, "0.3"), (20, "8")])
def test_the_randomizer_is_chosen_for_the_default_model_dim_of_its_epsilon2(n, epsilon) -> None:
    """No model_dim: the plan's d is default_model_dim(n, epsilon2) (10 when mean first); a
    given one is kept, and mean first still asks about the given d."""
    plan = plan_release(n=n, lo=0.0, hi=1.0, epsilon=epsilon)
    assert plan.model_dim == default_model_dim(n, plan.randomizer_float)
    assert f"dimension {plan.model_dim}, n epsilon2^2 / 80" in plan.explanation[-1]
    if plan.split == "mean_first":
        assert plan.model_dim == 10
    given = plan_release(n=n, lo=0.0, hi=1.0, epsilon=epsilon, model_dim=7)
    assert given.model_dim == 7 and "n epsilon2^2 / 80" not in given.explanation[-1]


@pytest.mark.parametrize("text", ["1_0", "\uff15", "\u0661", "sNaN", "0x1", "1e"])
def test_an_amount_text_is_a_plain_ascii_decimal(text: str) -> None:
    """shared.epsilon.exact reads text by the services' one number rule (strict_input), not
    Decimal's: "1_0" was 10."""
    with pytest.raises(InvalidParameterError, match="plain decimal"):
        amounts.exact(text)
    assert amounts.exact(" 2.50 ") == Decimal("2.50") and amounts.exact("1E-400") > 0


@pytest.mark.parametrize("n", [0, -1, 2**53 + 1, 2**63, True, 1.0])
def test_n_is_an_integer_in_1_to_2_53(n: object) -> None:
    with pytest.raises(InvalidParameterError, match="n "):
        plan_release(n=n, lo=0.0, hi=1.0, epsilon=1)  # type: ignore[arg-type]
    assert plan_release(n=2**53, lo=0.0, hi=1.0, epsilon=1).n == 2**53


@pytest.mark.parametrize("mechanism", ["auto", "rr_on_bins", "unbiased", "rpwithprior"])
def test_an_epsilon1_too_small_for_a_mean_leaves_the_histogram_all_of_it(mechanism: str) -> None:
    """Found by a fuzzer: an epsilon_histogram of 5e-324 made the default mean share underflow
    to 0 and the engine refuse "epsilon (0.0)", naming epsilon for a request whose bad field
    (if any) was epsilon_histogram; RPWithPrior (no mean) took it. The mean costs what it can
    buy: none of an epsilon1 whose share is no double, and the histogram keeps all of it."""
    assert release_mean_share(5e-324, 1.0, n=50, lo=0.0, hi=100.0) == 0.0
    plan = plan_release(
        n=50, lo=0.0, hi=100.0, epsilon=Decimal(1), epsilon1=Decimal("5e-324"), mechanism=mechanism
    )
    assert plan.label_mean_epsilon is None and plan.histogram_epsilon == Decimal("5e-324")
