"""The README's code, run as written (issue 26): its Python blocks execute (the one placeholder,
the private labels, filled in), and its shell blocks name commands that exist."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"```(bash|python)\n(.*?)```", re.DOTALL)


def blocks(language: str) -> list[str]:
    return [m.group(2) for m in BLOCK.finditer(README.read_text()) if m.group(1) == language]


def test_the_readmes_python_blocks_run() -> None:
    found = blocks("python")
    assert found, "the README shows the engine API"
    for code in found:
        # The placeholder a reader replaces with their own labels.
        program = code.replace("np.array([...])", "np.random.default_rng(0).uniform(0, 400, 500)")
        assert "..." not in program.replace("...]", ""), program
        done = subprocess.run(
            [sys.executable, "-c", program], capture_output=True, text=True, timeout=300,
            check=False, cwd=README.parent,
        )  # fmt: skip
        assert done.returncode == 0, f"{code}\n{done.stderr}"


def test_the_readmes_shell_commands_exist() -> None:
    """The quick start's two commands: the demo's entry point and the test script."""
    shell = "\n".join(blocks("bash"))
    assert "labeldp demo" in shell and "bash tests/run.sh" in shell
    assert (README.parent / "tests" / "run.sh").is_file()
    from labeldp.cli import build_parser

    assert build_parser().parse_args(["demo"]).command == "demo"
