"""Layering: the engine and wire format (``shared/``) depend on neither party, the demo nor
the benchmarks, so each party can ship and be audited with ``shared/`` alone."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = ("labels_party", "features_party", "demo", "bench", "tests")


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize(
    "path", sorted((ROOT / "shared").rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT))
)
def test_shared_imports_no_service_demo_or_bench(path: Path) -> None:
    assert not _imports(path) & set(FORBIDDEN)


def test_the_scanner_sees_imports_inside_functions(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from labels_party import ledger\n    import bench.x\n")
    assert {"labels_party", "bench"} <= _imports(module)


@pytest.mark.parametrize(
    "path", sorted((ROOT / "spark_release").rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT))
)
def test_the_spark_job_talks_to_the_labels_party_over_http_only(path: Path) -> None:
    """The Spark job runs where the labels live: it imports the engine (``shared``), never a
    party's service code (it charges and publishes through the labels party's HTTP API)."""
    assert not _imports(path) & {"labels_party", "features_party", "demo", "bench", "tests"}


@pytest.mark.parametrize(
    "package", ["shared", "labels_party", "features_party", "spark_release", "demo", "bench"]
)
def test_nothing_but_tests_imports_the_command(package: str) -> None:
    """``labeldp`` sits above everything it registers: no package imports it back."""
    for path in sorted((ROOT / package).rglob("*.py")):
        assert "labeldp" not in _imports(path), path
