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

import math
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from sqlalchemy import Connection, update

from labels_party import ledger
from labels_party.db.models import datasets
from shared import epsilon as amounts
from shared.errors import BudgetExceededError


def columns(prefix: str, amount: Decimal) -> dict[str, Any]:
    """The (float, exact text) column pair that stores ``amount`` under ``prefix``."""
    return {prefix: float(amount), f"{prefix}_exact": amounts.text(amount)}


@dataclass(frozen=True, kw_only=True)
class Budget:
    """A dataset's budget and what its ledger has spent, exactly."""

    budget: Decimal
    spent: Decimal

    @classmethod
    def of(cls, row: Any) -> Budget:
        """From a ``datasets`` row (or a ``DatasetRow``)."""
        return cls(
            budget=ledger.stored_amount(row.epsilon_budget_exact, row.epsilon_budget),
            spent=ledger.stored_amount(row.epsilon_spent_exact, row.epsilon_spent),
        )

    @property
    def left(self) -> Decimal:
        """What is left (never below 0)."""
        return max(amounts.subtract(self.budget, self.spent), amounts.ZERO)

    def fits(self, requested: Decimal) -> bool:
        """Whether ``requested`` more keeps the total within the budget: exact, no slack."""
        return amounts.add(self.spent, requested) <= self.budget

    def check(self, requested: Decimal) -> None:
        """Raise :class:`BudgetExceededError` (spent, requested, left) unless ``requested`` fits."""
        if not self.fits(requested):
            raise BudgetExceededError(spent=self.spent, requested=requested, budget=self.budget)

    def public(self) -> dict[str, str]:
        """Budget, spent and left as exact decimal strings."""
        return {
            "epsilon_budget": amounts.text(self.budget),
            "epsilon_spent": amounts.text(self.spent),
            "epsilon_left": amounts.text(self.left),
        }


@dataclass(frozen=True, kw_only=True)
class Charge:
    """One ledger entry that spends: its kind, mechanism, amount and public parameters."""

    kind: str
    mechanism: str
    epsilon: Decimal
    parameters: dict[str, Any]
    delta: Decimal | None = None


def spend(
    conn: Connection,
    row: Any,
    charges: Iterable[Charge],
    *,
    time: str,
    release_id: str,
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
    budget.check(total)
    for charge in items:
        ledger.append(
            conn,
            time=time,
            dataset=row.name,
            release_id=release_id,
            kind=charge.kind,
            mechanism=charge.mechanism,
            epsilon=charge.epsilon,
            delta=charge.delta,
            actor_role=actor_role,
            parameters=charge.parameters,
            message_sha256=message_sha256,
        )
    after = Budget(budget=budget.budget, spent=amounts.add(budget.spent, total))
    conn.execute(
        update(datasets)
        .where(datasets.c.id == row.id)
        .values(**columns("epsilon_spent", after.spent))
    )
    return after


def legacy_total_matches(recorded: float, exact_sum: Decimal) -> bool:
    """An older database's float total: the exact sum rounded UP to a float (its old rule)."""
    up = float(exact_sum)
    if Decimal(up) < exact_sum:
        up = math.nextafter(up, math.inf)
    return recorded == up


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
