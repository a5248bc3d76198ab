"""shared.estimators._checks: the estimators' input checks name the bad value."""

from __future__ import annotations

import pytest

from shared.errors import InvalidParameterError
from shared.estimators._checks import epsilon_delta, positives


def test_positives_keeps_the_order_and_names_the_first_bad_value() -> None:
    assert positives(r_x=2, r_theta=0.5, c0=1e-3) == (2.0, 0.5, 1e-3)
    with pytest.raises(InvalidParameterError, match=r"^r_theta \(0\.0\)"):
        positives(r_x=2, r_theta=0.0, c0=-1.0)
    with pytest.raises(InvalidParameterError, match="c0 .* must be a number"):
        positives(r_x=2, c0=True)


@pytest.mark.parametrize(
    ("epsilon", "delta", "named"),
    [(0.0, 0.1, "epsilon"), (float("inf"), 0.1, "epsilon"), (1.0, 0.0, "delta")]
    + [(1.0, 1.0, "delta")],
)
def test_epsilon_delta_refuses_what_is_not_approximate_dp(epsilon, delta, named) -> None:
    with pytest.raises(InvalidParameterError, match=named):
        epsilon_delta(epsilon, delta)
    assert epsilon_delta(0.5, 1e-6) == (0.5, 1e-6)
