"""The release as a Spark job: the same plan, the same engine, the same ledger, at 10^8+ labels.

Implements the release of ``labels_party.releasing.releases`` (Ghazi et al. 2022 Alg. 3 / Liu &
Huang Alg. 4 through ``shared.randomizer``) where the advertiser's conversions live, in Spark:

1. Read the dataset's public configuration (bounds, default label, budget) from the labels
   party; check both inputs' columns (no scan), n (the files' row counts), the plan and budget.
2. ONE shuffle: the union of both inputs, range partitioned by example id and aggregated per id
   in place: each id of the universe with its label (missing -> the default label, clipped to
   the bounds) and how many times each input holds it, sorted by id (the message's order).
3. Check the joined frame in the JVM (its first action, which also fills its persisted copy):
   the inputs' faults (null or malformed ids, duplicate ids in either input, labelled ids
   outside the universe: each distinct id checked once) and its row count; eight integers reach
   the driver, which refuses a faulty input. Only then, the ids being valid, ONE Python pass
   over the checked frame's label column (not the input again, which may have changed since)
   refuses null or non-finite labels and computes ``shared.randomizer.LabelCounts`` (k integer
   histogram counts and the DP mean's integer level sum): k + 3 integers per partition reach
   the driver, never a label. Every refusal comes BEFORE anything is randomized or spent.
4. Charge: ``POST /v1/datasets/{name}/external-releases`` with the plan, n and a release id
   the job chose, BEFORE any noise is drawn (the labels party recomputes the plan, checks the
   budget and records the release as ``charged`` with its two ledger entries in one
   transaction). The staging directory ``<out>.staging`` (0700) holds what it charged.
5. On the driver, ONCE: ``noisy_prior_from_counts`` (the engine's exact discrete Laplace
   samplers, OS CSPRNG) and ``choose_randomizer`` from the plan of ``shared.plan.ReleaseRequest``,
   the same functions the service runs.
6. Randomize each partition with the chosen mechanism's vectorised ``randomize`` (a
   non-deterministic iterator UDF: the label column in Arrow batches through numba, the ids stay
   in the JVM) and the OS CSPRNG inside each executor; write the result EXACTLY ONCE to
   ``<out>.staging/body`` (Parquet: ``example_id``, ``noisy_label``). Spark re-runs a task that
   fails; only the attempt that commits its files is kept (anything else left in ``body`` is
   deleted), and the files are never recomputed: every later step reads them back. A seeded
   mode (``seed``; per-partition, per-attempt seeds) exists for tests only.
7. Hash the written body in the documented order (``shared.message.body_sha256`` over the rows
   sorted by example id, as the service's message), write ``header.json`` (the same header
   schema as the HTTP message) and ``publication.json`` into staging.
8. Publish: ``POST .../external-releases/{id}/publication`` (the header must be what the charged
   plan produces, the universe the dataset's), then commit: rename ``<out>.staging`` to ``<out>``,
   delete the job's own records (``charge.json``, ``publication.json``), open it (0755): the
   message is ``header.json`` and ``body`` alone.

So no noisy output exists anywhere, staging included, before a ledger entry paid for it. A job
that fails after the charge marks the release ``failed`` (``.../failure``: the charge stays)
and deletes its staging directory. After a crash, ``--resume`` publishes and commits a fully
staged message (replaying the publication, which the labels party answers without recording it
twice) without randomizing again; a crash before the message was staged cannot be resumed (the
noise may have been drawn): ``--resume`` marks that release failed and removes its staging. A
crash during the commit (after the rename) leaves ``<out>`` private: ``--resume`` checks the
release is published with that header and finishes the commit.
Privacy: as the service's release (``shared.randomizer``): the epsilon1 noise is drawn once from
exact sums; the randomizer is applied once per published label.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np

from shared import epsilon as amounts
from shared.budget import Budget
from shared.domain import LabelDomain
from shared.errors import IntegrityError, LabelDPError
from shared.message import (
    EXAMPLE_ID_MAX_LENGTH,
    EXAMPLE_ID_PATTERN,
    MessageHeader,
    header_for,
    json_safe,
    new_release_id,
)
from shared.parquet_message import BODY, HEADER, body_files, hash_body_and_universe
from shared.plan import AUTO, ReleasePlan, ReleaseRequest
from shared.randomizer import (
    LabelCounts,
    LabelMechanism,
    NoisyPrior,
    choose_randomizer,
    describe,
    noisy_prior_from_counts,
)
from shared.rng import Rng, SystemRandom
from shared.service.client import LabelsPartyClient, ServiceError, _segment
from shared.service.files import write_whole
from spark_release import DRIVER_JAVA_OPTIONS, DRIVER_MEMORY

CHARGE = "charge.json"  # in staging: the charge the labels party recorded (or may have)
PUBLICATION = "publication.json"  # in staging beside the message: what --resume replays
# The job's own files in staging (0700 until published), written whole by a temporary file and a
# rename (``shared.service.files``); readable by all once the folder opens (0755).
PUBLISHED_FILE_MODE = 0o644
# Test hooks (never set in production): stop the job at a step, as a crash would.
CRASH_POINTS = ("after_charge", "before_publish", "after_publish", "after_rename")


class SparkJobError(LabelDPError):
    """A refusal of the job (bad input, budget, staging state); nothing was spent."""


class SimulatedCrash(RuntimeError):
    """Raised by the test hook ``crash_at``."""


@dataclass(frozen=True, kw_only=True)
class JobConfig:
    """What ``labeldp release --engine spark`` was asked to do."""

    dataset: str
    labels_url: str
    token: str
    examples: str
    labels: str
    epsilon: Decimal
    out: Path
    mechanism: str = AUTO
    epsilon_histogram: Decimal | None = None
    params: dict[str, Any] = field(default_factory=dict)  # bins, model_dim, mechanism options
    master: str = "local[*]"
    driver_memory: str = DRIVER_MEMORY
    resume: bool = False
    id_column: str = "example_id"
    value_column: str = "value"
    # Tests and benchmarks only: seeded randomness, an injected first-attempt failure of one
    # randomizing task, a simulated crash.
    seed: int | None = None
    fail_first_attempt: bool = False
    crash_at: str | None = None

    @property
    def staging(self) -> Path:
        return self.out.with_name(self.out.name + ".staging")


@dataclass(frozen=True, kw_only=True)
class JobResult:
    release: dict[str, Any]
    out: Path
    header: MessageHeader
    timings: dict[str, float] = field(default_factory=dict)


def input_digest(source: str) -> str | None:
    """sha256 of a local input (a file, or a directory's files by relative path, sorted): what
    names the labels a release read; None for a table name or a remote path."""
    root = Path(source)
    if not root.exists():
        return None
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    digest = hashlib.sha256(b"labeldp-input-v1\n")
    for path in files:
        if path.name.startswith((".", "_")):  # Spark's _SUCCESS and .crc side files
            continue
        name = path.name if path == root else path.relative_to(root).as_posix()
        digest.update(name.encode("utf-8") + b"\n")
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def charge_body(config: JobConfig, plan: ReleasePlan, *, release_id: str) -> dict[str, Any]:
    """The ``external-releases`` charge: the request, the job's release id, n and its plan."""
    return {
        "mechanism": config.mechanism,
        "epsilon": amounts.text(config.epsilon),
        **(
            {"epsilon_histogram": amounts.text(config.epsilon_histogram)}
            if config.epsilon_histogram is not None
            else {}
        ),
        "params": dict(config.params),
        "release_id": release_id,
        "n": plan.n,
        **({"labels_sha256": labels} if (labels := input_digest(config.labels)) else {}),
        "plan": json_safe(plan.public()),
    }


def publication_body(header: MessageHeader, *, universe_sha256: str) -> dict[str, Any]:
    """The publication of a charged release (what ``--resume`` replays); ``universe_sha256``:
    the digest of the body's sorted ids (``shared.message.UniverseDigest``), which binds the
    release to the dataset's universe."""
    return {"universe_sha256": universe_sha256, "header": json.loads(header.model_dump_json())}


def make_plan(config: JobConfig, info: dict[str, Any], *, n: int) -> ReleasePlan:
    """The plan exactly as the labels party computes it (``releases.plan_for``)."""
    request = ReleaseRequest.from_params(
        config.params,
        epsilon=config.epsilon,
        mechanism=config.mechanism,
        epsilon_histogram=config.epsilon_histogram,
    )
    return request.plan(n=n, lo=float(info["label_min"]), hi=float(info["label_max"]))


def check_budget(info: dict[str, Any], plan: ReleasePlan) -> None:
    """Refuse a release the dataset's budget cannot pay (``shared.budget``, on the dataset's
    view; checked again at the spend)."""
    budget = Budget.from_public(info)
    if not budget.fits(plan.epsilon):
        raise SparkJobError(
            f"budget too small: dataset {info['name']!r} has spent {amounts.text(budget.spent)} "
            f"of {amounts.text(budget.budget)}; this release needs {amounts.text(plan.epsilon)}"
        )


def build_header(
    *,
    plan: ReleasePlan,
    info: dict[str, Any],
    release_id: str,
    mechanism: str,
    randomizer: LabelMechanism,
    measured: NoisyPrior,
    body_sha256: str,
) -> MessageHeader:
    """The message header, written by the same function as the service's (``header_for``)."""
    return header_for(
        describe(plan, measured, mechanism, randomizer, np.empty(0)),
        release_id=release_id,
        dataset=info["name"],
        default_label=float(info["default_label"]),
        n=plan.n,
        body_sha256=body_sha256,
        created=datetime.now(UTC),
    )


# ---- the body: writing once, reading back, hashing ------------------------------------------


def _hashed(directory: Path, *, n: int) -> tuple[str, str]:
    """``shared.parquet_message.hash_body_and_universe``, a fault refused as the job's own."""
    try:
        return hash_body_and_universe(directory, n=n)
    except IntegrityError as exc:
        raise SparkJobError(str(exc)) from None


# ---- Spark --------------------------------------------------------------------------------


# Rows per Arrow batch handed to the Python passes (Spark's default is 10,000): each batch costs
# a fixed Python + numba call overhead, so larger batches raise the randomizing stage's rate
# (measured side by side in bench/results/spark_release.md); a batch of 2^17 rows is ~3 MiB.
ARROW_BATCH_ROWS = 131_072


def spark_session(master: str, conf: dict[str, str] | None = None) -> Any:
    """A SparkSession for the job (Arrow on, large Arrow batches, no speculative duplicate
    tasks, the joining pass's plan below, :data:`DRIVER_JAVA_OPTIONS`); ``conf`` adds or
    overrides settings (the benchmark sets the driver's memory). JVM settings apply only when
    this starts the JVM, not to a session already running in the process."""
    from pyspark.sql import SparkSession

    python_workers()
    settings = {
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.execution.arrow.maxRecordsPerBatch": str(ARROW_BATCH_ROWS),
        "spark.speculation": "false",
        "spark.sql.ansi.enabled": "true",  # integer sums fail loudly, never wrap
        "spark.ui.enabled": "false",
        "spark.driver.extraJavaOptions": DRIVER_JAVA_OPTIONS,
        # Task output is moved into the body only when the whole write commits (Hadoop's v1
        # committer, Spark's default, pinned against a cluster's v2): a failed attempt's files
        # never land beside the committed ones.
        "spark.hadoop.mapreduce.fileoutputcommitter.algorithm.version": "1",
        # The joining pass (:func:`joined_sorted`): aggregate the sorted rows as they stream
        # (one sort, no hash map of 10^8 ids spilling), and cache the joined frame uncompressed
        # (it lives for one release, on local disk): 0.73x the pass's wall time side by side at
        # 3 x 10^7 ids (bench/results/spark_release.md).
        "spark.sql.execution.replaceHashWithSortAgg": "true",
        "spark.sql.inMemoryColumnarStorage.compressed": "false",
        **(conf or {}),
    }
    builder = SparkSession.builder.master(master).appName("labeldp-release")
    for key, value in settings.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def python_workers() -> None:
    """Executors run this interpreter (its engine and numba) unless PYSPARK_PYTHON says else."""
    import sys

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


def _read(spark: Any, source: str) -> Any:
    """A Parquet path, or a Spark table name."""
    if os.path.exists(source):
        return spark.read.parquet(source)
    return spark.table(source)


def load_inputs(spark: Any, config: JobConfig) -> tuple[Any, Any]:
    """(universe, labels), their columns checked (no scan): the ids (null, malformed, duplicate,
    labelled but outside the universe) are checked by the joining pass (:func:`frame_faults`),
    the values (null, non-finite) by the counting pass (:func:`label_counts`), both before
    anything is spent. Raises :class:`SparkJobError` naming the problem."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import NumericType

    try:
        examples = _read(spark, config.examples)
        labels = _read(spark, config.labels)
    except Exception as exc:  # noqa: BLE001 - Spark's AnalysisException and friends
        raise SparkJobError(f"cannot read the inputs: {str(exc).splitlines()[0]}") from None
    key, value = config.id_column, config.value_column
    for name, frame, needed in (("examples", examples, [key]), ("labels", labels, [key, value])):
        missing = [column for column in needed if column not in frame.columns]
        if missing:
            raise SparkJobError(f"{name}: missing column(s) {', '.join(missing)}")
    if not isinstance(labels.schema[value].dataType, NumericType):
        raise SparkJobError(f"labels: column {value} must be numeric")
    universe = examples.select(F.col(key).cast("string").alias("example_id"))
    labelled = labels.select(
        F.col(key).cast("string").alias("example_id"), F.col(value).cast("double").alias("value")
    )
    return universe, labelled


# Rows per partition of the sorted frame. Each partition is one Python task per pass (count,
# randomize) and one Parquet file; Spark's default of 200 shuffle partitions made a 10^6-id
# release 200 tasks of ~0.1 s fixed cost each (bench/results/spark_release.md). Arrow streams a
# partition in batches, so a large partition does not mean large worker memory.
ROWS_PER_PARTITION = 4_000_000


def sorted_partitions(n: int, parallelism: int) -> int:
    """How many range partitions for ``n`` rows: ~4M rows each, one per core at least, rounded
    up to a multiple of the cores so that no last wave runs half the cores idle (0.84x the
    joining pass and write at 10^7 ids on 2 cores, 4 partitions against 3:
    bench/results/spark_release.md)."""
    cores = max(1, parallelism)
    wanted = max(1, -(-n // ROWS_PER_PARTITION))
    return -(-wanted // cores) * cores


def joined_sorted(universe: Any, labelled: Any, *, default_label: float, n: int) -> Any:
    """Every id of either input with its label (or the default) and how many times each input
    holds it (``in_examples``, ``in_labels``), sorted by id: ONE shuffle (a union, range
    partitioned by id, :func:`sorted_partitions` of them), ONE sort per partition, then the
    per-id aggregate as the sorted rows stream by (``first`` is order-dependent, so the sort
    stays below the aggregate, which :func:`spark_session`'s setting makes a sort aggregate
    whose output is already in order), so the part files in name order are the global order
    (``shared.parquet_message.hash_body_and_universe`` checks it). A valid input has
    in_examples == 1 and in_labels <= 1 on every row, so its one value is its label."""
    from pyspark.sql import functions as F

    ids = universe.select(
        "example_id",
        F.lit(1).alias("e"),
        F.lit(0).alias("l"),
        F.lit(None).cast("double").alias("value"),
    )
    values = labelled.select("example_id", F.lit(0).alias("e"), F.lit(1).alias("l"), "value")
    parallelism = universe.sparkSession.sparkContext.defaultParallelism
    ranged = (
        ids.unionByName(values)
        .repartitionByRange(sorted_partitions(n, parallelism), "example_id")
        .sortWithinPartitions("example_id")
    )
    in_labels = F.sum("l")
    per_id = ranged.groupBy("example_id").agg(  # range partitioning already clusters: no shuffle
        # The default for an id without a label; a labelled id's null value stays null (refused
        # by :func:`label_counts`, which reads this column).
        F.when(in_labels == 0, F.lit(float(default_label)))
        .otherwise(F.first("value", ignorenulls=True))
        .alias("label"),
        F.sum("e").cast("int").alias("in_examples"),
        in_labels.cast("int").alias("in_labels"),
    )
    return per_id.sortWithinPartitions("example_id")


@dataclass(frozen=True, kw_only=True)
class InputFaults:
    """What the joining pass found wrong with the inputs (all zero for a valid release)."""

    null_examples: int = 0  # rows of the universe with a null id
    null_labels: int = 0  # rows of the labels with a null id
    bad_examples: int = 0  # rows of the universe whose id is not EXAMPLE_ID_PATTERN
    bad_labels: int = 0  # rows of the labels whose id is not EXAMPLE_ID_PATTERN
    duplicate_examples: int = 0  # extra rows of ids the universe holds more than once
    duplicate_labels: int = 0  # extra rows of ids the labels hold more than once
    outside: int = 0  # labelled ids not in the universe

    def __add__(self, other: InputFaults) -> InputFaults:
        names = [f.name for f in dataclasses.fields(self)]
        return InputFaults(**{name: getattr(self, name) + getattr(other, name) for name in names})

    def check(self, key: str) -> None:
        """Raise :class:`SparkJobError` naming the first fault (before anything is spent)."""
        for name in ("examples", "labels"):
            if nulls := getattr(self, f"null_{name}"):
                raise SparkJobError(f"{name}: {nulls} null {key}(s)")
        for name in ("examples", "labels"):
            if bad := getattr(self, f"bad_{name}"):
                raise SparkJobError(
                    f"{name}: {bad} {key}(s) are not 1-128 characters of [A-Za-z0-9_.:-]"
                )
        if self.duplicate_examples:
            raise SparkJobError(
                f"examples: duplicate {key}s ({self.duplicate_examples} extra rows)"
            )
        if self.duplicate_labels:
            raise SparkJobError(f"labels: duplicate {key}s ({self.duplicate_labels} extra rows)")
        if self.outside:
            raise SparkJobError(f"labels: {self.outside} labelled {key}(s) are not in the universe")


def jvm_example_id_pattern() -> str:
    """``EXAMPLE_ID_PATTERN``'s characters as a ``java.util.regex`` pattern for ``rlike``, the
    length checked apart: ``\\A`` and ``\\z`` anchor the whole id (Java's ``$``, like Python's,
    also matches before one final line terminator, so ``"a\\n"`` passed ``rlike`` with the shared
    pattern), and the class lists each character it admits, which Java keeps as a bit set: half
    the CPU of the ranges' union per id (bench/results/spark_release.md)."""
    admitted = [chr(code) for code in range(128) if re.fullmatch(EXAMPLE_ID_PATTERN, chr(code))]
    listed = "".join(c if c.isalnum() else "\\" + c for c in admitted)
    return rf"\A[{listed}]+\z"


def frame_faults(frame: Any) -> tuple[InputFaults, int]:
    """The joined frame's :class:`InputFaults` and its row count, summed in the JVM (no Python,
    no labels: eight integers reach the driver). Each distinct id of either input is one row
    here, so each id's pattern is checked once (the rows of each input it stands for are its
    ``in_examples`` / ``in_labels``). The first action on the persisted frame, so it also builds
    the copy that the randomizing pass reads."""
    from pyspark.sql import functions as F

    ident, zero = F.col("example_id"), F.lit(0)
    # Null for a null id (counted as null only); the class is ASCII, so bytes are characters.
    malformed = ~ident.rlike(jvm_example_id_pattern()) | (
        F.octet_length(ident) > EXAMPLE_ID_MAX_LENGTH
    )
    sums: dict[str, Any] = {}
    for name, count in (("examples", F.col("in_examples")), ("labels", F.col("in_labels"))):
        sums[f"null_{name}"] = F.sum(F.when(ident.isNull(), count).otherwise(zero))
        sums[f"bad_{name}"] = F.sum(F.when(malformed, count).otherwise(zero))
        sums[f"duplicate_{name}"] = F.sum(F.greatest(count - 1, zero))
    sums["outside"] = F.sum(F.when(F.col("in_examples") == 0, 1).otherwise(zero))
    sums["rows"] = F.count(F.lit(1))
    row = frame.agg(*(column.alias(name) for name, column in sums.items())).first()
    names = [f.name for f in dataclasses.fields(InputFaults)]
    return InputFaults(**{name: int(row[name] or 0) for name in names}), int(row["rows"])


def label_counts(
    frame: Any, plan: ReleasePlan, *, default_label: float, value_column: str = "value"
) -> LabelCounts:
    """``LabelCounts`` of the release's n labels, computed from the checked, persisted joined
    frame (:func:`joined_sorted`, after :func:`frame_faults`): one Python pass over the ``label``
    of its labelled ids (each partition's ``LabelCounts.of``, the same function as the service;
    k + 2 integers per partition reach the driver), plus the default label's counts times the
    ids without a label. Reading the frame, not the labels input again, makes the counts those
    of the very rows that were checked and are randomized: an input that changes between two
    reads (a table, a file rewritten in place) cannot put an id into the histogram twice. Exact
    ONLY for a valid frame (every id once, labelled at most once): the caller checks
    :func:`frame_faults` first. Refuses null (a labelled id without a value) or non-finite
    labels (:class:`SparkJobError`, counted in the same pass)."""
    import pyarrow as pa
    from pyspark.sql import functions as F

    domain = LabelDomain(lo=plan.lo, hi=plan.hi)

    def per_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        total, bad = LabelCounts.of(plan, np.empty(0)), 0
        for batch in batches:
            labels = batch.column(0).to_numpy(zero_copy_only=False)  # a null is NaN here
            finite = np.isfinite(labels)
            if not finite.all():
                bad += int(labels.size - np.count_nonzero(finite))
                labels = labels[finite]  # refused on the driver: the counts are never used
            total = total + LabelCounts.of(plan, domain.clip(labels))
        yield pa.RecordBatch.from_pydict(
            {
                "cells": [total.cells.tolist()],
                "level_sum": [total.level_sum],
                "n": [total.n],
                "bad": [bad],
            }
        )

    schema = "cells array<bigint>, level_sum bigint, n bigint, bad bigint"
    total, bad = LabelCounts.of(plan, np.empty(0)), 0
    labelled = frame.where(F.col("in_labels") > 0).select("label")
    for row in labelled.mapInArrow(per_partition, schema).collect():
        bad += int(row["bad"])
        total = total + LabelCounts(
            cells=np.asarray(row["cells"], dtype=np.int64),
            level_sum=None if row["level_sum"] is None else int(row["level_sum"]),
            n=int(row["n"]),
        )
    if bad:
        raise SparkJobError(f"labels: {bad} null or non-finite {value_column}(s)")
    missing = plan.n - total.n  # ids of the universe without a label: the default label each
    if missing < 0:
        raise SparkJobError("the joined frame has more labelled ids than the plan's n")
    one = LabelCounts.of(plan, domain.clip(np.full(1, float(default_label))))
    return total + LabelCounts(
        cells=one.cells * missing,
        level_sum=None if one.level_sum is None else one.level_sum * missing,
        n=missing,
    )


def randomize_partitions(
    frame: Any,
    randomizer: LabelMechanism,
    plan: ReleasePlan,
    *,
    seed: int | None,
    fail_first_attempt: bool = False,
) -> Any:
    """The randomized body (lazy): ``example_id`` and ``noisy_label``, the labels sent to Python
    in Arrow batches through the mechanism's ``randomize`` (the ids stay in the JVM).

    A non-deterministic iterator UDF: one generator per task. Production randomness is
    ``SystemRandom`` (os.urandom) created inside the executor; with ``seed`` (tests only)
    partition p's attempt a uses ``default_rng([seed, p, a])``, so a retried task draws afresh,
    as in production.
    """
    import pandas as pd
    from pyspark.sql.functions import pandas_udf

    domain = LabelDomain(lo=plan.lo, hi=plan.hi)

    def per_partition(batches: Iterator[pd.Series]) -> Iterator[pd.Series]:
        from pyspark import TaskContext

        context = TaskContext.get()
        partition, attempt = context.partitionId(), context.attemptNumber()
        rng: Rng = (
            SystemRandom() if seed is None else np.random.default_rng([seed, partition, attempt])
        )
        for batch in batches:
            labels = domain.clip(batch.to_numpy(dtype=np.float64))
            noisy = randomizer.randomize(labels, rng) if labels.size else labels
            if fail_first_attempt and partition == 0 and attempt == 0:
                raise RuntimeError("injected failure of the first attempt (test hook)")
            yield pd.Series(np.asarray(noisy, dtype=np.float64))

    # Real types, not the postponed strings: pandas_udf reads the hints to pick the UDF kind.
    per_partition.__annotations__ = {"batches": Iterator[pd.Series], "return": Iterator[pd.Series]}
    randomize = pandas_udf(per_partition, "double").asNondeterministic()  # type: ignore[call-overload]
    return frame.select("example_id", randomize("label").alias("noisy_label"))


# ---- the job --------------------------------------------------------------------------------


def _dataset_info(client: LabelsPartyClient, name: str) -> dict[str, Any]:
    try:
        return dict(client.request("GET", f"/v1/datasets/{_segment(name)}", idempotent=True).json())
    except ServiceError as exc:
        raise SparkJobError(f"dataset {name!r}: {exc}") from None


def _path(config: JobConfig, *tail: str) -> str:
    return "/".join([f"/v1/datasets/{_segment(config.dataset)}/external-releases", *tail])


def _charge(config: JobConfig, client: LabelsPartyClient, body: dict[str, Any]) -> dict[str, Any]:
    """Stage what is charged (0700), then charge it; a refusal spent nothing."""
    config.staging.mkdir(parents=True, mode=0o700)
    config.staging.chmod(0o700)  # owner only until the message is published
    write_whole(config.staging / CHARGE, json.dumps(body).encode("utf-8"), mode=PUBLISHED_FILE_MODE)
    try:
        release = client.request("POST", _path(config), idempotent=True, json_body=body).json()
    except ServiceError as exc:
        if exc.status is not None and 400 <= exc.status < 500:
            discard(config)  # refused: nothing was spent, nothing was drawn
            raise SparkJobError(f"the labels party refused the charge: {exc}") from None
        raise SparkJobError(
            f"the charge's answer was lost ({exc}); nothing was drawn: run again with --resume "
            "to mark it failed if it was recorded"
        ) from None
    if config.crash_at == "after_charge":
        raise SimulatedCrash("after_charge")
    return dict(release)


def failure_reason(exc: BaseException, stage: str) -> str:
    """What a failed release's ledger entry says: the exception's type and the stage, never its
    message. The ledger is permanent and read by operators and its export; an exception from
    Spark or a Python worker can quote the rows it failed on (labels among them). The message
    itself reaches the advertiser who runs the job (the exception is re-raised)."""
    return f"{type(exc).__name__} {stage} (the message is in the job's own output)"


def _give_up(config: JobConfig, client: LabelsPartyClient, release_id: str, why: str) -> None:
    """Mark a charged release failed (its charge stays) and delete its unpublished staging."""
    body = {"reason": why[:500] or "the job failed"}
    try:
        client.request("POST", _path(config, release_id, "failure"), idempotent=True,
                       json_body=body)  # fmt: skip
    except ServiceError as exc:
        if exc.status != 404:  # 404: it was never charged
            raise SparkJobError(
                f"release {release_id} could not be marked failed ({exc}); its staging is kept"
            ) from None
    discard(config)


# Attempts at the publication when the labels party answers 409 (its state changed during the
# check: a replay racing, examples registered meanwhile): the publication is idempotent, and
# giving up would mark a paid release failed and delete its message.
PUBLICATION_ATTEMPTS = 3


def _publish(config: JobConfig, client: LabelsPartyClient, release_id: str,
             body: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
    """The publication, tried again on a 409 (:data:`PUBLICATION_ATTEMPTS` in all)."""
    import time

    for attempt in range(1, PUBLICATION_ATTEMPTS + 1):
        try:
            path = _path(config, release_id, "publication")
            return dict(client.request("POST", path, idempotent=True, json_body=body).json())
        except ServiceError as exc:
            if exc.status != 409 or attempt == PUBLICATION_ATTEMPTS:
                raise
            time.sleep(0.2 * attempt)
    raise AssertionError("unreachable")


def _publish_and_commit(
    config: JobConfig, client: LabelsPartyClient, release_id: str, body: dict[str, Any]
) -> dict[str, Any]:
    try:
        release = _publish(config, client, release_id, body)
    except ServiceError as exc:
        if exc.status is not None and 400 <= exc.status < 500:
            _give_up(config, client, release_id, f"publication refused: {exc.detail}")
            raise SparkJobError(
                f"the labels party refused the publication: {exc}; release {release_id} is "
                "marked failed (its charge stays)"
            ) from None
        raise SparkJobError(f"the publication failed ({exc}): run again with --resume") from None
    if release.get("binary_sha256") != _header_sha256(config.staging):
        raise SparkJobError("the labels party recorded another header than the staged one")
    if config.crash_at == "after_publish":
        raise SimulatedCrash("after_publish")
    os.replace(config.staging, config.out)  # the commit: the message appears at --out (0700)
    if config.crash_at == "after_rename":
        raise SimulatedCrash("after_rename")
    _open(config.out)
    return dict(release)


def _header_sha256(directory: Path) -> str:
    """The sha256 of ``directory``'s header.json as it is on disk (what the ledger records)."""
    return hashlib.sha256((directory / HEADER).read_bytes()).hexdigest()


def _staged_header(directory: Path) -> MessageHeader:
    """``directory``'s header, checked against its body (``body_sha256`` over the part files)."""
    try:
        header = MessageHeader.model_validate_json((directory / HEADER).read_bytes())
    except (OSError, ValueError) as exc:
        raise SparkJobError(f"{directory}: not a message this job staged ({exc})") from None
    if _hashed(directory / BODY, n=header.n)[0] != header.body_sha256:
        raise SparkJobError(f"{directory}/{BODY} does not match its header's body_sha256")
    return header


def _open(out: Path) -> None:
    """The commit's last step, after the rename: delete the job's own records (not the message:
    the charge names the labels input's raw sha256), then open the (DP, paid for, recorded)
    message to readers (0755). Idempotent: ``--resume`` repeats it after a crash."""
    for side in (CHARGE, PUBLICATION):
        (out / side).unlink(missing_ok=True)
    out.chmod(0o755)


def resume_open(config: JobConfig, client: LabelsPartyClient) -> JobResult:
    """After a crash between the commit's rename and its end: ``--out`` holds a message that is
    still private (0700). The rename follows the publication, so the labels party has recorded
    it: the job checks that (the release ``released`` with this very header) and that the body
    matches the header, then finishes the commit (:func:`_open`)."""
    out = config.out
    header = _staged_header(out)
    try:
        release = dict(
            client.request("GET", f"/v1/releases/{header.release_id}", idempotent=True).json()
        )
    except ServiceError as exc:
        raise SparkJobError(f"release {header.release_id}: {exc}") from None
    recorded = (release.get("dataset"), release.get("state"), release.get("binary_sha256"))
    if recorded != (config.dataset, "released", _header_sha256(out)):
        raise SparkJobError(
            f"release {header.release_id} is not recorded as published with {out}'s header: "
            "--out is left as it is"
        )
    _open(out)
    return JobResult(release=release, out=out, header=header)


def _committing(config: JobConfig) -> bool:
    """Whether ``--out`` is a commit a crash interrupted: staging gone, ``--out`` still private
    (0700, as staging is) and holding a header."""
    out = config.out
    return (
        not config.staging.exists()
        and out.is_dir()
        and out.stat().st_mode & 0o777 == 0o700
        and (out / HEADER).is_file()
    )


def resume(config: JobConfig, client: LabelsPartyClient) -> JobResult:
    """After a crash: publish and commit a fully staged message (no randomizing), or mark a
    release whose message was not staged failed (its noise may have been drawn)."""
    staging = config.staging
    if not (staging / HEADER).is_file() or not (staging / PUBLICATION).is_file():
        charged = json.loads((staging / CHARGE).read_text()) if (staging / CHARGE).is_file() else {}
        release_id = charged.get("release_id")
        if release_id:
            _give_up(
                config, client, str(release_id), "the job stopped before its message was staged"
            )
        else:
            discard(config)
        raise SparkJobError(
            f"{staging} was incomplete (the job stopped before its message was staged): "
            + (f"release {release_id} is marked failed if it was charged (the charge stays); "
               if release_id else "nothing was charged; ")
            + "run the release again"
        )  # fmt: skip
    header = _staged_header(staging)
    body = json.loads((staging / PUBLICATION).read_text())
    if body["header"] != json.loads(header.model_dump_json()):
        raise SparkJobError(f"{staging}: publication.json and header.json disagree")
    release = _publish_and_commit(config, client, header.release_id, body)
    return JobResult(release=release, out=config.out, header=header)


def run(config: JobConfig, *, spark: Any = None) -> JobResult:
    """Run the release (module docstring); ``spark``: an existing session (tests)."""
    import time

    timings: dict[str, float] = {}
    clock = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        timings[name] = now - clock
        clock = now

    if config.crash_at is not None and config.crash_at not in CRASH_POINTS:
        raise SparkJobError(f"crash_at must be one of {', '.join(CRASH_POINTS)}")
    if config.out.exists() and not (config.resume and _committing(config)):
        raise SparkJobError(
            f"--out {config.out} exists already: a message is never overwritten"
            + (" (--resume finishes a commit a crash interrupted)" if _committing(config) else "")
        )
    with LabelsPartyClient(config.labels_url, token=config.token) as client:
        if config.out.exists():
            return resume_open(config, client)
        info = _dataset_info(client, config.dataset)
        if config.staging.exists():
            if not config.resume:
                raise SparkJobError(
                    f"{config.staging} exists (an earlier run stopped): --resume publishes it, "
                    "or marks its release failed if its message was not staged"
                )
            return resume(config, client)
        if config.resume:
            raise SparkJobError(f"--resume: nothing staged at {config.staging}")
        session = spark or spark_session(
            config.master, {"spark.driver.memory": config.driver_memory}
        )
        default = float(info["default_label"])
        universe, labelled = load_inputs(session, config)
        n = universe.count()  # the files' row counts: no scan of the ids
        if n == 0:
            raise SparkJobError("examples: the universe is empty")
        try:
            plan = make_plan(config, info, n=n)
        except LabelDPError as exc:
            raise SparkJobError(f"the plan is refused: {exc}") from None
        check_budget(info, plan)
        lap("validate")
        frame = joined_sorted(universe, labelled, default_label=default, n=n)
        from pyspark import StorageLevel

        frame = frame.persist(StorageLevel.DISK_ONLY)
        try:
            faults, rows = frame_faults(frame)  # builds the persisted frame
            faults.check(config.id_column)  # nothing drawn or spent yet
            if rows != plan.n:
                raise RuntimeError("the joined frame disagrees with the universe's count")
            # Only now (a valid input) are the frame's counts the release's.
            counts = label_counts(
                frame, plan, default_label=default, value_column=config.value_column
            )
            lap("join_sort_count")
            release_id = new_release_id()
            _charge(config, client, charge_body(config, plan, release_id=release_id))
            lap("charge")
            drawn = _draw(config, client, frame, plan, counts, release_id)
        finally:
            frame.unpersist()
        lap("noise_randomize_write")
        publication, header = _stage_message(config, client, plan, info, release_id, drawn)
        lap("hash")
        release = _publish_and_commit(config, client, release_id, publication)
        lap("publish_commit")
    return JobResult(release=release, out=config.out, header=header, timings=timings)


def _draw(
    config: JobConfig,
    client: LabelsPartyClient,
    frame: Any,
    plan: ReleasePlan,
    counts: LabelCounts,
    release_id: str,
) -> tuple[str, LabelMechanism, NoisyPrior]:
    """Draw the paid noise: the prior on the driver, the labels into staging (once)."""
    try:
        rng: Rng = SystemRandom() if config.seed is None else np.random.default_rng(config.seed)
        measured = noisy_prior_from_counts(plan, counts, rng)
        mechanism, randomizer = choose_randomizer(plan, measured)
        body = randomize_partitions(
            frame,
            randomizer,
            plan,
            seed=None if config.seed is None else config.seed + 1,
            fail_first_attempt=config.fail_first_attempt,
        )
        # The ONE action that randomizes; everything after reads the written files.
        body.write.parquet(str(config.staging / BODY))
        keep_only_the_body(config.staging / BODY)
    except Exception as exc:
        _give_up(config, client, release_id, failure_reason(exc, "while drawing the noise"))
        raise
    return mechanism, randomizer, measured


def _stage_message(
    config: JobConfig,
    client: LabelsPartyClient,
    plan: ReleasePlan,
    info: dict[str, Any],
    release_id: str,
    drawn: tuple[str, LabelMechanism, NoisyPrior],
) -> tuple[dict[str, Any], MessageHeader]:
    """Hash the written body, write header.json and publication.json into staging."""
    mechanism, randomizer, measured = drawn
    try:
        digest, universe = _hashed(config.staging / BODY, n=plan.n)
        header = build_header(
            plan=plan,
            info=info,
            release_id=release_id,
            mechanism=mechanism,
            randomizer=randomizer,
            measured=measured,
            body_sha256=digest,
        )
        publication = publication_body(header, universe_sha256=universe)
        write_whole(
            config.staging / PUBLICATION,
            json.dumps(publication).encode("utf-8"),
            mode=PUBLISHED_FILE_MODE,
        )
        write_whole(
            config.staging / HEADER,
            header.model_dump_json().encode("utf-8"),
            mode=PUBLISHED_FILE_MODE,
        )
    except Exception as exc:
        _give_up(config, client, release_id, failure_reason(exc, "while staging the message"))
        raise
    if config.crash_at == "before_publish":
        raise SimulatedCrash("before_publish")
    return publication, header


def keep_only_the_body(directory: Path) -> None:
    """Delete whatever a write left in the body directory beside its part files and their
    markers (``_SUCCESS``, Hadoop's ``.crc`` checksums): a retried or stray task's leftover
    (``_temporary``) may hold a second randomization of some labels, and only the part files are
    hashed and paid for. Staging is private (0700) until the commit, so nothing else was read."""
    kept = {path.name for path in body_files(directory)} | {"_SUCCESS"}
    kept |= {f".{name}.crc" for name in kept}
    for path in directory.iterdir():
        if path.name in kept:
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


def discard(config: JobConfig) -> None:
    """Delete an unpublished staging directory (tests)."""
    shutil.rmtree(config.staging, ignore_errors=True)
