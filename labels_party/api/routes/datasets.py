"""Datasets: create (operator), read and list, with their releases (any role)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path
from fastapi.concurrency import run_in_threadpool

from labels_party import catalog
from labels_party import datasets as ds
from labels_party.api.deps import AnyRole, Operator, Services, ServicesDep
from labels_party.api.routes import BodyDocumentedRoute
from labels_party.schemas import (
    BudgetTopUp,
    DatasetArchive,
    DatasetCreate,
    DatasetList,
    DatasetPublic,
    ReleaseList,
)
from shared.http.requests import json_body

router = APIRouter(prefix="/v1/datasets", tags=["datasets"], route_class=BodyDocumentedRoute)
NamePath = Path(pattern=ds.LOOKUP_PATTERN, description="dataset name")


@router.post(
    "",
    status_code=201,
    response_model=DatasetPublic,
    response_model_exclude_unset=True,
)
async def create_dataset(
    role: Operator, services: ServicesDep, body: Annotated[DatasetCreate, json_body(DatasetCreate)]
) -> Any:
    """Create a dataset with public label bounds, a default label and a privacy budget."""
    spec = ds.DatasetSpec(
        name=body.name,
        label_min=float(body.label_min),
        label_max=float(body.label_max),
        default_label=float(body.default_label),
        epsilon_budget=body.epsilon_budget,
        delta_budget=body.delta_budget,
    )
    row = await run_in_threadpool(ds.create_dataset, services.db, spec, actor_role=role)
    return ds.public_view(row, [], role=role)


@router.get("/{name}", response_model=DatasetPublic, response_model_exclude_unset=True)
def get_dataset(role: AnyRole, services: ServicesDep, name: str = NamePath) -> Any:
    """Counts, state and budget of a dataset (``n_labels`` for the advertiser only)."""
    row, release_ids = ds.get_dataset(services.db, name)
    return ds.public_view(row, release_ids, role=role)


TopUpBody = Annotated[BudgetTopUp, json_body(BudgetTopUp)]
ArchiveBody = Annotated[DatasetArchive, json_body(DatasetArchive)]


async def _view(services: Services, name: str, role: str) -> Any:
    row, release_ids = await run_in_threadpool(ds.get_dataset, services.db, name)
    return ds.public_view(row, release_ids, role=role)


@router.post("/{name}/budget", response_model=DatasetPublic)
async def top_up_budget(
    role: Operator, services: ServicesDep, body: TopUpBody, name: str = NamePath
) -> Any:
    """Raise a dataset's privacy budget (operator): ledgered with who and why, never silent."""
    await run_in_threadpool(
        ds.top_up, services.db, name, add=body.add, reason=body.reason, actor_role=role
    )
    return await _view(services, name, role)


@router.post("/{name}/archive", response_model=DatasetPublic)
async def archive_dataset(
    role: Operator, services: ServicesDep, body: ArchiveBody, name: str = NamePath
) -> Any:
    """Archive a dataset (operator): its labels and example ids are deleted for good; its
    releases and its ledger are kept."""
    await run_in_threadpool(ds.archive, services.db, name, reason=body.reason, actor_role=role)
    return await _view(services, name, role)


@router.get("", response_model=DatasetList, response_model_exclude_unset=True)
def list_datasets(role: AnyRole, services: ServicesDep) -> Any:
    """Every dataset the caller may see (a publisher: those it registered examples in)."""
    return {"datasets": catalog.list_datasets(services.db, role=role)}


@router.get("/{name}/releases", response_model=ReleaseList)
def list_releases(role: AnyRole, services: ServicesDep, name: str = NamePath) -> Any:
    """A dataset's releases, newest first: what each spent, when, and by whom."""
    return {"dataset": name, "releases": catalog.list_releases(services.db, name)}
