"""Running a service's app: uvicorn, https when the settings name a certificate."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol


class TLSSettings(Protocol):
    """What both services' settings say about https."""

    tls_cert: Path | None
    tls_key: Path | None


def serve(
    app: Any, settings: TLSSettings, *, host: str, port: int, log_level: str, **options: Any
) -> None:
    """Run ``app`` under uvicorn until interrupted (one worker: the app owns its state);
    ``options`` go to ``uvicorn.run`` as they are."""
    import uvicorn

    uvicorn.run(
        app,
        host=host,
        port=port,
        log_level=log_level,
        workers=1,
        ssl_certfile=settings.tls_cert,
        ssl_keyfile=settings.tls_key,
        **options,
    )
