"""The features party with a pinned labels-party key: it trains only on a verified receipt.

Against a REAL labels-party process (its key file sits next to its database).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from features_party.db.models import StoredMessage
from shared.errors import InvalidParameterError
from shared.service import receipt as rc
from tests.features_party.conftest import TamperingProxy, wait_job
from tests.features_party.test_flow import count_messages, prepare

pytestmark = pytest.mark.integration


def pin(labels_party: Any, path: Path) -> Path:
    """The labels party's current public key, written where the publisher pins it."""
    (current,) = [
        k for k in labels_party.client("publisher").public_keys() if k["status"] == "current"
    ]
    path.write_text(current["public_key_pem"])
    return path


def train(features: Any, dataset: str, release_id: str) -> dict[str, Any]:
    created = features.post(
        "/v1/models",
        json={"dataset": dataset, "release_id": release_id, "model": "ridge", "seed": 1},
    )
    assert created.status_code == 202, created.text
    return wait_job(features, created.json()["id"])


def test_a_pinned_key_admits_a_verified_release(labels_party, features_factory, tmp_path) -> None:
    features = features_factory(labels_public_key=pin(labels_party, tmp_path / "labels.pub"))
    _, _, _, release = prepare(labels_party, features, "rcpt_ok", n=200)
    job = train(features, "rcpt_ok", release.id)
    assert job["status"] == "succeeded", job["error"]
    assert count_messages(features) == 1


def test_another_key_is_refused_and_nothing_is_stored(
    labels_party, features_factory, tmp_path
) -> None:
    other = tmp_path / "other.pub"  # dated: an undated pin would not start (test_pin_dates.py)
    other_key = Ed25519PrivateKey.generate().public_key()
    other.write_text(rc.pem_with_validity(other_key, "2000-01-01T00:00:00Z", None))
    features = features_factory(labels_public_key=other)
    _, _, _, release = prepare(labels_party, features, "rcpt_other", n=200)
    job = train(features, "rcpt_other", release.id)
    assert job["status"] == "failed"
    assert "ReceiptError" in job["error"] and "not a pinned key" in job["error"]
    assert count_messages(features) == 0


class ReceiptTamperer(TamperingProxy):
    """Relays everything; changes one field of every receipt (the signature no longer fits)."""

    def __init__(self, upstream: str, field: str, value: Any) -> None:
        super().__init__(upstream)
        handler = self.server.RequestHandlerClass
        proxy = self

        def do_get(request: Any) -> None:
            answer = httpx.get(
                proxy.upstream + request.path,
                headers={k: v for k, v in request.headers.items() if k.lower() != "host"},
            )
            content = answer.content
            if request.path.endswith("/receipt") and answer.status_code == 200:
                content = json.dumps({**answer.json(), field: value}).encode()
                proxy.tampered += 1
            request.send_response(answer.status_code)
            request.send_header("content-type", answer.headers.get("content-type", ""))
            request.send_header("content-length", str(len(content)))
            request.end_headers()
            request.wfile.write(content)

        handler.do_GET = do_get  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("field", "value"), [("epsilon", "0.001"), ("n", 1), ("signature", "AAAA")]
)
def test_a_tampered_receipt_is_refused(
    labels_party, features_factory: Callable[..., Any], tmp_path, field: str, value: Any
) -> None:
    key = pin(labels_party, tmp_path / "labels.pub")
    name = f"rcpt_t_{field}"
    direct = features_factory(labels_public_key=key)
    _, _, _, release = prepare(labels_party, direct, name, n=200)
    with ReceiptTamperer(labels_party.url, field, value) as proxy:
        features = features_factory(labels_url=proxy.url, labels_public_key=key)
        job = train(features, name, release.id)
        assert proxy.tampered >= 1
    assert job["status"] == "failed"
    assert "ReceiptError" in job["error"]
    with features.app.state.sessions() as session:
        assert session.get(StoredMessage, release.id) is None


def test_a_receipt_for_another_message_is_refused(labels_party, features_factory, tmp_path) -> None:
    """A valid receipt of release B served for release A: signature fine, content does not match."""
    key = pin(labels_party, tmp_path / "labels.pub")
    direct = features_factory(labels_public_key=key)
    _, _, _, first = prepare(labels_party, direct, "rcpt_swap", n=200)
    second = labels_party.client("advertiser").create_release("rcpt_swap", epsilon=1.0)
    swapped = labels_party.client("publisher").receipt(second.id)

    class Swapper(ReceiptTamperer):
        pass

    with Swapper(labels_party.url, "x", None) as proxy:
        handler = proxy.server.RequestHandlerClass
        original = handler.do_GET

        def do_get(request: Any) -> None:
            if request.path.endswith("/receipt"):
                content = json.dumps(swapped).encode()
                request.send_response(200)
                request.send_header("content-type", "application/json")
                request.send_header("content-length", str(len(content)))
                request.end_headers()
                request.wfile.write(content)
                return
            original(request)

        handler.do_GET = do_get  # type: ignore[attr-defined]
        features = features_factory(labels_url=proxy.url, labels_public_key=key)
        job = train(features, "rcpt_swap", first.id)
    assert job["status"] == "failed"
    # The receipt states the other release's whole header: the pull names what differs.
    assert "differs from the receipt's in:" in job["error"] and "release_id" in job["error"]


def test_an_unusable_pin_is_refused_at_start(features_factory, tmp_path) -> None:
    bad = tmp_path / "bad.pub"
    bad.write_text("not a key")
    with pytest.raises(InvalidParameterError, match="public key"):
        features_factory(labels_public_key=bad)


def test_a_pem_pins_dates_are_checked_at_the_pull_and_read_at_start(
    labels_party, features_factory, tmp_path
) -> None:
    """A PEM pin carrying its key's validity (``Created:`` / ``Retired:`` above the block, as
    ``labeldp keys public`` writes it): a receipt signed after the stated retirement is refused
    at the pull; a date that is not a UTC time stops the service at start."""
    key = pin(labels_party, tmp_path / "labels.pub")
    (public,) = rc.load_public_keys(key).values()
    pem = rc.public_pem(public)  # the bare block, dated below
    key.write_text("Created: 2000-01-01T00:00:00Z\nRetired: 2000-01-02T00:00:00Z\n" + pem)
    features = features_factory(labels_public_key=key)
    _, _, _, release = prepare(labels_party, features, "rcpt_pem_dates", n=200)
    job = train(features, "rcpt_pem_dates", release.id)
    assert job["status"] == "failed" and "outside key" in job["error"], job["error"]
    assert count_messages(features) == 0
    key.write_text("Created: yesterday\n" + pem)
    with pytest.raises(InvalidParameterError, match="Created of key"):
        features_factory(labels_public_key=key, db_path=tmp_path / "other.db")


def test_a_pin_without_dates_is_refused_not_trusted_at_any_date(
    labels_party, features_factory, tmp_path
) -> None:
    """Issue 24, item 4: a pinned key the pin gives no validity (a bare PEM block of the labels
    party's own key, as pinned before keys carried dates) cannot date-check a receipt. Such a
    pin stops the service at start (tests/features_party/test_pin_dates.py), unless
    ``no_date_check`` waives the date check. A pin made undated after the start (the pull reads
    the file each time) is refused at the pull (UndatedKeyError naming the key and the dated pin
    to use), nothing stored, for a label release and a model release alike; with the check
    waived both are admitted, and so they are with the same key pinned as ``GET /v1/keys``
    serves it (dated)."""
    from features_party.db.models import ReleasedModelMessage
    from tests.features_party.test_released_models import _labels_party_model, _released

    dated = pin(labels_party, tmp_path / "labels.pub")
    bare = tmp_path / "bare.pub"
    (key,) = rc.load_public_keys(dated).values()
    bare.write_text(rc.public_pem(key))
    assert rc.load_key_validity(dated) and not rc.load_key_validity(bare)
    with pytest.raises(InvalidParameterError, match="labeldp keys public --all"):
        features_factory(labels_public_key=bare)
    model = _labels_party_model(
        labels_party, "rcpt-undated-model", estimator="ols", privacy="label", epsilon="1"
    )

    pinned = tmp_path / "pinned.pub"
    pinned.write_text(dated.read_text())
    features = features_factory(labels_public_key=pinned)
    _, _, _, release = prepare(labels_party, features, "rcpt_undated", n=200)
    pinned.write_text(rc.public_pem(key))  # undated after the start
    job = train(features, "rcpt_undated", release.id)
    assert job["status"] == "failed" and "UndatedKeyError" in job["error"], job["error"]
    assert rc.key_id(key) in job["error"] and "labeldp keys public" in job["error"]
    assert count_messages(features) == 0
    refused = _released(features, model)
    assert refused.status_code == 502 and "no validity" in refused.text, refused.text
    with features.app.state.sessions() as session:
        assert session.get(ReleasedModelMessage, model["id"]) is None

    waived = features_factory(labels_public_key=bare, no_date_check=True)  # the same database
    assert train(waived, "rcpt_undated", release.id)["status"] == "succeeded"
    assert _released(waived, model).status_code == 201
    assert count_messages(waived) == 1

    admitted = features_factory(labels_public_key=dated)
    assert train(admitted, "rcpt_undated", release.id)["status"] == "succeeded"
    assert _released(admitted, model).status_code == 201
