"""Fixtures for the labels-party tests: an in-process app (TestClient) and real server processes."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from starlette.exceptions import StarletteDeprecationWarning

from labels_party.catalog import datasets as ds
from labels_party.config import Settings, Tokens
from labels_party.db.engine import Database, create_schema, make_engine
from labels_party.intake.ingest import store_examples
from labels_party.main import create_app

with warnings.catch_warnings():  # starlette prefers httpx2 (not a dependency) at import time
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from fastapi.testclient import TestClient

TOKENS = Tokens(
    advertiser="adv-0123456789abcdef",
    publisher="pub-0123456789abcdef",
    operator="ops-0123456789abcdef",
)
ROLES = ("advertiser", "publisher", "operator")
TOKENS_ENV = ",".join(f"{role}={token}" for role, token in TOKENS.items())


def auth(role: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {getattr(TOKENS, role)}"}


ADV, PUB, OPS = auth("advertiser"), auth("publisher"), auth("operator")


def make_settings(db_path: Path, **overrides: Any) -> Settings:
    return Settings(database_url=f"sqlite:///{db_path}", tokens=TOKENS, **overrides)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "labels.db"


@pytest.fixture
def make_client(db_path: Path) -> Iterator[Callable[..., TestClient]]:
    """Build TestClients on the test's database (seeded randomness unless told otherwise)."""
    stack = contextlib.ExitStack()

    def build(seed: int | None = 7, randomizer: Any = None, **overrides: Any) -> TestClient:
        rng_factory = None if seed is None else (lambda: np.random.default_rng(seed))
        app = create_app(
            make_settings(db_path, **overrides), rng_factory=rng_factory, randomizer=randomizer
        )
        return stack.enter_context(TestClient(app, raise_server_exceptions=False))

    with stack:
        yield build


@pytest.fixture
def client(make_client: Callable[..., TestClient]) -> TestClient:
    return make_client()


def create_dataset(client: Any, name: str = "ds", **fields: Any) -> dict[str, Any]:
    body = {
        "name": name,
        "label_min": 0.0,
        "label_max": 100.0,
        "default_label": 0.0,
        "epsilon_budget": 10.0,
        **fields,
    }
    response = client.post("/v1/datasets", json=body, headers=OPS)
    assert response.status_code == 201, response.text
    return response.json()


def register(client: Any, name: str, ids: list[str]) -> dict[str, Any]:
    response = client.post(f"/v1/datasets/{name}/examples", json={"example_ids": ids}, headers=PUB)
    assert response.status_code == 200, response.text
    return response.json()


def put_labels(client: Any, name: str, pairs: list[tuple[str, float]], **params: Any) -> Any:
    body = {"labels": [{"example_id": i, "value": v} for i, v in pairs]}
    return client.post(f"/v1/datasets/{name}/labels", json=body, headers=ADV, params=params)


def csv_body(pairs: list[tuple[str, float]]) -> bytes:
    return ("example_id,value\n" + "".join(f"{i},{v!r}\n" for i, v in pairs)).encode()


def release(client: Any, name: str, **body: Any) -> Any:
    payload = {"mechanism": "rpwithprior", "epsilon": 1.0, **body}
    return client.post(f"/v1/datasets/{name}/releases", json=payload, headers=ADV)


# ---- real server processes -------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> Any:
    """Run ``python -m labels_party ARGS`` and return the CompletedProcess."""
    return subprocess.run(
        [sys.executable, "-m", "labels_party", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=timeout,
        check=False,
    )


@dataclass
class Server:
    """A ``labeldp serve labels`` process on a free loopback port."""

    db: Path
    env: dict[str, str]
    args: tuple[str, ...] = ()
    database_url: str | None = None  # a PostgreSQL database instead of the SQLite file ``db``
    port: int = 0
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, **extra_env: str) -> Server:
        assert self.process is None
        self.port = free_port()
        env = {**os.environ, "LABELDP_TOKENS": TOKENS_ENV, "LABELDP_WARMUP": "0", **self.env}
        env.update(extra_env)
        self.log_path = self.db.with_suffix(f".{self.port}.log")
        log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "labels_party", "serve", "labels",
             *(["--database-url", self.database_url,
                "--signing-key", str(self.db.with_name("signing-key.pem"))]
               if self.database_url else ["--db", str(self.db)]),
             "--port", str(self.port), "--log-level", "warning", *self.args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )  # fmt: skip
        log.close()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited: {self.log_path.read_text()}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError("server did not become healthy")

    def kill(self) -> None:
        """kill -9: no shutdown handler, no flush, no checkpoint."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)
        self.process = None

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=20)
            self.process = None

    def client(self, **kwargs: Any) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=kwargs.pop("timeout", 120), **kwargs)


@pytest.fixture
def server_factory(tmp_path: Path) -> Iterator[Callable[..., Server]]:
    servers: list[Server] = []

    def build(db: Path | None = None, *args: str, store: Store | None = None, **env: str) -> Server:
        if store is not None:
            db = store.db
        url = store.url if store is not None else None
        server = Server(db=db or tmp_path / "server.db", env=env, args=args, database_url=url)
        servers.append(server)
        return server

    yield build
    for server in servers:
        server.stop()


def ledger_rows(db: Path) -> list[dict[str, Any]]:
    """The ledger read straight from SQLite (independent of the service code)."""
    import sqlite3

    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.row_factory = sqlite3.Row
        return [dict(r) for r in conn.execute("SELECT * FROM ledger ORDER BY seq")]


@dataclass
class Store:
    """The service's database read directly, SQLite file or PostgreSQL (not the service code)."""

    db: Path
    url: str | None = None  # PostgreSQL (psycopg) URL; None: the SQLite file ``db``

    @property
    def cli_args(self) -> list[str]:
        """How ``labeldp ledger verify`` finds this database."""
        return ["--database-url", self.url] if self.url else ["--db", str(self.db)]

    @contextlib.contextmanager
    def _cursor(self) -> Iterator[Any]:
        if self.url is None:
            import sqlite3

            with contextlib.closing(sqlite3.connect(self.db, timeout=30)) as conn:
                conn.row_factory = sqlite3.Row
                yield conn.cursor()
            return
        import psycopg
        from psycopg.rows import dict_row
        from sqlalchemy.engine import make_url

        url = make_url(self.url)
        with psycopg.connect(
            host=url.query["host"], user=url.username, dbname=url.database, autocommit=True,
            row_factory=dict_row,
        ) as conn:  # fmt: skip
            yield conn.cursor()

    def query(self, sql: str, *params: Any) -> list[dict[str, Any]]:
        """Rows of ``sql`` (``?`` placeholders) as dicts."""
        if self.url is not None:
            sql = sql.replace("%", "%%").replace("?", "%s")
        with self._cursor() as cursor:
            cursor.execute(sql, params)
            return [dict(row) for row in cursor.fetchall()]

    def count(self, sql: str, *params: Any) -> int:
        return int(next(iter(self.query(sql, *params)[0].values())))

    def ledger_rows(self) -> list[dict[str, Any]]:
        return self.query("SELECT * FROM ledger ORDER BY seq")

    def wait_for_write_lock(self, timeout: float = 30.0) -> None:
        """Block until the server is inside a write transaction (it holds the write lock)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.url is None:
                import sqlite3

                with contextlib.closing(
                    sqlite3.connect(self.db, timeout=0, isolation_level=None)
                ) as conn:
                    try:
                        conn.execute("BEGIN IMMEDIATE")
                        conn.execute("ROLLBACK")
                    except sqlite3.OperationalError:
                        return
            elif self.count(
                "SELECT count(*) FROM pg_locks AS l JOIN pg_class AS c ON l.relation = c.oid "
                "WHERE c.relname = 'ledger' AND l.mode = 'ShareRowExclusiveLock' AND l.granted"
            ):
                return
            time.sleep(0.02)
        raise AssertionError("the server never took the write lock")


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    """The database a server process uses: a SQLite file, or a REAL PostgreSQL database."""
    if request.param == "sqlite":
        return Store(db=tmp_path / "server.db")
    return Store(db=tmp_path / "unused.db", url=request.getfixturevalue("postgres_url"))


def parse_params(entry: dict[str, Any]) -> dict[str, Any]:
    return json.loads(entry["parameters"])


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    """A labels database on both engines (a SQLite file, a REAL PostgreSQL database) with
    dataset ``x``: 100 registered examples, no labels, a budget of 1."""
    url = (
        f"sqlite:///{tmp_path / 'labels.db'}"
        if request.param == "sqlite"
        else request.getfixturevalue("postgres_url")
    )
    engine = make_engine(url)
    create_schema(engine)
    database = Database(engine)
    spec = ds.DatasetSpec(
        name="x", label_min=0.0, label_max=100.0, default_label=0.0, epsilon_budget=Decimal("1")
    )
    ds.create_dataset(database, spec, actor_role="operator")
    store_examples(database, dataset="x", example_ids=[f"e{i:03d}" for i in range(100)])
    yield database
    engine.dispose()
