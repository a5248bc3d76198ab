"""The signed receipt kept with each pulled model-release message (released_models)."""

import sqlalchemy as sa
from alembic import op

revision, down_revision = "0003", "0002"  # this migration, the one it follows


def upgrade() -> None:
    op.add_column("model_release_messages", sa.Column("receipt", sa.Text, nullable=True))


def downgrade() -> None:
    op.drop_column("model_release_messages", "receipt")
