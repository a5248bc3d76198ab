"""Exact decimal amounts beside the floats (``shared.epsilon``): nullable text columns.

NULL in rows written before, which are read at their float's exact binary value; a ledger
entry without ``epsilon_exact`` keeps the hash it was written with. A dataset's total spent is
backfilled exactly: the previous release stored the float sum of its spends rounded UP, which
is not the exact sum of the ledger's amounts, so ``epsilon_spent_exact`` becomes that exact sum
(and ``epsilon_spent`` its float, as new rows are written) once the old float is confirmed to
be it rounded up; a total that is not (a tampered database) is left for ``ledger verify`` to
report. A database that the
pre-Alembic stop-gap (``create_schema`` adding missing columns) already extended keeps its
columns: only the missing ones are added.
"""

import math
from decimal import Decimal

import sqlalchemy as sa
from alembic import op

from shared import epsilon as amounts

revision, down_revision = "0002", "0001"  # this migration, the one it follows

COLUMNS = {
    "datasets": ("epsilon_budget_exact", "epsilon_spent_exact"),
    "releases": ("epsilon1_exact", "epsilon2_exact", "epsilon_exact"),
    "ledger": ("epsilon_exact", "delta_exact"),
}


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    for table, names in COLUMNS.items():
        present = {column["name"] for column in inspector.get_columns(table)}
        for name in names:
            if name not in present:
                op.add_column(table, sa.Column(name, sa.Text, nullable=True))
    _backfill_spent(op.get_bind())


def _backfill_spent(bind: sa.Connection) -> None:
    """epsilon_spent_exact := the exact sum of the dataset's ledger spends (see above)."""
    rows = bind.execute(
        sa.text("SELECT id, name, epsilon_spent FROM datasets WHERE epsilon_spent_exact IS NULL")
    ).all()
    for dataset_id, name, recorded in rows:
        spends = bind.execute(
            sa.text(
                "SELECT epsilon, epsilon_exact FROM ledger WHERE dataset = :name "
                "AND kind != 'dataset'"
            ),
            {"name": name},
        ).all()
        total = amounts.add(
            *(Decimal(exact) if exact is not None else Decimal(value) for value, exact in spends)
        )
        up = float(total)
        if Decimal(up) < total:
            up = math.nextafter(up, math.inf)
        if recorded not in (up, float(total)):
            continue
        bind.execute(
            sa.text(
                "UPDATE datasets SET epsilon_spent_exact = :exact, epsilon_spent = :value "
                "WHERE id = :id"
            ),
            {"exact": amounts.text(total), "value": float(total), "id": dataset_id},
        )


def downgrade() -> None:
    for table, names in COLUMNS.items():
        with op.batch_alter_table(table) as batch:
            for name in names:
                batch.drop_column(name)
