"""Per-token request rate limits (a token bucket per bearer token) and per-endpoint body limits.

Rate: each valid token has a bucket of ``burst`` requests refilled at ``rate`` per second; every
other request (no ``Authorization``, or one that is not a valid token) shares the bucket of its
client address (behind a reverse proxy listed in ``LABELDP_TRUSTED_PROXIES``, the address its
``X-Forwarded-For`` names: ``shared.service.http.proxies``, installed outside this layer). A request
finding its bucket empty gets 429 with ``Retry-After`` (whole seconds until one request fits)
and the JSON error shape, before any handler runs. So failed
authentication is limited per address: 1,000 different bad tokens from one address are one
bucket, not 1,000 fresh ones, and cannot push the legitimate tokens' buckets out of the table.
Buckets are keyed by a keyed hash (no token kept as a key) and at most ``MAX_BUCKETS`` are kept
(the least recently used go first), so memory stays bounded. ``/healthz`` is exempt.

Bodies: ``ENDPOINT_BODY_LIMITS`` gives small JSON endpoints a limit far below the bulk ingest
limit (``labels_party.api.body.BodyLimitMiddleware`` applies the smaller of the two).
"""

from __future__ import annotations

import hashlib
import math
import re
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from starlette.types import ASGIApp, Receive, Scope, Send

from shared.service.http import errors as http_errors
from shared.service.http.middleware import HTTPMiddleware

MAX_BUCKETS = 10_000
EXEMPT_PATHS = frozenset({"/healthz"})

# (method, path pattern, largest body in bytes): requests whose body is a small JSON document.
ENDPOINT_BODY_LIMITS: tuple[tuple[str, re.Pattern[str], int], ...] = (
    ("POST", re.compile(r"^/v1/datasets/?$"), 1 << 20),
    ("POST", re.compile(r"^/v1/datasets/[^/]+/releases/?$"), 1 << 20),
)


def endpoint_limit(method: str, path: str) -> int | None:
    """The body limit of this endpoint, if it has its own."""
    for verb, pattern, limit in ENDPOINT_BODY_LIMITS:
        if method == verb and pattern.match(path):
            return limit
    return None


@dataclass
class _Bucket:
    tokens: float
    updated: float


class TokenBuckets:
    """Thread-safe token buckets: ``take(key)`` -> 0 if allowed, else seconds to wait."""

    def __init__(
        self, *, rate: float, burst: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._buckets: OrderedDict[bytes, _Bucket] = OrderedDict()
        self._lock = threading.Lock()

    def take(self, key: bytes) -> float:
        now = self._clock()
        with self._lock:
            bucket = self._buckets.pop(key, None) or _Bucket(tokens=self.burst, updated=now)
            bucket.tokens = min(self.burst, bucket.tokens + (now - bucket.updated) * self.rate)
            bucket.updated = now
            self._buckets[key] = bucket  # most recently used last
            while len(self._buckets) > MAX_BUCKETS:
                self._buckets.popitem(last=False)
            if bucket.tokens >= 1:
                bucket.tokens -= 1
                return 0.0
            return (1 - bucket.tokens) / self.rate


class RateLimitMiddleware(HTTPMiddleware):
    """429 + ``Retry-After`` when a token's bucket is empty (see the module docstring)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        rate: float,
        burst: int,
        is_valid: Callable[[str | None], bool] = lambda _header: True,
    ) -> None:
        super().__init__(app)
        self.buckets = TokenBuckets(rate=rate, burst=burst)
        self._salt = secrets.token_bytes(16)
        self._is_valid = is_valid

    def key(self, scope: Scope) -> bytes:
        """The bucket: the valid token's, else the client address's (module docstring)."""
        headers = dict(scope.get("headers") or [])
        credential = headers.get(b"authorization")
        header = None if credential is None else credential.decode("latin-1")
        if credential is None or not self._is_valid(header):
            client = scope.get("client") or ("?", 0)
            credential = b"address:" + str(client[0]).encode()
        else:
            credential = b"token:" + credential
        return hashlib.blake2b(credential, key=self._salt, digest_size=16).digest()

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        wait = 0.0 if scope.get("path") in EXEMPT_PATHS else self.buckets.take(self.key(scope))
        if wait <= 0:
            await self.app(scope, receive, send)
            return
        retry = max(1, math.ceil(wait))
        body = http_errors.error_shape(
            f"too many requests: at most {self.buckets.rate:g} per second (burst "
            f"{self.buckets.burst}) per token; retry in {retry} s",
            [("Authorization", "rate limit exceeded for this token")],
        )
        await http_errors.send_json(
            send, 429, body, extra_headers=[(b"retry-after", str(retry).encode())]
        )
