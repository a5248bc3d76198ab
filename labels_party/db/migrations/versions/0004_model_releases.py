"""Public feature sets (publisher) and model releases (labels_party.releasing.model_releases)."""

import sqlalchemy as sa
from alembic import op

revision, down_revision = "0004", "0003"  # this migration, the one it follows


def upgrade() -> None:
    op.create_table(
        "public_feature_sets",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("dataset_id", sa.Integer, sa.ForeignKey("datasets.id"), nullable=False),
        sa.Column("columns", sa.Text, nullable=False),
        sa.Column("n", sa.BigInteger, nullable=False),
        sa.Column("ids", sa.Text, nullable=False),
        sa.Column("matrix", sa.LargeBinary, nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("created", sa.String(40), nullable=False),
        sa.Column("actor_role", sa.String(16), nullable=False),
    )
    op.create_table(
        "model_releases",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("dataset_id", sa.Integer, sa.ForeignKey("datasets.id"), nullable=False),
        sa.Column(
            "features_id", sa.String(40), sa.ForeignKey("public_feature_sets.id"), nullable=False
        ),
        sa.Column("estimator", sa.String(16), nullable=False),
        sa.Column("privacy", sa.String(16), nullable=False),
        sa.Column("epsilon_exact", sa.Text, nullable=False),
        sa.Column("delta_exact", sa.Text, nullable=True),
        sa.Column("message", sa.Text, nullable=False),
        sa.Column("message_sha256", sa.String(64), nullable=False),
        sa.Column("created", sa.String(40), nullable=False),
        sa.Column("actor_role", sa.String(16), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("model_releases")
    op.drop_table("public_feature_sets")
