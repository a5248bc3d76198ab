"""Public segments (issue 25): a dataset's declared segment column, each example's segment."""

import sqlalchemy as sa
from alembic import op

revision, down_revision = "0007", "0006"  # this migration, the one it follows


def upgrade() -> None:
    op.add_column("datasets", sa.Column("segment_column", sa.String(64), nullable=True))
    op.add_column("entries", sa.Column("segment", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("entries") as batch:
        batch.drop_column("segment")
    with op.batch_alter_table("datasets") as batch:
        batch.drop_column("segment_column")
