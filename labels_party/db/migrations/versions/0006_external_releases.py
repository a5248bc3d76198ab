"""Externally executed releases (the Spark job): where a release's message lives and its header."""

import sqlalchemy as sa
from alembic import op

revision, down_revision = "0006", "0005"  # this migration, the one it follows


def upgrade() -> None:
    op.add_column("releases", sa.Column("storage", sa.String(16), nullable=True))
    op.add_column("releases", sa.Column("external_header", sa.Text, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("releases") as batch:
        batch.drop_column("external_header")
        batch.drop_column("storage")
