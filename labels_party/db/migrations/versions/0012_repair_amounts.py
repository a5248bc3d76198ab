"""Budgets stored outside the amount range are repaired, each with a ledger entry (issue 24).

Before the range of ``shared.epsilon`` was enforced a dataset could be created with a budget
of ``1e10001`` (stored, then every view of it failed); a database edited by hand can hold NaN,
a negative or an unparseable budget. Each such ``epsilon_budget`` / ``delta_budget`` is set to
``shared.epsilon.budget_as_read`` of it, the value the service already reads it as: above
1e300 as 1e300; NaN, negative, unparseable or below 1e-400 as 0 (nothing spendable). Only the
dataset row changes: the recorded ledger entries are hash-chained and stay as they were; a new
entry of kind ``repair`` (epsilon 0, actor role ``migration``) records the field, what was
stored and the repaired value, so ``labeldp ledger verify`` follows the repair and operators
see it in the ledger and the console. A warning is logged per repair (dataset, field, amounts:
no label). Nothing else is read. A database without such a row is left as it was.
"""

import logging
from decimal import Decimal

import sqlalchemy as sa
from alembic import op

from labels_party.budget import ledger
from shared import epsilon as amounts

revision, down_revision = "0012", "0011"  # this migration, the one it follows

log = logging.getLogger("labels_party")
ACTOR_ROLE = "migration"
# A stored text longer than this is recorded by its start and length (it reads as NaN anyway).
_SHOWN = 1200
_COLUMNS = (
    "seq", "time", "dataset", "release_id", "kind", "mechanism", "epsilon", "epsilon_exact",
    "delta_exact", "actor_role", "actor", "parameters", "message_sha256", "prev_hash",
    "entry_hash",
)  # fmt: skip


def upgrade() -> None:
    bind = op.get_bind()
    rows = bind.execute(
        sa.text(
            "SELECT id, name, epsilon_budget, epsilon_budget_exact, delta_budget_exact "
            "FROM datasets ORDER BY id"
        )
    ).all()
    locked = False
    for dataset_id, name, epsilon_float, epsilon_text, delta_text in rows:
        stored = {
            "epsilon_budget": (epsilon_text, epsilon_float),
            "delta_budget": (delta_text, None),
        }
        for field, (text, legacy) in stored.items():
            was = amounts.stored(text, legacy)
            repaired = amounts.budget_as_read(was)
            if not was.is_nan() and repaired == was:
                continue
            if not locked and bind.dialect.name == "postgresql":
                bind.exec_driver_sql("LOCK TABLE ledger IN SHARE ROW EXCLUSIVE MODE")
            locked = True
            _repair(bind, dataset_id, name, field, _shown(text, legacy), repaired)


def _shown(text: str | None, legacy: float | None) -> str:
    """What was stored, as text: the exact text as it was, else the float's exact value."""
    if text is not None:
        return text if len(text) <= _SHOWN else f"{text[:40]}... ({len(text)} characters)"
    value = amounts.stored(None, legacy)
    return amounts.text(value) if value.is_finite() else str(value)


def _repair(
    bind: sa.Connection, dataset_id: int, name: str, field: str, was: str, repaired: Decimal
) -> None:
    """Set the row's ``field`` to ``repaired`` and append the ``repair`` entry saying so."""
    from labels_party.catalog.datasets import utc_now

    value = amounts.text(repaired)
    head = bind.execute(
        sa.text("SELECT seq, entry_hash FROM ledger ORDER BY seq DESC LIMIT 1")
    ).first()
    seq, prev = (0, ledger.GENESIS_HASH) if head is None else (int(head[0]), str(head[1]))
    parameters = {
        "field": field,
        "stored": was,
        field: value,
        "reason": f"outside the amount range [{amounts.MIN_AMOUNT}, {amounts.MAX_AMOUNT}]",
        "migration": revision,
    }
    entry = {
        "seq": seq + 1,
        "time": utc_now(),
        "dataset": name,
        "release_id": None,
        "kind": ledger.KIND_REPAIR,
        "mechanism": None,
        "epsilon": 0.0,
        "epsilon_exact": amounts.text(amounts.ZERO),
        "delta_exact": None,
        "actor_role": ACTOR_ROLE,
        "actor": None,
        "parameters": ledger.canonical_json(parameters),
        "message_sha256": None,
        "prev_hash": prev,
    }
    entry["entry_hash"] = ledger.entry_hash(entry)
    bind.execute(
        sa.text(
            f"INSERT INTO ledger ({', '.join(_COLUMNS)}) "
            f"VALUES ({', '.join(':' + column for column in _COLUMNS)})"
        ),
        entry,
    )
    if field == "epsilon_budget":
        statement = "UPDATE datasets SET epsilon_budget = :value, epsilon_budget_exact = :exact"
    else:
        statement = "UPDATE datasets SET delta_budget_exact = :exact"
    bind.execute(
        sa.text(statement + " WHERE id = :id"),
        {"value": float(repaired), "exact": value, "id": dataset_id},
    )
    log.warning(
        "migration %s: dataset %r: %s was %s, outside the amount range; set to %s "
        "(ledger entry seq %d, kind repair)",
        revision,
        name,
        field,
        was if len(was) <= 80 else was[:80] + "...",
        value,
        seq + 1,
    )


def downgrade() -> None:
    """Nothing to undo: the ledger keeps what was stored before (the repair entries)."""
