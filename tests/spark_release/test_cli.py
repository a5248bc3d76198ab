"""spark_release.cli: the options of ``labeldp release --engine spark`` reach the job's config."""

from __future__ import annotations

import pytest

from labeldp.cli import build_parser
from shared.service.cli_args import from_args
from spark_release import DRIVER_MEMORY
from spark_release.job import JobConfig

_REQUIRED = ["release", "--engine", "spark", "--dataset", "d", "--labels-url", "http://x",
             "--examples", "e", "--labels", "l", "--epsilon", "1", "--out", "o"]  # fmt: skip


def _config(*extra: str) -> JobConfig:
    args = build_parser("release").parse_args([*_REQUIRED, *extra])
    return from_args(JobConfig, args, token="t")


def test_the_driver_memory_defaults_to_the_jobs_and_is_passed_on() -> None:
    assert _config().driver_memory == DRIVER_MEMORY
    assert _config("--driver-memory", "6g").driver_memory == "6g"
    assert _config("--driver-memory", "4096").driver_memory == "4096"  # MiB, as Spark reads it


@pytest.mark.parametrize("bad", ["lots", "2 g", "-1g", "2gib", "", "1.5g"])
def test_a_malformed_driver_memory_is_refused_naming_the_option(
    bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        _config("--driver-memory", bad)
    assert exit_info.value.code == 2
    assert "--driver-memory" in capsys.readouterr().err
