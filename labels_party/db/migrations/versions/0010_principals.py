"""Named principals: tokens per person or integration (hashes only), and who acted where."""

import sqlalchemy as sa
from alembic import op

revision, down_revision = "0010", "0009"  # this migration, the one it follows

# Where an action is recorded, the principal (NULL: written before principals, or by a
# role-only token, whose principal is the role itself).
ACTOR_TABLES = ("ledger", "release_audit", "access_log", "releases", "model_releases")


def upgrade() -> None:
    op.create_table(
        "principals",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("token_sha256", sa.String(64), nullable=False, unique=True),
        sa.Column("created", sa.String(40), nullable=False),
        sa.Column("revoked", sa.String(40), nullable=True),
    )
    for table in ACTOR_TABLES:
        op.add_column(table, sa.Column("actor", sa.String(64), nullable=True))


def downgrade() -> None:
    for table in ACTOR_TABLES:
        with op.batch_alter_table(table) as batch:
            batch.drop_column("actor")
    op.drop_table("principals")
