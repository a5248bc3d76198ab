"""External releases charged before their noise: a release's state and the request it charged."""

import sqlalchemy as sa
from alembic import op

revision, down_revision = "0011", "0010"  # this migration, the one it follows


def upgrade() -> None:
    op.add_column("releases", sa.Column("state", sa.String(16), nullable=True))
    op.add_column("releases", sa.Column("external_request", sa.Text, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("releases") as batch:
        batch.drop_column("external_request")
        batch.drop_column("state")
