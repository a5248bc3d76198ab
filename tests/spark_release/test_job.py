"""The release as a Spark job (spark_release.job) against a real labels-party process."""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import itertools
import json
import math
import shutil
import sqlite3
import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy.stats import chisquare

from features_party.parquet_message import read_parquet_message
from shared.domain import LabelDomain
from shared.mechanisms.rr_on_bins import RROnBins
from shared.randomizer import LabelCounts, choose_randomizer, measure, noisy_prior_from_counts
from spark_release import DRIVER_JAVA_OPTIONS
from spark_release import job as spark_job
from spark_release.job import JobConfig, SimulatedCrash, SparkJobError, run
from tests.spark_release.conftest import LabelsParty, write_inputs

_names = (f"ds{i}" for i in itertools.count())


def _data(n: int, *, seed: int, share: float = 0.2) -> tuple[list[str], dict[str, float | None]]:
    gen = np.random.default_rng(seed)
    ids = [f"click-{i:06d}" for i in gen.permutation(n)]
    chosen = gen.choice(n, size=int(share * n), replace=False)
    values = gen.exponential(25.0, chosen.size)
    return ids, {ids[i]: float(v) for i, v in zip(chosen, values, strict=True)}


def _config(party: LabelsParty, tmp: Path, name: str, examples: Path, labels: Path,
            **overrides: Any) -> JobConfig:  # fmt: skip
    fields: dict[str, Any] = {
        "dataset": name,
        "labels_url": party.url,
        "token": party.tokens["advertiser"],
        "examples": str(examples),
        "labels": str(labels),
        "epsilon": Decimal("1"),
        "out": tmp / "message",
        "seed": 11,
        **overrides,
    }
    return JobConfig(**fields)


def _verify_ledger(party: LabelsParty) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "labels_party", "ledger", "verify", "--db",
         str(party.service.db_path)],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr + done.stdout


def _labels_in_order(ids: list[str], labelled: dict[str, float | None]) -> np.ndarray:
    clip = LabelDomain(lo=0.0, hi=100.0).clip
    return clip(np.array([labelled.get(i, 0.0) for i in sorted(ids)], dtype=np.float64))


def test_release_end_to_end_spends_once_and_publishes_a_verified_message(
    spark: Any, labels_party: LabelsParty, tmp_path: Path
) -> None:
    name = next(_names)
    labels_party.create_dataset(name)
    ids, labelled = _data(4000, seed=1)
    examples, labels = write_inputs(tmp_path / "in", ids, labelled)
    result = run(_config(labels_party, tmp_path, name, examples, labels), spark=spark)
    assert result.out.is_dir() and not (tmp_path / "message.staging").exists()
    # The message and nothing else: the job's charge.json names the labels input's raw sha256.
    assert sorted(p.name for p in result.out.iterdir()) == ["body", "header.json"]
    assert result.out.stat().st_mode & 0o777 == 0o755
    with labels_party.client("publisher") as client:
        header, got_ids, noisy = read_parquet_message(result.out, labels_party=client)
    assert got_ids == sorted(ids) and header.n == 4000 and noisy.size == 4000
    assert header.dataset == name and header.release_id == result.release["id"]
    info = labels_party.dataset(name)
    assert Decimal(info["epsilon_spent"]) == Decimal("1")
    entries = [e for e in labels_party.ledger(name) if e["kind"] != "dataset"]
    # Charged before the noise (no message yet), then published (epsilon 0, the message).
    assert [e["kind"] for e in entries] == ["histogram", "randomizer", "publication"]
    assert [e["message_sha256"] for e in entries] == [None, None, header.body_sha256]
    assert entries[1]["mechanism"] == "auto" and entries[2]["mechanism"] == header.mechanism
    assert entries[2]["parameters"]["params"] == json.loads(header.model_dump_json())["params"]
    assert sum(Decimal(e["epsilon"]) for e in entries) == Decimal("1")
    assert result.release["state"] == "released"
    _verify_ledger(labels_party)
    # The HTTP message route says where the message is instead of serving an empty one.
    with labels_party.client("publisher") as client:
        response = client._http.get(f"/v1/releases/{header.release_id}/message")
    assert response.status_code == 404 and "outside" in response.json()["detail"]


def test_a_publication_answered_409_is_tried_again_not_given_up(
    spark: Any, labels_party: LabelsParty, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 409 at the publication (the labels party's state changed during its check) is tried
    again: giving up would mark a paid release failed and delete its message."""
    from shared.service.client import ServiceError

    name = next(_names)
    labels_party.create_dataset(name)
    ids, labelled = _data(500, seed=6)
    examples, labels = write_inputs(tmp_path / "in", ids, labelled)
    real = spark_job.LabelsPartyClient.request
    refused: list[str] = []

    def once_409(self: Any, method: str, path: str, **kwargs: Any) -> Any:
        if path.endswith("/publication") and not refused:
            refused.append(path)
            raise ServiceError(status=409, method=method, url=path, detail="changed; retry")
        return real(self, method, path, **kwargs)

    monkeypatch.setattr(spark_job.LabelsPartyClient, "request", once_409)
    result = run(_config(labels_party, tmp_path, name, examples, labels), spark=spark)
    assert refused and result.release["state"] == "released" and result.out.is_dir()
    kinds = [e["kind"] for e in labels_party.ledger(name) if e["kind"] != "dataset"]
    assert kinds == ["histogram", "randomizer", "publication"]


@pytest.mark.parametrize("mechanism", ["auto", "rr_on_bins", "rpwithprior"])
def test_same_noisy_prior_gives_the_same_plan_and_parameters_as_the_service_path(
    spark: Any, mechanism: str
) -> None:
    ids, labelled = _data(3000, seed=2)
    info = {"name": "x", "label_min": 0.0, "label_max": 100.0, "default_label": 0.0}
    config = JobConfig(
        dataset="x", labels_url="", token="", examples="", labels="",
        epsilon=Decimal("0.5"), out=Path("/nonexistent"), mechanism=mechanism,
    )  # fmt: skip
    plan = spark_job.make_plan(config, info, n=len(ids))
    # The service's plan for the same request (labels_party.releasing.releases.plan_for) is the
    # same.
    from labels_party.releasing.releases import plan_for
    from shared.plan import ReleaseRequest

    class Row:
        label_min, label_max = 0.0, 100.0

    service_plan = plan_for(Row(), ReleaseRequest(epsilon=Decimal("0.5"), mechanism=mechanism),  # type: ignore[arg-type]
                            n=len(ids))  # fmt: skip
    assert service_plan == plan
    universe = spark.createDataFrame([(i,) for i in ids], "example_id string")
    labels = spark.createDataFrame(list(labelled.items()), "example_id string, value double")
    frame = spark_job.joined_sorted(universe, labels, default_label=0.0, n=len(ids))
    faults, rows = spark_job.frame_faults(frame)
    assert faults == spark_job.InputFaults() and rows == len(ids)
    counts = spark_job.label_counts(frame, plan, default_label=0.0)
    exact = LabelCounts.of(plan, _labels_in_order(ids, labelled))  # the service's counts
    assert counts.cells.tolist() == exact.cells.tolist() and counts.n == exact.n == len(ids)
    assert counts.level_sum == exact.level_sum
    job = noisy_prior_from_counts(plan, counts, np.random.default_rng(5))
    service = measure(plan, _labels_in_order(ids, labelled), np.random.default_rng(5))
    assert job.prior.probs.tobytes() == service.prior.probs.tobytes()
    assert job.label_mean == service.label_mean
    name_job, mech_job = choose_randomizer(plan, job)
    name_service, mech_service = choose_randomizer(plan, service)
    assert name_job == name_service
    assert mech_job.public_params() == mech_service.public_params()


def test_noisy_labels_follow_rr_on_bins_exact_output_probabilities(
    spark: Any, labels_party: LabelsParty, tmp_path: Path
) -> None:
    name = next(_names)
    labels_party.create_dataset(name)
    ids, labelled = _data(20000, seed=3, share=0.6)
    examples, labels = write_inputs(tmp_path / "in", ids, labelled)
    config = _config(labels_party, tmp_path, name, examples, labels, mechanism="rr_on_bins",
                     epsilon=Decimal("1.5"))  # fmt: skip
    result = run(config, spark=spark)
    header, got_ids, noisy = read_parquet_message(result.out)
    mechanism = RROnBins.from_params(header.params)
    clean = _labels_in_order(ids, labelled)
    expected = mechanism.output_probabilities(clean).sum(axis=0)
    outputs = np.asarray(mechanism.output_values)
    index = np.searchsorted(outputs, noisy)
    assert np.all(outputs[index] == noisy)  # every output is one of the mechanism's values
    observed = np.bincount(index, minlength=outputs.size)
    keep = expected > 0
    assert chisquare(observed[keep], expected[keep]).pvalue > 1e-4
    # And not the identity: the body is randomized (about e^-eps / ... of the labels move).
    assert np.mean(noisy != clean) > 0.05


def test_a_failed_task_is_retried_and_the_published_body_is_one_randomization(
    spark: Any, labels_party: LabelsParty, tmp_path: Path
) -> None:
    ids, labelled = _data(3000, seed=4)
    examples, labels = write_inputs(tmp_path / "in", ids, labelled)
    bodies = []
    # One dataset charged twice: the same labels in two datasets would fail `ledger verify`.
    name = next(_names)
    labels_party.create_dataset(name)
    for fail in (False, True):
        config = _config(labels_party, tmp_path / f"run{fail}", name, examples, labels,
                         mechanism="rr_on_bins", fail_first_attempt=fail)  # fmt: skip
        (tmp_path / f"run{fail}").mkdir()
        result = run(config, spark=spark)
        header, got_ids, noisy = read_parquet_message(result.out)  # hash and order verified
        assert got_ids == sorted(ids)
        bodies.append(noisy)
        assert Decimal(labels_party.dataset(name)["epsilon_spent"]) == Decimal(len(bodies))
    # Seeds are per (partition, attempt): the retried task drew afresh (as in production), so
    # the bodies differ; the published one still has every id exactly once and matches the
    # header's hash, i.e. it is the output of the ONE committed attempt per partition, never a
    # mixture with the failed attempt's rows, and never recomputed after it was written.
    assert np.any(bodies[0] != bodies[1])


def _crashed(
    spark: Any, party: LabelsParty, tmp: Path, *, seed: int, crash_at: str
) -> tuple[str, JobConfig, Path, Path]:
    """A new dataset's release of 2,000 ids (labels drawn from ``seed``: the same labels charged
    to two datasets would fail verify) stopped at ``crash_at``: (dataset, config, inputs)."""
    name = next(_names)
    party.create_dataset(name)
    ids, labelled = _data(2000, seed=seed)
    examples, labels = write_inputs(tmp / "in", ids, labelled)
    config = _config(party, tmp, name, examples, labels, crash_at=crash_at)
    with pytest.raises(SimulatedCrash):
        run(config, spark=spark)
    return name, config, examples, labels


def test_no_noise_is_drawn_before_the_charge_and_a_crash_after_it_is_marked_failed(
    spark: Any, labels_party: LabelsParty, tmp_path: Path
) -> None:
    """Issue 24, item 2: the charge comes first; a crash right after it leaves the charge and
    an owner-only staging directory with no noisy output; --resume cannot know whether noise
    was drawn, so it marks the release failed (the charge stays) and removes the staging."""
    name, config, examples, labels = _crashed(
        spark, labels_party, tmp_path, seed=5, crash_at="after_charge"
    )
    assert not config.out.exists()
    assert sorted(p.name for p in config.staging.iterdir()) == ["charge.json"]  # no noise yet
    assert oct(config.staging.stat().st_mode & 0o777) == "0o700"
    assert Decimal(labels_party.dataset(name)["epsilon_spent"]) == Decimal("1")
    kinds = [e["kind"] for e in labels_party.ledger(name)]
    assert kinds == ["dataset", "histogram", "randomizer"]
    # A plain rerun refuses to overwrite the staged run.
    with pytest.raises(SparkJobError, match="--resume"):
        run(_config(labels_party, tmp_path, name, examples, labels), spark=spark)
    with pytest.raises(SparkJobError, match="marked failed"):
        run(_config(labels_party, tmp_path, name, examples, labels, resume=True))
    assert not config.staging.exists() and not config.out.exists()
    ledger = labels_party.ledger(name)
    assert [e["kind"] for e in ledger][-1] == "failure"
    release_id = ledger[-1]["release_id"]
    with labels_party.client("advertiser") as client:
        meta = client.request("GET", f"/v1/releases/{release_id}", idempotent=True).json()
    assert meta["state"] == "failed"
    assert Decimal(labels_party.dataset(name)["epsilon_spent"]) == Decimal("1")  # it stays
    _verify_ledger(labels_party)


def test_a_job_failing_after_the_charge_marks_it_failed_and_leaves_no_output(
    spark: Any, labels_party: LabelsParty, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = next(_names)
    labels_party.create_dataset(name)
    ids, labelled = _data(500, seed=8)
    examples, labels = write_inputs(tmp_path / "in", ids, labelled)
    config = _config(labels_party, tmp_path, name, examples, labels)

    def broken(*_args: Any, **_kwargs: Any) -> Any:
        raise OSError("disk full")

    monkeypatch.setattr(spark_job, "randomize_partitions", broken)
    with pytest.raises(OSError, match="disk full"):
        run(config, spark=spark)
    assert not config.staging.exists() and not config.out.exists()
    ledger = labels_party.ledger(name)
    assert [e["kind"] for e in ledger] == ["dataset", "histogram", "randomizer", "failure"]
    # The ledger (permanent, the operator's) names the exception's type and the stage, never
    # its message, which can quote rows (labels); the advertiser running the job saw it above.
    reason = ledger[-1]["parameters"]["reason"]
    assert reason.startswith("OSError while drawing the noise") and "disk full" not in reason
    assert Decimal(labels_party.dataset(name)["epsilon_spent"]) == Decimal("1")
    _verify_ledger(labels_party)


@pytest.mark.parametrize("crash_at", ["before_publish", "after_publish"])
def test_a_crash_after_the_message_was_staged_is_published_by_resume_without_randomizing(
    spark: Any, labels_party: LabelsParty, tmp_path: Path, crash_at: str
) -> None:
    seed = 6 if crash_at == "before_publish" else 9
    name, config, examples, labels = _crashed(
        spark, labels_party, tmp_path, seed=seed, crash_at=crash_at
    )
    assert not config.out.exists()
    assert oct(config.staging.stat().st_mode & 0o777) == "0o700"
    staged_header = (config.staging / "header.json").read_bytes()
    assert Decimal(labels_party.dataset(name)["epsilon_spent"]) == Decimal("1")
    # --resume: no Spark session is even needed; the publication is replayed, not repeated.
    result = run(_config(labels_party, tmp_path, name, examples, labels, resume=True))
    assert (result.out / "header.json").read_bytes() == staged_header
    assert oct(result.out.stat().st_mode & 0o777) == "0o755"  # paid for and recorded: readable
    read_parquet_message(result.out)
    assert Decimal(labels_party.dataset(name)["epsilon_spent"]) == Decimal("1")
    kinds = [e["kind"] for e in labels_party.ledger(name) if e["kind"] != "dataset"]
    assert kinds == ["histogram", "randomizer", "publication"]
    _verify_ledger(labels_party)


def test_a_crash_during_the_commit_is_finished_by_resume(
    spark: Any, labels_party: LabelsParty, tmp_path: Path
) -> None:
    """A crash after the commit's rename left --out private (0700) with the job's own records
    (charge.json names the labels input's raw sha256): a plain rerun refuses to overwrite it and
    names --resume; --resume checks the release is published with that header and opens it,
    without charging, randomizing or publishing again. An --out the job did not commit is left
    as it is."""
    name, config, examples, labels = _crashed(
        spark, labels_party, tmp_path, seed=12, crash_at="after_rename"
    )
    assert not config.staging.exists()
    assert oct(config.out.stat().st_mode & 0o777) == "0o700"
    assert (config.out / "charge.json").is_file()
    header = (config.out / "header.json").read_bytes()
    with pytest.raises(SparkJobError, match="--resume finishes a commit"):
        run(_config(labels_party, tmp_path, name, examples, labels))
    result = run(_config(labels_party, tmp_path, name, examples, labels, resume=True))
    assert (result.out / "header.json").read_bytes() == header
    assert result.release["state"] == "released"
    assert oct(result.out.stat().st_mode & 0o777) == "0o755"
    assert sorted(p.name for p in result.out.iterdir()) == ["body", "header.json"]
    read_parquet_message(result.out)
    assert Decimal(labels_party.dataset(name)["epsilon_spent"]) == Decimal("1")
    kinds = [e["kind"] for e in labels_party.ledger(name) if e["kind"] != "dataset"]
    assert kinds == ["histogram", "randomizer", "publication"]
    # Not a commit this job made: a private --out whose header names no published release.
    forged = tmp_path / "forged"
    shutil.copytree(result.out, forged)
    release_id = json.loads(header)["release_id"]
    unknown = "rel_" + ("0" if release_id[4] != "0" else "1") + release_id[5:]
    (forged / "header.json").write_bytes(header.replace(release_id.encode(), unknown.encode()))
    forged.chmod(0o700)
    other = _config(labels_party, tmp_path, name, examples, labels, resume=True, out=forged)
    with pytest.raises(SparkJobError, match=unknown):
        run(other)
    assert oct(forged.stat().st_mode & 0o777) == "0o700"
    _verify_ledger(labels_party)


_LINE_ENDS = {"line_end_id": "\n", "line_end_id_crlf": "\r\n", "line_end_id_u2028": "\u2028"}


def _bad(kind: str, tmp: Path) -> tuple[Path, Path, dict[str, Any]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    ids, labelled = _data(200, seed=7)
    extra: dict[str, Any] = {}
    if kind == "null_label":
        labelled[ids[0]] = None
    elif kind == "nan_label":
        labelled[ids[0]] = math.nan
    elif kind == "inf_label":
        labelled[ids[0]] = math.inf
    elif kind == "outside":
        labelled["not-in-universe"] = 3.0
    elif kind == "bad_id":
        ids[0] = "has space"
    elif kind in _LINE_ENDS:
        # Java's "$" also matches before one final line terminator: not a valid id here.
        ids[0] += _LINE_ENDS[kind]
    elif kind == "line_end_labelled_id":
        labelled[next(iter(labelled)) + "\n"] = 1.0
    examples, labels = write_inputs(tmp, ids, labelled)
    if kind == "dup_examples":
        pq.write_table(pa.table({"example_id": ids + ids[:1]}), examples)
    elif kind == "dup_labels":
        first = next(iter(labelled))
        pq.write_table(
            pa.table({"example_id": [*labelled, first], "value": [*labelled.values(), 1.0]}),
            labels,
        )
    elif kind == "missing_column":
        pq.write_table(pa.table({"id": ids}), examples)
    elif kind == "null_id":
        pq.write_table(pa.table({"example_id": pa.array([*ids, None], pa.string())}), examples)
    elif kind == "budget":
        extra["epsilon"] = Decimal("20")
    elif kind == "no_dataset":
        extra["dataset"] = "does-not-exist"
    return examples, labels, extra


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("null_label", "null or non-finite"),
        ("nan_label", "null or non-finite"),
        ("inf_label", "null or non-finite"),
        ("dup_examples", "examples: duplicate"),
        ("dup_labels", "labels: duplicate"),
        ("outside", "not in the universe"),
        ("missing_column", "missing column"),
        ("null_id", "null example_id"),
        ("bad_id", "not 1-128 characters"),
        ("line_end_id", "examples: 1 example_id\\(s\\) are not 1-128 characters"),
        ("line_end_id_crlf", "examples: 1 example_id\\(s\\) are not 1-128 characters"),
        ("line_end_id_u2028", "examples: 1 example_id\\(s\\) are not 1-128 characters"),
        ("line_end_labelled_id", "labels: 1 example_id\\(s\\) are not 1-128 characters"),
        ("budget", "budget too small"),
        ("no_dataset", "does-not-exist"),
    ],
)
def test_bad_input_is_refused_before_anything_is_spent(
    spark: Any, labels_party: LabelsParty, tmp_path: Path, kind: str, message: str
) -> None:
    name = next(_names)
    labels_party.create_dataset(name)
    examples, labels, extra = _bad(kind, tmp_path / "in")
    config = _config(labels_party, tmp_path, name, examples, labels, **extra)
    with pytest.raises(SparkJobError, match=message):
        run(config, spark=spark)
    assert not config.out.exists() and not config.staging.exists()
    assert Decimal(labels_party.dataset(name)["epsilon_spent"]) == 0
    assert [e["kind"] for e in labels_party.ledger(name)] == ["dataset"]


def test_the_sessions_jvm_collects_with_parallel_gc(spark: Any) -> None:
    """spark_session starts its JVM with DRIVER_JAVA_OPTIONS: the collector is Parallel GC."""
    assert DRIVER_JAVA_OPTIONS == "-XX:+UseParallelGC"
    options = spark.sparkContext.getConf().get("spark.driver.extraJavaOptions")  # Spark's first
    assert options.split()[-1] == DRIVER_JAVA_OPTIONS
    beans = spark._jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()
    names = {bean.getName() for bean in beans}
    assert names == {"PS Scavenge", "PS MarkSweep"}, names  # G1 would be "G1 Young Generation"


def test_the_counts_are_the_checked_frames_not_a_second_read_of_the_labels(
    spark: Any, tmp_path: Path
) -> None:
    """label_counts reads the persisted, checked frame: the labels input rewritten after the
    check (one id 200 times at the top of the range) changes no count."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark import StorageLevel

    ids, labelled = _data(600, seed=4)
    examples, labels = write_inputs(tmp_path / "in", ids, labelled)
    config = JobConfig(
        dataset="x", labels_url="", token="", examples="", labels="",
        epsilon=Decimal("1"), out=Path("/nonexistent"),
    )  # fmt: skip
    plan = spark_job.make_plan(config, {"label_min": 0.0, "label_max": 100.0}, n=len(ids))
    read = spark.read.parquet
    frame = spark_job.joined_sorted(
        read(str(examples)), read(str(labels)), default_label=0.0, n=len(ids)
    ).persist(StorageLevel.DISK_ONLY)
    try:
        faults, rows = spark_job.frame_faults(frame)
        assert faults == spark_job.InputFaults() and rows == len(ids)
        first = next(iter(labelled))
        pq.write_table(pa.table({"example_id": [first] * 200, "value": [100.0] * 200}), labels)
        counts = spark_job.label_counts(frame, plan, default_label=0.0)
    finally:
        frame.unpersist()
    exact = LabelCounts.of(plan, _labels_in_order(ids, labelled))
    assert counts.cells.tolist() == exact.cells.tolist() and counts.n == len(ids)
    assert counts.level_sum == exact.level_sum


def test_keep_only_the_body_deletes_what_a_write_left_beside_its_part_files(
    tmp_path: Path,
) -> None:
    body = tmp_path / "body"
    (body / "_temporary" / "0").mkdir(parents=True)
    (body / "_temporary" / "0" / "part-00000-x.parquet").write_bytes(b"another draw")
    parts = ["part-00000-a.snappy.parquet", "part-00001-a.snappy.parquet"]
    kept = [*parts, "_SUCCESS", "._SUCCESS.crc", *(f".{p}.crc" for p in parts)]
    for name in [*kept, "stray.parquet", "part-00002-a.json"]:
        (body / name).write_bytes(b"x")
    spark_job.keep_only_the_body(body)
    assert sorted(p.name for p in body.iterdir()) == sorted(kept)


def test_sorted_partitions_follow_the_data_not_a_fixed_200() -> None:
    """About ROWS_PER_PARTITION rows each, one per core at least, a multiple of the cores."""
    per = spark_job.ROWS_PER_PARTITION
    assert spark_job.sorted_partitions(10, 2) == 2
    assert spark_job.sorted_partitions(10**6, 2) == 2
    assert spark_job.sorted_partitions(10**7, 2) == 4  # 3 wanted: no half-idle last wave
    assert spark_job.sorted_partitions(10**8, 2) == 26  # 25 wanted
    assert spark_job.sorted_partitions(per * 5 + 1, 2) == 6
    assert spark_job.sorted_partitions(per * 4, 2) == 4
    assert spark_job.sorted_partitions(per * 10 + 1, 8) == 16
    assert spark_job.sorted_partitions(10**6, 64) == 64
    assert spark_job.sorted_partitions(0, 0) == 1
    for n in (0, 1, per - 1, per, per + 1, 10**9):
        for cores in (1, 2, 3, 8):
            parts = spark_job.sorted_partitions(n, cores)
            assert parts % cores == 0 and parts >= cores
            assert parts * per >= n and (parts - cores) * per < max(n, 1)


def test_the_sorted_frame_is_globally_ordered_across_its_partitions(spark: Any) -> None:
    ids = [f"id{i:05d}" for i in np.random.default_rng(3).permutation(5000)]
    universe = spark.createDataFrame([(i,) for i in ids], "example_id string")
    labels = spark.createDataFrame([(ids[0], 1.0)], "example_id string, value double")
    frame = spark_job.joined_sorted(universe, labels, default_label=0.0, n=len(ids))
    # One shuffle: the union's range exchange; the per-id aggregation reuses its partitioning.
    plan = frame._jdf.queryExecution().executedPlan().toString()  # before any action ran
    assert plan.count("Exchange rangepartitioning") == 1 and "Exchange hashpartitioning" not in plan
    # One sort per partition, below a sort aggregate whose output keeps its order (no hash
    # aggregate, no second sort): the plan the joining pass was measured with.
    assert "SortAggregate" in plan and "HashAggregate" not in plan
    assert plan.count("Sort [example_id") == 1
    assert frame.rdd.getNumPartitions() == spark_job.sorted_partitions(
        len(ids), spark.sparkContext.defaultParallelism
    )
    parts = frame.rdd.glom().map(lambda rows: [row.example_id for row in rows]).collect()
    assert sum(len(p) for p in parts) == len(ids) and all(parts)
    assert [i for p in parts for i in p] == sorted(ids)  # partition order is id order
    rows = {row.example_id: row for row in frame.collect()}
    assert rows[ids[0]].label == 1.0 and rows[ids[1]].label == 0.0
    assert {(row.in_examples, row.in_labels) for row in rows.values()} == {(1, 1), (1, 0)}


def test_frame_faults_count_extra_rows_and_ids_outside_the_universe(spark: Any) -> None:
    frame = spark.createDataFrame(
        list(zip("abcde", [1, 2, 0, 3, 1], [0, 1, 1, 2, 1], strict=True)),
        "example_id string, in_examples int, in_labels int",
    )
    faults, rows = spark_job.frame_faults(frame)
    assert faults == spark_job.InputFaults(duplicate_examples=3, duplicate_labels=1, outside=1)
    assert rows == 5
    assert faults + faults == spark_job.InputFaults(
        duplicate_examples=6, duplicate_labels=2, outside=2
    )
    spark_job.InputFaults().check("example_id")  # a valid input passes
    with pytest.raises(SparkJobError, match="examples: duplicate example_ids \\(3 extra rows\\)"):
        faults.check("example_id")
    # Null and malformed ids are counted per input in rows (in_examples / in_labels), and named
    # before duplicates.
    bad = spark.createDataFrame(
        [(None, 2, 1), ("has space", 1, 0), ("x" * 129, 0, 3), ("ok", 1, 1)],
        "example_id string, in_examples int, in_labels int",
    )
    faults, rows = spark_job.frame_faults(bad)
    assert rows == 4
    assert faults == spark_job.InputFaults(
        null_examples=2, null_labels=1, bad_examples=1, bad_labels=3,
        duplicate_examples=1, duplicate_labels=2, outside=1,
    )  # fmt: skip
    with pytest.raises(SparkJobError, match="examples: 2 null example_id"):
        faults.check("example_id")
    with pytest.raises(SparkJobError, match="labels: 3 example_id\\(s\\) are not 1-128"):
        dataclasses.replace(faults, null_examples=0, null_labels=0, bad_examples=0).check(
            "example_id"
        )


# Ids a line terminator ends (Java's "$" matched before it), the edges of the length, and
# characters either side of the class.
_TRICKY_IDS = [
    "ok", "a-b.c:d_E9", "a\n", "a\r\n", "a\r", "a\u2028", "a\u2029", "a\u0085", "\n", "a\nb",
    "", "x" * 128, "x" * 129, "y" * 127 + "\n", "a b", "a,b", "a/b", "caf\u00e9", "a\x00", "a\t",
    "[a]", "a^", "a\\", "\u0661", "\uff21",
]  # fmt: skip


def test_the_jvm_id_pattern_admits_exactly_the_shared_patterns_characters() -> None:
    """The class lists every character EXAMPLE_ID_PATTERN admits, over all of Unicode."""
    import re

    from shared.message import EXAMPLE_ID_PATTERN

    pattern = spark_job.jvm_example_id_pattern()
    assert pattern.startswith("\\A[") and pattern.endswith("]+\\z")
    admitted = {chr(c) for c in range(0x110000) if re.fullmatch(EXAMPLE_ID_PATTERN, chr(c))}
    assert len(admitted) == 26 * 2 + 10 + 4
    listed = set(pattern[3:-4].replace("\\", ""))
    assert listed == admitted


def test_frame_faults_judge_each_id_as_the_message_does(spark: Any) -> None:
    """The JVM's check agrees with ``shared.message.check_example_id`` id by id."""
    from shared.message import check_example_id

    def valid(example_id: str) -> bool:
        try:
            check_example_id(example_id)
        except ValueError:
            return False
        return True

    # One frame, one action: id i stands for 2^i rows of the universe, so the malformed rows'
    # sum names each malformed id by its bit.
    assert len(_TRICKY_IDS) < 31
    frame = spark.createDataFrame(
        [(example_id, 1 << i, 0) for i, example_id in enumerate(_TRICKY_IDS)],
        "example_id string, in_examples int, in_labels int",
    )
    faults, rows = spark_job.frame_faults(frame)
    assert rows == len(_TRICKY_IDS)
    for i, example_id in enumerate(_TRICKY_IDS):
        assert bool(faults.bad_examples >> i & 1) != valid(example_id), repr(example_id)


def test_the_labeldp_release_command_runs_the_job(
    spark: Any, labels_party: LabelsParty, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    from labeldp.cli import main

    name = next(_names)
    labels_party.create_dataset(name)
    ids, labelled = _data(500, seed=5)
    examples, labels = write_inputs(tmp_path / "in", ids, labelled)
    out = tmp_path / "message"
    argv = ["release", "--engine", "spark", "--dataset", name, "--labels-url", labels_party.url,
            "--examples", str(examples), "--labels", str(labels), "--epsilon", "0.5",
            "--mechanism", "rr_on_bins", "--params", '{"bins": 8}', "--out", str(out)]  # fmt: skip
    monkeypatch.delenv("LABELDP_ADVERTISER_TOKEN", raising=False)
    assert main(argv) == 2 and "LABELDP_ADVERTISER_TOKEN" in capsys.readouterr().err
    monkeypatch.setenv("LABELDP_ADVERTISER_TOKEN", labels_party.tokens["advertiser"])
    assert main(argv) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["out"] == str(out) and out.is_dir()
    assert Decimal(labels_party.dataset(name)["epsilon_spent"]) == Decimal("0.5")
    with labels_party.client("publisher") as client:
        header, _, _ = read_parquet_message(out, labels_party=client)
    assert header.mechanism == "rr_on_bins" and len(header.histogram.probs) == 8


def test_external_releases_are_bound_to_the_datasets_universe(
    spark: Any, labels_party: LabelsParty, tmp_path: Path
) -> None:
    """Issue 24, item 2: the first external release of a dataset without registered examples
    fixes its universe (its n and the digest of its sorted ids); a later job over another number
    of ids is refused at the charge (422 naming n, nothing spent), one over as many other ids at
    publication (409 naming universe_sha256; charged first, so its charge stays, marked failed);
    a dataset with registered examples takes only a job over exactly those ids (n is refused at
    the charge, 422, nothing spent)."""
    name = next(_names)
    labels_party.create_dataset(name)
    ids, labelled = _data(800, seed=21)
    examples, labels = write_inputs(tmp_path / "in", ids, labelled)
    run(_config(labels_party, tmp_path, name, examples, labels), spark=spark)
    # The same universe again: recorded.
    again = _config(labels_party, tmp_path, name, examples, labels, out=tmp_path / "again")
    run(again, spark=spark)
    spent = Decimal(labels_party.dataset(name)["epsilon_spent"])
    assert spent == Decimal("2")
    more_ids, more_labelled = _data(801, seed=22)
    more = write_inputs(tmp_path / "more", more_ids, more_labelled)
    bigger = _config(labels_party, tmp_path, name, *more, out=tmp_path / "more_out")
    with pytest.raises(SparkJobError, match="n must be 800"):
        run(bigger, spark=spark)
    assert Decimal(labels_party.dataset(name)["epsilon_spent"]) == spent
    assert not bigger.staging.exists() and not bigger.out.exists()
    other_ids = [f"other-{i:06d}" for i in range(800)]
    other = write_inputs(tmp_path / "other", other_ids, {other_ids[0]: 1.0})
    refused = _config(labels_party, tmp_path, name, *other, out=tmp_path / "other_out")
    # The digest of the universe is known once the body is written, after the charge: the
    # publication is refused, the release marked failed, its charge kept, nothing published.
    with pytest.raises(SparkJobError, match="universe_sha256"):
        run(refused, spark=spark)
    assert Decimal(labels_party.dataset(name)["epsilon_spent"]) == spent + 1
    assert [e["kind"] for e in labels_party.ledger(name)][-1] == "failure"
    assert not refused.staging.exists() and not refused.out.exists()

    registered = next(_names)
    labels_party.create_dataset(registered)
    with labels_party.client("publisher") as publisher:
        publisher.register_examples(registered, ids[:-1])  # one id short of the job's
    # Other labels over the same ids (the same labels would be flagged: see below).
    _, relabelled = _data(800, seed=23)
    relabelled = {ids[i]: v for i, v in enumerate(relabelled.values())}
    examples, labels = write_inputs(tmp_path / "relabelled", ids, relabelled)
    mismatch = _config(labels_party, tmp_path, registered, examples, labels, out=tmp_path / "r")
    with pytest.raises(SparkJobError, match="registered examples"):  # n: refused at the charge
        run(mismatch, spark=spark)
    assert Decimal(labels_party.dataset(registered)["epsilon_spent"]) == 0
    assert not mismatch.staging.exists()
    with labels_party.client("publisher") as publisher:
        publisher.register_examples(registered, ids[-1:])
    run(_config(labels_party, tmp_path, registered, examples, labels, out=tmp_path / "ok"),
        spark=spark)  # fmt: skip
    assert Decimal(labels_party.dataset(registered)["epsilon_spent"]) == Decimal("1")
    _verify_ledger(labels_party)


def test_ledger_verify_names_datasets_charged_for_the_same_labels(
    spark: Any, labels_party: LabelsParty, tmp_path: Path
) -> None:
    """Issue 24, item 2: each external release records the digest of the labels input it read
    (keyed: ``labels_input_hmac`` in its randomizer entry); the same labels charged to two datasets
    (each budget holds, their sum does not) make ``ledger verify`` fail, naming both."""
    first, second = next(_names), next(_names)
    ids, labelled = _data(600, seed=31)
    examples, labels = write_inputs(tmp_path / "in", ids, labelled)
    for name in (first, second):
        labels_party.create_dataset(name)
        run(_config(labels_party, tmp_path, name, examples, labels, out=tmp_path / name),
            spark=spark)  # fmt: skip
    entries = [e for e in labels_party.ledger(first) if e["kind"] == "randomizer"]
    digest = entries[0]["parameters"]["labels_input_hmac"]
    # The ledger keeps the digest keyed by this database's secret (migration 0013), never the
    # sha256 of the labels files, which a ledger reader could test guessed labels against.
    raw = spark_job.input_digest(str(labels))
    assert raw is not None and raw not in json.dumps(labels_party.ledger(first))
    with sqlite3.connect(labels_party.service.db_path) as conn:
        (key,) = conn.execute("SELECT value FROM instance_secrets").fetchone()
    assert digest == hmac.new(key, raw.encode("ascii"), hashlib.sha256).hexdigest()
    done = subprocess.run(
        [sys.executable, "-m", "labels_party", "ledger", "verify", "--db",
         str(labels_party.service.db_path)],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert done.returncode != 0
    assert f"labels input {digest[:16]} was charged to 2 datasets" in done.stdout + done.stderr
    assert repr(first) in done.stdout + done.stderr and repr(second) in done.stdout + done.stderr
