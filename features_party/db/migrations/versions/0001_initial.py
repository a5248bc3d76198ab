"""The features party's schema of the last release before Alembic (commit e1a89f1)."""

import sqlalchemy as sa
from alembic import op

revision, down_revision = "0001", None  # this migration, the one it follows


def upgrade() -> None:
    op.create_table(
        "feature_datasets",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("columns_json", sa.Text, nullable=False),
        sa.Column("created", sa.DateTime(timezone=True), nullable=False),
        sa.Column("synced_rows", sa.Integer, nullable=False),
    )
    op.create_table(
        "feature_rows",
        sa.Column(
            "dataset", sa.String(64), sa.ForeignKey("feature_datasets.name"), primary_key=True
        ),
        sa.Column("example_id", sa.String(128), primary_key=True),
        sa.Column("values_json", sa.Text, nullable=False),
    )
    op.create_table(
        "messages",
        sa.Column("release_id", sa.String(128), primary_key=True),
        sa.Column("dataset", sa.String(64), nullable=False),
        sa.Column("header_json", sa.Text, nullable=False),
        sa.Column("body_sha256", sa.String(64), nullable=False),
        sa.Column("media_type", sa.String(64), nullable=False),
        sa.Column("raw", sa.LargeBinary, nullable=False),
        sa.Column("fetched", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "models",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("dataset", sa.String(64), nullable=False),
        sa.Column("release_id", sa.String(128), nullable=False),
        sa.Column("model", sa.String(16), nullable=False),
        sa.Column("label_transform", sa.String(16), nullable=False),
        sa.Column("seed", sa.Integer, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("stage", sa.String(200), nullable=False),
        sa.Column("progress", sa.Float, nullable=False),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("created", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished", sa.DateTime(timezone=True), nullable=True),
        sa.Column("result_json", sa.Text, nullable=True),
        sa.Column("blob", sa.LargeBinary, nullable=True),
        sa.Column("blob_sha256", sa.String(64), nullable=True),
    )


def downgrade() -> None:
    for table in ("models", "messages", "feature_rows", "feature_datasets"):
        op.drop_table(table)
