"""Alembic environment of the features party (shared.service.migrations.upgrade hands the
connection)."""

from features_party.db.models import Base
from shared.service.migrations import run_env

run_env(Base.metadata)
