"""Externally executed releases (the Spark job): where a release's message lives and its header.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("releases", sa.Column("storage", sa.String(16), nullable=True))
    op.add_column("releases", sa.Column("external_header", sa.Text, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("releases") as batch:
        batch.drop_column("external_header")
        batch.drop_column("storage")
