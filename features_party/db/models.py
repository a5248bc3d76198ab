"""Tables of the features party: feature schemas and rows, pulled messages, trained models."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import (
    DateTime,
    Float,
    ForeignKey,
    Integer,
    LargeBinary,
    String,
    Text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


def utcnow() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    pass


class FeatureDataset(Base):
    """A dataset's column schema, fixed by its first upload: ``[[name, kind], ...]`` as JSON."""

    __tablename__ = "feature_datasets"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    columns_json: Mapped[str] = mapped_column(Text)
    created: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    synced_rows: Mapped[int] = mapped_column(Integer, default=0)


class FeatureRow(Base):
    """One example's feature values, aligned with the dataset's columns (JSON list)."""

    __tablename__ = "feature_rows"

    dataset: Mapped[str] = mapped_column(
        String(64), ForeignKey("feature_datasets.name"), primary_key=True
    )
    example_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    values_json: Mapped[str] = mapped_column(Text)


class StoredMessage(Base):
    """The ONE message of a release, exactly as downloaded (binary encoding) and verified."""

    __tablename__ = "messages"

    release_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    dataset: Mapped[str] = mapped_column(String(64))
    header_json: Mapped[str] = mapped_column(Text)
    body_sha256: Mapped[str] = mapped_column(String(64))
    media_type: Mapped[str] = mapped_column(String(64))
    raw: Mapped[bytes] = mapped_column(LargeBinary)
    fetched: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class TrainedModel(Base):
    """A training job; once it succeeded, the pickled fitted model and its metrics."""

    __tablename__ = "models"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    dataset: Mapped[str] = mapped_column(String(64))
    release_id: Mapped[str] = mapped_column(String(128))
    model: Mapped[str] = mapped_column(String(16))
    label_transform: Mapped[str] = mapped_column(String(16))
    seed: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16), default="queued")
    stage: Mapped[str] = mapped_column(String(200), default="queued")
    progress: Mapped[float] = mapped_column(Float, default=0.0)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    created: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    finished: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    result_json: Mapped[str | None] = mapped_column(Text, nullable=True)
    blob: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    blob_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)


class ReleasedModelMessage(Base):
    """A model release's message as pulled from the labels party (JSON) and verified."""

    __tablename__ = "model_release_messages"

    model_release_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    dataset: Mapped[str] = mapped_column(String(64))
    message: Mapped[str] = mapped_column(Text)
    body_sha256: Mapped[str] = mapped_column(String(64))
    fetched: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    # The model release's signed receipt (JSON) as verified at the pull, with a pinned key: every
    # later load verifies it again and checks the stored header against it (released_models).
    receipt: Mapped[str | None] = mapped_column(Text, nullable=True)
