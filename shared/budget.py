"""A dataset's privacy budget, exactly: the one rule for "fits", "left" and "after".

Basic composition: the epsilons of a dataset's spends add up to at most its budget, their deltas
to at most its delta budget (0 when it has none: no (epsilon, delta) spend fits). Amounts are
exact decimals (``shared.epsilon``). Pure: the labels party builds one from a dataset row
(``labels_party.budget.accountant.budget_of``), a client from the dataset's API view
(:meth:`Budget.from_public`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from shared import epsilon as amounts
from shared.errors import BudgetExceededError, LabelDPError


@dataclass(frozen=True, kw_only=True)
class Budget:
    """A dataset's budget and what its ledger has spent, exactly: epsilon and delta.

    Basic composition holds both: the epsilons of all spends add up to at most ``budget`` and
    their deltas to at most ``delta_budget`` (0 for a dataset created without one: no
    (epsilon, delta) release fits).
    """

    budget: Decimal
    spent: Decimal
    delta_budget: Decimal = amounts.ZERO
    delta_spent: Decimal = amounts.ZERO

    @classmethod
    def from_public(cls, view: Mapping[str, Any]) -> Budget:
        """From a dataset's view as the labels party's API shows it (exact decimal strings;
        the delta fields default to 0): what a client such as the Spark job checks against."""

        def amount(key: str) -> Decimal:
            return Decimal(str(view.get(key, "0")))

        return cls(
            budget=amount("epsilon_budget"),
            spent=amount("epsilon_spent"),
            delta_budget=amount("delta_budget"),
            delta_spent=amount("delta_spent"),
        )

    @property
    def left(self) -> Decimal:
        """What is left (never below 0)."""
        return max(amounts.subtract(self.budget, self.spent), amounts.ZERO)

    @property
    def delta_left(self) -> Decimal:
        """The delta left (never below 0)."""
        return max(amounts.subtract(self.delta_budget, self.delta_spent), amounts.ZERO)

    def fits(self, requested: Decimal, *, delta: Decimal = amounts.ZERO) -> bool:
        """Whether ``requested`` (and ``delta``) more keep both totals within budget: exact."""
        return (
            amounts.add(self.spent, requested) <= self.budget
            and amounts.add(self.delta_spent, delta) <= self.delta_budget
        )

    def check(self, requested: Decimal, *, delta: Decimal = amounts.ZERO) -> None:
        """Raise :class:`BudgetExceededError` (spent, requested, left) unless the spend fits.

        The epsilon is checked first; a delta that does not fit raises
        :class:`DeltaBudgetExceededError` (its ``field`` is ``"delta"``).
        """
        if not amounts.add(self.spent, requested) <= self.budget:
            raise BudgetExceededError(spent=self.spent, requested=requested, budget=self.budget)
        if not amounts.add(self.delta_spent, delta) <= self.delta_budget:
            raise DeltaBudgetExceededError(
                spent=self.delta_spent, requested=delta, budget=self.delta_budget
            )

    def after(self, *, epsilon: Decimal, delta: Decimal = amounts.ZERO) -> Budget:
        """This budget once ``epsilon`` and ``delta`` more are spent."""
        return Budget(
            budget=self.budget,
            spent=amounts.add(self.spent, epsilon),
            delta_budget=self.delta_budget,
            delta_spent=amounts.add(self.delta_spent, delta),
        )

    def public(self) -> dict[str, str]:
        """Budget, spent and left of epsilon and delta as exact decimal strings."""
        return {
            "epsilon_budget": amounts.text(self.budget),
            "epsilon_spent": amounts.text(self.spent),
            "epsilon_left": amounts.text(self.left),
            "delta_budget": _text(self.delta_budget),
            "delta_spent": _text(self.delta_spent),
            "delta_left": _text(self.delta_left),
        }


def _text(value: Decimal) -> str:
    return "0" if value == 0 else amounts.text(value)


class DeltaBudgetExceededError(BudgetExceededError):
    """An (epsilon, delta) spend whose delta does not fit the dataset's delta budget."""

    field = "delta"

    def __init__(self, *, spent: Decimal, requested: Decimal, budget: Decimal) -> None:
        self.spent, self.requested, self.budget = spent, requested, budget
        self.left = max(amounts.subtract(budget, spent), amounts.ZERO)
        LabelDPError.__init__(
            self,
            f"delta budget exceeded: spent {_text(spent)}, requested {_text(requested)}, left "
            f"{_text(self.left)} of {_text(budget)}; "
            + (
                f"request at most delta {_text(self.left)}, or ask the operator for a delta budget"
                if self.left > 0
                else "no delta is left: use label privacy (no delta), or ask the operator "
                "for a dataset with a delta budget"
            ),
        )
