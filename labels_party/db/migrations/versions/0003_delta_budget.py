"""A dataset's delta budget and delta spent ((epsilon, delta) model releases), exact text.

NULL (every existing dataset) reads as 0: no delta may be spent until an operator creates a
dataset with a delta budget.
"""

import sqlalchemy as sa
from alembic import op

revision, down_revision = "0003", "0002"  # this migration, the one it follows


def upgrade() -> None:
    op.add_column("datasets", sa.Column("delta_budget_exact", sa.Text, nullable=True))
    op.add_column("datasets", sa.Column("delta_spent_exact", sa.Text, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("datasets") as batch:
        batch.drop_column("delta_spent_exact")
        batch.drop_column("delta_budget_exact")
