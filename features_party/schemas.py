"""API schemas of the features party (separate from the database models)."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from shared.message import EXAMPLE_ID_MAX_LENGTH, EXAMPLE_ID_PATTERN, ExampleId
from shared.model_message import MODEL_RELEASE_ID_PATTERN
from shared.service.client import FeatureUploadResult

CellIn = float | int | str | bool | None

MAX_PREDICT_ROWS = 100_000
# Dataset names as the labels party looks them up (creation is stricter: features.py).
DATASET_LOOKUP_PATTERN = r"^[A-Za-z0-9_.\-]{1,64}$"
# A release id is put into the labels party's URL path: one segment, never "." or "..".
RELEASE_ID_PATTERN = r"^[A-Za-z0-9_\-][A-Za-z0-9_.\-]{0,127}$"
# ``mdl_`` + 24 hex digits, like the labels party's ``rel_...``; bare 32-hex ids are older jobs.
MODEL_ID_PATTERN = r"^(mdl_[0-9a-f]{24}|[0-9a-f]{32})$"


def new_model_id() -> str:
    """``mdl_`` + 24 random hex digits, for trained and released models alike."""
    return "mdl_" + secrets.token_hex(12)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# Documentation of what features.check_columns enforces (it stays the source of truth).
COLUMN_NAME_PATTERN = r"^[A-Za-z0-9_.\-]([A-Za-z0-9_.\- ]{0,62}[A-Za-z0-9_.\-])?$"


class FeatureRowIn(_Strict):
    example_id: str = Field(
        min_length=1,
        max_length=EXAMPLE_ID_MAX_LENGTH,
        json_schema_extra={"pattern": EXAMPLE_ID_PATTERN},
    )
    features: dict[str, CellIn] = Field(
        json_schema_extra={"propertyNames": {"pattern": COLUMN_NAME_PATTERN}, "minProperties": 1}
    )


class FeatureUploadIn(_Strict):
    """The JSON form of a feature upload (one atomic batch)."""

    rows: list[FeatureRowIn] = Field(min_length=1)


# The upload answer is defined once, where the client reads it.
FeatureUploadOut = FeatureUploadResult


def _utc(value: datetime | None) -> datetime | None:
    """SQLite hands timestamps back without their zone; they are stored in UTC."""
    return value.replace(tzinfo=UTC) if value is not None and value.tzinfo is None else value


class DatasetOut(BaseModel):
    name: str
    rows: int
    columns: dict[str, str]
    created: datetime
    synced_rows: int

    _zone = field_validator("created")(_utc)


class DatasetList(BaseModel):
    datasets: list[DatasetOut]


class SyncOut(BaseModel):
    dataset: str
    registered: int
    batches: int
    labels_party: dict[str, Any]
    detail: str = Field(default="synced", description='"synced", or why there was nothing to do')


def _optional_id(pattern: str, description: str) -> Any:
    """An optional id: ``pattern`` checked when given, and shown at the top of the field's JSON
    schema (pydantic puts it inside the ``anyOf`` of ``str | None``); checked by the validators
    even when left out (``validate_default``)."""
    return Field(
        default=None,
        pattern=pattern,
        json_schema_extra={"pattern": pattern},
        validate_default=True,
        description=description,
    )


class ModelCreate(_Strict):
    dataset: str = Field(pattern=DATASET_LOOKUP_PATTERN)
    model: Literal["auto", "gbm", "ridge", "mlp", "constant", "released"] = "auto"
    release_id: str | None = _optional_id(
        RELEASE_ID_PATTERN, 'rel_... of the labels party (every model but "released")'
    )
    label_transform: Literal["auto", "raw", "debiased"] = "auto"
    seed: int | None = Field(default=None, ge=0, le=2**31 - 1)
    model_release_id: str | None = _optional_id(
        MODEL_RELEASE_ID_PATTERN,
        'model "released" only: mrel_... of the labels party (a released model)',
    )

    @field_validator("seed", mode="before")
    @classmethod
    def _json_integer(cls, value: object) -> object:
        # A JSON integer (428.0 is one, as in JSON Schema); pydantic's lax mode would also take
        # false as 0 and "3" as 3.
        if isinstance(value, bool | str):
            raise ValueError("must be a JSON integer")
        return value

    @field_validator("release_id", "model_release_id")
    @classmethod
    def _source(cls, value: str | None, info: ValidationInfo) -> str | None:
        """A trained model names a release_id, a released one a model_release_id: not both."""
        released = info.data.get("model") == "released"
        wanted = (info.field_name == "model_release_id") == released
        if wanted and value is None:
            raise ValueError(f"required for model {info.data.get('model', '?')!r}")
        if not wanted and value is not None:
            other = "release_id" if info.field_name == "model_release_id" else "model_release_id"
            raise ValueError(f"not for model {info.data.get('model', '?')!r} (use {other})")
        return value


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

    _zone = field_validator("created", "finished")(_utc)


class ModelList(BaseModel):
    models: list[ModelOut]


class PredictRow(_Strict):
    example_id: ExampleId | None = None
    features: dict[str, CellIn]


class PredictIn(_Strict):
    """Either feature rows (not stored) or example ids of stored feature rows."""

    rows: list[PredictRow] | None = Field(default=None, max_length=MAX_PREDICT_ROWS)
    example_ids: list[ExampleId] | None = Field(default=None, max_length=MAX_PREDICT_ROWS)

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
