"""Releases: label releases, external (Spark) releases, model releases, signed receipts."""
