"""API schemas (request bodies and documented responses), apart from the storage tables.

Request models are strict: numbers must be JSON numbers (not strings or booleans), finite,
and unknown keys are refused, so a typo never silently changes a privacy parameter.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from labels_party.datasets import MAX_BINS, NAME_PATTERN
from shared.message import EXAMPLE_ID_PATTERN
from shared.selection import MAX_MODEL_DIM

_STRICT = ConfigDict(strict=True, allow_inf_nan=False, extra="forbid")
# Public label bounds stay where float64 arithmetic on labels (squares, sums over millions of
# examples) cannot overflow, and below 2^53 where every integer amount is exact.
MAX_LABEL_MAGNITUDE = 1e15
# RPWithPrior's zeta relative to the label range (label_max - label_min): far beyond any useful
# noise radius on both sides, and inside what float64 computes (denormal zetas divide by 0).
ZETA_MIN_RATIO, ZETA_MAX_RATIO = 1e-9, 1e9
_Bound = Annotated[float, Field(ge=-MAX_LABEL_MAGNITUDE, le=MAX_LABEL_MAGNITUDE)]
ExampleId = Annotated[str, Field(pattern=EXAMPLE_ID_PATTERN, min_length=1, max_length=128)]


class DatasetCreate(BaseModel):
    """``POST /v1/datasets``: public label bounds, the default label and the budget."""

    model_config = _STRICT

    name: str = Field(pattern=NAME_PATTERN, description="1-64 of [A-Za-z0-9_.-], first alnum")
    label_min: _Bound
    label_max: _Bound
    default_label: _Bound = Field(description="label of registered examples never labelled")
    epsilon_budget: float = Field(gt=0, description="total epsilon all releases may spend")


class ReleaseOptions(BaseModel):
    """Optional mechanism parameters (chosen from the private prior when omitted)."""

    model_config = _STRICT

    bins: int | None = Field(
        default=None,
        ge=1,
        le=MAX_BINS,
        description=(
            "histogram cells; default: shared.selection.adaptive_bins(n, the histogram's "
            "part of epsilon1)"
        ),
    )
    select: Literal["mse", "paper"] | None = Field(default=None, description="RPWithPrior")
    zeta: float | None = Field(default=None, gt=0, description="RPWithPrior noise radius")
    outside: Literal["project", "uniform"] | None = Field(default=None, description="RPWithPrior")
    loss: Literal["squared", "absolute", "poisson"] | None = Field(
        default=None, description="RR-on-Bins"
    )
    max_bins: int | None = Field(default=None, ge=1, le=MAX_BINS, description="RR-on-Bins cap")
    model_dim: int | None = Field(
        default=None,
        ge=1,
        le=MAX_MODEL_DIM,
        description="the receiver's model dimension (features) for auto; default 10",
    )

    def mechanism_params(self) -> dict[str, object]:
        """The options passed through to the randomizer (``bins`` apart)."""
        return {
            key: value
            for key, value in self.model_dump(exclude={"bins"}).items()
            if value is not None
        }


class ReleaseCreate(BaseModel):
    """``POST /v1/datasets/{name}/releases``."""

    model_config = _STRICT

    mechanism: Literal["rpwithprior", "rr_on_bins", "auto"]
    epsilon: float = Field(gt=0, description="total epsilon of the release (epsilon1 + epsilon2)")
    epsilon_histogram: float | None = Field(
        default=None,
        gt=0,
        description=(
            "epsilon1 (the histogram and, below a total of 2, the DP label mean); "
            "default: shared.randomizer.default_split"
        ),
    )
    params: ReleaseOptions = Field(default_factory=ReleaseOptions)

    @field_validator("epsilon_histogram")
    @classmethod
    def _split(cls, value: float | None, info: ValidationInfo) -> float | None:
        epsilon = info.data.get("epsilon")  # absent if epsilon itself was invalid
        if value is not None and epsilon is not None and not value < epsilon:
            raise ValueError("epsilon_histogram must be < epsilon")
        return value


class LabelRow(BaseModel):
    """One label (documentation of the JSON ingest format, as strict as its parser)."""

    model_config = _STRICT

    example_id: ExampleId
    value: float = Field(description="a finite JSON number; clipped into the bounds")


class LabelsBatch(BaseModel):
    """``POST /v1/datasets/{name}/labels`` as JSON (bulk: text/csv or application/x-ndjson)."""

    model_config = _STRICT

    labels: list[LabelRow] = Field(min_length=1)


class ExamplesBatch(BaseModel):
    """``POST /v1/datasets/{name}/examples`` as JSON (bulk: text/plain, one id per line)."""

    model_config = _STRICT

    example_ids: list[ExampleId] = Field(min_length=1)


class DatasetPublic(BaseModel):
    name: str
    label_min: float
    label_max: float
    default_label: float
    epsilon_budget: float
    epsilon_spent: float
    epsilon_left: float
    state: Literal["open", "released"]
    n_examples: int
    n_labels: int | None = Field(default=None, description="advertiser only")
    releases: list[str]
    created: str


class LabelsIngested(BaseModel):
    accepted: int
    new: int
    clipped: int
    unchanged: int
    overwritten: int
    n_labels: int


class ExamplesRegistered(BaseModel):
    accepted: int
    registered_new: int
    n_examples: int


class ReleasePublic(BaseModel):
    id: str
    dataset: str
    mechanism: str
    requested_mechanism: str
    params: dict[str, object]
    epsilon1: float
    epsilon2: float
    epsilon: float
    n: int
    created: str
    message_sha256: str = Field(description="header.body_sha256 of the message")
    binary_sha256: str = Field(description="sha256 of the whole binary encoding")
    binary_size: int
    expected_label_mse: float | None


class LedgerEntry(BaseModel):
    seq: int
    time: str
    dataset: str
    release_id: str | None
    kind: Literal["dataset", "histogram", "randomizer"]
    mechanism: str | None
    epsilon: float
    actor_role: str
    parameters: dict[str, object]
    message_sha256: str | None
    prev_hash: str
    entry_hash: str


class LedgerPage(BaseModel):
    entries: list[LedgerEntry]
    head_hash: str
    next_after: int | None
    next: str | None = Field(default=None, description="the next page's URL (same filters)")


class FieldErrorBody(BaseModel):
    field: str
    message: str


class ErrorBody(BaseModel):
    """Every 4xx/5xx response body."""

    detail: str
    errors: list[FieldErrorBody] = []


# ---- listings and audit views (the operator console) ----------------------------------------

# A budget amount as the API reports it: a JSON number today, an exact decimal string once
# amounts are exact (the union keeps either as given; clients display it, never add floats).
Amount = float | str


class DatasetSummary(DatasetPublic):
    """One item of ``GET /v1/datasets``."""

    n_releases: int
    last_release: str | None = Field(description="created time of the newest release")


class DatasetList(BaseModel):
    datasets: list[DatasetSummary]


class ReleaseSummary(BaseModel):
    """One item of ``GET /v1/datasets/{name}/releases``."""

    id: str
    dataset: str
    created: str
    mechanism: str
    requested_mechanism: str
    epsilon1: Amount
    epsilon2: Amount
    epsilon: Amount
    n: int
    actor_role: str = Field(description="the role whose token made the release")
    message_sha256: str = Field(description="header.body_sha256 of the message")


class ReleaseList(BaseModel):
    dataset: str
    releases: list[ReleaseSummary] = Field(description="newest first")


class ChainBreakBody(BaseModel):
    seq: int = Field(description="the first ledger entry at which the hash chain breaks")
    reason: str


class LedgerVerifyReport(BaseModel):
    """``GET /v1/ledger/verify``: what ``labeldp ledger verify`` reports."""

    ok: bool
    entries: int
    head_hash: str
    problems: list[str]
    first_break: ChainBreakBody | None = Field(
        description="null when the chain's links (seq, prev_hash, entry_hash) all hold"
    )
