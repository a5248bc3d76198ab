"""Model releases: a fitted estimator on the publisher's public features, charged in the ledger.

The second, FEATURE-AWARE mode of the product (``shared.estimators``, Shen, Tong & Wang,
"Efficient Propose-Test-Release", and its exact label-DP counterparts). Unlike the one-message
protocol (``labels_party.releasing.releases``) it takes TWO messages: the publisher first sends the
numeric feature columns it chooses (:func:`store_features`; the advertiser sees those columns),
then the labels party releases ONE model fitted on its labels joined with them
(:meth:`ModelReleaseService.create`), as a message of the same schema family
(``shared.model_message``).

Privacy. The features are public (the publisher sent them), so every check on them (rows >=
columns, a non-singular X^T X, query points of the right dimension and with kernel support) is
a public function and may refuse freely. Only the estimator reads labels:

* ``privacy: "label"``: ``label_dp_ols`` / ``label_dp_nw``, pure epsilon-label-DP with the exact
  L1 sensitivity (Laplace noise sampled exactly on integers); charged (epsilon, no delta).
* ``privacy: "eptr"``: ``eptr_ols`` / ``eptr_nw`` / ``eptr_bayes`` (Algorithms 4, 5, 3), (epsilon,
  delta)-DP for a whole example (so also for its label); charged (epsilon, delta). The
  diagnostics gamma and the release probability depend on the labels and are never stored.
  ePTR-OLS without some of r_x, r_theta, c0, ePTR-NW without bandwidth and/or c0 and ePTR-Bayes
  without r_x and/or c0: the product chooses them by small DP estimates (the NW bandwidth by a
  public rule) inside the same charge (``shared.estimators.constants`` / ``nw_constants`` /
  ``bayes``; the family's ``split``, shown by the preview, recorded in the ledger entry; the
  chosen values, DP outputs, in the header). ePTR-NW clips the labels to the dataset's
  [label_min, label_max] unless the request gives ``r_f``.

Every step runs at the largest float not above its exact charge (``shared.epsilon``). Order of
work as for label releases: read a snapshot (budget checked, labels' ``data_version``), compute
outside the write lock, then in ONE write transaction re-check the version and the budget,
store the model release and append its ``model`` ledger entry (``accountant.spend``), and
freeze the dataset. A result that loses a race is discarded unseen, which costs no privacy.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import re
import secrets
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import numpy as np
from sqlalchemy import Connection, insert, select, update

from labels_party.budget import accountant, ledger
from labels_party.budget import idempotency as idem
from labels_party.catalog import datasets as ds
from labels_party.db.engine import Database
from labels_party.db.models import datasets, entries, model_releases, public_feature_sets
from labels_party.errors import BadInputError, ConflictError, FieldError, NotFoundError
from shared import epsilon as amounts
from shared.errors import InvalidParameterError
from shared.estimators import eptr
from shared.estimators import registry as estimators
from shared.estimators.registry import Design, DesignError, FitArgs, Fitted
from shared.message import check_example_id, json_safe
from shared.model_message import (
    MODEL_RELEASE_ID_PATTERN,
    ModelBody,
    ModelHeader,
    ModelMessage,
    model_body_sha256,
)
from shared.rng import Rng, SystemRandom
from shared.service import strict_input

RngFactory = Callable[[], Rng]
COLUMN_PATTERN = r"^[A-Za-z][A-Za-z0-9_.\-]{0,63}$"
_COLUMN_RE = re.compile(COLUMN_PATTERN)
MAX_COLUMNS = 64
_MAX_ERRORS = 10
ID_COLUMN = "example_id"

# ---- public features ------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class FeatureTable:
    """Parsed public features: ids in upload order and one float64 row per id."""

    columns: list[str]
    ids: list[str]
    matrix: np.ndarray

    def sha256(self) -> str:
        """Binds columns, ids and values (little-endian float64, row-major)."""
        digest = hashlib.sha256(b"labeldp-public-features-v1\n")
        digest.update(json.dumps(self.columns).encode("utf-8") + b"\n")
        digest.update("\n".join(self.ids).encode("utf-8") + b"\n")
        digest.update(np.ascontiguousarray(self.matrix, dtype="<f8").tobytes())
        return digest.hexdigest()


def _bad(detail: str, errors: list[tuple[str, str]]) -> BadInputError:
    return BadInputError(detail, [FieldError(field=f, message=m) for f, m in errors[:_MAX_ERRORS]])


def _check_columns(columns: list[str], where: str) -> None:
    errors = []
    if not columns:
        errors.append((where, "at least one numeric column besides example_id"))
    if len(columns) > MAX_COLUMNS:
        errors.append((where, f"at most {MAX_COLUMNS} columns"))
    for name in columns:
        if not isinstance(name, str) or not _COLUMN_RE.fullmatch(name):
            errors.append((where, f"column {name!r} must match {COLUMN_PATTERN}"))
    if len(set(columns)) != len(columns):
        errors.append((where, "column names must be distinct"))
    if errors:
        raise _bad("invalid feature columns", errors)


def _number(cell: Any, *, text: bool) -> float | None:
    """A finite float from a JSON number or (``text``) CSV text; None if it is not one."""
    if isinstance(cell, bool):
        return None
    if isinstance(cell, int | float):
        try:
            value = float(cell)
        except OverflowError:  # a JSON integer of 400 digits
            return None
    elif isinstance(cell, str) and text:
        try:  # the services' one number rule: no "1_000", no full-width digits
            value = strict_input.parse_decimal(cell.strip())
        except ValueError:
            return None
    else:
        return None
    return value if math.isfinite(value) else None


# One row as read: where it is (for errors), its id, its cells by column, its field count.
_Row = tuple[str, Any, Mapping[str, Any], int]


def _csv_rows(text: str) -> tuple[list[str], list[_Row]]:
    """The columns and rows of a CSV body (header ``example_id,col,...``)."""
    reader = csv.reader(io.StringIO(text))
    header = next(reader, None)
    if not header or header[0].strip() != ID_COLUMN:
        raise _bad("CSV needs a header", [("header", f"first column must be {ID_COLUMN}")])
    columns = [name.strip() for name in header[1:]]
    _check_columns(columns, "header")
    rows: list[_Row] = [
        (f"line {i}", row[0], dict(zip(columns, row[1:], strict=False)), len(row))
        for i, row in enumerate(reader, start=2)
        if row
    ]
    return columns, rows


def _json_rows(text: str) -> tuple[list[str], list[_Row]]:
    """The columns and rows of a JSON body (``{"rows": [{"example_id", col: number}]}``)."""
    try:
        document = strict_input.loads(text)  # a repeated key is refused, not read as the last
    except strict_input.DuplicateKeyError as exc:
        raise _bad("invalid JSON", [(exc.field, strict_input.DUPLICATE_KEY_MESSAGE)]) from None
    except RecursionError:
        raise _bad("invalid JSON", [("body", "nested too deeply")]) from None
    except ValueError as exc:
        raise _bad("invalid JSON", [("body", str(exc)[:200])]) from None
    items = document.get("rows") if isinstance(document, dict) else None
    if not isinstance(items, list) or set(document) != {"rows"}:
        raise _bad('JSON body must be {"rows": [...]}', [("rows", "a list of objects")])
    first = items[0] if items and isinstance(items[0], dict) else {}
    columns = [key for key in first if key != ID_COLUMN]
    _check_columns(columns, "rows[0]")
    rows: list[_Row] = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise _bad("invalid row", [(f"rows[{i}]", "must be an object")])
        if set(item) != {ID_COLUMN, *columns}:
            raise _bad(
                "every row must have the same columns",
                [(f"rows[{i}]", f"must have exactly example_id and {columns}")],
            )
        rows.append((f"rows[{i}]", item.get(ID_COLUMN), item, len(columns) + 1))
    return columns, rows


def _row_errors(
    row: _Row, columns: list[str], *, text: bool, into: np.ndarray, ids: list[str]
) -> list[tuple[str, str]]:
    """Check one row: its width, its id (appended to ``ids``), every cell a finite number
    (written into ``into``). Returns its problems."""
    where, example_id, cells, size = row
    if size != len(columns) + 1:
        return [(where, f"must have {len(columns) + 1} fields, has {size}")]
    errors: list[tuple[str, str]] = []
    try:
        ids.append(
            check_example_id(example_id.strip() if isinstance(example_id, str) else example_id)
        )
    except ValueError as exc:
        errors.append((f"{where}.example_id", str(exc)[:200]))
    for c, name in enumerate(columns):
        value = _number(cells.get(name), text=text)
        if value is None:
            errors.append((f"{where}.{name}", "must be a finite number"))
        else:
            into[c] = value
    return errors


def parse_features(body: bytes, media: str) -> FeatureTable:
    """CSV (header ``example_id,col,...``) or JSON (``{"rows": [{"example_id", col: number}]}``).

    Every cell must be a finite number; ids must be valid and distinct; at least one row.
    """
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise _bad("the body is not UTF-8", [("body", "must be UTF-8 text")]) from None
    columns, rows = _csv_rows(text) if media == "text/csv" else _json_rows(text)
    if not rows:
        raise _bad("no feature rows", [("rows", "at least one row")])
    errors: list[tuple[str, str]] = []
    ids: list[str] = []
    matrix = np.empty((len(rows), len(columns)), dtype=np.float64)
    for r, row in enumerate(rows):
        errors += _row_errors(row, columns, text=media == "text/csv", into=matrix[r], ids=ids)
        if len(errors) >= _MAX_ERRORS:
            break
    if errors:
        raise _bad(f"invalid public features ({len(errors)}+ problem(s))", errors)
    if len(set(ids)) != len(ids):
        seen: set[str] = set()
        duplicate = next(i for i in ids if i in seen or seen.add(i))  # type: ignore[func-returns-value]
        raise _bad("duplicate example id", [("example_id", f"{duplicate!r} appears twice")])
    return FeatureTable(columns=columns, ids=ids, matrix=matrix)


def dataset_for_features(db: Database, name: str) -> None:
    """The dataset exists and accepts feature uploads (checked again under the lock): the
    upload's body is read only then, so an unknown dataset is a 404, whatever the body."""
    with db.read() as conn:
        ds.refuse_archived(ds.load(conn, name))


def store_features(
    db: Database, name: str, table: FeatureTable, *, actor_role: str
) -> dict[str, Any]:
    """Store an upload as a new feature set of ``name`` (every id must be registered there)."""
    created = ds.utc_now()
    features_id = "pf_" + secrets.token_hex(12)
    with db.write() as conn:
        row = ds.load(conn, name, for_update=True)
        ds.refuse_archived(row)
        registered: set[str] = set()
        for start in range(0, len(table.ids), 500):
            chunk = table.ids[start : start + 500]
            registered.update(
                conn.execute(
                    select(entries.c.example_id).where(
                        entries.c.dataset_id == row.id,
                        entries.c.registered == 1,
                        entries.c.example_id.in_(chunk),
                    )
                ).scalars()
            )
        unknown = [i for i, example_id in enumerate(table.ids) if example_id not in registered]
        if unknown:
            raise _bad(
                f"{len(unknown)} example id(s) are not registered in dataset {name!r}",
                [(f"rows[{i}].example_id", "not registered in this dataset") for i in unknown],
            )
        record = {
            "id": features_id,
            "dataset_id": row.id,
            "columns": json.dumps(table.columns),
            "n": len(table.ids),
            "ids": "\n".join(table.ids),
            "matrix": np.ascontiguousarray(table.matrix, dtype="<f8").tobytes(),
            "sha256": table.sha256(),
            "created": created,
            "actor_role": actor_role,
        }
        conn.execute(insert(public_feature_sets).values(**record))
    return {
        "id": features_id,
        "dataset": name,
        "columns": table.columns,
        "n": len(table.ids),
        "sha256": record["sha256"],
        "created": created,
    }


def _load_features(conn: Connection, row: ds.DatasetRow, features_id: str | None) -> Any:
    query = select(public_feature_sets).where(public_feature_sets.c.dataset_id == row.id)
    if features_id is None:
        query = query.order_by(public_feature_sets.c.created.desc(), public_feature_sets.c.id)
    else:
        query = query.where(public_feature_sets.c.id == features_id)
    found = conn.execute(query.limit(1)).first()
    if found is None and features_id is not None:
        # A named set that is not this dataset's: bad input, as a malformed name is (422).
        message = f"dataset {row.name!r} has no public features {features_id!r}"
        raise BadInputError(
            message, [FieldError(field="public_features", message="unknown public features")]
        )
    if found is None:
        raise ConflictError(
            f"dataset {row.name!r} has no public features: the publisher uploads them with "
            "POST /v1/datasets/{name}/public-features",
            [FieldError(field="dataset", message="no public features")],
        )
    return found


# ---- model releases -------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ModelRequest:
    """What the advertiser asks for (validated by :func:`check_request`)."""

    estimator: str
    privacy: str
    epsilon: Decimal
    delta: Decimal | None = None
    params: dict[str, Any] = field(default_factory=dict)
    public_features: str | None = None


# The smallest epsilon or delta a model release runs at: an estimator divides by its float
# (noise scales, ePTR's log(1/delta)) and the product's constant searches scale with them, which
# overflow near the float's bottom (a 500 at 1e-310, Bayes' search at 2.3e-308); 1e-100 is far
# below any useful amount. Label releases go down to shared.epsilon.MIN_AMOUNT.
MIN_MODEL_AMOUNT = Decimal("1e-100")


def _refuse_below_floor(name: str, amount: Decimal, errors: list[tuple[str, str]]) -> None:
    """Refuse an amount below :data:`MIN_MODEL_AMOUNT` by name, before anything is read."""
    if amount < MIN_MODEL_AMOUNT:
        errors.append((name, f"must be at least {MIN_MODEL_AMOUNT} for a model release"))


def public_request(request: ModelRequest) -> dict[str, Any]:
    """The request as JSON (exact amounts as text): what an idempotency key's digest covers."""
    return {
        "estimator": request.estimator,
        "privacy": request.privacy,
        "epsilon": amounts.text(request.epsilon),
        "delta": None if request.delta is None else amounts.text(request.delta),
        "params": json_safe(request.params),
        "public_features": request.public_features,
    }


def check_request(request: ModelRequest) -> ModelRequest:
    """Refuse a bad combination naming the field: privacy, delta, each parameter."""
    errors: list[tuple[str, str]] = []
    try:
        family = estimators.get(request.estimator)
    except InvalidParameterError as exc:
        raise _bad("invalid model release", [("estimator", str(exc))]) from None
    if request.privacy not in family.privacies:
        kinds = " or ".join(family.privacies)
        errors.append(("privacy", f"{request.estimator} is released by {kinds} only"))
        raise _bad("invalid model release", errors)
    delta = request.delta
    _refuse_below_floor("epsilon", request.epsilon, errors)
    if request.privacy == "label" and delta is not None:
        errors.append(("delta", "label privacy is pure epsilon-DP: give no delta"))
    elif request.privacy == "eptr":
        if delta is None:
            errors.append(("delta", "eptr needs a delta in (0, 1)"))
        else:
            try:
                delta = accountant.exact_delta(delta)
            except InvalidParameterError as exc:
                errors.append(("delta", str(exc)))
            else:
                _refuse_below_floor("delta", delta, errors)
    allowed = family.allowed(request.privacy)
    for name in family.privacies[request.privacy]:
        if name not in request.params:
            errors.append((f"params.{name}", f"required for {request.estimator}/{request.privacy}"))
    for name in request.params:
        if name not in allowed:
            errors.append(
                (f"params.{name}", f"not a parameter of {request.estimator}/{request.privacy}")
            )
    if errors:
        raise _bad("invalid model release", errors)
    return ModelRequest(
        estimator=request.estimator,
        privacy=request.privacy,
        epsilon=request.epsilon,
        delta=delta,
        params=request.params,
        public_features=request.public_features,
    )


def public_design(request: ModelRequest, features: np.ndarray, columns: list[str]) -> Design:
    """Every check on the public features and parameters (the estimator family's ``design``),
    before any label is read: a 422 naming the field."""
    family = estimators.get(request.estimator)
    try:
        return family.design(request.privacy, request.params, features, columns)
    except DesignError as exc:
        raise _bad(str(exc), [(exc.field, str(exc))]) from None
    except InvalidParameterError as exc:
        raise _bad(str(exc), [("params", str(exc))]) from None


def request_split(request: ModelRequest, design: Design) -> Any:
    """How the request's exact (epsilon, delta) is split when the product chooses some of the
    estimator's parameters (``EstimatorFamily.split``; e.g. ePTR-OLS's constants: their
    estimates' share, then ePTR's rest), None if the estimator gets it all; bound to the
    design's public constants (``EstimatorFamily.bind``), which the alpha check and the fit
    then share. Public: reads the request and the public design only; a refusal is a 422
    naming the field."""
    family = estimators.get(request.estimator)
    try:
        return family.split_for(
            request.privacy, request.params, request.epsilon, request.delta, design
        )
    except DesignError as exc:
        raise _bad(str(exc), [(exc.field, str(exc))]) from None


def refuse_uncovered_alpha(
    request: ModelRequest, design: Design, split: Any, *, lo: float, hi: float
) -> None:
    """A request whose ePTR constants are all given or chosen by public rules fixes its alpha,
    a public number (``EstimatorFamily.public_alpha``). Where no finite noise covers it
    (``eptr.eptr_covers``) the release could only be the "no reply", charged: refuse it
    first, a 422 naming the parameters, before any label is read. (Where the product chooses
    a constant, alpha is a function of DP outputs and such a release is the charged "no
    reply": refusing it would say something about the labels.)"""
    family = estimators.get(request.estimator)
    if family.public_alpha is None or request.delta is None:
        return
    try:
        alpha = family.public_alpha(request.privacy, request.params, design, lo, hi, split)
    except DesignError as exc:
        raise _bad(str(exc), [(exc.field, str(exc))]) from None
    if alpha is None:
        return
    epsilon = amounts.float_at_most(request.epsilon)
    delta = amounts.float_at_most(request.delta)
    if not eptr.eptr_covers(alpha=alpha, epsilon=epsilon, delta=delta):
        if alpha == 0.0:
            message = (
                "these constants give ePTR an alpha that underflows to 0: no noise would certify "
                "it (bring r_x, r_theta or r_f up from the doubles' bottom)"
            )
        else:
            message = (
                f"these constants give ePTR an alpha ({alpha!r}) that no finite noise covers at "
                f"epsilon {amounts.text(request.epsilon)}: the release could only answer 'no "
                "reply' (bring r_x, r_theta, r_f or the bandwidth's 1/sigma^d down, c0 up, or "
                "omit them for the product to choose)"
            )
        raise _bad(message, [("params", message)])


def fit(
    request: ModelRequest,
    design: Design,
    labels: np.ndarray,
    *,
    lo: float,
    hi: float,
    rng: Rng,
    split: Any = None,
) -> Fitted:
    """Run the estimator at floats never above the exact charges (each part of ``split`` at
    its own); only the release leaves."""
    args = FitArgs(
        privacy=request.privacy,
        epsilon=amounts.float_at_most(request.epsilon),
        delta=None if request.delta is None else amounts.float_at_most(request.delta),
        lo=lo,
        hi=hi,
        params=request.params,
        rng=rng,
        split=split,
    )
    return estimators.get(request.estimator).fit(design, labels, args)


def new_model_release_id() -> str:
    return "mrel_" + secrets.token_hex(12)


# The header fields a model's ledger entry repeats, so that the ledger alone tells what was
# released from which features (the message itself is in ``model_releases``).
LEDGERED_HEADER_FIELDS = frozenset(
    {"estimator", "privacy", "features_id", "features_sha256", "columns", "n", "params"}
    | {"noise", "noise_scale", "sensitivity"}
)


class ModelReleaseService:
    """Creates model releases; randomness is injectable for tests (default: the OS CSPRNG)."""

    def __init__(self, db: Database, *, rng_factory: RngFactory | None = None) -> None:
        self._db = db
        self._rng_factory: RngFactory = rng_factory or SystemRandom
        self._slots = threading.BoundedSemaphore(2)
        self._in_flight = idem.InFlight()

    def preview(self, *, dataset: str, request: ModelRequest) -> dict[str, Any]:
        """What ``request`` would charge and leave, after every check a release makes before
        it reads a label (request, dataset state, public features and design): nothing is read
        beyond the public features, nothing spent."""
        request = check_request(request)
        with self._db.read() as conn:
            row = ds.load(conn, dataset)
            ds.refuse_archived(row)
            features = _load_features(conn, row, request.public_features)
            columns = json.loads(features.columns)
            n = len(features.ids.split("\n"))
            matrix = np.frombuffer(features.matrix, dtype="<f8").reshape(n, len(columns))
            design = public_design(request, matrix, columns)
        split = request_split(request, design)
        refuse_uncovered_alpha(request, design, split, lo=row.label_min, hi=row.label_max)
        budget = accountant.budget_of(row)
        delta = request.delta or amounts.ZERO
        constants = {} if split is None else {"constants": _split_preview(split)}
        return {
            "dry_run": True,
            "dataset": row.name,
            "estimator": request.estimator,
            "privacy": request.privacy,
            "n": n,
            "features_id": features.id,
            "columns": columns,
            "intercept": design.intercept,
            "charge": {
                "epsilon": amounts.text(request.epsilon),
                "delta": None if request.delta is None else amounts.text(request.delta),
            },
            "budget": {
                **budget.public(),
                "fits": budget.fits(request.epsilon, delta=delta),
                "after": budget.after(epsilon=request.epsilon, delta=delta).public(),
            },
            **constants,
        }

    def create(
        self,
        *,
        dataset: str,
        request: ModelRequest,
        actor_role: str,
        actor: str | None = None,
        key: idem.IdempotencyKey | None = None,
    ) -> dict[str, Any]:
        """Fit, then spend and store in one transaction; returns the metadata and the message.

        ``key``: the request's idempotency key; if it names a model release already, its
        stored answer (``idem.Replayed``), nothing read or spent."""
        request = check_request(request)
        with self._in_flight.hold(dataset, key):
            if (answer := idem.replay_first(self._db, dataset, key)) is not None:
                return answer
            return ds.retry_while_stale(
                lambda: self._attempt(dataset, request, actor_role, actor, key),
                dataset=dataset,
                what="model",
            )

    def _attempt(
        self,
        name: str,
        request: ModelRequest,
        actor_role: str,
        actor: str | None,
        key: idem.IdempotencyKey | None,
    ) -> dict[str, Any]:
        with self._db.read() as conn:
            row = ds.load(conn, name)
            ds.refuse_archived(row)
            accountant.budget_of(row).check(request.epsilon, delta=request.delta or amounts.ZERO)
            features = _load_features(conn, row, request.public_features)
            columns = json.loads(features.columns)
            ids = features.ids.split("\n")
            matrix = np.frombuffer(features.matrix, dtype="<f8").reshape(len(ids), len(columns))
            design = public_design(request, matrix, columns)
            split = request_split(request, design)
            refuse_uncovered_alpha(request, design, split, lo=row.label_min, hi=row.label_max)
            labels = _labels(conn, row, ids)
        with self._slots:
            fitted = fit(
                request, design, labels, lo=row.label_min, hi=row.label_max,
                rng=self._rng_factory(), split=split,
            )  # fmt: skip
        body = ModelBody(**fitted.body)
        model_id = new_model_release_id()
        created = datetime.now(UTC)
        created_text = created.isoformat(timespec="microseconds").replace("+00:00", "Z")
        public_params = {key: value for key, value in request.params.items() if key != "queries"}
        public_params.update(fitted.params)  # what the fit chose (DP outputs): public
        header = ModelHeader(
            model_release_id=model_id,
            dataset=row.name,
            created=created,
            estimator=request.estimator,  # type: ignore[arg-type]
            privacy=request.privacy,  # type: ignore[arg-type]
            epsilon=amounts.text(request.epsilon),
            delta=None if request.delta is None else amounts.text(request.delta),
            columns=columns,
            intercept=design.intercept,
            features_id=features.id,
            features_sha256=features.sha256,
            n=len(ids),
            label_min=row.label_min,
            label_max=row.label_max,
            params=public_params,
            noise=fitted.noise,  # type: ignore[arg-type]
            noise_scale=fitted.noise_scale,
            sensitivity=fitted.sensitivity,
            released=fitted.released,
            body_sha256=model_body_sha256(body),
        )
        message = ModelMessage(header=header, body=body)
        text = ledger.canonical_json(message.model_dump(mode="json"))
        charge = accountant.Charge(
            kind=ledger.KIND_MODEL,
            mechanism=f"{request.privacy}_{request.estimator}",
            epsilon=request.epsilon,
            delta=request.delta,
            parameters={
                "model_release_id": model_id,
                **header.model_dump(mode="json", include=LEDGERED_HEADER_FIELDS),
                # The charge's split (the chosen parameters' estimates, then the estimator),
                # exact decimals summing to the entry's epsilon and delta.
                **({} if split is None else {"split": split.public()}),
            },
        )
        with self._db.write() as conn:
            current = ds.load(conn, row.name, for_update=True)
            if (replayed := idem.replay(conn, current.id, key)) is not None:
                return replayed  # a repeat committed first: this fit is discarded unseen
            ds.refuse_archived(current)
            if current.data_version != row.data_version:
                raise ds.StaleSnapshot
            conn.execute(
                insert(model_releases).values(
                    id=model_id,
                    dataset_id=row.id,
                    message=text,
                    created=created_text,
                    actor_role=actor_role,
                    actor=actor,
                    **header.model_dump(include={"features_id", "estimator", "privacy"}),
                    epsilon_exact=header.epsilon,
                    delta_exact=header.delta,
                    message_sha256=header.body_sha256,
                )
            )
            budget = accountant.spend(
                conn, current, [charge], time=created_text, release_id=None,
                actor_role=actor_role, message_sha256=header.body_sha256, actor=actor,
            )  # fmt: skip
            conn.execute(update(datasets).where(datasets.c.id == row.id).values(state=ds.RELEASED))
            answer = {**_summary(header), "budget": budget.public(), "message": json.loads(text)}
            idem.remember(conn, row.id, key, made=model_id, answer=answer, time=created_text)
        return answer


def _split_preview(split: Any) -> dict[str, Any]:
    """A split as the preview shows it: which parameters the product will choose, each one's
    share and ePTR's, and how (their values need the data: they appear in the message)."""
    explanation = split.explanation() if hasattr(split, "explanation") else []
    return {**split.public(), "explanation": explanation}


def _labels(conn: Connection, row: ds.DatasetRow, ids: list[str]) -> np.ndarray:
    """The labels of ``ids`` in order (``default_label`` where none was posted)."""
    values: dict[str, float | None] = {}
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        values.update(
            conn.execute(
                select(entries.c.example_id, entries.c.value).where(
                    entries.c.dataset_id == row.id, entries.c.example_id.in_(chunk)
                )
            ).all()
        )
    return np.array(
        [row.default_label if values.get(i) is None else values[i] for i in ids], dtype=np.float64
    )


def _summary(header: ModelHeader) -> dict[str, Any]:
    return {
        "id": header.model_release_id,
        "dataset": header.dataset,
        "estimator": header.estimator,
        "privacy": header.privacy,
        "epsilon": header.epsilon,
        "delta": header.delta,
        "features_id": header.features_id,
        "columns": header.columns,
        "n": header.n,
        "released": header.released,
        "message_sha256": header.body_sha256,
        "created": header.created.isoformat().replace("+00:00", "Z"),
    }


def stored_model(db: Database, model_release_id: str) -> str:
    """The stored message of a model release (canonical JSON text; 404 if unknown)."""
    if not re.fullmatch(MODEL_RELEASE_ID_PATTERN, model_release_id):
        raise NotFoundError(
            "model release not found",
            [FieldError(field="model_release_id", message="unknown model release")],
        )
    with db.read() as conn:
        text = conn.execute(
            select(model_releases.c.message).where(model_releases.c.id == model_release_id)
        ).scalar()
    if text is None:
        raise NotFoundError(
            f"model release {model_release_id!r} not found",
            [FieldError(field="model_release_id", message="unknown model release")],
        )
    return str(text)
