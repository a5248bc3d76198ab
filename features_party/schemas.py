"""API schemas of the features party (separate from the database models)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

CellIn = float | int | str | bool | None

MAX_PREDICT_ROWS = 100_000


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FeatureRowIn(_Strict):
    example_id: str = Field(min_length=1, max_length=128)
    features: dict[str, CellIn]


class FeatureUploadIn(_Strict):
    """The JSON form of a feature upload (one atomic batch)."""

    rows: list[FeatureRowIn] = Field(min_length=1)


class FeatureUploadOut(BaseModel):
    dataset: str
    received: int
    inserted: int
    unchanged: int
    replaced: int
    rows_total: int
    columns: dict[str, str]


class DatasetOut(BaseModel):
    name: str
    rows: int
    columns: dict[str, str]
    created: datetime
    synced_rows: int


class DatasetList(BaseModel):
    datasets: list[DatasetOut]


class SyncOut(BaseModel):
    dataset: str
    registered: int
    batches: int
    labels_party: dict[str, Any]


class ModelCreate(_Strict):
    dataset: str = Field(min_length=1, max_length=64)
    release_id: str = Field(min_length=1, max_length=128)
    model: Literal["auto", "gbm", "ridge", "mlp"] = "gbm"
    label_transform: Literal["auto", "raw", "debiased"] = "auto"
    seed: int | None = Field(default=None, ge=0, le=2**31 - 1)


class ModelOut(BaseModel):
    id: str
    dataset: str
    release_id: str
    model: str
    label_transform: str
    seed: int
    status: Literal["queued", "running", "succeeded", "failed"]
    stage: str
    progress: float
    error: str | None
    created: datetime
    finished: datetime | None
    result: dict[str, Any] | None


class ModelList(BaseModel):
    models: list[ModelOut]


class PredictRow(_Strict):
    example_id: str | None = None
    features: dict[str, CellIn]


class PredictIn(_Strict):
    """Either feature rows (not stored) or example ids of stored feature rows."""

    rows: list[PredictRow] | None = Field(default=None, max_length=MAX_PREDICT_ROWS)
    example_ids: list[str] | None = Field(default=None, max_length=MAX_PREDICT_ROWS)

    @model_validator(mode="after")
    def _one_of(self) -> PredictIn:
        if (self.rows is None) == (self.example_ids is None):
            raise ValueError("give exactly one of 'rows' or 'example_ids'")
        if not (self.rows or self.example_ids):
            raise ValueError("nothing to predict: the list is empty")
        return self


class PredictOut(BaseModel):
    model_id: str
    n: int
    predictions: list[float]
