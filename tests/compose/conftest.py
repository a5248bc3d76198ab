"""The Docker tests' one daemon: a dockerd that this test session starts is stopped at its end.

``services/build_base_image.sh`` starts dockerd only where none runs, and then writes its pid to
``LABELDP_DOCKERD_PIDFILE``. Every module here runs on one worker (``tests/conftest.py``'s
"docker" group), after which the session fixture below stops that daemon (SIGTERM: dockerd stops
its containers and its containerd first), so CI leaves no daemon behind. A dockerd that was
already running (a developer's) is never touched.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

PIDFILE_VARIABLE = "LABELDP_DOCKERD_PIDFILE"
STOP_TIMEOUT_S = 60.0


def _is_dockerd(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return bool(cmdline) and os.path.basename(cmdline[0]) == b"dockerd"


def stop_daemon(pid: int, *, timeout: float = STOP_TIMEOUT_S) -> None:
    """SIGTERM ``pid`` if it is a dockerd, wait for it to exit, SIGKILL it after ``timeout``."""
    if not _is_dockerd(pid):
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _is_dockerd(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if _is_dockerd(pid):
        os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="session", autouse=True)
def docker_daemon_stopped_at_the_end(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Hand the build script a pidfile; stop the daemon it names once the session ends."""
    pidfile = tmp_path_factory.mktemp("dockerd") / "dockerd.pid"
    before = os.environ.get(PIDFILE_VARIABLE)
    os.environ[PIDFILE_VARIABLE] = str(pidfile)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(PIDFILE_VARIABLE, None)
        else:
            os.environ[PIDFILE_VARIABLE] = before
        if pidfile.is_file():
            stop_daemon(int(pidfile.read_text().strip()))
