"""Models released by the labels party (``model: "released"``): pull, verify, keep, predict.

The feature-aware mode (``labels_party.releasing.model_releases``): the publisher uploaded numeric
columns to the labels party, which released a fitted estimator as a model message
(``shared.model_message``). Here the publisher pulls that message once (verified: format
version, shapes, finiteness, body sha256, the release and dataset it names), stores it byte for
byte, and predicts with it: OLS by its released coefficients, Nadaraya-Watson by interpolating
its released grid (``shared.estimators.kernel.interpolate``), Bayes by the class rule of
Algorithm 3 step 6. Every prediction is post-processing of the released numbers.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from typing import Any

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from features_party.api.errors import FieldHTTPError
from features_party.config import Settings
from features_party.db.models import FeatureRow, ReleasedModelMessage, TrainedModel
from features_party.features import FeatureInputError, load_schema
from features_party.pull import check_model_receipt, labels_client
from features_party.schemas import ModelCreate, PredictIn, PredictOut, new_model_id
from shared.errors import IntegrityError
from shared.estimators import registry as estimators
from shared.model_message import ModelMessage, verify_model
from shared.service.client import ServiceError
from shared.service.receipt import ReceiptError

RELEASED = "released"


def _load(session: Session, settings: Settings, model_release_id: str) -> ModelMessage | None:
    """The stored message, verified again (a corrupted row is not trusted); with a pinned key,
    also against its signed receipt (see :func:`_check_stored_receipt`)."""
    stored = session.get(ReleasedModelMessage, model_release_id)
    if stored is None:
        return None
    message = verify_model(stored.message)
    if (
        message.header.body_sha256 != stored.body_sha256
        or message.header.model_release_id != model_release_id
    ):
        raise IntegrityError(f"stored model release {model_release_id!r} does not match its row")
    _check_stored_receipt(session, settings, stored, message)
    return message


def _check_stored_receipt(
    session: Session, settings: Settings, stored: ReleasedModelMessage, message: ModelMessage
) -> None:
    """With a pinned key: the receipt kept with the stored message verifies and states its whole
    header (a changed stored field is refused, named), on every load. A row kept without one
    (pulled before the key was pinned) has it fetched from the labels party once, then kept."""
    if settings.labels_public_key is None:
        return
    kept: dict[str, Any] | None = None
    if stored.receipt is not None:
        try:
            kept = json.loads(stored.receipt)
        except ValueError:
            raise ReceiptError(
                f"the stored receipt of model release {stored.model_release_id!r} is not JSON"
            ) from None
    header = json.loads(message.header.model_dump_json())
    receipt = check_model_receipt(settings, stored.model_release_id, header, receipt=kept)
    if kept is None and receipt is not None:
        stored.receipt = json.dumps(receipt, separators=(",", ":"))
        session.commit()


def pull(
    session: Session, settings: Settings, *, model_release_id: str, dataset: str
) -> ModelMessage:
    """The verified model message (from the database, its receipt checked again with a pinned
    key, or pulled once and stored with its receipt)."""
    message = _load(session, settings, model_release_id)
    if message is None:
        with labels_client(settings) as client:
            try:
                answer = client.request(
                    "GET", f"/v1/model-releases/{model_release_id}", idempotent=True
                )
            except ServiceError as exc:
                if exc.status != 404:
                    raise
                # The caller named a model release the labels party does not have: bad input
                # of this request (422 naming it), not a failing upstream (502).
                raise FieldHTTPError(
                    422,
                    f"the labels party has no model release {model_release_id!r}",
                    field="model_release_id",
                    message="unknown model release",
                ) from None
        message = verify_model(answer.content)
        if message.header.model_release_id != model_release_id:
            raise IntegrityError(
                f"the labels party answered model release {message.header.model_release_id!r} "
                f"for {model_release_id!r}"
            )
        receipt = check_model_receipt(
            settings, model_release_id, json.loads(message.header.model_dump_json())
        )
        if message.header.dataset == dataset:
            session.add(
                ReleasedModelMessage(
                    model_release_id=model_release_id,
                    dataset=dataset,
                    message=answer.content.decode("utf-8"),
                    body_sha256=message.header.body_sha256,
                    receipt=None if receipt is None else json.dumps(receipt, separators=(",", ":")),
                )
            )
    if message.header.dataset != dataset:
        raise FieldHTTPError(
            422,
            f"model release {model_release_id!r} is of dataset {message.header.dataset!r}",
            field="dataset",
            message=f"the model release is of dataset {message.header.dataset!r}",
        )
    return message


def create(session: Session, settings: Settings, body: ModelCreate) -> TrainedModel:
    """A succeeded model row for a released model (nothing to train); committed."""
    assert body.model_release_id is not None
    message = pull(session, settings, model_release_id=body.model_release_id, dataset=body.dataset)
    header = message.header
    now = datetime.now(UTC)
    job = TrainedModel(
        id=new_model_id(),
        dataset=body.dataset,
        release_id=body.model_release_id,
        model=RELEASED,
        label_transform="none",
        seed=0,
        status="succeeded",
        stage="pulled and verified the model release",
        progress=1.0,
        # One instant for both: the row's own default for created was taken at the flush,
        # after finished, so the job had finished before it was created (issue 24.7).
        created=now,
        finished=now,
        result_json=json.dumps(
            {
                "model_release_id": header.model_release_id,
                "estimator": header.estimator,
                "privacy": header.privacy,
                "epsilon": header.epsilon,
                "delta": header.delta,
                "columns": header.columns,
                "released": header.released,
                "n": header.n,
                "message_sha256": header.body_sha256,
            }
        ),
    )
    session.add(job)
    session.commit()
    return job


def predict_matrix(message: ModelMessage, x: np.ndarray) -> np.ndarray:
    """Predictions for the rows of ``x`` (columns in ``header.columns`` order): the estimator
    family's own ``predict`` (``shared.estimators.registry``)."""
    header, body = message.header, message.body
    return estimators.get(header.estimator).predict(header, body, x)


def _cell(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer beyond the doubles (a 400-digit JSON number)
        return None
    return number if math.isfinite(number) else None


def _rows_matrix(body: PredictIn, columns: list[str]) -> np.ndarray:
    assert body.rows is not None
    errors: list[tuple[str, str]] = []
    x = np.empty((len(body.rows), len(columns)))
    for i, row in enumerate(body.rows):
        if set(row.features) != set(columns):
            missing = sorted(set(columns) - set(row.features))
            extra = sorted(set(row.features) - set(columns))
            errors.append((f"rows[{i}].features", f"missing {missing}, unexpected {extra}"))
            continue
        for j, name in enumerate(columns):
            value = _cell(row.features[name])
            if value is None:
                errors.append((f"rows[{i}].features.{name}", "must be a finite number"))
            else:
                x[i, j] = value
        if len(errors) >= 10:
            break
    if errors:
        raise FeatureInputError("rows must carry the model's numeric columns", errors[:10])
    return x


def _ids_matrix(session: Session, dataset: str, ids: list[str], columns: list[str]) -> np.ndarray:
    schema = load_schema(session, dataset) or []
    names = [name for name, _kind in schema]
    absent = [c for c in columns if c not in names]
    if absent:
        raise FeatureInputError(
            f"dataset {dataset!r} has no stored column(s) {absent} of the released model",
            [("example_ids", f"no stored columns {absent}: predict from rows")],
        )
    index = [names.index(c) for c in columns]
    found: dict[str, list[Any]] = {}
    for start in range(0, len(ids), 500):
        rows = session.execute(
            select(FeatureRow.example_id, FeatureRow.values_json).where(
                FeatureRow.dataset == dataset, FeatureRow.example_id.in_(ids[start : start + 500])
            )
        )
        found.update({eid: json.loads(values) for eid, values in rows})
    errors = [(f"example_ids[{i}]", "no feature row") for i, e in enumerate(ids) if e not in found]
    x = np.empty((len(ids), len(columns)))
    for i, example_id in enumerate(ids):
        if example_id not in found:
            continue
        for j, k in enumerate(index):
            value = _cell(found[example_id][k])
            if value is None:
                errors.append((f"example_ids[{i}]", f"{columns[j]} is not a finite number"))
            else:
                x[i, j] = value
    if errors:
        raise FeatureInputError(f"{len(errors)} example id(s) cannot be predicted", errors[:10])
    return x


def predict(session: Session, settings: Settings, job: TrainedModel, body: PredictIn) -> PredictOut:
    """``POST /v1/models/{id}/predict`` for a released model (rows or stored example ids); the
    stored message is verified again, with a pinned key against its receipt too."""
    message = _load(session, settings, job.release_id)
    if message is None:
        raise IntegrityError(f"model {job.id!r}: its model release message is not stored")
    columns = message.header.columns
    if body.example_ids is not None:
        x = _ids_matrix(session, job.dataset, body.example_ids, columns)
    else:
        x = _rows_matrix(body, columns)
    predictions = predict_matrix(message, x)
    bad = np.flatnonzero(~np.isfinite(predictions))
    if bad.size:
        where = "example_ids[{}]" if body.example_ids is not None else "rows[{}].features"
        raise FeatureInputError(
            f"{bad.size} prediction(s) overflow float64",
            [(where.format(i), "prediction is not a finite number") for i in bad[:10]],
        )
    return PredictOut(model_id=job.id, n=len(x), predictions=predictions.tolist())
