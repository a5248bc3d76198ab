"""Domain errors of the label-DP engine; only the API layers translate them to HTTP."""

from __future__ import annotations


class LabelDPError(Exception):
    """Base class of every error this project raises on purpose."""


class InvalidParameterError(LabelDPError, ValueError):
    """A caller passed a value the mechanism cannot accept (names the bad value)."""


class BudgetExceededError(LabelDPError):
    """A release would spend more epsilon than the operator allowed."""

    def __init__(self, *, spent: float, requested: float, budget: float) -> None:
        self.spent = spent
        self.requested = requested
        self.budget = budget
        self.left = max(budget - spent, 0.0)
        super().__init__(
            f"privacy budget exceeded: spent {spent:g}, requested {requested:g}, "
            f"left {self.left:g} of {budget:g}"
        )


class IntegrityError(LabelDPError):
    """A message failed its schema-version or sha256 check."""
