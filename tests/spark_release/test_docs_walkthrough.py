"""docs/spark.md, run as written (issue 26): its shell and Python blocks, in order, against a
real labels party and small Parquet inputs. Only the host, the lake paths and the tokens are
substituted; a walkthrough that stops working fails here."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

from tests.spark_release.conftest import LabelsParty, write_inputs

DOC = Path(__file__).resolve().parents[2] / "docs" / "spark.md"
BLOCK = re.compile(r"```(bash|python)\n(.*?)```", re.DOTALL)


def blocks() -> list[tuple[str, str]]:
    """(language, code) of every fenced bash or python block, in document order."""
    return [(m.group(1), m.group(2)) for m in BLOCK.finditer(DOC.read_text())]


def test_the_spark_walkthrough_runs_as_written(labels_party: LabelsParty, tmp_path: Path) -> None:
    found = blocks()
    assert [lang for lang, _ in found] == ["bash", "bash", "python"], found
    lake = tmp_path / "lake"
    ids = [f"click-{i:05d}" for i in range(600)]
    rng = np.random.default_rng(4)
    converted = {ids[i]: float(v) for i, v in enumerate(rng.exponential(40.0, 120))}
    examples, labels = write_inputs(lake / "in", ids, converted)

    def adapt(code: str) -> str:
        code = code.replace("http://127.0.0.1:8001", labels_party.url)
        code = code.replace("/lake/clicks/2026-11", str(examples))
        code = code.replace("/lake/conversions/2026-11", str(labels))
        code = code.replace("/lake/releases/", f"{lake}/releases/")
        # The one placeholder a reader fills in: the token comes from the environment here.
        return code.replace("export LABELDP_ADVERTISER_TOKEN=...", ":")

    env = {
        **os.environ,
        "LABELDP_OPERATOR_TOKEN": labels_party.tokens["operator"],
        "LABELDP_ADVERTISER_TOKEN": labels_party.tokens["advertiser"],
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    (lake / "releases").mkdir(parents=True)
    for lang, code in found:
        if lang == "bash":
            script = "set -euo pipefail\n" + adapt(code) + "\n"
            done = subprocess.run(
                ["bash", "-c", script], env=env, capture_output=True, text=True, timeout=600,
                check=False,
            )  # fmt: skip
        else:
            program = (
                f"publisher_token = {labels_party.tokens['publisher']!r}\n"
                + adapt(code)
                + "\nassert header.n == len(ids) == 600 and noisy.size == 600\n"
                + "print('read', header.release_id)\n"
            )
            done = subprocess.run(
                [sys.executable, "-c", program], env=env, capture_output=True, text=True,
                timeout=300, check=False,
            )  # fmt: skip
        assert done.returncode == 0, f"{lang} block failed:\n{code}\n{done.stdout}\n{done.stderr}"
    assert (lake / "releases" / "clicks-2026-11-r1" / "header.json").is_file()
    assert labels_party.dataset("clicks-2026-11")["epsilon_spent"] == "1"
    kinds = [e["kind"] for e in labels_party.ledger("clicks-2026-11")]
    assert kinds == ["dataset", "histogram", "randomizer", "publication"]
