"""The schema of the last release before Alembic (commit e1a89f1): floats only."""

import sqlalchemy as sa
from alembic import op

revision, down_revision = "0001", None  # this migration, the one it follows


def upgrade() -> None:
    op.create_table(
        "datasets",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("label_min", sa.Double, nullable=False),
        sa.Column("label_max", sa.Double, nullable=False),
        sa.Column("default_label", sa.Double, nullable=False),
        sa.Column("epsilon_budget", sa.Double, nullable=False),
        sa.Column("epsilon_spent", sa.Double, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("n_examples", sa.BigInteger, nullable=False),
        sa.Column("n_labels", sa.BigInteger, nullable=False),
        sa.Column("data_version", sa.BigInteger, nullable=False),
        sa.Column("created", sa.String(40), nullable=False),
        sa.UniqueConstraint("name", name="uq_datasets_name"),
    )
    op.create_table(
        "entries",
        sa.Column("dataset_id", sa.Integer, sa.ForeignKey("datasets.id"), nullable=False),
        sa.Column("example_id", sa.String(128), nullable=False),
        sa.Column("registered", sa.SmallInteger, nullable=False),
        sa.Column("value", sa.Double, nullable=True),
        sa.PrimaryKeyConstraint("dataset_id", "example_id", name="pk_entries"),
        sqlite_with_rowid=False,
    )
    op.create_table(
        "releases",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("dataset_id", sa.Integer, sa.ForeignKey("datasets.id"), nullable=False),
        sa.Column("requested_mechanism", sa.String(32), nullable=False),
        sa.Column("mechanism", sa.String(32), nullable=False),
        sa.Column("params", sa.Text, nullable=False),
        sa.Column("epsilon1", sa.Double, nullable=False),
        sa.Column("epsilon2", sa.Double, nullable=False),
        sa.Column("epsilon", sa.Double, nullable=False),
        sa.Column("n", sa.BigInteger, nullable=False),
        sa.Column("created", sa.String(40), nullable=False),
        sa.Column("message_sha256", sa.String(64), nullable=False),
        sa.Column("binary_sha256", sa.String(64), nullable=False),
        sa.Column("binary_size", sa.BigInteger, nullable=False),
        sa.Column("expected_label_mse", sa.Double, nullable=True),
        sa.Column("actor_role", sa.String(16), nullable=False),
    )
    op.create_table(
        "message_chunks",
        sa.Column("release_id", sa.String(40), sa.ForeignKey("releases.id"), nullable=False),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("part", sa.SmallInteger, nullable=False),
        sa.Column("size", sa.Integer, nullable=False),
        sa.Column("data", sa.LargeBinary, nullable=False),
        sa.PrimaryKeyConstraint("release_id", "seq", name="pk_message_chunks"),
    )
    op.create_table(
        "ledger",
        sa.Column("seq", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("time", sa.String(40), nullable=False),
        sa.Column("dataset", sa.String(64), nullable=False),
        sa.Column("release_id", sa.String(40), sa.ForeignKey("releases.id"), nullable=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("mechanism", sa.String(32), nullable=True),
        sa.Column("epsilon", sa.Double, nullable=False),
        sa.Column("actor_role", sa.String(16), nullable=False),
        sa.Column("parameters", sa.Text, nullable=False),
        sa.Column("message_sha256", sa.String(64), nullable=True),
        sa.Column("prev_hash", sa.String(64), nullable=False),
        sa.Column("entry_hash", sa.String(64), nullable=False),
    )


def downgrade() -> None:
    for table in ("ledger", "message_chunks", "releases", "entries", "datasets"):
        op.drop_table(table)
