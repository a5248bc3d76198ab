"""Datasets: create (operator), read and list, with their releases (any role)."""

from __future__ import annotations

from functools import partial
from typing import Annotated, Any

from fastapi import APIRouter, Response
from fastapi.concurrency import run_in_threadpool

from labels_party.api.deps import (
    Actor,
    AnyRole,
    AnyRoleOn,
    DatasetCall,
    IdempotencyKeyHeader,
    Operator,
    OperatorOn,
    ServicesDep,
)
from labels_party.api.routes import BodyDocumentedRoute
from labels_party.budget import idempotency as idem
from labels_party.catalog import datasets as ds
from labels_party.catalog import listings
from labels_party.schemas import (
    BudgetTopUp,
    DatasetArchive,
    DatasetCreate,
    DatasetList,
    DatasetPublic,
    ReleaseList,
)
from shared import epsilon as amounts
from shared.service.http.requests import json_body

router = APIRouter(prefix="/v1/datasets", tags=["datasets"], route_class=BodyDocumentedRoute)


@router.post(
    "",
    status_code=201,
    response_model=DatasetPublic,
    response_model_exclude_unset=True,
)
async def create_dataset(
    role: Operator,
    actor: Actor,
    services: ServicesDep,
    body: Annotated[DatasetCreate, json_body(DatasetCreate)],
) -> Any:
    """Create a dataset with public label bounds, a default label and a privacy budget."""
    spec = ds.DatasetSpec(
        name=body.name,
        label_min=float(body.label_min),
        label_max=float(body.label_max),
        default_label=float(body.default_label),
        epsilon_budget=body.epsilon_budget,
        delta_budget=body.delta_budget,
        segment_column=body.segment_column,
    )
    create = partial(ds.create_dataset, actor_role=role, actor=actor)
    row = await run_in_threadpool(create, services.db, spec)
    return ds.public_view(row, [], role=role, n_model_releases=0)


@router.get("/{name}", response_model=DatasetPublic, response_model_exclude_unset=True)
def get_dataset(call: AnyRoleOn) -> Any:
    """Counts, state and budget of a dataset (``n_labels`` for the advertiser only)."""
    return ds.view(call.services.db, call.name, role=call.role)


TopUpBody = Annotated[BudgetTopUp, json_body(BudgetTopUp)]
ArchiveBody = Annotated[DatasetArchive, json_body(DatasetArchive)]


async def _view(call: DatasetCall) -> Any:
    return await run_in_threadpool(partial(ds.view, role=call.role), call.services.db, call.name)


@router.post("/{name}/budget", response_model=DatasetPublic)
async def top_up_budget(
    response: Response,
    call: OperatorOn,
    body: TopUpBody,
    idempotency_key: IdempotencyKeyHeader,
) -> Any:
    """Raise a dataset's privacy budget (operator): ledgered with who and why, never silent.

    With ``Idempotency-Key``, a repeat adds nothing again (``Idempotent-Replayed: true``)."""
    request = {"add": amounts.text(body.add), "reason": body.reason}
    key = idem.IdempotencyKey.of(
        idempotency_key, kind=idem.TOP_UP, request=request, role=call.role, actor=call.actor
    )
    top_up = partial(
        ds.top_up, add=body.add, reason=body.reason, actor_role=call.role, actor=call.actor, key=key
    )
    if not await run_in_threadpool(top_up, call.services.db, call.name):
        response.headers[idem.REPLAYED_HEADER] = "true"
        call.services.metrics.replay(idem.TOP_UP)
    return await _view(call)


@router.post("/{name}/archive", response_model=DatasetPublic)
async def archive_dataset(call: OperatorOn, body: ArchiveBody) -> Any:
    """Archive a dataset (operator): its labels and example ids are deleted for good; its
    releases and its ledger are kept."""
    archive = partial(ds.archive, reason=body.reason, actor_role=call.role, actor=call.actor)
    await run_in_threadpool(archive, call.services.db, call.name)
    return await _view(call)


@router.get("", response_model=DatasetList, response_model_exclude_unset=True)
def list_datasets(role: AnyRole, services: ServicesDep) -> Any:
    """Every dataset the caller may see (a publisher: those it registered examples in)."""
    return {"datasets": listings.list_datasets(services.db, role=role)}


@router.get("/{name}/releases", response_model=ReleaseList)
def list_releases(call: AnyRoleOn) -> Any:
    """A dataset's releases, newest first: what each spent, when, and by whom."""
    return {"dataset": call.name, "releases": listings.list_releases(call.services.db, call.name)}
