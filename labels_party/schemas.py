"""API schemas (request bodies and documented responses), apart from the storage tables.

Request models are strict: numbers must be JSON numbers (not strings or booleans), finite,
and unknown keys are refused, so a typo never silently changes a privacy parameter.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    create_model,
    field_validator,
)

from labels_party.catalog.datasets import NAME_PATTERN
from shared import epsilon as amounts
from shared.domain import MAX_LABEL_MAGNITUDE
from shared.errors import InvalidParameterError
from shared.estimators.families import NW_REFERENCE_MAX_ROWS
from shared.mechanisms import registry
from shared.mechanisms.histogram import MAX_BINS
from shared.message import ExampleId
from shared.number_text import exact_decimal
from shared.plan import AUTO, MAX_EXAMPLES, check_mechanism
from shared.segments import SEGMENT_COLUMN_PATTERN
from shared.selection import MAX_MODEL_DIM

_STRICT = ConfigDict(strict=True, allow_inf_nan=False, extra="forbid")
# RPWithPrior's zeta relative to the label range (label_max - label_min): far beyond any useful
# noise radius on both sides, and inside what float64 computes (denormal zetas divide by 0).
_Bound = Annotated[float, Field(ge=-MAX_LABEL_MAGNITUDE, le=MAX_LABEL_MAGNITUDE)]


def _amount_in_range(value: Decimal) -> Decimal:
    try:
        return amounts.check_range(value, name="amount")
    except InvalidParameterError as exc:
        raise ValueError(str(exc)) from None


def _amount_input(value: Any) -> Any:
    """An amount as sent, as a ``Decimal``: a string must be a plain ASCII decimal
    (``shared.number_text``; ``Decimal`` alone also reads ``1_0`` as 10 and full-width or
    Arabic-Indic digits), a JSON number is its shortest text (``shared.epsilon``). Anything else
    is left for the strict ``Decimal`` check to refuse (a boolean, an object)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        if len(value.strip()) > amounts.MAX_TEXT:  # a number, not a document
            raise ValueError(f"must be at most {amounts.MAX_TEXT} characters")
        return exact_decimal(value)  # ValueError(NUMBER_RULE): a 422 naming the field
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        return Decimal(repr(value))
    return value


# An epsilon, delta or budget: an exact decimal within shared.epsilon's documented range.
_Amount = Annotated[Decimal, BeforeValidator(_amount_input), AfterValidator(_amount_in_range)]


class DatasetCreate(BaseModel):
    """``POST /v1/datasets``: public label bounds, the default label and the budget."""

    model_config = _STRICT

    name: str = Field(pattern=NAME_PATTERN, description="1-64 of [A-Za-z0-9_.-], first alnum")
    label_min: _Bound
    label_max: _Bound
    default_label: _Bound = Field(description="label of registered examples never labelled")
    epsilon_budget: _Amount = Field(
        gt=0,
        description="total epsilon all releases may spend (a JSON number or a decimal string, "
        "kept as an exact decimal)",
    )
    delta_budget: _Amount = Field(
        default=Decimal(0),
        ge=0,
        lt=1,
        description="total delta the (epsilon, delta) model releases (ePTR) may spend, in "
        "[0, 1); default 0: no delta may be spent (a JSON number or a decimal string)",
    )
    segment_column: str | None = Field(
        default=None,
        pattern=SEGMENT_COLUMN_PATTERN,
        description="the name of a PUBLIC attribute every example is registered with (e.g. "
        "campaign): releases then run one prior, DP mean and randomizer per segment "
        "(shared.segments); fixed at creation",
    )


def _option_field(spec: registry.OptionSpec) -> tuple[Any, Any]:
    """A family's option spec as an optional, strictly typed request field."""
    kinds: dict[str, Any] = {"number": float, "integer": int, "string": str}
    annotation: Any = Literal[spec.choices] if spec.choices else kinds[spec.kind]
    bounds = {k: v for k, v in (("gt", spec.gt), ("ge", spec.ge), ("le", spec.le)) if v is not None}
    return annotation | None, Field(default=None, description=spec.description, **bounds)


def _release_options() -> type[BaseModel]:
    """``ReleaseOptions``: ``bins`` and ``model_dim`` (plan inputs of every mechanism), then each
    registered family's options from its specs (``shared.mechanisms.registry.OptionSpec``)."""
    fields: dict[str, Any] = {
        "bins": (
            int | None,
            Field(
                default=None,
                ge=1,
                le=MAX_BINS,
                description=(
                    "histogram cells; default: shared.selection.adaptive_bins(n, the "
                    "histogram's part of epsilon1)"
                ),
            ),
        ),
    }
    for family in registry.families():
        for name, spec in family.option_specs.items():
            fields.setdefault(name, _option_field(spec))
    fields["model_dim"] = (
        int | None,
        Field(
            default=None,
            ge=1,
            le=MAX_MODEL_DIM,
            description="the receiver's model dimension (features) for auto; default 10",
        ),
    )
    model = create_model("ReleaseOptions", __config__=_STRICT, **fields)
    model.__doc__ = "Optional mechanism parameters (chosen from the private prior when omitted)."
    return model


ReleaseOptions = _release_options()


class ReleaseRequestBody(BaseModel):
    """What a release asks for: the fields every way of making one shares."""

    model_config = _STRICT

    @field_validator("mechanism")
    @classmethod
    def _known(cls, value: str) -> str:
        try:
            return check_mechanism(value)
        except InvalidParameterError as exc:
            raise ValueError(str(exc)) from None

    mechanism: str = Field(
        default=AUTO,
        description="auto (the default: the registered mechanism the noisy prior predicts "
        "trains best), or a registered mechanism: " + ", ".join(registry.names()),
    )
    epsilon: _Amount = Field(
        gt=0,
        description="total epsilon of the release (epsilon1 + epsilon2), an exact decimal: a "
        "JSON number (0.1 is the decimal 0.1) or a decimal string",
    )
    epsilon_histogram: _Amount | None = Field(
        default=None,
        gt=0,
        description=(
            "epsilon1 (the histogram and, below a total of 2, the DP label mean); "
            "default: shared.plan.default_epsilon1"
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


class ReleaseCreate(ReleaseRequestBody):
    """``POST /v1/datasets/{name}/releases``."""

    dry_run: bool = Field(
        default=False,
        description="return the plan (what would be spent on what, and the budget left after) "
        "without reading labels or spending anything",
    )


class ExternalReleaseCharge(ReleaseRequestBody):
    """``POST /v1/datasets/{name}/external-releases``: charge a release a job will execute
    elsewhere (Spark), BEFORE it draws any noise.

    The request as for ``/releases`` plus the release id the job chose, n and the plan it will
    run; the labels party recomputes the plan from its own dataset and n and refuses any
    difference.
    """

    release_id: str = Field(pattern=r"^rel_[0-9a-f]{24}$", description="chosen by the job")
    n: int = Field(
        ge=1, le=MAX_EXAMPLES, description="examples in the job's universe (the message's n)"
    )
    labels_sha256: str | None = Field(
        default=None,
        pattern=r"^[0-9a-f]{64}$",
        description="sha256 of the labels input the job read (its files, by relative path): "
        "its HMAC under this database's key is recorded in the randomizer's ledger entry "
        "(`labels_input_hmac`); `ledger verify` names datasets charged for the same labels",
    )
    plan: dict[str, object] = Field(description="the plan the job runs (ReleasePlan.public())")


class ExternalReleasePublication(BaseModel):
    """``POST /v1/datasets/{name}/external-releases/{id}/publication``: the message the job
    wrote for a charged release."""

    model_config = _STRICT

    universe_sha256: str = Field(
        pattern=r"^[0-9a-f]{64}$",
        description="shared.message.universe_digest of the job's sorted example ids: must be "
        "the registered examples' (when the dataset has some), else the dataset's first "
        "external release's",
    )
    header: dict[str, object] = Field(
        description="the message header the job wrote (header.json), body_sha256 included"
    )


class ExternalReleaseFailure(BaseModel):
    """``POST /v1/datasets/{name}/external-releases/{id}/failure``: the job gave up after the
    charge (the charge stays)."""

    model_config = _STRICT

    reason: str = Field(min_length=1, max_length=500, description="recorded in the ledger")


class SegmentGroupPublic(BaseModel):
    segments: list[str]
    pooled: bool
    n: int
    bins: int


class SegmentsPlanPublic(BaseModel):
    """A segmented release's groups (``shared.segments.SegmentedPlan.public``)."""

    column: str
    groups: list[SegmentGroupPublic]


class ReleasePlanPublic(BaseModel):
    """What a release will spend on what (``shared.plan.ReleasePlan.public``)."""

    mechanism: str
    n: int
    epsilon: str
    epsilon1: str
    epsilon2: str
    histogram_epsilon: str
    label_mean_epsilon: str | None
    randomizer_epsilon: str
    split: Literal["default", "mean_first", "given", "segmented"] = Field(
        description='"mean_first": auto spent 96% on the DP mean (shared.plan.labels_can_train)'
    )
    bins: int = Field(description="histogram cells (segmented: the largest group's)")
    model_dim: int
    options: dict[str, object]
    explanation: list[str]
    segments: SegmentsPlanPublic | None = Field(
        default=None, description="a segmented release's groups (None: not segmented)"
    )


class BudgetPreview(BaseModel):
    budget: str
    spent: str
    requested: str
    fits: bool
    left_after: str


class ReleasePreview(BaseModel):
    """``dry_run: true``: the plan and the budget after it; nothing is read or spent."""

    dry_run: Literal[True]
    dataset: str
    n: int
    plan: ReleasePlanPublic
    budget: BudgetPreview


class BudgetTopUp(BaseModel):
    """``POST /v1/datasets/{name}/budget`` (operator): raise the budget, saying why."""

    model_config = _STRICT

    add: _Amount = Field(gt=0, description="epsilon added to the budget (exact decimal)")
    reason: str = Field(min_length=1, max_length=500, description="recorded in the ledger")


class DatasetArchive(BaseModel):
    """``POST /v1/datasets/{name}/archive`` (operator): delete the labels for good."""

    model_config = _STRICT

    reason: str = Field(min_length=1, max_length=500, description="recorded in the ledger")


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
    segments: list[str] | None = Field(
        default=None,
        description="each example's public segment, aligned with example_ids: required by a "
        "dataset with a segment_column, refused by any other",
    )


class DatasetPublic(BaseModel):
    name: str
    label_min: float
    label_max: float
    default_label: float
    epsilon_budget: str = Field(description="exact decimal")
    epsilon_spent: str = Field(description="exact decimal")
    epsilon_left: str = Field(description="exact decimal")
    delta_budget: str = Field(default="0", description="exact decimal")
    delta_spent: str = Field(default="0", description="exact decimal")
    delta_left: str = Field(default="0", description="exact decimal")
    state: Literal["open", "released", "archived"]
    n_examples: int
    n_labels: int | None = Field(default=None, description="advertiser only")
    releases: list[str]
    n_model_releases: int = Field(
        default=0, description="model releases (estimators) of the dataset"
    )
    created: str
    segment_column: str | None = Field(default=None, description="None: not segmented")


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
    bins: int | None = Field(description="histogram cells of the release's prior")
    epsilon1: str = Field(description="exact decimal charged for the histogram and DP mean")
    epsilon2: str = Field(description="exact decimal charged for the randomizer")
    epsilon: str = Field(description="epsilon1 + epsilon2, exactly")
    n: int
    created: str
    message_sha256: str = Field(description="header.body_sha256 of the message")
    binary_sha256: str = Field(description="sha256 of the whole binary encoding")
    binary_size: int
    expected_label_mse: float | None
    state: Literal["released", "charged", "failed"] = Field(
        default="released",
        description='an external release charged before its noise: "charged" until its '
        'message is published, "failed" if the job gave up (the charge stays)',
    )


class LedgerEntry(BaseModel):
    seq: int
    time: str
    dataset: str
    release_id: str | None
    kind: Literal[
        "dataset",
        "histogram",
        "randomizer",
        "model",
        "topup",
        "archive",
        "publication",
        "failure",
        "repair",
    ]
    mechanism: str | None
    epsilon: str = Field(description="exact decimal")
    delta: str | None = Field(default=None, description="exact decimal, (epsilon, delta) spends")
    actor_role: str
    actor: str | None = Field(
        default=None, description="the named principal who acted (null: a role-only token)"
    )
    parameters: dict[str, object]
    message_sha256: str | None
    prev_hash: str
    entry_hash: str


class LedgerPage(BaseModel):
    entries: list[LedgerEntry]
    head_hash: str
    next_after: int | None
    next: str | None = Field(default=None, description="the next page's URL (same filters)")


class ModelParams(BaseModel):
    """Public parameters of a model release (which ones each estimator needs: API.md)."""

    model_config = _STRICT

    intercept: bool | None = Field(default=None, description="ols: add a constant column")
    bandwidth: float | None = Field(
        default=None, gt=0, description="nw: Gaussian kernel sigma (eptr: chosen if omitted)"
    )
    queries: list[list[float]] | None = Field(
        default=None,
        min_length=1,
        max_length=4096,
        description="nw: the public query points, one value per feature column",
    )
    reference: list[list[float]] | None = Field(
        default=None,
        min_length=1,
        max_length=NW_REFERENCE_MAX_ROWS,
        description="eptr nw, c0 omitted: public points the caller will predict at (one value "
        f"per feature column, at most {NW_REFERENCE_MAX_ROWS}); c0 is then chosen per query "
        "from their density (the message keeps their sha256, not the rows)",
    )
    r_x: float | None = Field(
        default=None, gt=0, description="eptr ols/bayes: feature radius (chosen if omitted)"
    )
    r_theta: float | None = Field(
        default=None, gt=0, description="eptr ols: coefficient radius (chosen if omitted)"
    )
    r_f: float | None = Field(
        default=None,
        gt=0,
        description="eptr nw: labels clipped to [-r_f, r_f] (omitted: [label_min, label_max])",
    )
    c0: float | None = Field(
        default=None,
        gt=0,
        description="eptr: the SaLBo constant (ols, nw, bayes: chosen if omitted)",
    )
    n_classes: int | None = Field(default=None, ge=2, le=64, description="bayes: classes")


class ModelReleaseCreate(BaseModel):
    """``POST /v1/datasets/{name}/model-releases``: fit and release one model."""

    model_config = _STRICT

    estimator: str = Field(
        min_length=1, max_length=32, description="a family of shared.estimators.registry"
    )
    privacy: Literal["label", "eptr"]
    epsilon: _Amount = Field(gt=0, description="exact decimal charged")
    delta: _Amount | None = Field(
        default=None, gt=0, lt=1, description="eptr only: exact decimal in (0, 1) charged"
    )
    params: ModelParams = Field(default_factory=ModelParams)
    public_features: str | None = Field(
        default=None,
        pattern=r"^pf_[0-9a-f]{24}$",
        description="the feature set (default: the dataset's latest upload)",
    )
    dry_run: bool = Field(
        default=False,
        description="true: answer 200 with what it would charge and leave (every check made, "
        "no label read, nothing spent)",
    )


# ---- listings and audit views (the operator console) ----------------------------------------

# A budget amount as the API reports it: an exact decimal string (clients display it as given,
# never add it as floats).
Amount = str


class DatasetSummary(DatasetPublic):
    """One item of ``GET /v1/datasets``."""

    n_releases: int
    last_release: str | None = Field(description="created time of the newest label release")


class DatasetList(BaseModel):
    datasets: list[DatasetSummary]


class _ListedRelease(BaseModel):
    """What every listed release (label or model) says first: which, where, when, by whom."""

    id: str
    dataset: str
    created: str
    actor_role: str = Field(description="the role whose token made the release")
    actor: str | None = Field(
        default=None, description="the named principal who made it (null: a role-only token)"
    )
    message_sha256: str = Field(description="header.body_sha256 of its message")


class ReleaseSummary(_ListedRelease):
    """One item of ``GET /v1/datasets/{name}/releases``."""

    mechanism: str
    requested_mechanism: str
    epsilon1: Amount
    epsilon2: Amount
    epsilon: Amount
    n: int


class ReleaseList(BaseModel):
    dataset: str
    releases: list[ReleaseSummary] = Field(description="newest first")


class ModelReleaseSummary(_ListedRelease):
    """One item of ``GET /v1/datasets/{name}/model-releases``."""

    estimator: str
    privacy: str
    epsilon: Amount
    delta: Amount | None = Field(description="eptr only (null: pure epsilon-DP)")
    features_id: str = Field(description="the public feature set it was fitted on")
    n: int = Field(description="the examples of that feature set")


class ModelReleaseList(BaseModel):
    dataset: str
    model_releases: list[ModelReleaseSummary] = Field(description="newest first")


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
