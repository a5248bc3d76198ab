"""Datasets: creation, public bounds, budgets, archive, and the read-only listings."""
