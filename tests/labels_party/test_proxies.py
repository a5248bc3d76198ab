"""Failed-authentication buckets behind a load balancer: ``LABELDP_TRUSTED_PROXIES``.

Behind the compose profile ``replicas``' HAProxy every request's peer is the balancer, so the
per-address bucket of failed authentication was one bucket for every client. A trusted proxy's
``X-Forwarded-For`` now names the client (the right-most hop that is not a trusted proxy); a
forwarded header from any other peer is ignored, and the default trusts no one (uvicorn's own
default, believing 127.0.0.1, is off).
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from starlette.exceptions import StarletteDeprecationWarning

from labels_party.config import Settings
from labels_party.main import create_app
from shared.errors import InvalidParameterError
from shared.service.http.proxies import TrustedProxies, parse_entries
from tests.labels_party.conftest import TOKENS_ENV, make_settings

with warnings.catch_warnings():
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from fastapi.testclient import TestClient

BAD = {"Authorization": "Bearer not-a-token"}
BALANCER = ("10.0.0.2", 41000)


def _codes(client: Any, forwarded_for: str | None, count: int) -> list[int]:
    headers = dict(BAD)
    if forwarded_for is not None:
        headers["X-Forwarded-For"] = forwarded_for
    return [client.get("/v1/ledger", headers=headers).status_code for _ in range(count)]


def _app(db_path: Any, peer: tuple[str, int], **settings: Any) -> TestClient:
    app = create_app(make_settings(db_path, rate_limit=0.001, rate_burst=2, **settings))
    return TestClient(app, raise_server_exceptions=False, client=peer)


def test_two_clients_behind_a_trusted_proxy_get_their_own_buckets(db_path: Any) -> None:
    with _app(db_path, BALANCER, trusted_proxies=("10.0.0.0/24",)) as client:
        assert _codes(client, "203.0.113.1", 3) == [401, 401, 429]
        # Another client through the same balancer: its own bucket, still full.
        assert _codes(client, "203.0.113.2", 2) == [401, 401]
        # What a client writes before the hop the balancer appended is never reached.
        assert _codes(client, "198.51.100.9, 203.0.113.1", 1) == [429]


def test_without_the_setting_every_client_of_the_proxy_shares_its_bucket(db_path: Any) -> None:
    with _app(db_path, BALANCER) as client:
        assert _codes(client, "203.0.113.1", 2) == [401, 401]
        assert _codes(client, "203.0.113.2", 1) == [429]


def test_a_forged_header_from_an_untrusted_peer_is_ignored(db_path: Any) -> None:
    with _app(db_path, ("198.51.100.7", 5000), trusted_proxies=("10.0.0.0/24",)) as client:
        assert _codes(client, "203.0.113.1", 2) == [401, 401]
        assert _codes(client, "203.0.113.2", 1) == [429]  # its own address's bucket
        assert _codes(client, None, 1) == [429]


def test_the_client_is_the_right_most_untrusted_hop() -> None:
    proxies = TrustedProxies(["10.0.0.0/24", "192.0.2.5", "balancer"],
                             resolver=lambda name: {"172.18.0.4"})  # fmt: skip
    proxies.refresh()
    assert proxies.client("172.18.0.4", ["203.0.113.1"]) == "203.0.113.1"
    assert proxies.client("10.0.0.9", ["1.1.1.1, 203.0.113.1, 192.0.2.5"]) == "203.0.113.1"
    assert proxies.client("10.0.0.9", ["1.1.1.1", "203.0.113.1"]) == "203.0.113.1"
    assert proxies.client("10.0.0.9", ["10.0.0.3, 192.0.2.5"]) == "10.0.0.3"  # all trusted
    assert proxies.client("10.0.0.9", ["[2001:db8::1]:443"]) == "2001:db8::1"
    assert proxies.client("::ffff:10.0.0.9", ["203.0.113.1"]) == "203.0.113.1"
    assert proxies.client("203.0.113.7", ["10.0.0.1"]) == "203.0.113.7"  # untrusted peer
    assert proxies.client("10.0.0.9", []) == "10.0.0.9"
    assert not TrustedProxies([]) and parse_entries(" a.b , 10.1.0.0/16 ::1") == (
        "a.b",
        "10.1.0.0/16",
        "::1",
    )


@pytest.mark.parametrize("value", ["10.0.0.0/33", "not a host!", "1.2.3", "-x"])
def test_a_bad_trusted_proxy_entry_is_refused_by_name(value: str) -> None:
    with pytest.raises(InvalidParameterError, match="LABELDP_TRUSTED_PROXIES"):
        Settings.from_env(
            db_path="x.db",
            environ={"LABELDP_TOKENS": TOKENS_ENV, "LABELDP_TRUSTED_PROXIES": value},
        )
    settings = Settings.from_env(
        db_path="x.db",
        environ={"LABELDP_TOKENS": TOKENS_ENV, "LABELDP_TRUSTED_PROXIES": "balancer,10.0.0.2"},
    )
    assert settings.trusted_proxies == ("balancer", "10.0.0.2")


@pytest.mark.integration
def test_a_served_process_believes_forwarded_headers_only_from_listed_proxies(
    server_factory: Any,
) -> None:
    """A real ``labeldp serve labels`` on loopback: uvicorn's default trusted X-Forwarded-For
    from 127.0.0.1, so any local process could pick its bucket; now only the setting does."""
    rate = {"LABELDP_RATE_LIMIT": "0.001", "LABELDP_RATE_BURST": "2"}
    plain = server_factory(**rate).start()
    with plain.client() as http:
        assert _codes(http, "203.0.113.1", 2) == [401, 401]
        assert _codes(http, "203.0.113.2", 1) == [429]
    plain.stop()
    behind = server_factory(None, **rate, LABELDP_TRUSTED_PROXIES="127.0.0.1").start()
    with behind.client() as http:
        assert _codes(http, "203.0.113.1", 3) == [401, 401, 429]
        assert _codes(http, "203.0.113.2", 2) == [401, 401]
