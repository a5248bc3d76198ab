"""A released model as a message: a versioned header and a body, in the message schema family.

The second kind of release (``labels_party.releasing.model_releases``): instead of noisy labels the
labels party releases a fitted estimator (``shared.estimators``) on public features the publisher
uploaded. Like ``shared.message.LabelMessage`` it is a header with every public parameter the
receiver needs (estimator, privacy, exact epsilon and delta, feature columns, label bounds, the
noise that was added) and a body with the released numbers only (OLS coefficients, the
Nadaraya-Watson grid and its values, the Bayes priors and means), bound together by
``header.body_sha256``. Nothing in it depends on the labels except the released numbers: the ePTR
diagnostics (gamma, the release probability) are the data owner's and never leave.
"""

from __future__ import annotations

import hashlib
import json
import math
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from shared.errors import IntegrityError, InvalidParameterError
from shared.estimators import registry as estimators
from shared.message import validated

MODEL_FORMAT_VERSION = 1
SUPPORTED_MODEL_FORMAT_VERSIONS = (1,)
MODEL_RELEASE_ID_PATTERN = r"^mrel_[0-9a-f]{24}$"
_BODY_DOMAIN = b"labeldp-model-body-v1\n"
_DECIMAL = r"^[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?$"

Privacy = Literal["label", "eptr"]
ParamValue = float | int | str | bool | None


class ModelHeader(BaseModel):
    """Everything public about one model release."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    format_version: int = MODEL_FORMAT_VERSION
    kind: Literal["model"] = "model"
    model_release_id: str = Field(pattern=MODEL_RELEASE_ID_PATTERN)
    dataset: str
    created: datetime
    estimator: str = Field(description="a family of shared.estimators.registry")
    privacy: Privacy
    epsilon: str = Field(pattern=_DECIMAL, description="exact decimal charged")
    delta: str | None = Field(default=None, pattern=_DECIMAL, description="exact decimal, eptr")
    columns: list[str] = Field(min_length=1, description="public feature columns, in order")
    intercept: bool = Field(description="OLS: a constant column was appended after `columns`")
    features_id: str
    features_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    n: int = Field(ge=1)
    label_min: float
    label_max: float
    params: dict[str, ParamValue]
    noise: Literal["discrete_laplace", "gaussian"]
    noise_scale: float = Field(ge=0)
    sensitivity: float | None = Field(default=None, ge=0, description="label DP: exact L1")
    released: bool = Field(description="eptr: False means the data-independent 'no reply'")
    body_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")

    @model_validator(mode="after")
    def _privacy(self) -> ModelHeader:
        if (self.privacy == "eptr") != (self.delta is not None):
            raise ValueError("an eptr release has a delta, a label-DP release none")
        try:
            family = estimators.get(self.estimator)
        except InvalidParameterError as exc:
            raise ValueError(str(exc)) from None
        if self.privacy not in family.privacies:
            kinds = " or ".join(family.privacies)
            raise ValueError(f"{self.estimator} is released by {kinds} only")
        return self


class ModelBody(BaseModel):
    """The released numbers (which fields are set depends on the estimator)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    coef: list[float] | None = None  # ols: one per column (+ the intercept last)
    queries: list[list[float]] | None = None  # nw: the public query points
    values: list[float] | None = None  # nw: the released value at each query point
    priors: list[float] | None = None  # bayes: class priors (revised, step 5)
    means: list[list[float]] | None = None  # bayes: class means

    def numbers(self) -> list[float]:
        out: list[float] = []
        for field in (self.coef, self.values, self.priors):
            out.extend(field or [])
        for rows in (self.queries, self.means):
            for row in rows or []:
                out.extend(row)
        return out


class ModelMessage(BaseModel):
    """The whole model message, as stored and served (JSON)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    header: ModelHeader
    body: ModelBody


def model_body_sha256(body: ModelBody) -> str:
    """sha256 of the domain tag and the body's canonical JSON (sorted keys, shortest floats)."""
    text = json.dumps(
        body.model_dump(), sort_keys=True, separators=(",", ":"), allow_nan=False
    ).encode("utf-8")
    return hashlib.sha256(_BODY_DOMAIN + text).hexdigest()


def verify_model(message: ModelMessage | dict[str, Any] | str | bytes) -> ModelMessage:
    """Validate and verify a model message (raises :class:`IntegrityError`).

    Checks the format version, the body's shape against the header (estimator, columns) and
    finiteness, and that the body hashes to ``header.body_sha256``.
    """
    parsed = validated(ModelMessage, message, what="model message")
    header, body = parsed.header, parsed.body
    if header.format_version not in SUPPORTED_MODEL_FORMAT_VERSIONS:
        raise IntegrityError(f"unsupported model format_version {header.format_version}")
    if not all(math.isfinite(value) for value in body.numbers()):
        raise IntegrityError("model message contains non-finite numbers")
    estimators.get(header.estimator).check_body(header, body)  # the family's shape rule
    if model_body_sha256(body) != header.body_sha256:
        raise IntegrityError("model message body does not match its sha256")
    return parsed
