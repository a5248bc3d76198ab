"""Benchmark of the labels-party service against a real uvicorn process (loopback).

Measures, as medians of ``--repeats`` runs on fresh datasets:
- ingest throughput (labels/s): JSON batches of 10^4 vs one bulk CSV stream vs one bulk NDJSON
  stream, 10^6 labels each, and the same CSV sent again to the same dataset (every row
  unchanged), each next to the raw engine's own rate for the same rows in the same repeat: on
  SQLite one ``executemany`` INSERT into ``entries`` (same file, same pragmas, one transaction),
  on PostgreSQL one ``COPY`` into ``entries`` from Python (the COPY text built before the clock
  starts, so the figure is the server's alone), both committed durably;
- release latency (POST /releases: snapshot + histogram + randomizer + store + commit) at
  10^6 and 2x10^6 registered examples (half of them labelled);
- message download time (binary, streamed; JSON for comparison) at 10^6 and 2x10^6;
- peak resident memory of the server (VmHWM from /proc/<pid>/status, reset per phase through
  /proc/<pid>/clear_refs).

With ``--database-url postgresql://...`` (an empty database) the ingest phase also runs against a
second server on that PostgreSQL database, side by side with SQLite in the same run.

``--scale 1e7,1e8``: one machine at scale instead, on SQLite: per run a fresh dataset, the ids
registered in text/plain batches of ``--batch`` (10^7), every fifth labelled (CSV batches of
half that), one release, the binary message downloaded and checked against the release's
sha256; seconds and peak server RSS of each phase. ``--stages N``: where the time and memory
of a release of N ids go, in this process (snapshot, randomizer, digests, store transaction).

Usage: python bench/labels_service.py [--repeats 5] [--database-url URL] [--phases ingest]
       [--server-root DIR] [--write bench/results/labels_service.md]
       python bench/labels_service.py --scale 1e7,1e8 [--repeats 1] [--server-root DIR]
       python bench/labels_service.py --stages 1e7 [--server-root DIR]

``--server-root``: run the server from another checkout (a ``git worktree`` of an older commit)
to compare versions with the same client.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import secrets
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np

BINARY = "application/vnd.labeldp.message+binary"
TOKENS = {role: f"{role[:3]}-{secrets.token_hex(16)}" for role in ("advertiser", "publisher",
                                                                     "operator")}  # fmt: skip
ADV = {"Authorization": f"Bearer {TOKENS['advertiser']}"}
PUB = {"Authorization": f"Bearer {TOKENS['publisher']}"}
OPS = {"Authorization": f"Bearer {TOKENS['operator']}"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def vm_hwm_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def reset_peak(pid: int) -> None:
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        pass


def chunks(data: bytes, size: int = 1 << 20) -> Iterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


def ids_for(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i:08d}" for i in range(n)]


def raw_sqlite(path: Path, dataset_id: int, ids: list[str], values: list[float]) -> float:
    """Seconds for the engine alone: one executemany INSERT of the rows into ``entries`` of the
    service's own database file (WAL, synchronous=FULL, foreign keys on), committed."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=60)
    try:
        for pragma in ("journal_mode=WAL", "synchronous=FULL", "foreign_keys=ON",
                       "cache_size=-65536"):  # fmt: skip
            conn.execute(f"PRAGMA {pragma}")
        start = time.perf_counter()
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(
            "INSERT INTO entries (dataset_id, example_id, registered, value) VALUES (?, ?, 0, ?)",
            zip([dataset_id] * len(ids), ids, values, strict=True),
        )
        conn.execute("COMMIT")
        return time.perf_counter() - start
    finally:
        conn.close()


def libpq_url(database_url: str) -> str:
    """A SQLAlchemy PostgreSQL URL as libpq reads it (no ``+driver``)."""
    scheme, rest = database_url.split("://", 1)
    return f"{scheme.split('+')[0]}://{rest}"


def raw_postgres(url: str, dataset_id: int, ids: list[str], values: list[float]) -> float:
    """Seconds for the engine alone: one COPY of the rows into ``entries``, committed (the
    COPY text is built before the clock starts)."""
    import psycopg

    text = "".join(
        f"{dataset_id}\t{i}\t0\t{v!r}\n" for i, v in zip(ids, values, strict=True)
    ).encode()
    with psycopg.connect(libpq_url(url)) as conn:
        start = time.perf_counter()
        with (
            conn.cursor() as cursor,
            cursor.copy(
                "COPY entries (dataset_id, example_id, registered, value) FROM STDIN"
            ) as copy,
        ):
            for piece in chunks(text):
                copy.write(piece)
        conn.commit()
        return time.perf_counter() - start


def values_for(n: int, seed: int) -> list[float]:
    rng = np.random.default_rng(seed)
    return np.round(rng.exponential(20.0, n), 4).tolist()


class Bench:
    def __init__(
        self,
        workdir: Path,
        repeats: int,
        database_url: str | None = None,
        server_root: Path | None = None,
    ) -> None:
        self.repeats = repeats
        self.port = free_port()
        self.database_url = database_url
        self.db_path = workdir / "bench.db"
        root = (server_root or Path(__file__).resolve().parents[1]).resolve()
        env = {
            **os.environ,
            "LABELDP_TOKENS": ",".join(f"{k}={v}" for k, v in TOKENS.items()),
            "LABELDP_WARMUP": "1",
            "PYTHONPATH": str(root),
        }
        self.log = (workdir / "server.log").open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "labels_party", "serve", "labels",
             *(["--database-url", database_url,
                "--signing-key", str(workdir / "signing-key.pem")]
               if database_url else ["--db", str(self.db_path)]),
             "--port", str(self.port), "--log-level", "warning"],
            env=env, stdout=self.log, stderr=subprocess.STDOUT, cwd=root,
        )  # fmt: skip
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=600)
        deadline = time.monotonic() + 60
        while True:
            try:
                if self.http.get("/healthz").status_code == 200:
                    break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.1)
        time.sleep(5)  # let the background numba warm-up finish before timing
        self.counter = 0
        self.peaks: dict[str, float] = {}

    def close(self) -> None:
        self.http.close()
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)
        self.log.close()

    def dataset(self, budget: float = 100.0) -> str:
        self.counter += 1
        name = f"bench{self.counter}"
        body = {"name": name, "label_min": 0, "label_max": 200, "default_label": 0,
                "epsilon_budget": budget}  # fmt: skip
        response = self.http.post("/v1/datasets", json=body, headers=OPS)
        response.raise_for_status()
        return name

    def post(self, url: str, *, headers: dict[str, str], **kwargs: object) -> float:
        start = time.perf_counter()
        response = self.http.post(url, headers=headers, **kwargs)  # type: ignore[arg-type]
        elapsed = time.perf_counter() - start
        if response.status_code >= 300:
            raise RuntimeError(f"{url}: {response.status_code} {response.text[:300]}")
        return elapsed

    def phase(self, name: str) -> None:
        self.peaks[name] = vm_hwm_mib(self.proc.pid)
        reset_peak(self.proc.pid)

    # ---- ingest --------------------------------------------------------------------------

    def dataset_id(self, name: str) -> int:
        """The dataset's row id, read from its database (for the raw engine's insert)."""
        query = "SELECT id FROM datasets WHERE name = %s"
        if self.database_url is None:
            with sqlite3.connect(self.db_path) as conn:
                return int(conn.execute(query.replace("%s", "?"), (name,)).fetchone()[0])
        import psycopg

        with psycopg.connect(libpq_url(self.database_url)) as conn:
            return int(conn.execute(query, (name,)).fetchone()[0])  # type: ignore[index]

    def raw(self, ids: list[str], values: list[float]) -> float:
        """Seconds the engine alone takes to store the rows (a fresh dataset's entries)."""
        dataset_id = self.dataset_id(self.dataset())
        if self.database_url is None:
            return raw_sqlite(self.db_path, dataset_id, ids, values)
        return raw_postgres(self.database_url, dataset_id, ids, values)

    def ingest(self, n: int) -> dict[str, list[tuple[float, float]]]:
        """Per format, one (seconds, raw engine seconds of the same repeat) per repeat."""
        ids, values = ids_for("x", n), values_for(n, 1)
        batch = 10_000
        json_batches = [
            {"labels": [{"example_id": i, "value": v}
                        for i, v in zip(ids[s : s + batch], values[s : s + batch], strict=True)]}
            for s in range(0, n, batch)
        ]  # fmt: skip
        csv = (
            "example_id,value\n" + "".join(f"{i},{v!r}\n" for i, v in zip(ids, values, strict=True))
        ).encode()

        ndjson = "".join(
            json.dumps({"example_id": i, "value": v}) + "\n"
            for i, v in zip(ids, values, strict=True)
        ).encode()
        out: dict[str, list[tuple[float, float]]] = {key: [] for key in INGEST_FORMATS}
        reset_peak(self.proc.pid)
        for _ in range(self.repeats):
            raw = self.raw(ids, values)
            name = self.dataset()
            start = time.perf_counter()
            for body in json_batches:
                self.post(f"/v1/datasets/{name}/labels", headers=ADV, json=body)
            out["json batches of 10^4"].append((time.perf_counter() - start, raw))
            csv_name = self.dataset()
            for key, name, content_type, body in (
                ("bulk CSV stream", csv_name, "text/csv", csv),
                ("same CSV re-sent (unchanged)", csv_name, "text/csv", csv),
                (CHANGED, csv_name, "text/csv", csv),
                ("bulk NDJSON stream", self.dataset(), "application/x-ndjson", ndjson),
            ):
                if key == CHANGED:  # one more label: a new data version, so every row is compared
                    one = {"labels": [{"example_id": "another", "value": 1.0}]}
                    self.post(f"/v1/datasets/{name}/labels", headers=ADV, json=one)
                elapsed = self.post(
                    f"/v1/datasets/{name}/labels",
                    headers={**ADV, "content-type": content_type},
                    content=chunks(body),
                )
                out[key].append((elapsed, raw))
        self.phase(f"ingest 10^{int(np.log10(n))}")
        return out

    # ---- release and download -------------------------------------------------------------

    def release_and_download(self, n: int, label: str) -> dict[str, list[float]]:
        ids, values = ids_for("r", n), values_for(n // 2, 2)
        plain = "\n".join(ids).encode()
        csv = (
            "example_id,value\n"
            + "".join(f"{i},{v!r}\n" for i, v in zip(ids[::2], values, strict=True))
        ).encode()
        out: dict[str, list[float]] = {"register (text/plain)": [], "release": [],
                                       "download binary": [], "download JSON": [],
                                       "binary MiB": []}  # fmt: skip
        for repeat in range(self.repeats):
            name = self.dataset()
            out["register (text/plain)"].append(
                self.post(f"/v1/datasets/{name}/examples",
                          headers={**PUB, "content-type": "text/plain"}, content=chunks(plain))
            )  # fmt: skip
            self.post(f"/v1/datasets/{name}/labels", headers={**ADV, "content-type": "text/csv"},
                      content=chunks(csv))  # fmt: skip
            reset_peak(self.proc.pid)
            start = time.perf_counter()
            response = self.http.post(
                f"/v1/datasets/{name}/releases",
                json={"mechanism": "rpwithprior", "epsilon": 2.0},
                headers=ADV,
            )
            out["release"].append(time.perf_counter() - start)
            response.raise_for_status()
            self.peaks[f"release {label} (repeat {repeat + 1})"] = vm_hwm_mib(self.proc.pid)
            rid = response.json()["id"]
            reset_peak(self.proc.pid)
            for kind, accept in (
                ("download binary", BINARY),
                ("download JSON", "application/json"),
            ):
                start = time.perf_counter()
                size = 0
                with self.http.stream("GET", f"/v1/releases/{rid}/message",
                                      headers={**PUB, "accept": accept}) as stream:  # fmt: skip
                    stream.raise_for_status()
                    for piece in stream.iter_raw():
                        size += len(piece)
                out[kind].append(time.perf_counter() - start)
                if kind == "download binary":
                    out["binary MiB"].append(size / 2**20)
            self.peaks[f"download {label} (repeat {repeat + 1})"] = vm_hwm_mib(self.proc.pid)
        return out

    # ---- one machine at scale (10^7, 10^8 ids) ---------------------------------------------

    def scale(self, n: int, *, batch: int, labelled_every: int = 5) -> dict[str, float]:
        """One end-to-end run at ``n`` ids, ``1 / labelled_every`` of them labelled: seconds and
        peak server RSS (MiB) of each phase, and the binary message's size and check.

        The ids are registered as text/plain batches of ``batch`` ids (the body limit is 1 GiB,
        and the parser holds a batch's ids), the labels sent as CSV batches of ``batch / 2``
        rows; each body is built before its clock starts. The binary message is streamed and
        hashed by the client, and its sha256 compared with the release's ``binary_sha256``.
        """
        name = self.dataset()
        out: dict[str, float] = {"n": float(n)}
        reset_peak(self.proc.pid)
        out["register s"] = 0.0
        for start in range(0, n, batch):
            body = id_lines(start, min(n, start + batch))
            out["register s"] += self.post(
                f"/v1/datasets/{name}/examples",
                headers={**PUB, "content-type": "text/plain"},
                content=chunks(body),
            )
        out["register MiB"] = vm_hwm_mib(self.proc.pid)
        reset_peak(self.proc.pid)
        out["labels s"] = 0.0
        rng = np.random.default_rng(3)
        step = max(batch // 2, 1) * labelled_every
        for start in range(0, n, step):
            body = label_csv(start, min(n, start + step), labelled_every, rng)
            out["labels s"] += self.post(
                f"/v1/datasets/{name}/labels",
                headers={**ADV, "content-type": "text/csv"},
                content=chunks(body),
            )
        out["labels MiB"] = vm_hwm_mib(self.proc.pid)
        reset_peak(self.proc.pid)
        start_time = time.perf_counter()
        response = self.http.post(
            f"/v1/datasets/{name}/releases",
            json={"mechanism": "rpwithprior", "epsilon": 2.0},
            headers=ADV,
        )
        out["release s"] = time.perf_counter() - start_time
        response.raise_for_status()
        out["release MiB"] = vm_hwm_mib(self.proc.pid)
        release = response.json()
        reset_peak(self.proc.pid)
        digest, size = hashlib.sha256(), 0
        start_time = time.perf_counter()
        with self.http.stream("GET", f"/v1/releases/{release['id']}/message",
                              headers={**PUB, "accept": BINARY}) as stream:  # fmt: skip
            stream.raise_for_status()
            for piece in stream.iter_raw():
                digest.update(piece)
                size += len(piece)
        out["download s"] = time.perf_counter() - start_time
        out["download MiB"] = vm_hwm_mib(self.proc.pid)
        out["binary MiB"] = size / 2**20
        if digest.hexdigest() != release["binary_sha256"] or size != release["binary_size"]:
            raise RuntimeError("the downloaded message does not match its release's sha256")
        return out


def id_lines(start: int, stop: int, prefix: bytes = b"r", width: int = 9) -> bytes:
    """Ids ``r000000000``... for ``start <= i < stop``, one per line (built by numpy)."""
    index = np.arange(start, stop, dtype=np.int64)
    out = np.empty((index.size, len(prefix) + width + 1), dtype=np.uint8)
    out[:, : len(prefix)] = np.frombuffer(prefix, dtype=np.uint8)
    for k in range(width):
        out[:, len(prefix) + width - 1 - k] = 48 + (index // 10**k) % 10
    out[:, -1] = ord("\n")
    return out.tobytes()


def label_csv(start: int, stop: int, every: int, rng: np.random.Generator) -> bytes:
    """CSV labels of every ``every``-th id in ``[start, stop)`` (exponential, 4 decimals)."""
    first = -(-start // every) * every  # the first multiple of ``every`` from ``start``
    names = id_lines(first, stop).split(b"\n")[:-1][::every]
    values = np.round(rng.exponential(20.0, len(names)), 4).tolist()
    return b"example_id,value\n" + b"".join(
        b"%s,%r\n" % (name, value) for name, value in zip(names, values, strict=True)
    )


NOTE = """\
Notes: `clear_refs` resets the peak to the current RSS, which after the first phase includes
the heap the process keeps (CPython and numpy arenas, numba code: about 350 MiB here), so the
per-phase figures are that baseline plus the phase's own growth. A release holds the ids as bytes
(one piece per fetched batch, never joined), the labels as a float64 array and what the
randomizer allocates; the binary message is built and stored one 1 MiB chunk at a time, and a
download streams the stored chunks, so neither adds more than a chunk. JSON batches
are slower than the bulk streams because each request is parsed whole and committed (fsync) on
its own; the bulk streams are parsed chunk by chunk as they arrive and stored as one batch.
"""


POSTGRES_NOTE = """\
PostgreSQL (Debian's server, on a Unix socket, default durability: fsync and synchronous_commit
on) takes a batch into an empty dataset by one binary `COPY` straight into `entries`; any other
batch by one binary `COPY` into a temporary staging table, one read that counts the unchanged
and contradicting rows (when the dataset has labels), and one statement that moves the rest:
`INSERT ... SELECT ... ON CONFLICT` (an index probe per row) when the batch is smaller than its
dataset, one update-join and one anti-join when it is larger (`labels_party/intake/ingest.py`).
"""


CHANGED = "same CSV re-sent after one other label (compared row by row)"
INGEST_FORMATS = (
    "json batches of 10^4",
    "bulk CSV stream",
    "same CSV re-sent (unchanged)",
    CHANGED,
    "bulk NDJSON stream",
)


def median(values: list[float]) -> float:
    return statistics.median(values)


def ingest_table(n: int, runs: dict[str, list[tuple[float, float]]], engine: str) -> list[str]:
    """Rates next to the raw engine's rate of the same repeat; the ratio is taken per repeat."""
    lines = [
        f"| format | labels/s (median) | raw {engine} labels/s (median) | ratio to raw "
        "(median of per-repeat ratios) | runs (labels/s) |",
        "|---|---:|---:|---:|---|",
    ]
    for name, pairs in runs.items():
        rates = [n / seconds for seconds, _ in pairs]
        raws = [n / raw for _, raw in pairs]
        ratio = median([raw / seconds for seconds, raw in pairs])
        all_runs = ", ".join(f"{r:,.0f}" for r in rates)
        lines.append(
            f"| {name} | {median(rates):,.0f} | {median(raws):,.0f} | {ratio:.2f} | {all_runs} |"
        )
    first = [seconds for seconds, _ in runs["bulk CSV stream"]]
    again = [seconds for seconds, _ in runs["same CSV re-sent (unchanged)"]]
    compared = [seconds for seconds, _ in runs[CHANGED]]
    resent = median([b / a for a, b in zip(first, again, strict=True)])
    row_by_row = median([b / a for a, b in zip(first, compared, strict=True)])
    lines += [
        "",
        f"Re-sent CSV / first CSV (time, median of per-repeat ratios): {resent:.2f}; "
        f"re-sent after one other label: {row_by_row:.2f} (goal <= 1). Bulk CSV / raw {engine}: "
        f"{median([raw / s for s, raw in runs['bulk CSV stream']]):.2f} (goal >= 0.8).",
    ]
    return lines


def self_hwm_mib() -> float:
    """This process's peak RSS since the last :func:`reset_peak` (MiB)."""
    return vm_hwm_mib(os.getpid())


def _stage_ingest(db_url: str, n: int, batch: int, send: Any) -> None:
    """``--stages``, in a child process: create the dataset, register ``n`` ids and label every
    fifth through the store functions; sends the seconds and peak RSS of each."""
    from decimal import Decimal

    from labels_party.catalog import datasets as ds
    from labels_party.db.engine import Database, create_schema, make_engine
    from labels_party.intake import ingest
    from labels_party.intake.parsing import LabelRows

    db = Database(make_engine(db_url))
    create_schema(db.engine)
    for name in ("b", "w"):  # "w": two examples, for the warm-up release
        spec = ds.DatasetSpec(name=name, label_min=0, label_max=200, default_label=0,
                              epsilon_budget=Decimal(100))  # fmt: skip
        ds.create_dataset(db, spec, actor_role="operator")
    ingest.store_examples(db, dataset="w", example_ids=["a", "b"])
    out = {"register s": 0.0, "labels s": 0.0}
    rng = np.random.default_rng(3)
    reset_peak(os.getpid())
    for start in range(0, n, batch):
        ids = id_lines(start, min(n, start + batch)).decode().split()
        begin = time.perf_counter()
        ingest.store_examples(db, dataset="b", example_ids=ids)
        out["register s"] += time.perf_counter() - begin
        labelled = ids[::5]
        rows = LabelRows(example_ids=labelled,
                         values=np.round(rng.exponential(20.0, len(labelled)), 4))  # fmt: skip
        begin = time.perf_counter()
        ingest.store_labels(db, dataset="b", rows=rows, overwrite=False)
        out["labels s"] += time.perf_counter() - begin
        del ids, labelled, rows
    out["ingest MiB"] = self_hwm_mib()
    db.dispose()
    send.send(out)


def run_stages(n: int, batch: int, root: Path | None) -> dict[str, float]:
    """``--stages``: where a release's time and memory go, in this process (no HTTP).

    A child process registers ``n`` ids and labels every fifth through the store functions
    (so this process's memory is the release's alone); then this process releases with each
    stage of ``ReleaseService`` timed by wrapping it: the snapshot (reading the universe), the
    randomizer, the body digest, the write transaction (spend and store the chunks); the rest
    is building the header and the binary message's digest. Each stage's peak RSS is measured
    from a peak reset at its start (so it includes what earlier stages still hold). ``root``:
    the checkout whose service code runs (imported from there).
    """
    if root is not None:
        sys.path.insert(0, str(root.resolve()))
    import multiprocessing
    from contextlib import contextmanager
    from decimal import Decimal

    from labels_party.db.engine import Database, make_engine
    from labels_party.releasing import releases
    from shared.plan import ReleaseRequest

    out: dict[str, float] = {"n": float(n)}

    def timed(key: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            reset_peak(os.getpid())
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                out[f"{key} s"] = out.get(f"{key} s", 0.0) + time.perf_counter() - start
                out[f"{key} MiB"] = max(out.get(f"{key} MiB", 0.0), self_hwm_mib())

        return wrapper

    with tempfile.TemporaryDirectory() as tmp:
        db_url = f"sqlite:///{tmp}/stages.db"
        context = multiprocessing.get_context("fork")
        receive, send = context.Pipe(duplex=False)
        child = context.Process(target=_stage_ingest, args=(db_url, n, batch, send))
        child.start()
        out.update(receive.recv())
        child.join()
        db = Database(make_engine(db_url))
        service = releases.ReleaseService(db)
        request = ReleaseRequest(epsilon=Decimal(2), mechanism="rpwithprior")
        # A first release of a tiny dataset compiles the randomizer's kernels (as the
        # service's warm-up does), so the timed release runs compiled code.
        service.create(dataset="w", request=request, actor_role="advertiser")
        service._randomizer = timed("randomize", service._randomizer)  # type: ignore[method-assign]
        service._snapshot = timed("snapshot", service._snapshot)  # type: ignore[method-assign]
        digest_name = "body_digest" if hasattr(releases, "body_digest") else "body_sha256"
        setattr(releases, digest_name, timed("body digest", getattr(releases, digest_name)))
        write = db.write

        @contextmanager
        def timed_write() -> Iterator[Any]:
            start = time.perf_counter()
            with write() as conn:
                yield conn
            out["store transaction s"] = time.perf_counter() - start

        db.write = timed_write  # type: ignore[method-assign]
        reset_peak(os.getpid())
        out["before release MiB"] = self_hwm_mib()
        timed("release", service.create)(dataset="b", request=request, actor_role="advertiser")
        db.dispose()
    # Each stage reset the peak at its start: the release's own is the highest of theirs.
    stages = ("snapshot", "randomize", "body digest", "release")
    out["release MiB"] = max(out[f"{key} MiB"] for key in stages)
    known = sum(out[f"{key} s"] for key in stages[:3])
    out["header and binary digest s"] = out["release s"] - known - out["store transaction s"]
    return out


SCALE_KEYS = ("register", "labels", "release", "download")


def ids_label(n: int) -> str:
    """``10^k`` for a power of ten, else ``n`` with thousands separators."""
    power = len(str(n)) - 1
    return f"10^{power}" if n == 10**power else f"{n:,}"


def run_scale(sizes: list[int], repeats: int, batch: int, server_root: Path | None) -> int:
    """``--scale``: each size ``repeats`` times on one server (a fresh dataset each run), then
    a markdown table of medians (seconds and peak server RSS per phase) and every run."""
    runs: dict[int, list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        bench = Bench(Path(tmp), repeats, server_root=server_root)
        try:
            for n in sizes:
                for _ in range(repeats):
                    result = bench.scale(n, batch=batch)
                    print(json.dumps(result), flush=True)
                    runs.setdefault(n, []).append(result)
        finally:
            bench.close()
    header = " | ".join(f"{key} s | {key} peak MiB" for key in SCALE_KEYS)
    lines = [
        f"| ids | runs | {header} | binary MiB |",
        "|---|---:|" + "---:|" * (2 * len(SCALE_KEYS) + 1),
    ]
    for n, results in runs.items():
        cells = " | ".join(
            f"{median([r[f'{key} s'] for r in results]):.1f} | "
            f"{median([r[f'{key} MiB'] for r in results]):.0f}"
            for key in SCALE_KEYS
        )
        size = median([r["binary MiB"] for r in results])
        lines.append(f"| {ids_label(n)} | {len(results)} | {cells} | {size:.0f} |")
    lines += ["", "All runs (s):", ""]
    for n, results in runs.items():
        for key in SCALE_KEYS:
            values = ", ".join(f"{r[f'{key} s']:.2f}" for r in results)
            lines.append(f"- {ids_label(n)} {key}: {values}")
    print("\n".join(lines))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--ingest-n", type=int, default=1_000_000)
    parser.add_argument("--write", type=Path, help="write the markdown results here")
    parser.add_argument(
        "--database-url", help="also measure ingest on this (empty) PostgreSQL database"
    )
    parser.add_argument(
        "--phases", default="ingest,release", help="comma-separated: ingest, release"
    )
    parser.add_argument("--server-root", type=Path, help="run the server's code from this checkout")
    parser.add_argument(
        "--scale",
        help="comma-separated id counts (e.g. 1e7,1e8): register, label 20%%, release and "
        "download at each, --repeats times, on SQLite; then exit",
    )
    parser.add_argument("--batch", type=float, default=1e7, help="ids per request at --scale")
    parser.add_argument(
        "--stages",
        type=float,
        help="in this process: time and peak memory of each stage of a release of this many ids",
    )
    args = parser.parse_args()
    if args.stages:
        stages = run_stages(int(args.stages), int(args.batch), args.server_root)
        print(json.dumps(stages, indent=1))
        return 0
    if args.scale:
        sizes = [int(float(size)) for size in args.scale.split(",")]
        return run_scale(sizes, args.repeats, int(args.batch), args.server_root)
    phases = set(args.phases.split(","))
    postgres: dict[str, list[tuple[float, float]]] = {}
    if args.database_url and "ingest" in phases:
        with tempfile.TemporaryDirectory() as tmp:
            bench = Bench(Path(tmp), args.repeats, args.database_url, args.server_root)
            try:
                postgres = bench.ingest(args.ingest_n)
            finally:
                bench.close()
    ingest: dict[str, list[tuple[float, float]]] = {}
    releases: dict[str, dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        bench = Bench(Path(tmp), args.repeats, server_root=args.server_root)
        try:
            if "ingest" in phases:
                ingest = bench.ingest(args.ingest_n)
            if "release" in phases:
                releases = {
                    "10^6": bench.release_and_download(1_000_000, "10^6"),
                    "2x10^6": bench.release_and_download(2_000_000, "2x10^6"),
                }
            overall_peak = max(bench.peaks.values(), default=float("nan"))
        finally:
            bench.close()
    lines = [
        "# Labels-party service benchmark",
        "",
        f"`python bench/labels_service.py --repeats {args.repeats}` against a real uvicorn process "
        "on loopback (one worker, SQLite WAL file, synchronous=FULL, CSPRNG randomness).",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}."
        " Client and server share the machine. Medians of the repeats (all runs in brackets).",
    ]
    if ingest:
        lines += ["", f"## Ingest, SQLite ({args.ingest_n:,} labels per run)", ""]
        lines += ingest_table(args.ingest_n, ingest, "SQLite executemany")
    if postgres:
        lines += ["", f"## Ingest, PostgreSQL ({args.ingest_n:,} labels per run)", ""]
        lines += ingest_table(args.ingest_n, postgres, "PostgreSQL COPY")
        lines += ["", POSTGRES_NOTE]
    if not releases:
        print("\n".join(lines))
        return 0
    lines += [
        "",
        "## Release and download (half the examples labelled, RPWithPrior, epsilon = 2)",
        "",
        "| n | register ids (s) | release (s) | download binary (s) | binary MiB | "
        "download JSON (s) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for label, out in releases.items():
        lines.append(
            f"| {label} | {median(out['register (text/plain)']):.2f} | {median(out['release']):.2f}"
            f" | {median(out['download binary']):.2f} | {median(out['binary MiB']):.1f} | "
            f"{median(out['download JSON']):.2f} |"
        )
    lines += ["", "All runs (s):", ""]
    for label, out in releases.items():
        for key in ("release", "download binary", "download JSON"):
            lines.append(f"- {label} {key}: " + ", ".join(f"{v:.3f}" for v in out[key]))
    release_ok = median(releases["10^6"]["release"]) < 2.0
    download_ok = median(releases["2x10^6"]["download binary"]) < 2.0
    lines += [
        "",
        f"Target release of 10^6 < 2 s: {'met' if release_ok else 'NOT met'}; "
        f"binary download of 2x10^6 < 2 s: {'met' if download_ok else 'NOT met'}.",
        "",
        "## Peak server memory (VmHWM, MiB; peak reset before each phase)",
        "",
        "| phase | peak RSS (MiB) |",
        "|---|---:|",
    ]
    for phase, mib in bench.peaks.items():
        lines.append(f"| {phase} | {mib:.0f} |")
    lines += ["", f"Overall peak: {overall_peak:.0f} MiB.", "", NOTE]
    text = "\n".join(lines)
    print(text)
    if args.write:
        args.write.parent.mkdir(parents=True, exist_ok=True)
        args.write.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
