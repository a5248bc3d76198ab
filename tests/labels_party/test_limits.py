"""Per-token rate limits (429 + Retry-After), per-endpoint body limits and the access log."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from labels_party.api.limits import MAX_BUCKETS, TokenBuckets, endpoint_limit
from labels_party.config import Settings
from shared.message import BINARY_MEDIA_TYPE, JSON_MEDIA_TYPE
from tests.labels_party.conftest import (
    ADV,
    OPS,
    PUB,
    TOKENS_ENV,
    create_dataset,
    put_labels,
    register,
    release,
)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_token_bucket_burst_then_refill_at_the_rate() -> None:
    clock = Clock()
    buckets = TokenBuckets(rate=2.0, burst=3, clock=clock)
    assert [buckets.take(b"a") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert buckets.take(b"a") == pytest.approx(0.5)  # one token comes back in 1/rate s
    assert buckets.take(b"b") == 0.0  # another token has its own bucket
    clock.now += 0.5
    assert buckets.take(b"a") == 0.0 and buckets.take(b"a") > 0
    clock.now += 100  # refills to the burst, not beyond
    assert [buckets.take(b"a") for _ in range(4)][-1] > 0


def test_buckets_are_bounded() -> None:
    buckets = TokenBuckets(rate=1.0, burst=1, clock=Clock())
    for i in range(MAX_BUCKETS + 10):
        buckets.take(str(i).encode())
    assert len(buckets._buckets) == MAX_BUCKETS


def test_rate_limit_answers_429_with_retry_after(make_client: Callable[..., Any]) -> None:
    client = make_client(rate_limit=0.5, rate_burst=3)
    assert [client.get("/v1/ledger", headers=OPS).status_code for _ in range(3)] == [200] * 3
    limited = client.get("/v1/ledger", headers=OPS)
    assert limited.status_code == 429
    assert limited.headers["retry-after"] == "2"  # 1 / 0.5 s, whole seconds
    body = limited.json()
    assert "too many requests" in body["detail"]
    assert body["errors"] == [
        {"field": "Authorization", "message": "rate limit exceeded for this token"}
    ]
    # Other tokens and the health check are not affected.
    assert client.get("/v1/datasets/none", headers=PUB).status_code == 404
    assert all(client.get("/healthz").status_code == 200 for _ in range(5))
    # An unknown token is limited too (by its own bucket), before the 401.
    bad = {"Authorization": "Bearer nope"}
    codes = [client.get("/v1/ledger", headers=bad).status_code for _ in range(4)]
    assert codes == [401, 401, 401, 429]


def test_a_thousand_bad_tokens_share_one_bucket_and_evict_nothing(
    make_client: Callable[..., Any],
) -> None:
    """Issue 24.5: buckets keyed on the raw header gave each of 200 bad tokens a fresh bucket
    (200 x 401, no 429) and let a flood of them evict the legitimate buckets. Failed
    authentication is now limited per client address."""
    client = make_client(rate_limit=0.001, rate_burst=5)
    assert client.get("/v1/ledger", headers=OPS).status_code == 200  # the operator's bucket: 4
    codes = [
        client.get("/v1/ledger", headers={"Authorization": f"Bearer bad-{i:04d}"}).status_code
        for i in range(1000)
    ]
    assert codes[:5] == [401] * 5 and set(codes[5:]) == {429}
    # The legitimate token's bucket was neither spent nor evicted by the flood.
    assert [client.get("/v1/ledger", headers=OPS).status_code for _ in range(4)] == [200] * 4
    assert client.get("/v1/ledger", headers=OPS).status_code == 429
    # No token at all is the same address bucket as the bad ones.
    assert client.get("/v1/ledger").status_code == 429


def test_rate_limit_settings() -> None:
    env = {"LABELDP_TOKENS": TOKENS_ENV}
    served = Settings.from_env(db_path="x.db", environ=env)
    assert (served.rate_limit, served.rate_burst) == (50.0, 500)
    tuned = Settings.from_env(
        db_path="x.db", environ={**env, "LABELDP_RATE_LIMIT": "0", "LABELDP_RATE_BURST": "9"}
    )
    assert tuned.rate_limit == 0  # off
    from shared.errors import InvalidParameterError

    with pytest.raises(InvalidParameterError, match="rate_burst"):
        Settings(database_url="sqlite:///x.db", tokens=served.tokens, rate_limit=1.0)
    with pytest.raises(InvalidParameterError, match="LABELDP_RATE_LIMIT"):
        Settings.from_env(db_path="x.db", environ={**env, "LABELDP_RATE_LIMIT": "-1"})


def test_small_json_endpoints_have_their_own_body_limit(client: Any) -> None:
    assert endpoint_limit("POST", "/v1/datasets/ds/releases") == 1 << 20
    assert endpoint_limit("POST", "/v1/datasets/ds/labels") is None
    create_dataset(client)
    padding = " " * (1 << 20)
    big = client.post(
        "/v1/datasets/ds/releases",
        content=b'{"epsilon": 1' + padding.encode() + b"}",
        headers={**ADV, "Content-Type": "application/json"},
    )
    assert big.status_code == 413
    assert big.json()["errors"][0]["field"] == "body" and "1048576" in big.json()["detail"]
    too_big_create = client.post(
        "/v1/datasets",
        content=b'{"name": "x"' + padding.encode() + b"}",
        headers={**OPS, "Content-Type": "application/json"},
    )
    assert too_big_create.status_code == 413
    # A bulk endpoint still takes a body far above 1 MiB.
    ids = [f"example-{i:06d}" for i in range(40000)]
    register(client, "ds", ids)
    labels = put_labels(client, "ds", [(i, 1.0) for i in ids])
    assert labels.status_code == 200 and len(labels.request.content) > 1 << 20


def test_access_log_records_every_download(client: Any) -> None:
    create_dataset(client)
    ids = [f"e{i}" for i in range(30)]
    register(client, "ds", ids)
    put_labels(client, "ds", [(i, 5.0) for i in ids])
    release_id = release(client, "ds").json()["id"]
    pulls = [
        (PUB, BINARY_MEDIA_TYPE, "publisher"),
        (ADV, JSON_MEDIA_TYPE, "advertiser"),
        (PUB, JSON_MEDIA_TYPE, "publisher"),
    ]
    sizes = []
    for headers, accept, _ in pulls:
        answer = client.get(
            f"/v1/releases/{release_id}/message", headers={**headers, "Accept": accept}
        )
        assert answer.status_code == 200
        sizes.append(len(answer.content))
    assert client.get(f"/v1/releases/{release_id}/message", headers=OPS).status_code == 403
    page = client.get("/v1/access-log", headers=OPS, params={"limit": 2}).json()
    rest = client.get("/v1/access-log", headers=OPS, params={"after": page["next_after"]}).json()
    assert rest["next_after"] is None
    entries = page["entries"] + rest["entries"]
    assert [(e["actor_role"], e["encoding"], e["bytes"]) for e in entries] == [
        (role, accept, size) for (_, accept, role), size in zip(pulls, sizes, strict=True)
    ]
    assert all(e["release_id"] == release_id and e["completed"] for e in entries)
    assert all(e["time"].endswith("Z") for e in entries)
    for headers in (ADV, PUB):
        assert client.get("/v1/access-log", headers=headers).status_code == 403
