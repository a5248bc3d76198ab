"""Example registration (publisher): the public universe every release covers."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool

from labels_party.api.body import read_batch
from labels_party.api.deps import PublisherOn
from labels_party.api.routes import BodyDocumentedRoute, json_body_doc
from labels_party.intake import ingest
from labels_party.intake.parsing import ExampleBatch, ExampleStreamParser, parse_example_batch
from labels_party.schemas import ExamplesBatch, ExamplesRegistered

router = APIRouter(prefix="/v1/datasets", tags=["examples"], route_class=BodyDocumentedRoute)
_PLAIN = {"text/plain": {"schema": {"type": "string", "description": "one example id per line"}}}


@router.post(
    "/{name}/examples",
    response_model=ExamplesRegistered,
    openapi_extra=json_body_doc(ExamplesBatch, extra=_PLAIN),
)
async def register_examples(request: Request, call: PublisherOn) -> Any:
    """Register example ids (idempotent), with their public segments in a segmented dataset;
    refused once the dataset has been released."""
    services, name = call.services, call.name
    await run_in_threadpool(ingest.open_dataset, services.db, name)
    batch = await read_batch(
        request, parse_json=parse_example_batch, streams={"text/plain": ExampleStreamParser}
    )
    if not isinstance(batch, ExampleBatch):  # a text/plain stream: ids only
        batch = ExampleBatch(ids=batch)
    result = await run_in_threadpool(
        ingest.store_examples,
        services.db,
        dataset=name,
        example_ids=batch.ids,
        segments=batch.segments,
        commit_delay=services.settings.debug_commit_delay,
    )
    services.metrics.examples_registered(result.registered_new)
    return asdict(result)
