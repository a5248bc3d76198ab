"""Pulled model-release messages (``model: "released"``, features_party.released_models)."""

import sqlalchemy as sa
from alembic import op

revision, down_revision = "0002", "0001"  # this migration, the one it follows


def upgrade() -> None:
    op.create_table(
        "model_release_messages",
        sa.Column("model_release_id", sa.String(40), primary_key=True),
        sa.Column("dataset", sa.String(64), nullable=False),
        sa.Column("message", sa.Text, nullable=False),
        sa.Column("body_sha256", sa.String(64), nullable=False),
        sa.Column("fetched", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("model_release_messages")
