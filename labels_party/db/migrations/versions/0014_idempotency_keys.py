"""Idempotency keys of label and model releases: a repeated request spends nothing.

A client that lost the answer to a committed release and repeated it was charged again; from
this revision a release request may carry ``Idempotency-Key``, stored with the release in the
transaction that spends (``labels_party.releasing.idempotency``).
"""

import sqlalchemy as sa
from alembic import op

revision, down_revision = "0014", "0013"  # this migration, the one it follows


def upgrade() -> None:
    op.create_table(
        "idempotency_keys",
        sa.Column("dataset_id", sa.Integer, sa.ForeignKey("datasets.id"), primary_key=True),
        sa.Column("key", sa.String(255), primary_key=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("request_sha256", sa.String(64), nullable=False),
        sa.Column("release_id", sa.String(40), nullable=False),
        sa.Column("answer", sa.Text, nullable=False),
        sa.Column("created", sa.String(40), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("idempotency_keys")
