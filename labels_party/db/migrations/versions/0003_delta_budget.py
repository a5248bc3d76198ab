"""A dataset's delta budget and delta spent ((epsilon, delta) model releases), exact text.

NULL (every existing dataset) reads as 0: no delta may be spent until an operator creates a
dataset with a delta budget.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("datasets", sa.Column("delta_budget_exact", sa.Text, nullable=True))
    op.add_column("datasets", sa.Column("delta_spent_exact", sa.Text, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("datasets") as batch:
        batch.drop_column("delta_spent_exact")
        batch.drop_column("delta_budget_exact")
