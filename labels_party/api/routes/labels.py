"""Label ingest (advertiser): JSON batches and bulk CSV / NDJSON streams, atomic per batch."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool

from labels_party import ingest
from labels_party.api.body import feed_stream
from labels_party.api.deps import Advertiser, ServicesDep
from labels_party.api.routes import json_body_doc
from labels_party.api.routes.datasets import NamePath
from labels_party.parsing import LabelStreamParser, parse_labels_json
from labels_party.schemas import LabelsBatch, LabelsIngested
from shared.http.requests import require_media

router = APIRouter(prefix="/v1/datasets", tags=["labels"])
log = logging.getLogger("labels_party")
_STREAMS = {
    "text/csv": {"schema": {"type": "string", "description": "header example_id,value"}},
    "application/x-ndjson": {
        "schema": {"type": "string", "description": 'lines {"example_id": .., "value": ..}'}
    },
}
_FORMATS = {"text/csv": "csv", "application/x-ndjson": "ndjson"}


@router.post(
    "/{name}/labels",
    response_model=LabelsIngested,
    openapi_extra=json_body_doc(LabelsBatch, extra=_STREAMS),
)
async def ingest_labels(
    request: Request,
    role: Advertiser,
    services: ServicesDep,
    name: str = NamePath,
    overwrite: bool = Query(default=False, description="replace labels that differ"),
) -> Any:
    """Store a batch of labels (all or nothing); values are clipped into the bounds."""
    await run_in_threadpool(ingest.open_dataset, services.db, name)
    kind = require_media(request.headers.get("content-type"), {"application/json": 1, **_STREAMS})
    if kind == "application/json":
        rows = parse_labels_json(await request.body())
    else:
        parser = LabelStreamParser(fmt=_FORMATS[kind])
        await feed_stream(request, parser)
        rows = parser.finish()
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
    return {
        "accepted": result.accepted,
        "new": result.new,
        "clipped": result.clipped,
        "unchanged": result.unchanged,
        "overwritten": result.overwritten,
        "n_labels": result.n_labels,
    }
