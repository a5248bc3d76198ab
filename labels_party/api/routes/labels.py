"""Label ingest (advertiser): JSON batches and bulk CSV / NDJSON streams, atomic per batch."""

from __future__ import annotations

import logging
from dataclasses import asdict
from functools import partial
from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool

from labels_party.api.body import read_batch
from labels_party.api.deps import AdvertiserOn
from labels_party.api.routes import BodyDocumentedRoute, json_body_doc
from labels_party.intake import ingest
from labels_party.intake.parsing import LabelStreamParser, parse_labels_json
from labels_party.schemas import LabelsBatch, LabelsIngested

router = APIRouter(prefix="/v1/datasets", tags=["labels"], route_class=BodyDocumentedRoute)
log = logging.getLogger("labels_party")
_STREAMS = {
    "text/csv": {"schema": {"type": "string", "description": "header example_id,value"}},
    "application/x-ndjson": {
        "schema": {"type": "string", "description": 'lines {"example_id": .., "value": ..}'}
    },
}
_PARSERS = {
    "text/csv": partial(LabelStreamParser, fmt="csv"),
    "application/x-ndjson": partial(LabelStreamParser, fmt="ndjson"),
}


@router.post(
    "/{name}/labels",
    response_model=LabelsIngested,
    openapi_extra=json_body_doc(LabelsBatch, extra=_STREAMS),
)
async def ingest_labels(
    request: Request,
    call: AdvertiserOn,
    overwrite: bool = Query(default=False, description="replace labels that differ"),
) -> Any:
    """Store a batch of labels (all or nothing); values are clipped into the bounds."""
    services, name = call.services, call.name
    await run_in_threadpool(ingest.open_dataset, services.db, name)
    rows = await read_batch(request, parse_json=parse_labels_json, streams=_PARSERS)
    result = await run_in_threadpool(
        ingest.store_labels,
        services.db,
        dataset=name,
        rows=rows,
        overwrite=overwrite,
        commit_delay=services.settings.debug_commit_delay,
    )
    # No count in metrics or logs: how many labels a dataset gets is label information (with
    # default_label meaning "no conversion" it is the number of conversions), the advertiser's.
    log.info("labels batch stored: dataset=%s", name)
    return asdict(result)
