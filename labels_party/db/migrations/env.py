"""Alembic environment of the labels party (``shared.service.migrations.upgrade`` hands the
connection)."""

from labels_party.db.models import metadata
from shared.service.migrations import run_env

run_env(metadata)
