"""Benchmark of the labels-party service against a real uvicorn process (loopback).

Measures, as medians of ``--repeats`` runs on fresh datasets:
- ingest throughput (labels/s): JSON batches of 10^4 vs one bulk CSV stream vs one bulk NDJSON
  stream, 10^6 labels each;
- release latency (POST /releases: snapshot + histogram + randomizer + store + commit) at
  10^6 and 2x10^6 registered examples (half of them labelled);
- message download time (binary, streamed; JSON for comparison) at 10^6 and 2x10^6;
- peak resident memory of the server (VmHWM from /proc/<pid>/status, reset per phase through
  /proc/<pid>/clear_refs).

With ``--database-url postgresql://...`` (an empty database) the ingest phase also runs against a
second server on that PostgreSQL database, side by side with SQLite in the same run.

Usage: python bench/labels_service.py [--repeats 3] [--database-url URL]
       [--write bench/results/labels_service.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import secrets
import signal
import socket
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


def values_for(n: int, seed: int) -> list[float]:
    rng = np.random.default_rng(seed)
    return np.round(rng.exponential(20.0, n), 4).tolist()


class Bench:
    def __init__(self, workdir: Path, repeats: int, database_url: str | None = None) -> None:
        self.repeats = repeats
        self.port = free_port()
        env = {
            **os.environ,
            "LABELDP_TOKENS": ",".join(f"{k}={v}" for k, v in TOKENS.items()),
            "LABELDP_WARMUP": "1",
        }
        self.log = (workdir / "server.log").open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "labels_party", "serve", "labels",
             *(["--database-url", database_url,
                "--signing-key", str(workdir / "signing-key.pem")]
               if database_url else ["--db", str(workdir / "bench.db")]),
             "--port", str(self.port), "--log-level", "warning"],
            env=env, stdout=self.log, stderr=subprocess.STDOUT,
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

    def ingest(self, n: int) -> dict[str, list[float]]:
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
        rates: dict[str, list[float]] = {"json batches of 10^4": [], "bulk CSV stream": [],
                                         "bulk NDJSON stream": []}  # fmt: skip
        reset_peak(self.proc.pid)
        for _ in range(self.repeats):
            name = self.dataset()
            start = time.perf_counter()
            for body in json_batches:
                self.post(f"/v1/datasets/{name}/labels", headers=ADV, json=body)
            rates["json batches of 10^4"].append(n / (time.perf_counter() - start))
            for key, content_type, body in (
                ("bulk CSV stream", "text/csv", csv),
                ("bulk NDJSON stream", "application/x-ndjson", ndjson),
            ):
                elapsed = self.post(
                    f"/v1/datasets/{self.dataset()}/labels",
                    headers={**ADV, "content-type": content_type},
                    content=chunks(body),
                )
                rates[key].append(n / elapsed)
        self.phase(f"ingest 10^{int(np.log10(n))}")
        return rates

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
its own; the bulk streams are parsed chunk by chunk as they arrive and stored with one
`executemany` per batch.
"""


POSTGRES_NOTE = """\
PostgreSQL (Debian's server, on a Unix socket, default durability: fsync and synchronous_commit
on) stores each batch with one `COPY` into a temporary staging table and one statement
(`labels_party/ingest.py`): `INSERT ... SELECT ... ON CONFLICT` (an index probe per row) when the
batch is smaller than its dataset, so a batch costs the same however large the dataset grows;
one update-join and one anti-join for a larger batch (a first bulk load), which read the
dataset's rows once. What is left is mostly PostgreSQL's per-row foreign-key check of
`entries.dataset_id` and the durable commit of each batch.
"""


def median(values: list[float]) -> float:
    return statistics.median(values)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--ingest-n", type=int, default=1_000_000)
    parser.add_argument("--write", type=Path, help="write the markdown results here")
    parser.add_argument(
        "--database-url", help="also measure ingest on this (empty) PostgreSQL database"
    )
    args = parser.parse_args()
    postgres: dict[str, list[float]] = {}
    if args.database_url:
        with tempfile.TemporaryDirectory() as tmp:
            bench = Bench(Path(tmp), args.repeats, args.database_url)
            try:
                postgres = bench.ingest(args.ingest_n)
            finally:
                bench.close()
    with tempfile.TemporaryDirectory() as tmp:
        bench = Bench(Path(tmp), args.repeats)
        try:
            ingest = bench.ingest(args.ingest_n)
            releases = {
                "10^6": bench.release_and_download(1_000_000, "10^6"),
                "2x10^6": bench.release_and_download(2_000_000, "2x10^6"),
            }
            overall_peak = max(bench.peaks.values())
        finally:
            bench.close()
    lines = [
        "# Labels-party service benchmark",
        "",
        f"`python bench/labels_service.py --repeats {args.repeats}` against a real uvicorn process "
        "on loopback (one worker, SQLite WAL file, synchronous=FULL, CSPRNG randomness).",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}."
        " Client and server share the machine. Medians of the repeats (all runs in brackets).",
        "",
        f"## Ingest ({args.ingest_n:,} labels per run)",
        "",
        "| format | labels/s (median) | runs |",
        "|---|---:|---|",
    ]
    for name, rates in ingest.items():
        runs = ", ".join(f"{r:,.0f}" for r in rates)
        lines.append(f"| {name} | {median(rates):,.0f} | {runs} |")
    target_ok = median(ingest["bulk CSV stream"]) >= 200_000
    lines += [
        "",
        f"Target bulk ingest >= 200,000 labels/s: {'met' if target_ok else 'NOT met'}.",
    ]
    if postgres:
        lines += [
            "",
            "### Same ingest, SQLite vs PostgreSQL (same run, same machine)",
            "",
            "| format | SQLite labels/s | PostgreSQL labels/s | PostgreSQL runs |",
            "|---|---:|---:|---|",
        ]
        for name, rates in postgres.items():
            runs = ", ".join(f"{r:,.0f}" for r in rates)
            lines.append(
                f"| {name} | {median(ingest[name]):,.0f} | {median(rates):,.0f} | {runs} |"
            )
        lines += ["", POSTGRES_NOTE]
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
