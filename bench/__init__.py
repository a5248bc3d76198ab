"""Speed and accuracy benchmarks; their results are committed under ``bench/results/``."""

from __future__ import annotations

from pathlib import Path


def emit(text: str, out: Path | None) -> None:
    """Print a benchmark's report, and write it to ``out`` too when one is given."""
    print(text)
    if out is not None:
        out.write_text(text + "\n")
