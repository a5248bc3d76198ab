"""Externally executed releases: record the spend of a release a Spark job ran elsewhere.

The job (``labels_party.spark_job``) runs the SAME plan (``shared.plan.plan_release``) on its
driver and the same engine functions on its executors, writes its message (header.json + a
Parquet body) to a staging location, and only then calls this: the labels party recomputes the
plan from ITS dataset configuration (bounds, default label) and the job's n, refuses any
difference from the plan and header the job sent, and in ONE write transaction checks the
budget, inserts the release row (``storage = "external"``, the header kept, no message chunks)
and appends the two ledger entries through ``accountant.spend``, exactly as for its own
releases. The job publishes its message (renames staging to its output) only after this
returns. Replaying the same request (same release id, same header) returns the recorded
release without spending again, so a job that lost the answer can ``--resume``.
"""

from __future__ import annotations

import hashlib
import math
import re
from typing import Any

from pydantic import ValidationError
from sqlalchemy import select, update

from labels_party import datasets as ds
from labels_party.db.engine import Database
from labels_party.db.models import datasets, releases
from labels_party.errors import BadInputError, ConflictError, FieldError
from labels_party.releases import (
    RELEASE_ID_PATTERN,
    _public,
    plan_for,
    release_charges,
    release_record,
    store_and_spend,
)
from shared.mechanisms.histogram import bin_edges
from shared.message import (
    FORMAT_VERSION,
    NO_MECHANISM,
    MessageHeader,
    UniverseDigest,
    json_safe,
)
from shared.plan import AUTO, ReleasePlan, ReleaseRequest

EXTERNAL = "external"


def header_bytes(header: MessageHeader) -> bytes:
    """header.json as the job writes it and the labels party hashes it (pydantic's JSON)."""
    return header.model_dump_json().encode("utf-8")


def _refuse(field: str, message: str) -> BadInputError:
    return BadInputError(
        f"the external release does not match the labels party's plan: {field} {message}",
        [FieldError(field=field, message=message)],
    )


def parse_header(raw: dict[str, Any]) -> MessageHeader:
    try:
        return MessageHeader.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = "header." + ".".join(str(part) for part in first["loc"])
        raise BadInputError(
            "invalid message header", [FieldError(field=where, message=first["msg"])]
        ) from None


def check_against_plan(
    header: MessageHeader, plan: ReleasePlan, row: ds.DatasetRow, *, requested: str
) -> None:
    """Refuse a header whose public values are not what ``plan`` on ``row`` produces."""
    if header.format_version != FORMAT_VERSION:
        raise _refuse("header.format_version", f"must be {FORMAT_VERSION}")
    if not re.fullmatch(RELEASE_ID_PATTERN, header.release_id):
        raise _refuse("header.release_id", "must be rel_ and 24 hex digits")
    if header.dataset != row.name:
        raise _refuse("header.dataset", f"must be {row.name!r}")
    if header.n != plan.n:
        raise _refuse("header.n", f"must equal n ({plan.n})")
    expected: dict[str, Any] = {
        "epsilon1": plan.epsilon1_float,
        "epsilon2": plan.randomizer_float,
        "label_min": row.label_min,
        "label_max": row.label_max,
        "default_label": row.default_label,
        "model_dim": plan.model_dim,
        "label_mean_epsilon": plan.label_mean_float,
        "label_mean_variance": plan.label_mean_variance,
    }
    for key, value in expected.items():
        if getattr(header, key) != value:
            raise _refuse(f"header.{key}", f"must be {value!r} (the plan's)")
    if (header.label_mean is None) != (plan.label_mean_float is None):
        raise _refuse("header.label_mean", "present exactly when the plan buys a DP mean")
    edges = bin_edges(lo=plan.lo, hi=plan.hi, bins=plan.bins).tolist()
    if header.histogram.edges != edges:
        raise _refuse("header.histogram.edges", f"must be the plan's {plan.bins} cells")
    if not math.isclose(sum(header.histogram.probs), 1.0, abs_tol=1e-9):
        raise _refuse("header.histogram.probs", "must sum to 1")
    if header.mechanism == NO_MECHANISM or requested not in (AUTO, header.mechanism):
        raise _refuse("header.mechanism", f"is not what {requested!r} may choose")


def record(
    db: Database,
    *,
    dataset: str,
    request: ReleaseRequest,
    n: int,
    universe_sha256: str,
    labels_sha256: str | None = None,
    plan_given: dict[str, Any],
    header_raw: dict[str, Any],
    actor_role: str,
    actor: str | None = None,
) -> tuple[dict[str, Any], bool]:
    """Check and record one external release; returns (its metadata, whether it is new)."""
    header = parse_header(header_raw)
    with db.read() as conn:
        row = ds.load(conn, dataset)
        registered = registered_universe(db, conn, row) if row.n_examples else None
    ds.refuse_archived(row)
    check_universe(row, n=n, universe_sha256=universe_sha256, registered=registered)
    plan = plan_for(row, request, n=n)
    ours = json_safe(plan.public())
    for key in sorted(set(ours) | set(plan_given)):
        if ours.get(key) != plan_given.get(key):
            raise _refuse(f"plan.{key}", f"must be {ours.get(key)!r} (recomputed here)")
    check_against_plan(header, plan, row, requested=request.mechanism)
    text = header_bytes(header)
    record_ = release_record(
        header,
        plan,
        requested_mechanism=request.mechanism,
        actor_role=actor_role,
        actor=actor,
        binary_sha256=hashlib.sha256(text).hexdigest(),
        binary_size=len(text),
        storage=EXTERNAL,
        external_header=text.decode("utf-8"),
    )
    charges = release_charges(
        plan,
        requested_mechanism=request.mechanism,
        header=header,
        bins=plan.bins,
        inputs={"labels_input_sha256": labels_sha256} if labels_sha256 else None,
    )
    with db.write() as conn:
        current = ds.load(conn, row.name, for_update=True)
        ds.refuse_archived(current)
        existing = conn.execute(select(releases).where(releases.c.id == header.release_id)).first()
        if existing is not None:
            same = (
                existing.storage == EXTERNAL
                and existing.dataset_id == row.id
                and existing.external_header == record_["external_header"]
            )
            if not same:
                raise ConflictError(
                    f"release {header.release_id!r} exists with other content",
                    [FieldError(field="header.release_id", message="already used")],
                )
            return _public(existing, dataset=row.name, bins=plan.bins), False
        if current.n_examples != (registered[0] if registered else 0):
            raise ConflictError(
                f"dataset {row.name!r}: its registered examples changed during the check; retry",
                [FieldError(field="dataset", message="examples changed")],
            )
        check_universe(current, n=n, universe_sha256=universe_sha256, registered=registered)
        store_and_spend(conn, current, record_, charges, plan, time=ds.utc_now())
        if current.n_examples == 0 and current.universe_sha256 is None:
            conn.execute(
                update(datasets)
                .where(datasets.c.id == current.id)
                .values(universe_sha256=universe_sha256)
            )
    return _public(record_, dataset=row.name, bins=plan.bins), True


def registered_universe(db: Database, conn: Any, row: ds.DatasetRow) -> tuple[int, str]:
    """(n, ``shared.message.universe_digest``) of the dataset's registered example ids, read
    in the message's order (ascending id), in pieces."""
    digest = UniverseDigest()
    count = 0
    cursor = conn.connection.driver_connection.cursor()
    try:
        cursor.execute(
            db.sql(
                "SELECT example_id FROM entries WHERE dataset_id = ? AND registered = 1 "
                "ORDER BY example_id"
            ),
            (row.id,),
        )
        while batch := cursor.fetchmany(65_536):
            digest.update("\n".join(example_id for (example_id,) in batch).encode("utf-8"))
            count += len(batch)
    finally:
        cursor.close()
    return count, digest.hexdigest()


def check_universe(
    row: ds.DatasetRow, *, n: int, universe_sha256: str, registered: tuple[int, str] | None
) -> None:
    """Refuse an external release over another universe than the dataset's (issue 24): the
    registered examples' when it has some (``n`` and digest, 422), else the one its first
    external release fixed (409): a job cannot charge this dataset for other labels."""
    if registered is not None:
        count, digest = registered
        if n != count:
            raise _refuse("n", f"must be the {count} registered examples")
        if universe_sha256 != digest:
            raise _refuse("universe_sha256", "must be the registered examples' digest")
        return
    if row.universe_sha256 is not None and universe_sha256 != row.universe_sha256:
        raise ConflictError(
            f"dataset {row.name!r} was first released over another universe of example ids",
            [
                FieldError(
                    field="universe_sha256",
                    message="differs from the universe of the dataset's first external release",
                )
            ],
        )
