"""Start and stop the two services as local processes on 127.0.0.1 (demo and tests).

Each service is ``python -m labeldp serve <labels|features> ...`` on a free loopback port,
with its SQLite file and its log in a working folder; tokens travel in the environment, never on
the command line (where ``ps`` would show them).
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from shared.errors import LabelDPError

READY_TIMEOUT = 60.0


class ServiceStartError(LabelDPError):
    """A service process exited or never answered /healthz."""


def free_port() -> int:
    """A TCP port that was free on 127.0.0.1 a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def new_tokens() -> dict[str, str]:
    """Random bearer tokens for the three labels-party roles and the features party."""
    return {
        role: secrets.token_urlsafe(24)
        for role in ("advertiser", "publisher", "operator", "features")
    }


@dataclass
class ServiceProcess:
    """A running service: its URL, process, database file and log."""

    name: str
    url: str
    port: int
    db_path: Path
    log_path: Path
    process: subprocess.Popen[bytes]
    argv: list[str] = field(default_factory=list)

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, *, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL if it does not exit within ``timeout`` seconds."""
        if self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=timeout)

    def kill(self) -> None:
        """SIGKILL (a crash, for tests)."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)


def _wait_ready(service: ServiceProcess, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if service.process.poll() is not None:
            raise ServiceStartError(
                f"{service.name} party exited with code {service.process.returncode}:\n"
                + service.log_tail()
            )
        try:
            if httpx.get(f"{service.url}/healthz", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    service.stop()
    raise ServiceStartError(
        f"{service.name} party did not answer /healthz within {timeout:g} s:\n" + service.log_tail()
    )


def _spawn(
    name: str,
    args: list[str],
    *,
    workdir: Path,
    env: dict[str, str],
    port: int | None,
    db_path: Path,
    timeout: float,
) -> ServiceProcess:
    last: ServiceStartError | None = None
    for _ in range(3):  # a "free" port can be taken in between: try another one
        chosen = port or free_port()
        argv = [sys.executable, "-m", "labeldp", "serve", name, *args, "--port", str(chosen)]
        log_path = workdir / f"{name}-party.log"
        log = open(log_path, "ab")  # noqa: SIM115 - owned by the child for its lifetime
        process = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env},
            cwd=workdir,
        )
        log.close()
        service = ServiceProcess(
            name=name,
            url=f"http://127.0.0.1:{chosen}",
            port=chosen,
            db_path=db_path,
            log_path=log_path,
            process=process,
            argv=argv,
        )
        try:
            _wait_ready(service, timeout)
            return service
        except ServiceStartError as exc:
            last = exc
            if port is not None or "address already in use" not in str(exc).lower():
                raise
    assert last is not None
    raise last


def start_labels_party(
    workdir: Path,
    tokens: dict[str, str],
    *,
    port: int | None = None,
    db_path: Path | None = None,
    timeout: float = READY_TIMEOUT,
    database_url: str | None = None,
) -> ServiceProcess:
    """``labeldp serve labels`` with ``LABELDP_TOKENS`` from ``tokens`` (``database_url``:
    a PostgreSQL or other SQLAlchemy URL instead of the SQLite file ``db_path``)."""
    db = db_path or workdir / "labels.db"
    env = {
        "LABELDP_TOKENS": ",".join(
            f"{role}={tokens[role]}" for role in ("advertiser", "publisher", "operator")
        )
    }
    where = (
        ["--database-url", database_url, "--signing-key", str(workdir / "labels-signing-key.pem")]
        if database_url
        else ["--db", str(db)]
    )
    args = [*where, "--host", "127.0.0.1", "--log-level", "warning"]
    return _spawn("labels", args, workdir=workdir, env=env, port=port, db_path=db, timeout=timeout)


def start_features_party(
    workdir: Path,
    tokens: dict[str, str],
    *,
    labels_url: str,
    port: int | None = None,
    db_path: Path | None = None,
    timeout: float = READY_TIMEOUT,
    database_url: str | None = None,
) -> ServiceProcess:
    """``labeldp serve features`` using the publisher token; its own token if ``features``."""
    db = db_path or workdir / "features.db"
    env = {"LABELDP_PUBLISHER_TOKEN": tokens["publisher"]}
    if tokens.get("features"):
        env["LABELDP_FEATURES_TOKEN"] = tokens["features"]
    where = (
        ["--database-url", database_url, "--signing-key", str(workdir / "labels-signing-key.pem")]
        if database_url
        else ["--db", str(db)]
    )
    args = [
        *where,
        "--host",
        "127.0.0.1",
        "--labels-url",
        labels_url,
        "--log-level",
        "warning",
    ]
    return _spawn(
        "features", args, workdir=workdir, env=env, port=port, db_path=db, timeout=timeout
    )
