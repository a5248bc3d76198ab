"""External releases bound to a universe: the dataset's universe digest, fixed at first use."""

import sqlalchemy as sa
from alembic import op

revision, down_revision = "0008", "0007"  # this migration, the one it follows


def upgrade() -> None:
    op.add_column("datasets", sa.Column("universe_sha256", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("datasets") as batch:
        batch.drop_column("universe_sha256")
