"""Signed receipts of model releases (their own table: a model release is not a label release)."""

import sqlalchemy as sa
from alembic import op

revision, down_revision = "0009", "0008"  # this migration, the one it follows


def upgrade() -> None:
    op.create_table(
        "model_receipts",
        sa.Column(
            "model_release_id", sa.String(40), sa.ForeignKey("model_releases.id"), primary_key=True
        ),
        sa.Column("key_id", sa.String(32), nullable=False),
        sa.Column("receipt", sa.Text, nullable=False),
        sa.Column("signed_at", sa.String(40), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("model_receipts")
