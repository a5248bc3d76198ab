"""shared.domain: public label bounds, one limit for every door, and their middle."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import numpy as np
import pytest

from shared.domain import MAX_LABEL_MAGNITUDE, LabelDomain
from shared.errors import InvalidParameterError
from shared.estimators.constants import eptr_ols_chosen, ols_split
from shared.estimators.ols import ols_no_reply
from shared.mechanisms.histogram import private_histogram
from shared.mechanisms.private_mean import private_mean
from shared.plan import plan_release
from shared.randomizer import label_randomizer


class NoRandomness:
    """An rng that fails the test if anything draws from it."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"randomness drawn ({name}) for bounds that must be refused")


def test_bounds_within_the_limit_are_accepted_and_beyond_it_refused() -> None:
    assert MAX_LABEL_MAGNITUDE == 1e15  # the service's schema imports this one number
    LabelDomain(lo=-MAX_LABEL_MAGNITUDE, hi=MAX_LABEL_MAGNITUDE)
    for lo, hi in [(1e300, 2e300), (-2e15, 0.0), (0.0, 1.0000000000000002e15)]:
        with pytest.raises(InvalidParameterError, match=r"within \+-1e\+15"):
            LabelDomain(lo=lo, hi=hi)


@pytest.mark.parametrize(("lo", "hi"), [(1e300, 2e300), (-1e308, 1e308), (0.0, 1e16)])
def test_every_engine_entry_refuses_bounds_beyond_the_limit_before_any_noise(
    lo: float, hi: float
) -> None:
    """Before: bounds like [1e300, 2e300] reached the mechanisms, whose expected errors
    overflow (RPWithPrior ended in an AssertionError after the histogram's noise was drawn,
    the unbiased LP in a refusal of its weights); the service's schema alone held the limit."""
    labels = np.linspace(lo / 2 + hi / 2, hi, 10)
    rng = NoRandomness()
    calls = [
        lambda: plan_release(n=10, lo=lo, hi=hi, epsilon="1"),
        lambda: label_randomizer(
            labels, lo=lo, hi=hi, epsilon1=0.5, epsilon2=0.5, mechanism="auto", rng=rng
        ),
        lambda: private_mean(labels, lo=lo, hi=hi, epsilon=1.0, rng=rng),
        lambda: private_histogram(labels, lo=lo, hi=hi, bins=4, epsilon=1.0, rng=rng),
        lambda: eptr_ols_chosen(
            np.random.default_rng(0).normal(size=(10, 2)),
            labels,
            lo=lo,
            hi=hi,
            rng=rng,
            split=ols_split(epsilon=Decimal(1), delta=Decimal("0.01"), chosen=["r_x"]),
            given={"r_theta": 1.0, "c0": 0.1},
        ),  # fmt: skip
        lambda: ols_no_reply(2, intercept=True, lo=lo, hi=hi),
    ]
    for call in calls:
        with pytest.raises(InvalidParameterError, match="label bounds"):
            call()


def test_the_middle_of_the_bounds() -> None:
    assert LabelDomain(lo=1.0, hi=4.0).middle == 2.5
    assert LabelDomain(lo=-5.0, hi=5.0).middle == 0.0
    top = LabelDomain(lo=MAX_LABEL_MAGNITUDE - 2.0, hi=MAX_LABEL_MAGNITUDE)
    assert top.middle == MAX_LABEL_MAGNITUDE - 1.0
