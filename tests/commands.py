"""Run the ``labeldp`` command in a fresh interpreter, as a user would (tests only)."""

from __future__ import annotations

import subprocess
import sys


def labeldp(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python -m labeldp ARGS``: its exit status and text output, never raising on failure."""
    return subprocess.run(
        [sys.executable, "-m", "labeldp", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
