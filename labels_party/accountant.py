"""The privacy-budget accountant: the one exact rule for "fits", "spend" and the totals.

Basic composition over a dataset's ledger: the spends of its releases add up, and their sum may
never exceed its budget, by any amount. Amounts are exact decimals (``shared.epsilon``) stored
as canonical text beside a float column kept for old readers and sorting; a database written
before exact amounts (floats only) is read at each float's exact binary value. Every spend is
made inside the write transaction that stores what it pays for (``labels_party.releases``), so
the check and the spend are atomic. Deltas ((epsilon, delta) spends of model releases) add up
the same way; a spend without one has delta 0.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from decimal import Decimal
from typing import Any

from sqlalchemy import Connection, update

from labels_party import ledger
from labels_party.db.models import datasets
from labels_party.errors import BadInputError, FieldError
from shared import epsilon as amounts
from shared.errors import BudgetExceededError, InvalidParameterError, LabelDPError


def columns(prefix: str, amount: Decimal) -> dict[str, Any]:
    """The (float, exact text) column pair that stores ``amount`` under ``prefix``."""
    return {prefix: float(amount), f"{prefix}_exact": amounts.text(amount)}


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
    def of(cls, row: Any) -> Budget:
        """From a ``datasets`` row (or a ``DatasetRow``); NULL delta columns read as 0. An
        amount outside the accepted range (a database written before the range was enforced)
        is read conservatively into it (``shared.epsilon.budget_as_read`` / ``spent_as_read``),
        so one such row never fails a view or a listing."""
        return cls(
            budget=amounts.budget_as_read(
                ledger.stored_amount(row.epsilon_budget_exact, row.epsilon_budget)
            ),
            spent=amounts.spent_as_read(
                ledger.stored_amount(row.epsilon_spent_exact, row.epsilon_spent)
            ),
            delta_budget=amounts.budget_as_read(
                ledger.stored_amount(getattr(row, "delta_budget_exact", None), None)
            ),
            delta_spent=amounts.spent_as_read(
                ledger.stored_amount(getattr(row, "delta_spent_exact", None), None)
            ),
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


def exact_delta(value: Any, *, name: str = "delta") -> Decimal:
    """A delta as an exact decimal strictly inside (0, 1) (:class:`InvalidParameterError`)."""
    delta = amounts.exact(value, name=name)
    if not delta < 1:
        raise InvalidParameterError(f"{name} ({value!r}) must be in (0, 1)")
    return delta


@dataclass(frozen=True, kw_only=True)
class Charge:
    """One ledger entry that spends: its kind, mechanism, amount and public parameters (its
    fields are the ones ``ledger.append`` takes besides who, when and for which message)."""

    kind: str
    mechanism: str
    epsilon: Decimal
    parameters: dict[str, Any]
    delta: Decimal | None = None

    def __post_init__(self) -> None:
        if self.delta is not None:
            exact_delta(self.delta)


def spend(
    conn: Connection,
    row: Any,
    charges: Iterable[Charge],
    *,
    time: str,
    release_id: str | None,
    actor_role: str,
    message_sha256: str,
) -> Budget:
    """Check the budget, append one ledger entry per charge, record the new total; returns it.

    Call inside the write transaction that stores what the charges pay for, with ``row`` read
    in it (``FOR UPDATE``). Raises :class:`BudgetExceededError` and writes nothing if the charges
    do not fit.
    """
    items = list(charges)
    budget = Budget.of(row)
    total = amounts.add(*(charge.epsilon for charge in items))
    total_delta = amounts.add(*(charge.delta for charge in items if charge.delta is not None))
    budget.check(total, delta=total_delta)
    for charge in items:
        ledger.append(
            conn,
            time=time,
            dataset=row.name,
            release_id=release_id,
            actor_role=actor_role,
            message_sha256=message_sha256,
            **asdict(charge),
        )
    after = budget.after(epsilon=total, delta=total_delta)
    values = columns("epsilon_spent", after.spent)
    if total_delta > 0:
        values["delta_spent_exact"] = amounts.text(after.delta_spent)
    conn.execute(update(datasets).where(datasets.c.id == row.id).values(**values))
    return after


def top_up(
    conn: Connection, row: Any, *, add: Decimal, reason: str, time: str, actor_role: str
) -> Budget:
    """Raise ``row``'s budget by ``add`` (exact), ledgered with who and why; returns the budget.

    Call inside a write transaction with ``row`` read ``FOR UPDATE``. The ledger entry (kind
    ``topup``, epsilon 0: it spends nothing) records the budget before and after, so verify
    recomputes the budget from the creation entry plus every top-up.
    """
    before = Budget.of(row)
    after = Budget(budget=amounts.add(before.budget, add), spent=before.spent)
    if after.budget > amounts.MAX_AMOUNT:
        message = (
            f"the budget after this top-up ({amounts.text(after.budget)}) would exceed "
            f"{amounts.MAX_AMOUNT}, the largest amount a budget may hold"
        )
        raise BadInputError(message, [FieldError(field="add", message=message)])
    ledger.record_event(
        conn,
        time=time,
        dataset=row.name,
        kind=ledger.KIND_TOPUP,
        actor_role=actor_role,
        parameters={
            "add": amounts.text(add),
            "epsilon_budget_before": amounts.text(before.budget),
            "epsilon_budget": amounts.text(after.budget),
            "reason": reason,
        },
    )
    conn.execute(
        update(datasets)
        .where(datasets.c.id == row.id)
        .values(**columns("epsilon_budget", after.budget))
    )
    return after
