"""Idempotency keys of releases, model releases and top-ups: a repeat spends or adds nothing.

A client that lost the answer to a committed release and repeated it was charged again (a top-up
added twice); from this revision such a request may carry ``Idempotency-Key``, stored in the
transaction that spends or adds (``labels_party.budget.idempotency``).
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
        sa.Column("made", sa.String(40), nullable=False),
        sa.Column("answer", sa.Text, nullable=False),
        sa.Column("created", sa.String(40), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("idempotency_keys")
