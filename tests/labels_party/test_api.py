"""HTTP behaviour of the labels party through the real app (TestClient, real SQLite file)."""

from __future__ import annotations

import contextlib
import json
from decimal import Decimal

import numpy as np
import pytest

from labels_party.releasing.releases import ReleaseService
from shared.epsilon import float_at_most
from shared.mechanisms.private_mean import private_mean_variance
from shared.message import BINARY_MEDIA_TYPE, decode_binary, from_json_message
from shared.plan import default_mean_share, default_split, split_prior_epsilon
from shared.randomizer import Release, execute
from tests.labels_party.conftest import (
    ADV,
    OPS,
    PUB,
    create_dataset,
    csv_body,
    ledger_rows,
    put_labels,
    register,
    release,
)


def test_dataset_create_and_read(client):
    created = create_dataset(client, "clicks", epsilon_budget=2.5)
    assert created["state"] == "open" and created["epsilon_left"] == "2.5"
    again = client.post(
        "/v1/datasets",
        json={"name": "clicks", "label_min": 0, "label_max": 1, "default_label": 0,
              "epsilon_budget": 1},
        headers=OPS,
    )  # fmt: skip
    assert again.status_code == 409
    assert again.json()["errors"][0]["field"] == "name"
    for headers in (ADV, PUB, OPS):
        view = client.get("/v1/datasets/clicks", headers=headers).json()
        assert view["epsilon_budget"] == "2.5" and view["n_examples"] == 0
        assert ("n_labels" in view) == (headers is ADV)


def test_examples_are_idempotent_and_counted(client):
    create_dataset(client)
    first = register(client, "ds", ["a", "b", "c"])
    assert first == {"accepted": 3, "registered_new": 3, "n_examples": 3}
    second = register(client, "ds", ["b", "c", "d", "d"])
    assert second == {"accepted": 4, "registered_new": 1, "n_examples": 4}
    plain = client.post(
        "/v1/datasets/ds/examples",
        content=b"e\r\nf\n\na\n",
        headers={**PUB, "content-type": "text/plain; charset=utf-8"},
    )
    assert plain.status_code == 200, plain.text
    assert plain.json() == {"accepted": 3, "registered_new": 2, "n_examples": 6}


def test_labels_counts_clipping_idempotency_conflict_overwrite(client):
    create_dataset(client, label_min=0.0, label_max=10.0)
    first = put_labels(client, "ds", [("a", 1.0), ("b", 20.0), ("c", -5.0), ("d", 3)])
    assert first.json() == {
        "accepted": 4, "new": 4, "clipped": 2, "unchanged": 0, "overwritten": 0, "n_labels": 4
    }  # fmt: skip
    # same values (b clipped to 10 either way) -> idempotent
    again = put_labels(client, "ds", [("a", 1.0), ("b", 10.0), ("e", 2.0)])
    assert again.json() == {
        "accepted": 3, "new": 1, "clipped": 0, "unchanged": 2, "overwritten": 0, "n_labels": 5
    }  # fmt: skip
    conflict = put_labels(client, "ds", [("f", 1.0), ("a", 2.0)])
    assert conflict.status_code == 409
    assert conflict.json()["errors"][0]["field"] == "labels[1].value"  # as a parse error would
    assert "'a'" in conflict.json()["errors"][0]["message"]
    # nothing of the refused batch was stored (f is absent)
    assert client.get("/v1/datasets/ds", headers=ADV).json()["n_labels"] == 5
    # in a stream, the conflict names its line (header = line 1, blank lines counted)
    for kind, text in (
        ("text/csv", "example_id,value\nf,1\n\n\na,2\n"),
        (
            "application/x-ndjson",
            '{"example_id":"f","value":1}\n\n\n{"example_id":"a","value":2}\n',
        ),
    ):
        streamed = client.post(
            "/v1/datasets/ds/labels", content=text, headers={**ADV, "Content-Type": kind}
        )
        assert streamed.status_code == 409, streamed.text
        line = 5 if kind == "text/csv" else 4
        assert streamed.json()["errors"][0]["field"] == f"line[{line}].value"
    forced = put_labels(client, "ds", [("f", 1.0), ("a", 2.0)], overwrite="true")
    assert forced.json() == {
        "accepted": 2, "new": 1, "clipped": 0, "unchanged": 0, "overwritten": 1, "n_labels": 6
    }  # fmt: skip


def test_duplicates_within_one_batch(client):
    create_dataset(client)
    same = put_labels(client, "ds", [("a", 1.0), ("a", 1.0)])
    assert same.json()["new"] == 1 and same.json()["unchanged"] == 1
    differ = put_labels(client, "ds", [("b", 1.0), ("b", 2.0)])
    assert differ.status_code == 409
    last_wins = put_labels(client, "ds", [("b", 1.0), ("b", 2.0), ("b", 3.0)], overwrite="true")
    assert last_wins.json()["new"] == 1 and last_wins.json()["overwritten"] == 2


def test_csv_and_ndjson_streams(client):
    create_dataset(client)
    pairs = [(f"id{i:05d}", i / 10) for i in range(5000)]
    response = client.post(
        "/v1/datasets/ds/labels",
        content=csv_body(pairs),
        headers={**ADV, "content-type": "text/csv"},
    )
    assert response.status_code == 200, response.text
    assert response.json()["new"] == 5000
    ndjson = "".join(json.dumps({"example_id": f"n{i}", "value": i}) + "\n" for i in range(10))
    response = client.post(
        "/v1/datasets/ds/labels",
        content=ndjson.encode(),
        headers={**ADV, "content-type": "application/x-ndjson"},
    )
    assert response.status_code == 200, response.text
    assert response.json()["n_labels"] == 5010


def _capture_randomizer(seen: list[np.ndarray]):
    def fake(plan, labels, rng) -> Release:
        seen.append(np.array(labels, copy=True))
        return execute(plan, labels, rng)

    return fake


def test_release_uses_default_label_for_unlabelled_and_only_registered(make_client):
    seen: list[np.ndarray] = []
    client = make_client(randomizer=_capture_randomizer(seen))
    create_dataset(client, default_label=5.0)
    register(client, "ds", ["b", "a", "c"])
    put_labels(client, "ds", [("a", 70.0), ("zz-unregistered", 99.0)])
    response = release(client, "ds")
    assert response.status_code == 201, response.text
    # message order is sorted by id: a, b, c; b and c unlabelled -> default 5.0
    np.testing.assert_array_equal(seen[0], [70.0, 5.0, 5.0])
    message = client.get(f"/v1/releases/{response.json()['id']}/message", headers=PUB)
    header, ids, _labels = from_json_message(message.content)
    assert ids == ["a", "b", "c"] and header.n == 3 and header.default_label == 5.0


def test_release_message_is_stored_once_and_both_encodings_agree(client):
    create_dataset(client, epsilon_budget=2.0)
    ids = [f"x{i:04d}" for i in range(3000)]
    register(client, "ds", ids)
    put_labels(client, "ds", [(i, float(k % 100)) for k, i in enumerate(ids)])
    created = release(client, "ds", epsilon=1.0, epsilon_histogram=0.25, params={"bins": 32})
    assert created.status_code == 201, created.text
    meta = created.json()
    assert (meta["epsilon1"], meta["epsilon2"], meta["epsilon"]) == ("0.25", "0.75", "1")
    assert meta["n"] == 3000 and meta["mechanism"] == "rpwithprior"
    assert client.get(f"/v1/releases/{meta['id']}", headers=PUB).json() == meta

    url = f"/v1/releases/{meta['id']}/message"
    json_1 = client.get(url, headers=ADV)
    json_2 = client.get(url, headers={**PUB, "accept": "application/json"})
    assert json_1.headers["content-type"].startswith("application/json")
    assert json_1.content == json_2.content
    binary_1 = client.get(url, headers={**PUB, "accept": BINARY_MEDIA_TYPE})
    binary_2 = client.get(url, headers={**ADV, "accept": f"{BINARY_MEDIA_TYPE}, */*;q=0.1"})
    assert binary_1.headers["content-type"] == BINARY_MEDIA_TYPE
    assert binary_1.content == binary_2.content
    assert int(binary_1.headers["content-length"]) == meta["binary_size"]

    header_j, ids_j, labels_j = from_json_message(json_1.content)
    header_b, ids_b, labels_b = decode_binary(binary_1.content)
    assert header_j == header_b and ids_j == ids_b == ids
    np.testing.assert_array_equal(labels_j, labels_b)
    assert header_b.body_sha256 == meta["message_sha256"]
    assert len(header_b.histogram.probs) == 32
    import hashlib

    assert hashlib.sha256(binary_1.content).hexdigest() == meta["binary_sha256"]
    # pulling again cost nothing
    assert client.get("/v1/datasets/ds", headers=OPS).json()["epsilon_spent"] == "1"
    unacceptable = client.get(url, headers={**PUB, "accept": "text/html"})
    assert unacceptable.status_code == 406


def test_release_default_bins_are_adaptive_and_model_dim_is_accepted(client):
    from shared.selection import adaptive_bins

    create_dataset(client, epsilon_budget=2.0)
    ids = [f"x{i:04d}" for i in range(1600)]
    register(client, "ds", ids)
    put_labels(client, "ds", [(i, float(k % 10)) for k, i in enumerate(ids)])
    created = release(
        client, "ds", epsilon=1.0, epsilon_histogram=0.08, mechanism="auto", params={"model_dim": 8}
    )
    assert created.status_code == 201, created.text
    meta = created.json()
    # The decimal 0.08 runs at the largest float not above it (the float 0.08 is above it).
    eps1 = float_at_most(Decimal("0.08"))
    assert eps1 < 0.08 and Decimal(eps1) <= Decimal("0.08")
    eps_hist, eps_mean = split_prior_epsilon(eps1, default_mean_share(1.0))
    bins = adaptive_bins(1600, eps_hist)
    assert bins < 64  # few cells: n epsilon_histogram is small
    message = client.get(f"/v1/releases/{meta['id']}/message", headers=PUB)
    header, _ids, _labels = from_json_message(message.content)
    assert len(header.histogram.probs) == bins
    assert header.model_dim == 8  # the features party resolves its transform with the same d
    # epsilon1 also bought the DP label mean the features party anchors on (format 3).
    assert header.format_version == 4 and header.label_mean_epsilon == eps_mean
    # format 4: the derived values the features party reads instead of recomputing.
    assert header.label_mean_variance == private_mean_variance(
        lo=0.0, hi=100.0, epsilon=eps_mean, n=1600
    )
    assert header.recommended_transform in ("raw", "debiased")
    assert header.label_mean is not None and 0.0 <= header.label_mean <= 100.0
    entries = client.get("/v1/ledger", headers=OPS).json()
    randomizer = [e for e in entries["entries"] if e["kind"] == "randomizer"][-1]
    assert randomizer["parameters"]["options"] == {}
    assert randomizer["parameters"]["model_dim"] == 8
    assert randomizer["parameters"]["recommended_transform"] in ("raw", "debiased")
    histogram = [e for e in entries["entries"] if e["kind"] == "histogram"][-1]
    assert histogram["parameters"]["bins"] == bins
    assert histogram["epsilon"] == "0.08"  # the whole epsilon1: histogram + mean, exactly
    mean_charge = Decimal(histogram["parameters"]["label_mean_epsilon"])
    # Short decimals a person can read (issue 25.7): 30% of 0.08, and the exact rest.
    assert histogram["parameters"]["label_mean_epsilon"] == "0.024"
    assert float_at_most(mean_charge) == eps_mean  # the float the mean ran at
    assert histogram["parameters"]["histogram_epsilon"] == "0.056"
    hist_charge = Decimal(histogram["parameters"]["histogram_epsilon"])
    assert hist_charge + mean_charge == Decimal("0.08") and hist_charge >= Decimal(eps_hist)


def test_release_freezes_the_dataset_and_spends_budget(client):
    create_dataset(client, epsilon_budget=2.0)
    register(client, "ds", ["a", "b"])
    put_labels(client, "ds", [("a", 1.0)])
    assert release(client, "ds", epsilon=1.5).status_code == 201
    assert (
        client.post(
            "/v1/datasets/ds/examples", json={"example_ids": ["c"]}, headers=PUB
        ).status_code
        == 409
    )
    assert put_labels(client, "ds", [("b", 2.0)]).status_code == 409
    over = release(client, "ds", epsilon=0.6)
    assert over.status_code == 409
    body = over.json()
    assert (body["spent"], body["requested"], body["left"], body["budget"]) == (
        "1.5",
        "0.6",
        "0.5",
        "2",
    )
    assert "request at most epsilon 0.5" in body["detail"] and "top up" in body["detail"]
    assert body["errors"][0]["field"] == "epsilon"
    assert release(client, "ds", epsilon=0.5).status_code == 201
    view = client.get("/v1/datasets/ds", headers=OPS).json()
    assert view["state"] == "released" and view["epsilon_left"] == "0"
    assert len(view["releases"]) == 2


def test_many_small_spends_fit_despite_rounding(client):
    create_dataset(client, epsilon_budget=0.3)
    register(client, "ds", ["a"])
    for _ in range(3):
        assert release(client, "ds", epsilon=0.1).status_code == 201
    assert release(client, "ds", epsilon=1e-6).status_code == 409


def test_release_needs_examples(client):
    create_dataset(client)
    put_labels(client, "ds", [("a", 1.0)])
    response = release(client, "ds")
    assert response.status_code == 409 and "no registered examples" in response.json()["detail"]


@pytest.mark.parametrize("mechanism", ["rr_on_bins", "auto"])
def test_other_mechanisms(client, mechanism):
    create_dataset(client)
    ids = [f"e{i}" for i in range(500)]
    register(client, "ds", ids)
    put_labels(client, "ds", [(i, float(k % 7) * 10) for k, i in enumerate(ids)])
    response = release(client, "ds", mechanism=mechanism, epsilon=2.0)
    assert response.status_code == 201, response.text
    assert response.json()["mechanism"] in ("rpwithprior", "rr_on_bins")
    message = client.get(f"/v1/releases/{response.json()['id']}/message", headers=PUB)
    header, _ids, labels = from_json_message(message.content)
    assert header.mechanism == response.json()["mechanism"]
    if header.mechanism == "rr_on_bins":  # outputs are the published output values only
        assert set(np.unique(labels)) <= set(header.params["output_values"])
    else:
        assert labels.min() >= header.params["a1"] - header.params["zeta"] - 1e-9
        assert labels.max() <= header.params["a2"] + header.params["zeta"] + 1e-9


def test_release_retries_when_labels_change_after_the_snapshot(make_client, monkeypatch):
    client = make_client()
    create_dataset(client)
    register(client, "ds", ["a", "b"])
    original = ReleaseService._snapshot
    calls = {"n": 0}

    def racing_snapshot(self, name, request):
        snap = original(self, name, request)
        calls["n"] += 1
        if calls["n"] == 1:  # a label lands between the snapshot and the write lock
            put_labels(client, "ds", [("a", 42.0)])
        return snap

    monkeypatch.setattr(ReleaseService, "_snapshot", racing_snapshot)
    seen: list[np.ndarray] = []
    client.app.state.services.releases._randomizer = _capture_randomizer(seen)
    assert release(client, "ds").status_code == 201
    assert calls["n"] == 2
    np.testing.assert_array_equal(seen[-1], [42.0, 0.0])  # the stored release saw the label


@pytest.mark.parametrize("mechanism", ["rpwithprior", "rr_on_bins", "auto"])
def test_the_default_split_is_the_engines_for_the_releases_mechanism(client, mechanism):
    """Without epsilon_histogram the service charges default_split(epsilon, n, mechanism)."""
    create_dataset(client, epsilon_budget=5.0)
    ids = [f"x{i:04d}" for i in range(2500)]
    register(client, "ds", ids)
    rel = release(client, "ds", epsilon=1.0, mechanism=mechanism).json()
    eps1 = default_split(1.0, n=2500, mechanism=mechanism)[0]
    # epsilon1 is a short decimal the split's float runs at, epsilon2 the rest of 1, exactly.
    assert float_at_most(Decimal(rel["epsilon1"])) == eps1
    assert Decimal(rel["epsilon1"]) + Decimal(rel["epsilon2"]) == Decimal(rel["epsilon"]) == 1
    if mechanism == "rpwithprior":  # sqrt(4 / 2500): a cheaper prior than RR-on-Bins'
        assert (rel["epsilon1"], rel["epsilon2"]) == ("0.04", "0.96")
    else:  # min(sqrt(64 / 2500), 0.25)
        assert (rel["epsilon1"], rel["epsilon2"]) == ("0.16", "0.84")


def test_ledger_endpoint_and_metrics(client):
    create_dataset(client, epsilon_budget=3.0)
    register(client, "ds", ["a", "b"])
    rel = release(client, "ds", epsilon=1.0).json()
    page = client.get("/v1/ledger", headers=OPS).json()
    kinds = [(e["kind"], e["epsilon"]) for e in page["entries"]]
    assert kinds == [
        ("dataset", "0"),
        ("histogram", rel["epsilon1"]),
        ("randomizer", rel["epsilon2"]),
    ]
    assert page["entries"][0]["parameters"]["epsilon_budget"] == "3"
    assert all(e["release_id"] == rel["id"] for e in page["entries"][1:])
    assert all(e["message_sha256"] == rel["message_sha256"] for e in page["entries"][1:])
    assert all(e["actor_role"] == "advertiser" for e in page["entries"][1:])
    assert page["entries"][1]["prev_hash"] == page["entries"][0]["entry_hash"]
    assert page["head_hash"] == page["entries"][-1]["entry_hash"]
    paged = client.get("/v1/ledger", params={"limit": 2}, headers=OPS).json()
    assert len(paged["entries"]) == 2 and paged["next_after"] == 2
    rest = client.get("/v1/ledger", params={"after": 2}, headers=OPS).json()
    assert [e["seq"] for e in rest["entries"]] == [3] and rest["next_after"] is None

    text = client.get("/metrics", headers=OPS).text
    assert 'labeldp_epsilon_spent{dataset="ds"} 1.0' in text
    assert 'labeldp_epsilon_budget{dataset="ds"} 3.0' in text
    assert 'labeldp_releases_total{mechanism="rpwithprior"} 1' in text
    assert "labeldp_examples_registered_total 2" in text
    assert 'route="/v1/datasets/{name}/releases",status="201"} 1' in text


def test_healthz_and_openapi_documented(client):
    assert client.get("/healthz").json() == {"status": "ok"}
    spec = client.get("/openapi.json").json()
    assert "/v1/datasets/{name}/labels" in spec["paths"]
    content = spec["paths"]["/v1/datasets/{name}/labels"]["post"]["requestBody"]["content"]
    assert set(content) == {"application/json", "text/csv", "application/x-ndjson"}
    assert "ReleaseCreate" in spec["components"]["schemas"]
    assert client.get("/docs").status_code == 200


def test_every_typed_json_body_is_documented_by_its_model(client):
    import importlib
    import pkgutil

    from fastapi.routing import APIRoute

    from labels_party.api import routes
    from shared.service.http.requests import JSONBody

    spec = client.get("/openapi.json").json()
    typed = 0
    for info in pkgutil.iter_modules(routes.__path__):
        router = importlib.import_module(f"{routes.__name__}.{info.name}").router
        for route in router.routes:
            assert isinstance(route, APIRoute)
            typed += _check_body_documented(route, spec, JSONBody)
    assert typed >= 6  # datasets, budget, archive, releases, external and model releases


def _check_body_documented(route, spec, body_type) -> int:
    found = 0
    for dep in route.dependant.dependencies:
        if isinstance(dep.call, body_type):
            found += 1
            (method,) = route.methods
            body = spec["paths"][route.path][method.lower()]["requestBody"]
            schema = body["content"]["application/json"]["schema"]
            assert schema == {"$ref": f"#/components/schemas/{dep.call.model.__name__}"}
            assert dep.call.model.__name__ in spec["components"]["schemas"]
    return found


def test_unknown_route_and_method_use_the_error_shape(client):
    missing = client.get("/v1/nothing", headers=OPS)
    assert missing.status_code == 404 and set(missing.json()) == {"detail", "errors"}
    wrong = client.delete("/v1/ledger", headers=OPS)
    assert wrong.status_code == 405 and "detail" in wrong.json()


def test_production_randomness_is_the_os_csprng(make_client):
    from shared.rng import SystemRandom

    client = make_client(seed=None)  # what `labeldp serve labels` builds: no rng injected
    assert isinstance(client.app.state.services.releases._rng_factory(), SystemRandom)
    create_dataset(client)
    register(client, "ds", ["a", "b", "c"])
    assert release(client, "ds").status_code == 201


def test_metrics_text_escapes_label_values():
    from labels_party.metrics import Metrics

    text = Metrics().render(datasets=[('we"ird\\name', 0.5, 1.0)])
    assert 'labeldp_epsilon_spent{dataset="we\\"ird\\\\name"} 0.5' in text
    assert text.endswith("\n")


def test_a_dry_run_returns_the_plan_and_spends_nothing(client, db_path):
    """The preview: what a release would spend on what, and the budget after it."""
    create_dataset(client, epsilon_budget=2)
    register(client, "ds", [f"p{i}" for i in range(800)])
    put_labels(client, "ds", [(f"p{i}", float(i % 50)) for i in range(800)])
    before = (client.get("/v1/datasets/ds", headers=OPS).json(), ledger_rows(db_path))
    response = client.post(
        "/v1/datasets/ds/releases", json={"epsilon": "0.5", "dry_run": True}, headers=ADV
    )
    assert response.status_code == 200, response.text
    preview = response.json()
    plan = preview["plan"]
    assert preview["dry_run"] is True and preview["n"] == 800 and plan["mechanism"] == "auto"
    assert Decimal(plan["epsilon1"]) + Decimal(plan["epsilon2"]) == Decimal("0.5")
    assert plan["explanation"] and plan["bins"] >= 2
    assert preview["budget"] == {
        "budget": "2",
        "spent": "0",
        "requested": "0.5",
        "fits": True,
        "left_after": "1.5",
    }
    after = (client.get("/v1/datasets/ds", headers=OPS).json(), ledger_rows(db_path))
    assert after == before  # nothing read into the ledger, nothing spent, still open
    # The release made next charges exactly what the preview said.
    made = release(client, "ds", epsilon="0.5", mechanism="auto").json()
    assert (made["epsilon1"], made["epsilon2"]) == (plan["epsilon1"], plan["epsilon2"])
    assert made["bins"] == plan["bins"]
    # A preview past the budget says so, still without spending.
    over = client.post(
        "/v1/datasets/ds/releases", json={"epsilon": 1.6, "dry_run": True}, headers=ADV
    ).json()
    assert over["budget"]["fits"] is False and over["budget"]["left_after"] == "0"


@pytest.mark.parametrize(
    ("mechanism", "option", "value"),
    [
        ("rr_on_bins", "zeta", 5.0),
        ("rr_on_bins", "select", "mse"),
        ("rpwithprior", "loss", "absolute"),
    ],
)
def test_an_option_of_another_mechanism_is_a_422_naming_it(client, mechanism, option, value):
    create_dataset(client)
    register(client, "ds", ["a", "b"])
    for dry_run in (True, False):
        response = client.post(
            "/v1/datasets/ds/releases",
            json={
                "epsilon": 1,
                "mechanism": mechanism,
                "params": {option: value},
                "dry_run": dry_run,
            },
            headers=ADV,
        )
        assert response.status_code == 422, response.text
        assert response.json()["errors"][0]["field"] == f"params.{option}"
    assert client.get("/v1/datasets/ds", headers=OPS).json()["epsilon_spent"] == "0"


def test_an_operator_top_up_is_ledgered_and_lets_a_refused_release_through(client, db_path):
    create_dataset(client, epsilon_budget=1)
    register(client, "ds", ["a", "b", "c"])
    assert release(client, "ds", epsilon=1).status_code == 201
    assert release(client, "ds", epsilon="0.5").status_code == 409
    body = {"add": "0.5", "reason": "Q4 campaign approved by the privacy board"}
    assert client.post("/v1/datasets/ds/budget", json=body, headers=ADV).status_code == 403
    raised = client.post("/v1/datasets/ds/budget", json=body, headers=OPS)
    assert raised.status_code == 200, raised.text
    assert (raised.json()["epsilon_budget"], raised.json()["epsilon_left"]) == ("1.5", "0.5")
    entry = ledger_rows(db_path)[-1]
    assert entry["kind"] == "topup" and entry["actor_role"] == "operator"
    assert json.loads(entry["parameters"]) == {
        "add": "0.5",
        "epsilon_budget_before": "1",
        "epsilon_budget": "1.5",
        "reason": body["reason"],
    }
    assert release(client, "ds", epsilon="0.5").status_code == 201
    bad = client.post("/v1/datasets/ds/budget", json={"add": 0, "reason": "x"}, headers=OPS)
    assert bad.status_code == 422 and bad.json()["errors"][0]["field"] == "add"
    no_reason = client.post("/v1/datasets/ds/budget", json={"add": 1}, headers=OPS)
    assert no_reason.status_code == 422 and no_reason.json()["errors"][0]["field"] == "reason"


def test_archiving_deletes_the_labels_for_good_and_keeps_the_ledger(client, db_path):
    import sqlite3

    create_dataset(client, epsilon_budget=3)
    register(client, "ds", ["a", "b"])
    put_labels(client, "ds", [("a", 42.0)])
    made = release(client, "ds", epsilon=1).json()
    archived = client.post("/v1/datasets/ds/archive", json={"reason": "retention"}, headers=OPS)
    assert archived.status_code == 200, archived.text
    assert archived.json()["state"] == "archived" and archived.json()["n_examples"] == 0
    with contextlib.closing(sqlite3.connect(db_path)) as conn:
        assert conn.execute("SELECT count(*) FROM entries").fetchone() == (0,)
    kinds = [row["kind"] for row in ledger_rows(db_path)]
    assert kinds == ["dataset", "histogram", "randomizer", "archive"]
    assert release(client, "ds", epsilon=1).status_code == 409
    assert put_labels(client, "ds", [("b", 1.0)]).status_code == 409
    # the released message stays downloadable; the ledger still verifies
    assert client.get(f"/v1/releases/{made['id']}/message", headers=PUB).status_code == 200
    again = client.post("/v1/datasets/ds/archive", json={"reason": "twice"}, headers=OPS)
    assert again.status_code == 409


def test_top_ups_and_archives_verify_and_a_forged_top_up_does_not(client, db_path):
    import sqlite3

    from labels_party.budget.ledger import verify
    from labels_party.db.engine import Database, make_engine

    create_dataset(client, epsilon_budget=1)
    register(client, "ds", ["a"])
    for add in ("0.25", "0.5"):
        body = {"add": add, "reason": "more"}
        assert client.post("/v1/datasets/ds/budget", json=body, headers=OPS).status_code == 200
    assert release(client, "ds", epsilon="1.75").status_code == 201
    assert (
        client.post("/v1/datasets/ds/archive", json={"reason": "r"}, headers=OPS).status_code == 200
    )

    def report():
        db = Database(make_engine(f"sqlite:///{db_path}"))
        with db.read() as conn:
            found = verify(conn)
        db.engine.dispose()
        return found

    ok = report()
    assert ok.ok, ok.problems
    assert ok.spent["ds"] == Decimal("1.75")
    with contextlib.closing(sqlite3.connect(db_path)) as conn:  # a budget raised off the books
        conn.execute("UPDATE datasets SET epsilon_budget = 9, epsilon_budget_exact = '9'")
        conn.commit()
    assert any("epsilon_budget" in p for p in report().problems)
