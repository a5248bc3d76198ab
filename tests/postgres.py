"""A REAL PostgreSQL server for the tests (Debian's ``postgresql`` package), on a Unix socket.

``initdb`` into a fresh directory, then ``pg_ctl start`` with ``listen_addresses=''`` (no TCP at
all) and the socket in that directory. CI runs as root, and PostgreSQL refuses to run as root:
then the server runs as the ``postgres`` user (or ``nobody``) through ``runuser``. Each test gets
its own database (``fresh_url``). Tests skip only when the binaries cannot be found at all
(tests/run.sh installs the package on a fresh machine).
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

SKIP_REASON = (
    "PostgreSQL server binaries (initdb, pg_ctl) not found: install Debian's `postgresql` "
    "package (tests/run.sh does) or put its bin directory on PATH"
)


def find_bindir() -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl`` (newest Debian version first)."""
    candidates = sorted(
        glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]), reverse=True
    )
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(str(Path(on_path).parent))
    for candidate in candidates:
        if (Path(candidate) / "initdb").is_file() and (Path(candidate) / "pg_ctl").is_file():
            return Path(candidate)
    return None


def _server_user() -> str | None:
    """The unprivileged user to run the server as when we are root (``None``: ourselves)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            pwd.getpwnam(name)
            return name
    raise RuntimeError("running as root and neither a 'postgres' nor a 'nobody' user exists")


@dataclass
class PostgresServer:
    """One PostgreSQL cluster in a temporary directory; ``start``/``stop`` may repeat."""

    bindir: Path
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="labeldp-pg-")))
    user: str | None = field(default_factory=_server_user)

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def superuser(self) -> str:
        return self.user or pwd.getpwuid(os.geteuid()).pw_name

    def _run(self, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        command = [str(self.bindir / argv[0]), *argv[1:]]
        if self.user is not None:
            command = ["runuser", "-u", self.user, "--", *command]
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, check=False, cwd=self.root
        )
        if result.returncode != 0:
            raise RuntimeError(f"{argv[0]} failed: {result.stdout}\n{result.stderr}")
        return result

    def init(self) -> PostgresServer:
        self.root.chmod(0o755)
        if self.user is not None:
            entry = pwd.getpwnam(self.user)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        self._run(
            "initdb", "-D", str(self.data), "--auth=trust", "--encoding=UTF8",
            "--no-sync", "-U", self.superuser,
        )  # fmt: skip
        return self

    def start(self, *, durable: bool = False) -> PostgresServer:
        """Start (again); ``durable``: keep fsync on (benchmarks), else off (tests are faster)."""
        options = (
            f"-k {self.root} -c listen_addresses='' -c max_connections=200 -c shared_buffers=64MB"
            + ("" if durable else " -c fsync=off")
        )
        self._run(
            "pg_ctl", "-D", str(self.data), "-l", str(self.root / "server.log"),
            "-o", options, "-w", "-t", "60", "start",
        )  # fmt: skip
        return self

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def url(self, database: str = "postgres") -> str:
        """A SQLAlchemy URL over the Unix socket (psycopg 3)."""
        return f"postgresql+psycopg://{self.superuser}@/{database}?host={self.root}"

    def create_database(self) -> str:
        """A new empty database; returns its URL."""
        import psycopg

        name = "t_" + secrets.token_hex(6)
        with psycopg.connect(
            host=str(self.root), user=self.superuser, dbname="postgres", autocommit=True
        ) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def destroy(self) -> None:
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
            if self.running():
                self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def postgres_server() -> Iterator[PostgresServer]:
    """A started server, destroyed afterwards (the caller skips when ``find_bindir`` is None)."""
    bindir = find_bindir()
    assert bindir is not None, SKIP_REASON
    server = PostgresServer(bindir=bindir)
    try:
        yield server.init().start()
    finally:
        server.destroy()
