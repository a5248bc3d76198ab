"""Training jobs (background), their progress and results, and predictions."""

from __future__ import annotations

import json
import re
import secrets
from typing import Annotated, Any

import numpy as np
from fastapi import APIRouter, Path, Request, Response
from fastapi.concurrency import run_in_threadpool
from sqlalchemy import select
from sqlalchemy.orm import Session

from features_party import released_models
from features_party.api.deps import RunnerDep, SessionDep, SettingsDep
from features_party.api.errors import FieldHTTPError, StrictJSONRoute
from features_party.config import Settings
from features_party.db.models import FeatureDataset, FeatureRow, StoredMessage, TrainedModel
from features_party.features import FeatureInputError, RawBatch, type_rows
from features_party.schemas import (
    MODEL_ID_PATTERN,
    ModelCreate,
    ModelList,
    ModelOut,
    PredictIn,
    PredictOut,
    new_model_id,
)
from shared.service.client import NO_RETRY, LabelsPartyClient
from shared.service.client import ServiceError as ClientServiceError
from shared.service.http.requests import json_body

router = APIRouter(prefix="/v1/models", tags=["models"], route_class=StrictJSONRoute)
# Documented, and checked by _unknown_model (404 without echoing an arbitrary string).
ModelIdPath = Path(json_schema_extra={"pattern": MODEL_ID_PATTERN}, description="model id")
_MODEL_ID_RE = re.compile(MODEL_ID_PATTERN)


def _body_doc(model: type[Any]) -> dict[str, Any]:
    """OpenAPI ``requestBody`` of a body read by ``json_body`` (after the token check: a caller
    without the token learns nothing about how the body would be read)."""
    ref = {"$ref": f"#/components/schemas/{model.__name__}"}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": ref}}}}


def _unknown_model(model_id: str) -> FieldHTTPError:
    shown = f"model {model_id!r}" if _MODEL_ID_RE.fullmatch(model_id) else "model"
    return FieldHTTPError(404, f"{shown} not found", field="model_id", message="unknown model")


def model_out(job: TrainedModel) -> ModelOut:
    """The API view of a job: its columns of the same names, and its result parsed."""
    columns = {name: getattr(job, name) for name in ModelOut.model_fields if name != "result"}
    return ModelOut(**columns, result=json.loads(job.result_json) if job.result_json else None)


def check_release(session: Session, settings: Settings, dataset: str, release_id: str) -> None:
    """The release exists and is one of ``dataset``'s: 404 / 409 naming ``release_id`` now,
    not a job that fails later. A message already stored here answers without the labels party;
    a labels party that does not answer right now leaves the check to the job's own pull.
    """
    stored = session.get(StoredMessage, release_id)
    if stored is not None:
        owner = stored.dataset
    else:
        try:
            with LabelsPartyClient(
                settings.labels_url, token=settings.labels_token, retry=NO_RETRY, timeout=10.0
            ) as client:
                owner = client.release(release_id).dataset
        except ClientServiceError as exc:
            if exc.status is None or exc.status >= 500:
                # Unreachable or failing right now: the job's pull retries with back-off and
                # reports clearly if it never answers, so the job is still accepted.
                return
            if exc.status != 404:
                raise
            raise FieldHTTPError(
                404,
                f"release {release_id!r} not found at the labels party",
                field="release_id",
                message="unknown release",
            ) from None
    if owner != dataset:
        raise FieldHTTPError(
            409,
            f"release {release_id!r} is a release of dataset {owner!r}, not {dataset!r}",
            field="release_id",
            message=f"belongs to dataset {owner!r}",
        )


@router.post("", response_model=ModelOut, status_code=202, openapi_extra=_body_doc(ModelCreate))
def create_model(
    body: Annotated[ModelCreate, json_body(ModelCreate)],
    session: SessionDep,
    runner: RunnerDep,
    settings: SettingsDep,
    response: Response,
) -> ModelOut:
    """Queue a training job: pull the release's message once, join, select, fit.

    ``model: "released"`` instead pulls and verifies a released model (201, ready at once).
    """
    if body.model == released_models.RELEASED:
        response.status_code = 201
        return model_out(released_models.create(session, settings, body))
    if session.get(FeatureDataset, body.dataset) is None:
        raise FieldHTTPError(
            404,
            f"dataset {body.dataset!r} has no features uploaded",
            field="dataset",
            message="no features uploaded",
        )
    check_release(session, settings, body.dataset, body.release_id)
    job = TrainedModel(
        id=new_model_id(),
        dataset=body.dataset,
        release_id=body.release_id,
        model=body.model,
        label_transform=body.label_transform,
        seed=body.seed if body.seed is not None else secrets.randbelow(2**31),
        status="queued",
        stage="queued",
        progress=0.0,
    )
    session.add(job)
    session.commit()  # the job is durable before it is acknowledged
    runner.submit(job.id)
    return model_out(job)


@router.get("", response_model=ModelList)
def list_models(session: SessionDep) -> ModelList:
    """Every training job, newest first."""
    jobs = session.scalars(select(TrainedModel).order_by(TrainedModel.created.desc()))
    return ModelList(models=[model_out(job) for job in jobs])


@router.get("/{model_id}", response_model=ModelOut)
def get_model(session: SessionDep, model_id: str = ModelIdPath) -> ModelOut:
    """Status, stage, progress (0..1) and, once done, the validation report."""
    job = session.get(TrainedModel, model_id)
    if job is None:
        raise _unknown_model(model_id)
    return model_out(job)


@router.post("/{model_id}/predict", response_model=PredictOut, openapi_extra=_body_doc(PredictIn))
async def predict(
    body: Annotated[PredictIn, json_body(PredictIn)], request: Request, model_id: str = ModelIdPath
) -> PredictOut:
    """Predictions for feature rows given inline, or for stored example ids."""

    def run() -> PredictOut:
        runner = request.app.state.runner
        with request.app.state.sessions() as session:
            job = session.get(TrainedModel, model_id)
            if job is None:
                raise _unknown_model(model_id)
            if job.status != "succeeded":
                raise FieldHTTPError(
                    409,
                    f"model {model_id!r} is {job.status}, not trained",
                    field="model_id",
                    message=f"is {job.status}, not trained",
                )
            if job.model == released_models.RELEASED:
                return released_models.predict(session, request.app.state.settings, job, body)
            fitted = runner.fitted(session, model_id)
            columns = list(fitted.encoder.columns)
            if body.example_ids is not None:
                found: dict[str, list[object]] = {}
                ids = body.example_ids
                for start in range(0, len(ids), 500):
                    rows = session.execute(
                        select(FeatureRow.example_id, FeatureRow.values_json).where(
                            FeatureRow.dataset == job.dataset,
                            FeatureRow.example_id.in_(ids[start : start + 500]),
                        )
                    )
                    found.update({eid: json.loads(values) for eid, values in rows})
                missing = [i for i, eid in enumerate(ids) if eid not in found]
                if missing:
                    raise FeatureInputError(
                        f"{len(missing)} example id(s) have no features in {job.dataset!r}",
                        [(f"example_ids[{i}]", "no feature row") for i in missing[:10]],
                    )
                typed = [found[eid] for eid in ids]
            else:
                assert body.rows is not None
                names = [name for name, _ in columns]
                errors = []
                for i, row in enumerate(body.rows):
                    if set(row.features) != set(names):
                        missing_cols = sorted(set(names) - set(row.features))
                        extra = sorted(set(row.features) - set(names))
                        errors.append(
                            (f"rows[{i}].features", f"missing {missing_cols}, unexpected {extra}")
                        )
                        if len(errors) >= 10:
                            break
                if errors:
                    raise FeatureInputError("rows must carry exactly the model's columns", errors)
                batch = RawBatch(
                    columns=names,
                    example_ids=[row.example_id or "" for row in body.rows],
                    cells=[[row.features[name] for name in names] for row in body.rows],
                    source="json",
                )
                typed = type_rows(batch, columns)
        predictions = np.asarray(fitted.predict_rows(typed), dtype=np.float64)
        overflow = np.flatnonzero(~np.isfinite(predictions))
        if overflow.size:
            # JSON has no inf / NaN (they would go out as null): feature values far outside
            # what the model was fitted on (x = 1e308 for a feature of scale 1e-6, say).
            where = "example_ids[{}]" if body.example_ids is not None else "rows[{}].features"
            raise FeatureInputError(
                f"{overflow.size} prediction(s) overflow float64: feature values far outside "
                "the range the model was fitted on",
                [(where.format(i), "prediction is not a finite number") for i in overflow[:10]],
            )
        return PredictOut(model_id=model_id, n=len(typed), predictions=predictions.tolist())

    return await run_in_threadpool(run)
