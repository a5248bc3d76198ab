"""The session fixture's stop (tests/compose/conftest.py): a dockerd it names is stopped, any
other process is left alone."""

from __future__ import annotations

import subprocess
import time

from tests.compose.conftest import _is_dockerd, stop_daemon


def _named(argv0: str) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(["bash", "-c", f"exec -a {argv0} sleep 60"])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not _is_dockerd(process.pid) and argv0 == "dockerd":
        time.sleep(0.05)
    return process


def test_a_dockerd_is_stopped_and_another_process_is_not() -> None:
    daemon, other = _named("dockerd"), _named("not-dockerd")
    try:
        assert _is_dockerd(daemon.pid) and not _is_dockerd(other.pid)
        stop_daemon(daemon.pid, timeout=5)
        assert daemon.wait(timeout=10) is not None
        stop_daemon(other.pid, timeout=5)
        assert other.poll() is None  # not a dockerd: untouched
    finally:
        for process in (daemon, other):
            process.kill()
            process.wait(timeout=10)
