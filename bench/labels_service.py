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

Usage: python bench/labels_service.py [--repeats 5] [--database-url URL] [--phases ingest]
       [--server-root DIR] [--write bench/results/labels_service.md]

``--server-root``: run the server from another checkout (a ``git worktree`` of an older commit)
to compare versions with the same client.
"""

from __future__ import annotations

import argparse
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
from collections.abc import Iterator
from pathlib import Path

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
        import json

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


NOTE = """\
Notes: `clear_refs` resets the peak to the current RSS, which after the first phase includes
the heap the process keeps (CPython and numpy arenas, numba code: about 350 MiB here), so the
per-phase figures are that baseline plus the phase's own growth. A release holds the ids as one
string, the labels and the noisy labels as float64 arrays and the encoded message (about 2x its
size) at once; a download streams stored 1 MiB chunks, so it adds almost nothing. JSON batches
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
    args = parser.parse_args()
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
