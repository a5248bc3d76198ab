"""The typed clients: retries with back-off, error bodies, and verified message downloads."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
import numpy as np
import pytest

from shared.errors import IntegrityError, InvalidParameterError
from shared.message import (
    BINARY_MEDIA_TYPE,
    MessageHeader,
    NoisyHistogram,
    body_sha256,
    encode_binary,
    to_json_message,
)
from shared.service.client import (
    FeaturesPartyClient,
    LabelsPartyClient,
    RetryPolicy,
    ServiceError,
    ServiceUnavailableError,
    columns_to_csv,
)


class Recorder:
    """A MockTransport handler that replays scripted answers and records requests."""

    def __init__(self, *answers: object) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        assert isinstance(answer, httpx.Response)
        return answer


def make_client(cls, handler, *, attempts: int = 4, sleeps: list[float] | None = None, **kw):
    slept = sleeps if sleeps is not None else []
    return cls(
        "http://labels.test",
        token="tok-123456789",
        retry=RetryPolicy(attempts=attempts, base_delay=0.1, factor=2.0, max_delay=0.3),
        transport=httpx.MockTransport(handler),
        sleep=slept.append,
        **kw,
    )


def ok(body: object) -> httpx.Response:
    return httpx.Response(200, json=body)


def test_get_retries_5xx_with_exponential_backoff_then_succeeds():
    handler = Recorder(
        httpx.Response(503, json={"detail": "busy"}),
        httpx.Response(502, text="bad gateway"),
        httpx.ConnectError("refused"),
        ok({"status": "ok"}),
    )
    sleeps: list[float] = []
    client = make_client(LabelsPartyClient, handler, sleeps=sleeps)
    assert client.healthz() == {"status": "ok"}
    assert len(handler.requests) == 4
    assert sleeps == [0.1, 0.2, 0.3]  # base * 2^k, capped at max_delay
    assert handler.requests[0].headers["authorization"] == "Bearer tok-123456789"


def test_gives_up_after_the_bounded_attempts_with_a_clear_error():
    handler = Recorder(httpx.ConnectError("connection refused"))
    sleeps: list[float] = []
    client = make_client(LabelsPartyClient, handler, attempts=3, sleeps=sleeps)
    with pytest.raises(ServiceUnavailableError) as info:
        client.dataset("ds")
    assert len(handler.requests) == 3 and len(sleeps) == 2
    assert info.value.status is None
    assert "gave up after 3 attempt(s)" in str(info.value)
    assert "connection refused" in str(info.value)
    assert "/v1/datasets/ds" in str(info.value)


def test_4xx_is_not_retried_and_carries_status_and_json_errors():
    body = {"detail": "invalid request", "errors": [{"field": "epsilon", "message": "> 0"}]}
    handler = Recorder(httpx.Response(422, json=body))
    client = make_client(LabelsPartyClient, handler)
    with pytest.raises(ServiceError) as info:
        client.create_release("ds", epsilon=-1.0)
    error = info.value
    assert not isinstance(error, ServiceUnavailableError)
    assert len(handler.requests) == 1
    assert error.status == 422 and error.detail == "invalid request"
    assert error.errors == [{"field": "epsilon", "message": "> 0"}]
    assert "epsilon: > 0" in str(error) and "HTTP 422" in str(error)


def test_non_idempotent_post_is_not_retried_on_5xx_or_timeouts():
    dataset = {"label_min": 0.0, "label_max": 1.0, "default_label": 0.0, "epsilon_budget": 1.0}
    handler = Recorder(httpx.Response(500, json={"detail": "boom"}))
    client = make_client(LabelsPartyClient, handler)
    with pytest.raises(ServiceUnavailableError) as info:
        client.create_dataset("ds", **dataset)
    assert len(handler.requests) == 1 and info.value.status == 500

    handler = Recorder(httpx.ReadTimeout("slow"))
    client = make_client(LabelsPartyClient, handler)
    with pytest.raises(ServiceUnavailableError, match="may have been applied"):
        client.create_dataset("ds", **dataset)
    assert len(handler.requests) == 1


RELEASE = {
    "id": "r1",
    "dataset": "ds",
    "mechanism": "rr_on_bins",
    "params": {},
    "epsilon1": 0.1,
    "epsilon2": 0.9,
    "epsilon": 1.0,
    "n": 3,
}


def test_a_release_is_retried_on_5xx_and_timeouts_with_one_idempotency_key():
    """The labels party answers a repeated key with the first release, spending nothing
    (tests/labels_party/test_idempotency.py): so the client may retry a lost answer."""
    handler = Recorder(
        httpx.Response(500, json={"detail": "boom"}), httpx.ReadTimeout("slow"), ok(RELEASE)
    )
    client = make_client(LabelsPartyClient, handler)
    assert client.create_release("ds", epsilon=1.0).id == "r1"
    keys = {request.headers["idempotency-key"] for request in handler.requests}
    assert len(handler.requests) == 3 and len(keys) == 1 and len(min(keys)) >= 22
    handler = Recorder(ok(RELEASE))
    make_client(LabelsPartyClient, handler).create_release("ds", epsilon=1, idempotency_key="j/1")
    assert handler.requests[0].headers["idempotency-key"] == "j/1"
    # Giving up names the key: a repeat with it gets the release if one was made, spends nothing.
    lost = Recorder(httpx.ReadTimeout("slow"))
    with pytest.raises(ServiceUnavailableError) as info:
        make_client(LabelsPartyClient, lost, attempts=2).create_release("ds", epsilon=1.0)
    sent = lost.requests[0].headers["idempotency-key"]
    assert f"repeat it with idempotency_key={sent!r}" in str(info.value)
    assert {request.headers["idempotency-key"] for request in lost.requests} == {sent}
    fresh = Recorder(ok(RELEASE))
    make_client(LabelsPartyClient, fresh).create_release("ds", epsilon=1.0)
    assert fresh.requests[0].headers["idempotency-key"] not in keys | {"j/1"}


def test_non_idempotent_post_is_retried_when_the_request_never_left():
    handler = Recorder(httpx.ConnectError("refused"), ok(RELEASE))
    client = make_client(LabelsPartyClient, handler)
    info = client.create_release("ds", epsilon=1.0, epsilon_histogram=0.1)
    assert info.id == "r1" and len(handler.requests) == 2
    sent = handler.requests[-1].read()
    assert b'"epsilon_histogram":0.1' in sent.replace(b" ", b"")


def test_idempotent_ingest_is_retried_on_5xx():
    handler = Recorder(httpx.Response(503, json={"detail": "later"}), ok({"accepted": 2}))
    client = make_client(LabelsPartyClient, handler)
    answers = client.post_labels("ds", ["a", "b"], [1.0, 2.5])
    assert answers == [{"accepted": 2}]
    body = handler.requests[-1].read().decode()
    assert body == "example_id,value\na,1.0\nb,2.5\n"
    assert handler.requests[-1].headers["content-type"] == "text/csv"


def _message(n: int = 4) -> tuple[MessageHeader, list[str], np.ndarray]:
    ids = [f"e{i}" for i in range(n)]
    labels = np.linspace(0.0, 3.0, n)
    header = MessageHeader(
        release_id="rel-1",
        dataset="ds",
        created=datetime(2026, 1, 1, tzinfo=UTC),
        mechanism="none",
        params={},
        epsilon1=0.5,
        epsilon2=0.5,
        label_min=0.0,
        label_max=3.0,
        default_label=0.0,
        histogram=NoisyHistogram(edges=[0.0, 1.5, 3.0], probs=[0.5, 0.5]),
        n=n,
        body_sha256=body_sha256(ids, labels),
    )
    return header, ids, labels


def test_binary_download_is_verified():
    header, ids, labels = _message()
    raw = b"".join(encode_binary(header, ids, labels))
    handler = Recorder(
        httpx.Response(200, content=raw, headers={"content-type": BINARY_MEDIA_TYPE})
    )
    client = make_client(LabelsPartyClient, handler)
    pulled = client.download_message("rel-1")
    assert pulled.example_ids == ids and pulled.raw == raw
    np.testing.assert_array_equal(pulled.noisy_labels, labels)
    assert handler.requests[0].headers["accept"] == BINARY_MEDIA_TYPE


def test_tampered_binary_body_is_refused():
    header, ids, labels = _message()
    raw = bytearray(b"".join(encode_binary(header, ids, labels)))
    raw[-3] ^= 0x01  # one bit of the last noisy label
    handler = Recorder(
        httpx.Response(200, content=bytes(raw), headers={"content-type": BINARY_MEDIA_TYPE})
    )
    client = make_client(LabelsPartyClient, handler)
    with pytest.raises(IntegrityError, match="sha256"):
        client.download_message("rel-1")


def test_json_download_verified_and_release_id_checked():
    header, ids, labels = _message()
    body = to_json_message(header, ids, labels).model_dump_json()
    handler = Recorder(
        httpx.Response(200, content=body, headers={"content-type": "application/json"})
    )
    client = make_client(LabelsPartyClient, handler)
    pulled = client.download_message("rel-1", binary=False)
    np.testing.assert_array_equal(pulled.noisy_labels, labels)
    with pytest.raises(IntegrityError, match="rel-2"):
        client.download_message("rel-2", binary=False)
    tampered = body.replace('"e3"', '"e9"')
    handler.answers = [
        httpx.Response(200, content=tampered, headers={"content-type": "application/json"})
    ]
    with pytest.raises(IntegrityError):
        client.download_message("rel-1", binary=False)


def test_unexpected_media_type_is_refused():
    handler = Recorder(
        httpx.Response(200, content=b"<html>", headers={"content-type": "text/html"})
    )
    with pytest.raises(IntegrityError, match="media type"):
        make_client(LabelsPartyClient, handler).download_message("rel-1")


def test_features_client_uploads_csv_batches_and_validates_predict_args():
    answer = {
        "dataset": "ds",
        "received": 2,
        "inserted": 2,
        "unchanged": 0,
        "replaced": 0,
        "rows_total": 2,
        "columns": {"x": "numeric", "c": "categorical"},
    }
    handler = Recorder(ok(answer))
    client = make_client(FeaturesPartyClient, handler)
    client.upload_features(
        "ds",
        ["a", "b", "c"],
        {"x": np.array([1.5, np.nan, 2.0]), "c": np.array(["red", "x,y", "blue"])},
        categorical=["c"],
        batch_size=2,
    )
    assert len(handler.requests) == 2
    first = handler.requests[0]
    assert first.url.params["categorical"] == "c"
    assert first.read().decode() == 'example_id,x,c\na,1.5,red\nb,,"x,y"\n'
    with pytest.raises(InvalidParameterError):
        client.predict("m", rows=[{"features": {}}], example_ids=["a"])


def test_columns_to_csv_checks_lengths():
    with pytest.raises(InvalidParameterError, match="column 'x'"):
        columns_to_csv(["a", "b"], {"x": np.array([1.0])})


@pytest.mark.parametrize(
    "kwargs",
    [{"attempts": 0}, {"attempts": 1.5}, {"base_delay": -1.0}, {"factor": 0.5}],
)
def test_retry_policy_rejects_bad_values(kwargs):
    with pytest.raises(InvalidParameterError):
        RetryPolicy(**kwargs)


def test_path_segments_are_percent_encoded() -> None:
    """A hostile id cannot walk the URL path (``..``, ``/``) of the other party's API."""
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.raw_path.decode())
        return httpx.Response(404, json={"detail": "no", "errors": []})

    client = make_client(LabelsPartyClient, handler, attempts=1)
    with pytest.raises(ServiceError):
        client.release("../../ledger")
    assert seen == ["/v1/releases/..%2F..%2Fledger"]
