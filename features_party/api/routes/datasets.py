"""Feature uploads, dataset info, and registering the example universe with the labels party."""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.concurrency import run_in_threadpool
from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from features_party.api.deps import SessionDep, SettingsDep
from features_party.db.models import FeatureDataset
from features_party.features import (
    FeatureInputError,
    RawBatch,
    check_dataset_name,
    count_rows,
    iter_example_ids,
    parse_csv,
    parse_json_rows,
    store_batch,
)
from features_party.pull import labels_client
from features_party.schemas import (
    DatasetList,
    DatasetOut,
    FeatureUploadIn,
    FeatureUploadOut,
    SyncOut,
)

router = APIRouter(prefix="/v1/datasets", tags=["datasets"])


async def read_body(request: Request) -> bytes:
    """The request body, refused with 413 beyond the configured limit."""
    limit: int = request.app.state.settings.max_body_bytes
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise HTTPException(status_code=413, detail=f"body larger than {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise HTTPException(status_code=413, detail=f"body larger than {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _parse(body: bytes, content_type: str, id_column: str) -> RawBatch:
    media = content_type.split(";")[0].strip().lower()
    if media in ("text/csv", "application/csv", "text/plain"):
        try:
            text = body.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise FeatureInputError("CSV body is not UTF-8", [("body", "not UTF-8")]) from None
        return parse_csv(text, id_column=id_column)
    if media == "application/json":
        try:
            upload = FeatureUploadIn.model_validate_json(body)
        except ValidationError as exc:
            errors = [
                (".".join(str(p) for p in e["loc"]) or "body", e["msg"]) for e in exc.errors()
            ]
            raise FeatureInputError("invalid JSON upload", errors[:10]) from None
        return parse_json_rows([row.model_dump() for row in upload.rows])
    raise HTTPException(
        status_code=415,
        detail=f"Content-Type {media or '(none)'} not supported: send text/csv or application/json",
    )


def _dataset_out(session: Session, dataset: FeatureDataset) -> DatasetOut:
    return DatasetOut(
        name=dataset.name,
        rows=count_rows(session, dataset.name),
        columns=dict(json.loads(dataset.columns_json)),
        created=dataset.created,
        synced_rows=dataset.synced_rows,
    )


@router.post("/{name}/features", response_model=FeatureUploadOut)
async def upload_features(
    name: str,
    request: Request,
    overwrite: bool = False,
    categorical: Annotated[str, Query(max_length=10_000)] = "",
    id_column: Annotated[str, Query(min_length=1, max_length=64)] = "example_id",
) -> FeatureUploadOut:
    """Store one atomic batch of feature rows (CSV with a header, or JSON)."""
    check_dataset_name(name)
    body = await read_body(request)
    batch = _parse(body, request.headers.get("content-type", ""), id_column)
    forced = [column.strip() for column in categorical.split(",") if column.strip()]

    def store() -> FeatureUploadOut:
        with request.app.state.write_lock, request.app.state.sessions() as session:
            result = store_batch(session, name, batch, categorical=forced, overwrite=overwrite)
            session.commit()  # durable (synchronous=FULL) before we acknowledge
        return FeatureUploadOut(dataset=name, **result.__dict__)

    answer = await run_in_threadpool(store)
    request.app.state.counters["feature_rows_received"] += answer.received
    return answer


@router.get("", response_model=DatasetList)
def list_datasets(session: SessionDep) -> DatasetList:
    """Every dataset with features."""
    datasets = session.scalars(select(FeatureDataset).order_by(FeatureDataset.name))
    return DatasetList(datasets=[_dataset_out(session, d) for d in datasets])


@router.get("/{name}", response_model=DatasetOut)
def get_dataset(name: str, session: SessionDep) -> DatasetOut:
    """Row count and column kinds of one dataset."""
    dataset = session.get(FeatureDataset, name)
    if dataset is None:
        raise HTTPException(status_code=404, detail=f"dataset {name!r} has no features")
    return _dataset_out(session, dataset)


@router.post("/{name}/examples/sync", response_model=SyncOut)
def sync_examples(name: str, session: SessionDep, settings: SettingsDep) -> SyncOut:
    """Register every example id of this dataset with the labels party (the public universe)."""
    dataset = session.get(FeatureDataset, name)
    if dataset is None:
        raise HTTPException(status_code=404, detail=f"dataset {name!r} has no features")
    ids = iter_example_ids(session, name)
    last: dict[str, object] = {}
    batches = 0
    with labels_client(settings) as client:
        for start in range(0, len(ids), settings.sync_batch):
            last = client.register_examples(name, ids[start : start + settings.sync_batch])
            batches += 1
    dataset.synced_rows = len(ids)
    session.commit()
    return SyncOut(dataset=name, registered=len(ids), batches=batches, labels_party=last)
