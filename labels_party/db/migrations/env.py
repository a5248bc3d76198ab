"""Alembic environment of the labels party (``shared.migrations.upgrade`` hands the connection)."""

from labels_party.db.models import metadata
from shared.migrations import run_env

run_env(metadata)
