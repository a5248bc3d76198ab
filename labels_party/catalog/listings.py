"""Read-only listings: datasets with their release counts, a dataset's label and model releases,
a header.

What the operator console and ``GET /v1/datasets`` show. Everything here is public metadata
(bounds, budgets, what each release spent, the message header: the epsilon1-DP histogram and the
randomizer's parameters); no label, and nothing computed from labels outside a release, is read.
A publisher sees only the datasets it registered examples in (it has one token, so "it
registered" means "has registered examples").
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select

from labels_party.budget import ledger
from labels_party.catalog import datasets as ds
from labels_party.db.engine import Database
from labels_party.db.models import (
    PART_HEAD,
    datasets,
    message_chunks,
    model_releases,
    public_feature_sets,
    releases,
)
from labels_party.errors import FieldError, NotFoundError
from shared import epsilon as amounts
from shared.errors import IntegrityError
from shared.message import MessageHeader, decode_header, validated

_AMOUNTS = ("epsilon1", "epsilon2", "epsilon")


def list_datasets(db: Database, *, role: str) -> list[dict[str, Any]]:
    """Every dataset ``role`` may see, by name, with its release count and last release time."""
    counts = (
        select(
            releases.c.dataset_id,
            func.count().label("n_releases"),
            func.max(releases.c.created).label("last_release"),
        )
        .group_by(releases.c.dataset_id)
        .subquery()
    )
    query = (
        select(datasets, counts.c.n_releases, counts.c.last_release)
        .outerjoin(counts, counts.c.dataset_id == datasets.c.id)
        .order_by(datasets.c.name)
    )
    if role == "publisher":
        query = query.where(datasets.c.n_examples > 0)
    with db.read() as conn:
        rows = conn.execute(query).all()
        models = ds.model_release_counts(conn)
        ids: dict[int, list[str]] = {}
        for dataset_id, release_id in conn.execute(
            select(releases.c.dataset_id, releases.c.id).order_by(releases.c.created, releases.c.id)
        ):
            ids.setdefault(dataset_id, []).append(release_id)
    out = []
    for row in rows:
        view = ds.public_view(
            ds.DatasetRow.from_row(row),
            ids.get(row.id, []),
            role=role,
            n_model_releases=models.get(row.id, 0),
        )
        view["n_releases"] = int(row.n_releases or 0)
        view["last_release"] = row.last_release
        out.append(view)
    return out


def list_releases(db: Database, name: str) -> list[dict[str, Any]]:
    """The releases of dataset ``name`` (404 if unknown), newest first."""
    with db.read() as conn:
        row = ds.load(conn, name)
        found = conn.execute(
            select(releases)
            .where(releases.c.dataset_id == row.id)
            .order_by(releases.c.created.desc(), releases.c.id.desc())
        ).all()
    return [
        {
            "id": rel.id,
            "dataset": row.name,
            "created": rel.created,
            "mechanism": rel.mechanism,
            "requested_mechanism": rel.requested_mechanism,
            **{key: _amount(rel._mapping, key) for key in _AMOUNTS},
            "n": rel.n,
            "actor_role": rel.actor_role,
            "actor": rel.actor,
            "message_sha256": rel.message_sha256,
        }
        for rel in found
    ]


def list_model_releases(db: Database, name: str) -> list[dict[str, Any]]:
    """The model releases of dataset ``name`` (404 if unknown), newest first: what each
    released from which public features, what it was charged, when and by whom."""
    with db.read() as conn:
        row = ds.load(conn, name)
        found = conn.execute(
            select(model_releases, public_feature_sets.c.n.label("n"))
            .join(public_feature_sets, public_feature_sets.c.id == model_releases.c.features_id)
            .where(model_releases.c.dataset_id == row.id)
            .order_by(model_releases.c.created.desc(), model_releases.c.id.desc())
        ).all()
    return [
        {
            "id": model.id,
            "dataset": row.name,
            "created": model.created,
            "estimator": model.estimator,
            "privacy": model.privacy,
            "epsilon": model.epsilon_exact,
            "delta": model.delta_exact,
            "features_id": model.features_id,
            "n": model.n,
            "actor_role": model.actor_role,
            "actor": model.actor,
            "message_sha256": model.message_sha256,
        }
        for model in found
    ]


def _amount(mapping: Any, key: str) -> str:
    """A charge as the API shows it everywhere: exact decimal text (an older row's float taken
    at its exact value), as ``releases`` does."""
    return amounts.text(ledger.stored_amount(mapping.get(f"{key}_exact"), mapping[key]))


def release_header(db: Database, release_id: str) -> MessageHeader:
    """The header of a release's message (404 if unknown): public, no body is read. A release
    executed outside the service (the Spark job) has only its header stored, and it is that."""
    with db.read() as conn:
        data = conn.execute(
            select(message_chunks.c.data).where(
                message_chunks.c.release_id == release_id, message_chunks.c.part == PART_HEAD
            )
        ).scalar()
        external = None
        if data is None:
            external = conn.execute(
                select(releases.c.external_header).where(releases.c.id == release_id)
            ).scalar()
    if data is None and external is None:
        raise NotFoundError(
            f"release {release_id!r} not found", [FieldError(field="id", message="unknown release")]
        )
    try:
        if data is None:
            return validated(MessageHeader, external, what="stored external header")
        return decode_header(bytes(data))
    except IntegrityError as exc:  # a damaged database: say so rather than serve a guess
        raise RuntimeError(f"release {release_id}: stored header is invalid: {exc}") from None
