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


def _modules(path: Path) -> set[str]:
    """Every module ``path`` imports, dotted in full (``from a import b`` also as ``a.b``)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def _under(modules: set[str], package: str) -> set[str]:
    return {m for m in modules if m == package or m.startswith(package + ".")}


ENGINE = sorted(
    path
    for path in (ROOT / "shared").rglob("*.py")
    if path.relative_to(ROOT / "shared").parts[0] != "service"
)


@pytest.mark.parametrize("path", ENGINE, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_engine_needs_no_service_kit(path: Path) -> None:
    """The DP engine and the wire format (``shared/`` outside ``shared/service/``) need no HTTP,
    database, TLS, receipt or command-line plumbing: a party can audit them alone."""
    assert not _under(_modules(path), "shared.service")


# The labels party's packages along the data: what each may import of its siblings.
LABELS_PARTY_LAYERS = {
    "budget": set(),
    "catalog": {"budget"},
    "intake": {"budget", "catalog"},
    "access": {"budget", "catalog"},
    "releasing": {"budget", "catalog", "intake", "access"},
}
SERVICE_SHELL = ("api", "main", "cli", "console")


@pytest.mark.parametrize("package", sorted(LABELS_PARTY_LAYERS))
def test_the_labels_partys_packages_import_only_what_comes_before_them(package: str) -> None:
    """budget <- catalog <- intake, access <- releasing, and none of them imports the service
    shell above them (the routes, the app, the commands)."""
    siblings = set(LABELS_PARTY_LAYERS) - {package} - LABELS_PARTY_LAYERS[package]
    forbidden = {f"labels_party.{name}" for name in (*siblings, *SERVICE_SHELL)}
    files = sorted((ROOT / "labels_party" / package).rglob("*.py"))
    assert files, package
    for path in files:
        imported = _modules(path)
        assert not {m for f in forbidden for m in _under(imported, f)}, path


def test_the_full_name_scanner_sees_each_imported_name(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "from shared import service\ndef f():\n    from labels_party.catalog import datasets\n"
    )
    found = _modules(module)
    assert _under(found, "shared.service") == {"shared.service"}
    assert "labels_party.catalog.datasets" in _under(found, "labels_party.catalog")
