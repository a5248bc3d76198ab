"""Signed release receipts (any role) and the public keys that verify them (any role)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel

from labels_party.api.deps import AnyRole, ServicesDep
from labels_party.api.routes import BodyDocumentedRoute
from labels_party.api.routes.model_releases import ModelReleasePath
from labels_party.api.routes.releases import ReleasePath
from labels_party.releasing.receipts import ReceiptService

router = APIRouter(tags=["receipts"], route_class=BodyDocumentedRoute)


class PublicKey(BaseModel):
    """One Ed25519 public key that signs (``current``) or signed (``retired``) receipts."""

    key_id: str
    algorithm: str
    public_key: str  # base64 of the raw 32 bytes
    public_key_pem: str  # the PEM block under its Key-Id / Created / Retired lines: a pin
    status: str
    created: str
    retired: str | None


class KeyList(BaseModel):
    keys: list[PublicKey]


def _receipts(services: Any) -> ReceiptService:
    assert services.receipts is not None  # create_app always sets it
    return services.receipts  # type: ignore[no-any-return]


@router.get("/v1/keys", response_model=KeyList)
def list_keys(role: AnyRole, services: ServicesDep) -> Any:
    """The receipt-signing public keys, current first; retired keys stay listed."""
    return {"keys": _receipts(services).keys.published()}


@router.get("/v1/releases/{release_id}/receipt", response_model=dict[str, Any])
async def get_receipt(role: AnyRole, services: ServicesDep, release_id: str = ReleasePath) -> Any:
    """The release's signed receipt (signed on first request for an older release)."""
    return await run_in_threadpool(_receipts(services).get, release_id)


@router.get("/v1/model-releases/{model_release_id}/receipt", response_model=dict[str, Any])
async def get_model_receipt(
    role: AnyRole, services: ServicesDep, model_release_id: str = ModelReleasePath
) -> Any:
    """A model release's signed receipt: its whole header, charge, message sha256, ledger
    entry (signed on first request for an older model release)."""
    return await run_in_threadpool(_receipts(services).get_model, model_release_id)
