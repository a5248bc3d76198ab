"""The client address behind trusted reverse proxies (``X-Forwarded-For``), and only those.

A service behind a load balancer sees the balancer as every request's peer, so anything keyed
on the client address (the labels party's failed-authentication rate limit) would put every
client in one bucket. :class:`TrustedProxies` is an explicit list of addresses, networks (CIDR)
and host names (a compose service such as ``balancer``, resolved at most every
:data:`RESOLVE_SECONDS`, when a forwarded request arrives); empty, the default, trusts no one.
:class:`ForwardedClientMiddleware` then replaces the request's client address with the
right-most ``X-Forwarded-For`` hop that is not a trusted proxy, walking left from the peer,
only while each hop so far is trusted: a header sent by an untrusted peer is ignored, and what a
client writes to the left of the hops its proxies appended is never reached.
"""

from __future__ import annotations

import ipaddress
import logging
import re
import socket
import threading
import time
from collections.abc import Callable, Iterable, Sequence

import anyio
from starlette.types import ASGIApp, Receive, Scope, Send

from shared.errors import InvalidParameterError
from shared.service.http.middleware import HTTPMiddleware

ENV = "LABELDP_TRUSTED_PROXIES"
RESOLVE_SECONDS = 5.0
_HOST_NAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,62})(\.[A-Za-z0-9-]{1,63})*$")
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str], set[str]]

log = logging.getLogger(__name__)


def resolve(name: str) -> set[str]:
    """Every address ``name`` resolves to (empty when it does not resolve)."""
    try:
        return {str(info[4][0]) for info in socket.getaddrinfo(name, None)}
    except OSError:
        return set()


def parse_entries(value: str | Iterable[str]) -> tuple[str, ...]:
    """The entries of a trusted-proxy list (comma or space separated text, or items), each
    checked: an IP address, a network in CIDR notation, or a host name."""
    items = re.split(r"[,\s]+", value) if isinstance(value, str) else list(value)
    entries = tuple(item.strip() for item in items if item and item.strip())
    for entry in entries:
        _parse(entry)
    return entries


def _parse(entry: str) -> Network | str:
    try:
        return ipaddress.ip_network(entry, strict=False)
    except ValueError:
        pass
    if _HOST_NAME.fullmatch(entry) and not entry.replace(".", "").isdigit():
        return entry
    raise InvalidParameterError(
        f"{ENV}: {entry!r} is not an IP address, a network (CIDR) or a host name"
    )


def _address(text: str) -> Address | None:
    """A hop of X-Forwarded-For as an address (``[v6]:port`` and ``v4:port`` accepted)."""
    text = text.strip()
    candidates = [text]
    if text.startswith("[") and "]" in text:
        candidates.append(text[1 : text.index("]")])
    elif text.count(":") == 1:
        candidates.append(text.split(":", 1)[0])
    for candidate in candidates:
        try:
            return ipaddress.ip_address(candidate)
        except ValueError:
            continue
    return None


class TrustedProxies:
    """Which peers may say, in ``X-Forwarded-For``, whom they forward (module docstring)."""

    def __init__(
        self,
        entries: Sequence[str],
        *,
        resolver: Resolver = resolve,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        parsed = [_parse(entry) for entry in entries]
        self.networks = [item for item in parsed if not isinstance(item, str)]
        self.names = [item for item in parsed if isinstance(item, str)]
        self._resolver = resolver
        self._clock = clock
        self._resolved: set[Address] = set()
        self._resolved_at: float | None = None
        self._lock = threading.Lock()

    def __bool__(self) -> bool:
        return bool(self.networks or self.names)

    @property
    def stale(self) -> bool:
        """Whether the host names are due to be resolved (again)."""
        at = self._resolved_at
        return bool(self.names) and (at is None or self._clock() - at >= RESOLVE_SECONDS)

    def refresh(self) -> None:
        """Resolve the host names now (blocking: the middleware runs it in a thread)."""
        found: set[Address] = set()
        for name in self.names:
            addresses = self._resolver(name)
            if not addresses:
                log.warning("%s: %s does not resolve (not trusted until it does)", ENV, name)
            for text in addresses:
                address = _address(text)
                if address is not None:
                    found.add(address)
        with self._lock:
            self._resolved, self._resolved_at = found, self._clock()

    def trusts(self, host: str) -> bool:
        address = _address(host)
        if address is None:
            return False
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        return address in self._resolved or any(address in net for net in self.networks)

    def client(self, peer: str, forwarded_for: Sequence[str]) -> str:
        """The client address of a request from ``peer`` carrying these X-Forwarded-For
        header values (in order): the right-most hop that is not trusted, ``peer`` itself when
        it is not trusted or nothing was forwarded, the left-most hop when all are trusted."""
        if not self.trusts(peer):
            return peer
        hops = [hop.strip() for value in forwarded_for for hop in value.split(",")]
        hops = [hop for hop in hops if hop]
        client = peer
        for hop in reversed(hops):
            address = _address(hop)
            client = str(address) if address is not None else hop[:64]
            if not self.trusts(hop):
                break
        return client


class ForwardedClientMiddleware(HTTPMiddleware):
    """Sets ``scope["client"]`` to :meth:`TrustedProxies.client` (the port becomes 0: it is
    the proxy's, not the client's) for a request a trusted proxy forwarded."""

    def __init__(self, app: ASGIApp, *, proxies: TrustedProxies) -> None:
        super().__init__(app)
        self.proxies = proxies

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        forwarded = [
            value.decode("latin-1")
            for key, value in scope.get("headers") or []
            if key == b"x-forwarded-for"
        ]
        peer = scope.get("client")
        if forwarded and peer:
            if self.proxies.stale:
                await anyio.to_thread.run_sync(self.proxies.refresh)
            client = self.proxies.client(str(peer[0]), forwarded)
            if client != peer[0]:
                scope["client"] = (client, 0)  # in place: outer layers read the same scope
        await self.app(scope, receive, send)
