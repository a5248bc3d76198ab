"""Release receipts (signing keys, signed receipts) and the operator trails (refused releases,
message downloads): labels_party.releasing.receipts, labels_party.budget.trails.
"""

import sqlalchemy as sa
from alembic import op

revision, down_revision = "0005", "0004"  # this migration, the one it follows


def upgrade() -> None:
    op.create_table(
        "signing_keys",
        sa.Column("key_id", sa.String(32), primary_key=True),
        sa.Column("algorithm", sa.String(16), nullable=False),
        sa.Column("public_key", sa.Text, nullable=False),
        sa.Column("created", sa.String(40), nullable=False),
        sa.Column("retired", sa.String(40), nullable=True),
    )
    op.create_table(
        "receipts",
        sa.Column("release_id", sa.String(40), sa.ForeignKey("releases.id"), primary_key=True),
        sa.Column("key_id", sa.String(32), nullable=False),
        sa.Column("receipt", sa.Text, nullable=False),
        sa.Column("signed_at", sa.String(40), nullable=False),
    )
    op.create_table(
        "release_audit",
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("time", sa.String(40), nullable=False),
        sa.Column("actor_role", sa.String(16), nullable=False),
        sa.Column("dataset", sa.String(200), nullable=False),
        sa.Column("request", sa.Text, nullable=False),
        sa.Column("status", sa.Integer, nullable=False),
        sa.Column("error_class", sa.String(64), nullable=False),
        sa.Column("detail", sa.Text, nullable=False),
        sa.Column("errors", sa.Text, nullable=False),
    )
    op.create_table(
        "access_log",
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("time", sa.String(40), nullable=False),
        sa.Column("actor_role", sa.String(16), nullable=False),
        sa.Column("release_id", sa.String(40), nullable=False),
        sa.Column("encoding", sa.String(64), nullable=False),
        sa.Column("bytes", sa.BigInteger, nullable=True),
        sa.Column("completed", sa.SmallInteger, nullable=False),
    )


def downgrade() -> None:
    for table in ("access_log", "release_audit", "receipts", "signing_keys"):
        op.drop_table(table)
