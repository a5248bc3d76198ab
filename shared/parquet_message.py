"""The ONE message as a Spark job publishes it: ``header.json`` + a Parquet body.

A release executed by ``labeldp release --engine spark`` (``spark_release.job``) is a
directory::

    <out>/header.json            the same MessageHeader as the HTTP message
    <out>/body/part-*.parquet    example_id (string), noisy_label (double), sorted by example_id

``body_sha256`` covers the body in the documented order (``shared.message.body_sha256``: ids
joined by "\n", then the float64 labels), i.e. the part files in name order, rows in file
order. This module is the one definition of that layout: the job writes and hashes it
(:func:`hash_body_and_universe`), the features party reads and verifies it
(:func:`read_parquet_message`; ``features_party.parquet_message`` adds the labels party's check).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from shared.errors import IntegrityError
from shared.message import MessageHeader, check_example_id, verify

HEADER, BODY = "header.json", "body"


def body_files(directory: Path) -> list[Path]:
    """The Parquet part files of a body, in the order Spark wrote its sorted partitions."""
    return sorted(p for p in directory.glob("part-*") if p.suffix == ".parquet")


# Rows per batch read back for hashing (~4 MB of ids), and how many batches' digests may lag.
HASH_BATCH_ROWS = 1 << 18
HASH_LAG = 2


def hash_body_and_universe(directory: Path, *, n: int) -> tuple[str, str]:
    """(``shared.message.body_sha256``, ``shared.message.universe_digest``) of a written body,
    in one streamed pass (driver memory ~ a few batches).

    Checks the documented order on the way: ids strictly increasing (sorted, no duplicate) and
    exactly n rows, every label finite. The two digests run in their own threads (hashlib
    releases the GIL), each fed the batches in order while this thread reads the next: 0.6x the
    step's time on two cores (bench/results/spark_release.md).
    """
    import pyarrow.parquet as pq

    from shared.message import BodyDigest, UniverseDigest

    files = body_files(directory)

    def batches(column: str) -> Iterator[Any]:
        for path in files:
            for batch in pq.ParquetFile(path).iter_batches(
                columns=[column], batch_size=HASH_BATCH_ROWS
            ):
                yield batch.column(0)

    body, universe = BodyDigest(), UniverseDigest()
    with ThreadPoolExecutor(1) as body_thread, ThreadPoolExecutor(1) as universe_thread:
        lagging: deque[list[Future[None]]] = deque()

        def settle(keep: int) -> None:
            while len(lagging) > keep:
                for future in lagging.popleft():
                    future.result()

        for piece in _sorted_id_pieces(batches("example_id"), n=n):
            lagging.append(
                [
                    body_thread.submit(body.update, piece),
                    universe_thread.submit(universe.update, piece),
                ]
            )
            settle(HASH_LAG)
        for column in batches("noisy_label"):
            values = column.to_numpy(zero_copy_only=False)
            if not np.all(np.isfinite(values)):
                raise IntegrityError("the written body has a non-finite noisy label")
            lagging.append([body_thread.submit(body.labels, values)])
            settle(HASH_LAG)
        settle(0)
    return body.hexdigest(), universe.hexdigest()


def _sorted_id_pieces(columns: Iterable[Any], *, n: int) -> Iterator[memoryview]:
    """Each Arrow batch of ids joined by "\n" (its bytes, not copied), checked on the way: no
    null, strictly increasing across batches, exactly ``n`` ids in all."""
    import pyarrow as pa
    import pyarrow.compute as pc

    last: str | None = None
    count = 0
    for column in columns:
        if column.null_count:
            raise IntegrityError("the written body has a null example id")
        if len(column) == 0:
            continue
        increasing = (
            len(column) < 2
            or pc.all(pc.greater(column.slice(1), column.slice(0, len(column) - 1))).as_py()
        )
        if not increasing or (last is not None and not column[0].as_py() > last):
            raise IntegrityError("the written body is not sorted by example_id")
        last = column[-1].as_py()
        count += len(column)
        joined = pc.binary_join(pa.ListArray.from_arrays([0, len(column)], column), "\n")
        yield memoryview(joined[0].as_buffer())
    if count != n:
        raise IntegrityError(f"the written body has {count} rows, the plan n = {n}")


@dataclass(frozen=True, kw_only=True)
class ParquetMessage:
    """A Parquet message read back and verified: its header (and the exact bytes of
    ``header.json``), ids and noisy labels."""

    header: MessageHeader
    raw_header: bytes
    example_ids: list[str]
    noisy_labels: np.ndarray


def read_parquet_message(directory: Path | str) -> ParquetMessage:
    """Read and verify a Parquet message (else :class:`IntegrityError`): a valid header, the
    two columns, valid ids in strictly increasing order, n rows, finite labels, the body sha256."""
    import pyarrow.parquet as pq

    root = Path(directory)
    try:
        raw_header = (root / HEADER).read_bytes()
        header = MessageHeader.model_validate_json(raw_header)
    except FileNotFoundError:
        raise IntegrityError(f"{root}: no {HEADER}") from None
    except ValueError as exc:
        raise IntegrityError(f"{root}/{HEADER} is not a valid message header: {exc}") from None
    files = body_files(root / BODY)
    if not files and header.n:
        raise IntegrityError(f"{root}/{BODY}: no Parquet part files")
    ids: list[str] = []
    pieces: list[np.ndarray] = []
    for path in files:
        table = pq.read_table(path)
        if table.column_names != ["example_id", "noisy_label"]:
            raise IntegrityError(f"{path}: columns must be example_id, noisy_label")
        ids.extend(table.column("example_id").to_pylist())
        pieces.append(table.column("noisy_label").to_numpy().astype(np.float64))
    labels = np.concatenate(pieces) if pieces else np.empty(0)
    for example_id in ids:
        try:
            check_example_id(example_id)
        except ValueError as exc:
            raise IntegrityError(f"{root}: {exc}") from None
    if any(b <= a for a, b in zip(ids, ids[1:], strict=False)):
        raise IntegrityError(f"{root}: body is not sorted by example_id (or has duplicates)")
    verify(header, ids, labels)
    return ParquetMessage(
        header=header, raw_header=raw_header, example_ids=ids, noisy_labels=labels
    )
