"""The privacy-budget accountant: the one exact rule for "fits", "spend" and the totals.

Basic composition over a dataset's ledger: the spends of its releases add up, and their sum may
never exceed its budget, by any amount. Amounts are exact decimals (``shared.epsilon``) stored
as canonical text beside a float column kept for old readers and sorting; a database written
before exact amounts (floats only) is read at each float's exact binary value. Every spend is
made inside the write transaction that stores what it pays for
(``labels_party.releasing.releases``), so the check and the spend are atomic. Deltas ((epsilon,
delta) spends of model releases) add up the same way; a spend without one has delta 0.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from decimal import Decimal
from typing import Any

from sqlalchemy import Connection, update

from labels_party.budget import ledger
from labels_party.db.models import datasets
from labels_party.errors import BadInputError, FieldError
from shared import epsilon as amounts
from shared.budget import Budget
from shared.errors import InvalidParameterError


def columns(prefix: str, amount: Decimal) -> dict[str, Any]:
    """The (float, exact text) column pair that stores ``amount`` under ``prefix``."""
    return {prefix: float(amount), f"{prefix}_exact": amounts.text(amount)}


def budget_of(row: Any) -> Budget:
    """A ``datasets`` row's (or a ``DatasetRow``'s) budget; NULL delta columns read as 0. An
    amount outside the accepted range, NaN or unparseable (a database written before the range
    was enforced, or edited by hand) is read conservatively into it
    (``shared.epsilon.budget_as_read`` / ``spent_as_read``), so one such row never fails a
    view or a listing; migration 0012 repairs such budgets in the database."""
    return Budget(
        budget=amounts.budget_as_read(amounts.stored(row.epsilon_budget_exact, row.epsilon_budget)),
        spent=amounts.spent_as_read(amounts.stored(row.epsilon_spent_exact, row.epsilon_spent)),
        delta_budget=amounts.budget_as_read(
            amounts.stored(getattr(row, "delta_budget_exact", None), None)
        ),
        delta_spent=amounts.spent_as_read(
            amounts.stored(getattr(row, "delta_spent_exact", None), None)
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
    actor: str | None = None,
) -> Budget:
    """Check the budget, append one ledger entry per charge, record the new total; returns it.

    Call inside the write transaction that stores what the charges pay for, with ``row`` read
    in it (``FOR UPDATE``). Raises :class:`BudgetExceededError` and writes nothing if the charges
    do not fit.
    """
    items = list(charges)
    budget = budget_of(row)
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
            actor=actor,
            **asdict(charge),
        )
    after = budget.after(epsilon=total, delta=total_delta)
    values = columns("epsilon_spent", after.spent)
    if total_delta > 0:
        values["delta_spent_exact"] = amounts.text(after.delta_spent)
    conn.execute(update(datasets).where(datasets.c.id == row.id).values(**values))
    return after


def top_up(
    conn: Connection,
    row: Any,
    *,
    add: Decimal,
    reason: str,
    time: str,
    actor_role: str,
    actor: str | None = None,
) -> int:
    """Raise ``row``'s budget by ``add`` (exact), ledgered with who and why; returns the ledger
    entry's seq.

    Call inside a write transaction with ``row`` read ``FOR UPDATE``. The ledger entry (kind
    ``topup``, epsilon 0: it spends nothing) records the budget before and after, so verify
    recomputes the budget from the creation entry plus every top-up.
    """
    before = budget_of(row)
    after = Budget(budget=amounts.add(before.budget, add), spent=before.spent)
    if after.budget > amounts.MAX_AMOUNT:
        message = (
            f"the budget after this top-up ({amounts.text(after.budget)}) would exceed "
            f"{amounts.MAX_AMOUNT}, the largest amount a budget may hold"
        )
        raise BadInputError(message, [FieldError(field="add", message=message)])
    entry = ledger.record_event(
        conn,
        time=time,
        dataset=row.name,
        kind=ledger.KIND_TOPUP,
        actor_role=actor_role,
        actor=actor,
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
    return int(entry["seq"])
