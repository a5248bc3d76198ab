"""Domain errors of the label-DP engine; only the API layers translate them to HTTP."""

from __future__ import annotations

from decimal import Decimal


class LabelDPError(Exception):
    """Base class of every error this project raises on purpose."""


class InvalidParameterError(LabelDPError, ValueError):
    """A caller passed a value the mechanism cannot accept (names the bad value)."""


class BudgetExceededError(LabelDPError):
    """A release would spend more epsilon than the operator allowed (exact decimal amounts)."""

    def __init__(self, *, spent: Decimal, requested: Decimal, budget: Decimal) -> None:
        from shared import epsilon as amounts

        self.spent = spent
        self.requested = requested
        self.budget = budget
        self.left = max(amounts.subtract(budget, spent), amounts.ZERO)
        spent_text, left_text = amounts.text(spent), amounts.text(self.left)
        super().__init__(
            f"privacy budget exceeded: spent {spent_text}, requested "
            f"{amounts.text(requested)}, left {left_text} of {amounts.text(budget)}; "
            + (
                f"request at most epsilon {left_text}, or ask the operator to top up the budget"
                if self.left > 0
                else "nothing is left: ask the operator to top up the budget"
            )
        )


class IntegrityError(LabelDPError):
    """A message failed its schema-version or sha256 check."""
