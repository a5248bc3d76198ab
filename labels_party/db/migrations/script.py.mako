"""${message}"""

import sqlalchemy as sa
from alembic import op
${imports if imports else ""}
revision, down_revision = ${repr(up_revision)}, ${repr(down_revision)}  # this migration, the one it follows


def upgrade() -> None:
    ${upgrades if upgrades else "pass"}


def downgrade() -> None:
    ${downgrades if downgrades else "pass"}
