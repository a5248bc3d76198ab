"""A per-database key for external releases' labels input digests (the ledger keeps keyed ones).

An external (Spark) release reports the sha256 of the labels input files it read; the ledger
kept it as ``labels_input_sha256``, which anyone who reads the ledger (an operator, its export)
could test guesses against: knowing every label but one (and the file's encoding), the last one
follows. From this revision the ledger keeps ``labels_input_hmac``, HMAC-SHA256 of that digest
under a 32-byte key drawn here from the OS CSPRNG and kept in ``instance_secrets``, so equal
inputs still match across datasets (``ledger verify``) and nothing can be tested without the
key. Entries already recorded are hash-chained and stay as they were.
"""

import os

import sqlalchemy as sa
from alembic import op

revision, down_revision = "0013", "0012"  # this migration, the one it follows

LABELS_INPUT_KEY = "labels_input"


def upgrade() -> None:
    table = op.create_table(
        "instance_secrets",
        sa.Column("name", sa.String(32), primary_key=True),
        sa.Column("value", sa.LargeBinary, nullable=False),
    )
    op.bulk_insert(table, [{"name": LABELS_INPUT_KEY, "value": os.urandom(32)}])


def downgrade() -> None:
    op.drop_table("instance_secrets")
