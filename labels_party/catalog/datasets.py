"""Datasets: creation with public label bounds and a budget, lookup, and the public view.

What each role may see: counts the role already knows or that carry no label information.
``n_labels`` (how many examples have a label) is label information when ``default_label``
means "no conversion", so only the advertiser, who owns the labels, sees it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, TypeVar

from sqlalchemy import Connection, delete, func, insert, select, update

from labels_party.budget import accountant, ledger
from labels_party.budget import idempotency as idem
from labels_party.db.engine import Database
from labels_party.db.models import (
    datasets,
    entries,
    model_releases,
    public_feature_sets,
    releases,
)
from labels_party.errors import BadInputError, ConflictError, FieldError, NotFoundError
from shared import epsilon as amounts
from shared.errors import InvalidParameterError
from shared.mechanisms.histogram import MAX_BINS, bin_edges
from shared.segments import check_segment_column

# Starts with a letter or digit: "." and ".." would be dot segments that HTTP clients collapse
# out of a URL, so such a dataset could be created but never addressed.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$"
_NAME_RE = re.compile(NAME_PATTERN)
# Looking a dataset up accepts the older, laxer rule (datasets created before it still load).
LOOKUP_PATTERN = r"^[A-Za-z0-9_.\-]{1,64}$"
NAME_RULE = "must be 1-64 characters of letters, digits, '_.-', starting with a letter or digit"
OPEN, RELEASED, ARCHIVED = "open", "released", "archived"
# Budget comparisons allow this relative slack so that, e.g., ten spends of 0.1 fit a budget
# of 1.0 despite binary rounding (1e-9 of the budget: far below any meaningful epsilon).


def utc_now() -> str:
    """The current time as an ISO-8601 UTC string with microseconds (stored as text)."""
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def check_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise BadInputError(
            "invalid dataset name",
            [FieldError(field="name", message=NAME_RULE)],
        )
    return name


class StaleSnapshot(Exception):
    """The dataset's labels changed between a release's snapshot and its write lock."""


STALE_ATTEMPTS = 4
T = TypeVar("T")


def retry_while_stale(attempt: Callable[[], T], *, dataset: str, what: str) -> T:
    """Run ``attempt`` (snapshot, compute, then store if nothing changed) until it is not
    stale; after :data:`STALE_ATTEMPTS` a 409 asks the caller to retry (``what``: the noun)."""
    for _ in range(STALE_ATTEMPTS):
        try:
            return attempt()
        except StaleSnapshot:
            continue
    raise ConflictError(
        f"dataset {dataset!r} kept changing while the {what} was computed; retry",
        [FieldError(field="dataset", message=f"labels changed during the {what}")],
    )


@dataclass(frozen=True, kw_only=True)
class DatasetRow:
    """One row of ``datasets``."""

    id: int
    name: str
    label_min: float
    label_max: float
    default_label: float
    epsilon_budget: float
    epsilon_spent: float
    epsilon_budget_exact: str | None
    epsilon_spent_exact: str | None
    delta_budget_exact: str | None
    delta_spent_exact: str | None
    state: str
    n_examples: int
    n_labels: int
    data_version: int
    created: str
    segment_column: str | None = None
    universe_sha256: str | None = None

    @classmethod
    def from_row(cls, row: Any) -> DatasetRow:
        return cls(**{key: row._mapping[key] for key in cls.__dataclass_fields__})


@dataclass(frozen=True, kw_only=True)
class DatasetSpec:
    """What an operator fixes when creating a dataset (all public)."""

    name: str
    label_min: float
    label_max: float
    default_label: float
    epsilon_budget: Decimal
    # The total delta (epsilon, delta) model releases may spend; 0: none (label DP only).
    delta_budget: Decimal = amounts.ZERO
    # The public attribute examples are segmented by (``shared.segments``); None: none.
    segment_column: str | None = None

    def __post_init__(self) -> None:
        errors: list[FieldError] = []
        check_name(self.name)
        if self.segment_column is not None:
            try:
                check_segment_column(self.segment_column)
            except InvalidParameterError as exc:
                errors.append(FieldError(field="segment_column", message=str(exc)))
        exact = {"epsilon_budget": amounts.exact}
        if self.delta_budget != 0:
            exact["delta_budget"] = accountant.exact_delta
        for field, parse in exact.items():
            try:
                object.__setattr__(self, field, parse(getattr(self, field), name=field))
            except InvalidParameterError as exc:
                errors.append(FieldError(field=field, message=str(exc)))
        for field in ("label_min", "label_max", "default_label"):
            if not math.isfinite(getattr(self, field)):
                errors.append(FieldError(field=field, message="must be a finite number"))
        if not errors:
            if self.label_min >= self.label_max:
                errors.append(FieldError(field="label_max", message="must be > label_min"))
            elif not math.isfinite(self.label_max - self.label_min):
                errors.append(
                    FieldError(field="label_max", message="label_max - label_min must be finite")
                )
            elif not _grid_representable(self.label_min, self.label_max):
                errors.append(
                    FieldError(
                        field="label_max",
                        message=f"[label_min, label_max] too narrow for its magnitude: "
                        f"{MAX_BINS} equal histogram cells must be distinct floats",
                    )
                )
            elif not self.label_min <= self.default_label <= self.label_max:
                errors.append(
                    FieldError(field="default_label", message="must lie in [label_min, label_max]")
                )
        if errors:
            raise BadInputError("invalid dataset", errors)

    def ledger_parameters(self) -> dict[str, Any]:
        """What the dataset's creation entry records: bounds, default label, exact budgets (the
        delta budget only when there is one); ``ledger verify`` starts the totals from it."""
        recorded: dict[str, Any] = {
            "label_min": self.label_min,
            "label_max": self.label_max,
            "default_label": self.default_label,
            "epsilon_budget": amounts.text(self.epsilon_budget),
        }
        if self.delta_budget > 0:
            recorded["delta_budget"] = amounts.text(self.delta_budget)
        if self.segment_column is not None:
            recorded["segment_column"] = self.segment_column
        return recorded


def _grid_representable(lo: float, hi: float) -> bool:
    """Whether every release's histogram grid (up to MAX_BINS cells) exists in float64."""
    try:
        bin_edges(lo=lo, hi=hi, bins=MAX_BINS)
    except InvalidParameterError:
        return False
    return True


def create_dataset(
    db: Database, spec: DatasetSpec, *, actor_role: str, actor: str | None = None
) -> DatasetRow:
    """Create a dataset and record its budget in the ledger (409 if the name exists)."""
    now = utc_now()
    with db.write() as conn:
        if conn.execute(select(datasets.c.id).where(datasets.c.name == spec.name)).first():
            raise ConflictError(
                f"dataset {spec.name!r} already exists",
                [FieldError(field="name", message="already exists")],
            )
        conn.execute(
            insert(datasets).values(
                name=spec.name,
                label_min=spec.label_min,
                label_max=spec.label_max,
                default_label=spec.default_label,
                **accountant.columns("epsilon_budget", spec.epsilon_budget),
                **accountant.columns("epsilon_spent", amounts.ZERO),
                **_delta_columns(spec.delta_budget),
                state=OPEN,
                n_examples=0,
                n_labels=0,
                data_version=0,
                created=now,
                segment_column=spec.segment_column,
            )
        )
        ledger.record_event(
            conn,
            time=now,
            dataset=spec.name,
            kind=ledger.KIND_DATASET,
            actor_role=actor_role,
            actor=actor,
            parameters=spec.ledger_parameters(),
        )
        return load(conn, spec.name)


def _delta_columns(delta_budget: Decimal) -> dict[str, str | None]:
    """A dataset's delta columns at creation (NULL, read as 0, when it has no delta budget)."""
    if delta_budget == 0:
        return {"delta_budget_exact": None, "delta_spent_exact": None}
    return {"delta_budget_exact": amounts.text(delta_budget), "delta_spent_exact": "0"}


def load(conn: Connection, name: str, *, for_update: bool = False) -> DatasetRow:
    """The dataset called ``name`` (404 if unknown); ``for_update`` locks the row."""
    query = select(datasets).where(datasets.c.name == name)
    if for_update:
        query = query.with_for_update()
    row = conn.execute(query).first()
    if row is None:
        raise NotFoundError(
            f"dataset {name!r} not found", [FieldError(field="dataset", message="unknown dataset")]
        )
    return DatasetRow.from_row(row)


def model_release_counts(conn: Connection, dataset_id: int | None = None) -> dict[int, int]:
    """Model releases per dataset id (only ``dataset_id``'s when given; a dataset without any
    is absent): the one count a dataset's view and the listing show as ``n_model_releases``."""
    query = select(model_releases.c.dataset_id, func.count()).group_by(model_releases.c.dataset_id)
    if dataset_id is not None:
        query = query.where(model_releases.c.dataset_id == dataset_id)
    return {int(key): int(count) for key, count in conn.execute(query).all()}


def view(db: Database, name: str, *, role: str) -> dict[str, Any]:
    """``GET /v1/datasets/{name}``: the dataset as shown to ``role``, with the ids of its
    releases (oldest first) and its model-release count, read in one snapshot."""
    with db.read() as conn:
        row = load(conn, name)
        ids = conn.execute(
            select(releases.c.id)
            .where(releases.c.dataset_id == row.id)
            .order_by(releases.c.created, releases.c.id)
        ).scalars()
        n_models = model_release_counts(conn, row.id).get(row.id, 0)
        return public_view(row, list(ids), role=role, n_model_releases=n_models)


def public_view(
    row: DatasetRow, release_ids: list[str], *, role: str, n_model_releases: int
) -> dict[str, Any]:
    """The dataset as shown to ``role`` (``n_labels`` for the advertiser only)."""
    view: dict[str, Any] = {
        "name": row.name,
        "label_min": row.label_min,
        "label_max": row.label_max,
        "default_label": row.default_label,
        **accountant.budget_of(row).public(),
        "state": row.state,
        "n_examples": row.n_examples,
        "releases": release_ids,
        "n_model_releases": n_model_releases,
        "created": row.created,
    }
    if row.segment_column is not None:
        view["segment_column"] = row.segment_column
    if role == "advertiser":
        view["n_labels"] = row.n_labels
    return view


def refuse_archived(row: DatasetRow) -> None:
    """The one 409 for any write on an archived dataset (its labels and ids were deleted)."""
    if row.state == ARCHIVED:
        raise ConflictError(
            f"dataset {row.name!r} is archived: its labels and example ids were deleted",
            [FieldError(field="dataset", message="archived")],
        )


def top_up(
    db: Database,
    name: str,
    *,
    add: Decimal,
    reason: str,
    actor_role: str,
    actor: str | None = None,
    key: idem.IdempotencyKey | None = None,
) -> bool:
    """Raise a dataset's budget by ``add`` (operator), ledgered with who and why; False if
    ``key`` names a top-up already (a repeat: nothing is added again)."""
    with db.write() as conn:
        row = load(conn, name, for_update=True)
        if idem.replay(conn, row.id, key) is not None:
            return False
        refuse_archived(row)
        time = utc_now()
        seq = accountant.top_up(
            conn, row, add=add, reason=reason, time=time, actor_role=actor_role, actor=actor
        )
        idem.remember(conn, row.id, key, made=f"ledger:{seq}", answer={}, time=time)
    return True


def archive(
    db: Database, name: str, *, reason: str, actor_role: str, actor: str | None = None
) -> DatasetRow:
    """Delete a dataset's labels and example ids for good; keep its releases and its ledger.

    Ledgered (kind ``archive``, epsilon 0). An archived dataset takes no ingest and no release;
    its messages (already public) stay downloadable.
    """
    with db.write() as conn:
        row = load(conn, name, for_update=True)
        if row.state == ARCHIVED:
            raise ConflictError(
                f"dataset {name!r} is already archived",
                [FieldError(field="dataset", message="already archived")],
            )
        conn.execute(delete(entries).where(entries.c.dataset_id == row.id))
        # The public feature sets hold the example ids too: their ids and matrices go, their
        # columns, size and digest stay (the model releases made from them cite them).
        conn.execute(
            update(public_feature_sets)
            .where(public_feature_sets.c.dataset_id == row.id)
            .values(ids="", matrix=b"")
        )
        conn.execute(
            update(datasets)
            .where(datasets.c.id == row.id)
            .values(state=ARCHIVED, n_examples=0, n_labels=0, data_version=row.data_version + 1)
        )
        ledger.record_event(
            conn,
            time=utc_now(),
            dataset=name,
            kind=ledger.KIND_ARCHIVE,
            actor_role=actor_role,
            actor=actor,
            parameters={"reason": reason, "state_before": row.state},
        )
        return load(conn, name)
