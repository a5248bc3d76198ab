"""Feature uploads, dataset info, and registering the example universe with the labels party."""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import APIRouter, Path, Query, Request
from fastapi.concurrency import run_in_threadpool
from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from features_party.api.deps import SessionDep, SettingsDep
from features_party.api.errors import FieldHTTPError, StrictJSONRoute
from features_party.db.models import FeatureDataset
from features_party.features import (
    FeatureInputError,
    RawBatch,
    check_dataset_name,
    count_rows,
    iter_example_ids,
    parse_csv,
    parse_json_rows,
    segment_values,
    store_batch,
)
from features_party.pull import labels_client
from features_party.schemas import (
    DATASET_LOOKUP_PATTERN,
    DatasetList,
    DatasetOut,
    FeatureUploadIn,
    FeatureUploadOut,
    SyncOut,
)
from shared.service import strict_input
from shared.service.client import ServiceError

router = APIRouter(prefix="/v1/datasets", tags=["datasets"], route_class=StrictJSONRoute)
# Documented here, checked by check_dataset_name (a 422 naming "dataset", the name not echoed).
NamePath = Path(json_schema_extra={"pattern": DATASET_LOOKUP_PATTERN}, description="dataset")
_UPLOAD_DOC = {
    "requestBody": {
        "required": True,
        "content": {
            "text/csv": {"schema": {"type": "string", "description": "header row, example_id"}},
            "application/json": {"schema": {"$ref": "#/components/schemas/FeatureUploadIn"}},
        },
    }
}


def _too_large(limit: int) -> FieldHTTPError:
    return FieldHTTPError(413, f"body larger than {limit} bytes", field="body", message="too large")


def _no_features(name: str) -> FieldHTTPError:
    return FieldHTTPError(
        404, f"dataset {name!r} has no features", field="dataset", message="no features uploaded"
    )


async def read_body(request: Request) -> bytes:
    """The request body, refused with 413 beyond the configured limit."""
    limit: int = request.app.state.settings.max_body_bytes
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
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
        repeated = strict_input.find_duplicate_key(body)
        if repeated is not None:  # pydantic would silently keep the last one
            raise FeatureInputError(
                "a JSON object repeats a key", [(repeated, strict_input.DUPLICATE_KEY_MESSAGE)]
            )
        try:
            upload = FeatureUploadIn.model_validate_json(body)
        except ValidationError as exc:
            errors = [
                ("body" if e["type"] == "json_invalid" else _loc(e["loc"]), e["msg"])
                for e in exc.errors(include_input=False)
            ]
            raise FeatureInputError("invalid JSON upload", errors[:10]) from None
        return parse_json_rows([row.model_dump() for row in upload.rows])
    raise FieldHTTPError(
        415,
        f"Content-Type {media or '(none)'} not supported: send text/csv or application/json",
        field="Content-Type",
        message="must be text/csv or application/json",
    )


def _loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else ("." if out else "") + str(part)
    return out or "body"


def _dataset_out(session: Session, dataset: FeatureDataset) -> DatasetOut:
    return DatasetOut(
        name=dataset.name,
        rows=count_rows(session, dataset.name),
        columns=dict(json.loads(dataset.columns_json)),
        created=dataset.created,
        synced_rows=dataset.synced_rows,
    )


@router.post("/{name}/features", response_model=FeatureUploadOut, openapi_extra=_UPLOAD_DOC)
async def upload_features(
    request: Request,
    name: str = NamePath,
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
        return result

    answer = await run_in_threadpool(store)
    request.app.state.counters["feature_rows_received"] += answer.received
    return answer


@router.get("", response_model=DatasetList)
def list_datasets(session: SessionDep) -> DatasetList:
    """Every dataset with features."""
    datasets = session.scalars(select(FeatureDataset).order_by(FeatureDataset.name))
    return DatasetList(datasets=[_dataset_out(session, d) for d in datasets])


@router.get("/{name}", response_model=DatasetOut)
def get_dataset(session: SessionDep, name: str = NamePath) -> DatasetOut:
    """Row count and column kinds of one dataset."""
    check_dataset_name(name)
    dataset = session.get(FeatureDataset, name)
    if dataset is None:
        raise _no_features(name)
    return _dataset_out(session, dataset)


@router.post("/{name}/examples/sync", response_model=SyncOut)
def sync_examples(session: SessionDep, settings: SettingsDep, name: str = NamePath) -> SyncOut:
    """Register every example id of this dataset with the labels party (the public universe);
    for a dataset the labels party segments, each with its value in the segment column."""
    check_dataset_name(name)
    dataset = session.get(FeatureDataset, name)
    if dataset is None:
        raise _no_features(name)
    ids = iter_example_ids(session, name)
    last: dict[str, object] = {}
    batches = 0
    with labels_client(settings) as client:
        column = client.dataset(name).segment_column
        segments = None if column is None else segment_values(session, name, column, ids)
        try:
            for start in range(0, len(ids), settings.sync_batch):
                stop = start + settings.sync_batch
                last = client.register_examples(
                    name,
                    ids[start:stop],
                    segments=None if segments is None else segments[start:stop],
                )
                batches += 1
        except ServiceError as exc:
            # Released: its examples are frozen. If nothing changed since the last sync (rows
            # are only ever added, and the labels party holds as many), there is nothing to do.
            if exc.status != 409 or batches or len(ids) != dataset.synced_rows:
                raise
            if client.dataset(name).n_examples != len(ids):
                raise
            return SyncOut(
                dataset=name,
                registered=0,
                batches=0,
                labels_party={},
                detail="nothing to do: every example id was synced before the release",
            )
    dataset.synced_rows = len(ids)
    session.commit()
    return SyncOut(dataset=name, registered=len(ids), batches=batches, labels_party=last)
