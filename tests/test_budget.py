"""shared.budget: the one exact budget rule, and a client's view of it."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.budget import Budget, DeltaBudgetExceededError
from shared.errors import BudgetExceededError

amounts = st.decimals(min_value=Decimal("0"), max_value=Decimal("1000"), places=6)


@given(budget=amounts, spent=amounts, delta_budget=amounts, delta_spent=amounts)
def test_a_client_reads_back_exactly_what_the_service_shows(
    budget: Decimal, spent: Decimal, delta_budget: Decimal, delta_spent: Decimal
) -> None:
    """``Budget.from_public`` of ``Budget.public()`` (the API's view) is the same budget."""
    original = Budget(
        budget=budget, spent=spent, delta_budget=delta_budget, delta_spent=delta_spent
    )
    again = Budget.from_public(original.public())
    assert again == original
    assert again.fits(Decimal("0.1")) == original.fits(Decimal("0.1"))


def test_ten_spends_of_a_tenth_fill_one_exactly_and_the_delta_counts_too() -> None:
    budget = Budget(budget=Decimal(1), spent=Decimal(0), delta_budget=Decimal("1e-5"))
    for _ in range(10):
        budget.check(Decimal("0.1"))
        budget = budget.after(epsilon=Decimal("0.1"))
    assert budget.left == 0 and not budget.fits(Decimal("1e-300"))
    with pytest.raises(BudgetExceededError):
        budget.check(Decimal("1e-300"))
    roomy = Budget(budget=Decimal(2), spent=Decimal(0), delta_budget=Decimal("1e-5"))
    with pytest.raises(DeltaBudgetExceededError):
        roomy.check(Decimal("0.1"), delta=Decimal("2e-5"))
    assert Budget.from_public({"epsilon_budget": "1", "epsilon_spent": "0.5"}).delta_budget == 0
