"""Public features and model releases through the real app: charges, messages, bad input."""

from __future__ import annotations

import json
import re
from decimal import Decimal
from typing import Any

import numpy as np
import pytest
from sqlalchemy import func, select, update

from labels_party.budget import ledger
from labels_party.db.models import datasets, public_feature_sets
from shared.model_message import ModelMessage, verify_model
from shared.rng import SystemRandom
from tests.labels_party.conftest import ADV, OPS, PUB, cli, create_dataset, put_labels, register

N = 300
TRUE_COEF = np.array([10.0, -5.0, 50.0])  # x1, x2, intercept


def _data(seed: int = 0) -> tuple[list[str], np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = np.round(rng.normal(size=(N, 2)), 6)
    y = np.clip(x @ TRUE_COEF[:2] + TRUE_COEF[2] + rng.normal(0, 1, N), 0, 100)
    return [f"ex-{i:04d}" for i in range(N)], x, y


def _csv(ids: list[str], x: np.ndarray, columns: tuple[str, ...] = ("x1", "x2")) -> str:
    lines = ["example_id," + ",".join(columns)]
    lines += [
        f"{i}," + ",".join(repr(float(v)) for v in row) for i, row in zip(ids, x, strict=True)
    ]
    return "\n".join(lines) + "\n"


def setup_dataset(client: Any, name: str = "ds", **fields: Any) -> tuple[list[str], np.ndarray]:
    """A dataset of N labelled examples with features x1, x2 uploaded (CSV)."""
    ids, x, y = _data()
    create_dataset(client, name, **{"epsilon_budget": "10", "delta_budget": "0.001", **fields})
    register(client, name, ids)
    assert put_labels(client, name, list(zip(ids, y.tolist(), strict=True))).status_code == 200
    answer = upload(client, name, _csv(ids, x), "text/csv")
    assert answer.status_code == 201, answer.text
    return ids, x


def upload(client: Any, name: str, body: str, media: str, headers: Any = PUB) -> Any:
    return client.post(
        f"/v1/datasets/{name}/public-features",
        content=body.encode(),
        headers={**headers, "Content-Type": media},
    )


def model_release(client: Any, name: str = "ds", **body: Any) -> Any:
    return client.post(f"/v1/datasets/{name}/model-releases", json=body, headers=ADV)


def state(client: Any, name: str = "ds") -> tuple[Any, ...]:
    """Everything a refused request must leave alone: the ledger and both budgets."""
    view = client.get(f"/v1/datasets/{name}", headers=ADV).json()
    with client.app.state.services.db.read() as conn:
        entries = ledger.entries(conn)
    keys = ("epsilon_spent", "delta_spent", "state")
    return (len(entries), entries[-1]["entry_hash"], *(view[k] for k in keys))


def verify(client: Any) -> ledger.VerifyReport:
    with client.app.state.services.db.read() as conn:
        return ledger.verify(conn)


# ---- public features ------------------------------------------------------------------------


def test_upload_public_features_csv_and_json(client: Any) -> None:
    ids, x = setup_dataset(client)
    rows = [
        {"example_id": i, "x1": float(a), "x2": float(b)} for i, (a, b) in zip(ids, x, strict=True)
    ]
    answer = upload(client, "ds", json.dumps({"rows": rows}), "application/json")
    assert answer.status_code == 201, answer.text
    body = answer.json()
    assert (body["columns"], body["n"], body["dataset"]) == (["x1", "x2"], N, "ds")
    assert body["id"].startswith("pf_") and len(body["sha256"]) == 64
    # The same table by CSV has the same digest.
    assert upload(client, "ds", _csv(ids, x), "text/csv").json()["sha256"] == body["sha256"]


@pytest.mark.parametrize(
    ("body", "media", "field"),
    [
        ("example_id,x1\nex-0000,nan\n", "text/csv", "line 2.x1"),
        ("example_id,x1\nex-0000,1e999\n", "text/csv", "line 2.x1"),
        ("example_id,x1\nex-0000,abc\n", "text/csv", "line 2.x1"),
        ("example_id,x1\nex-0000,1,2\n", "text/csv", "line 2"),
        ("example_id,x1\nnope-9999,1\n", "text/csv", "rows[0].example_id"),
        ("example_id,x1\nex-0000,1\nex-0000,2\n", "text/csv", "example_id"),
        ("id,x1\nex-0000,1\n", "text/csv", "header"),
        ("example_id\nex-0000\n", "text/csv", "header"),
        ('{"rows": [{"example_id": "ex-0000", "x1": NaN}]}', "application/json", "rows[0].x1"),
        # The services' input rules (found by an audit: 500s, or silently accepted):
        ('{"rows": [{"example_id": "ex-0000", "x1": 1' + "0" * 400 + "}]}", "application/json",
         "rows[0].x1"),
        ('{"rows": ' + "[" * 100_000 + "]" * 100_000 + "}", "application/json", "body"),
        ('{"rows": [{"example_id": "ex-0000", "x1": 1, "x1": 2}]}', "application/json",
         "rows[0].x1"),
        ("example_id,x1\nex-0000,1_000\n", "text/csv", "line 2.x1"),
        ("example_id,x1\nex-0000,\uff11\uff12\n", "text/csv", "line 2.x1"),
        ('{"rows": [{"example_id": "ex-0000", "x1": "1"}]}', "application/json", "rows[0].x1"),
        ('{"rows": [{"example_id": "ex-0000", "x1": true}]}', "application/json", "rows[0].x1"),
        ('{"rows": [{"example_id": "ex-0000", "x1": 1}, {"example_id": "ex-0001"}]}',
         "application/json", "rows[1]"),
        ('{"rows": []}', "application/json", "rows[0]"),
    ],
)  # fmt: skip
def test_bad_public_features_name_the_field(client: Any, body: str, media: str, field: str) -> None:
    setup_dataset(client)
    answer = upload(client, "ds", body, media)
    assert answer.status_code == 422, answer.text
    assert field in {e["field"] for e in answer.json()["errors"]}, answer.json()
    with client.app.state.services.db.read() as conn:  # only setup_dataset's upload is stored
        assert conn.execute(select(func.count()).select_from(public_feature_sets)).scalar() == 1


def test_only_the_publisher_uploads_features(client: Any) -> None:
    setup_dataset(client)
    assert upload(client, "ds", "example_id,x1\nex-0000,1\n", "text/csv", ADV).status_code == 403


# ---- model releases -------------------------------------------------------------------------


def test_label_dp_ols_release_charges_epsilon_only_and_verifies(client: Any) -> None:
    setup_dataset(client)
    answer = model_release(client, estimator="ols", privacy="label", epsilon="2")
    assert answer.status_code == 201, answer.text
    out = answer.json()
    assert (out["epsilon"], out["delta"], out["released"]) == ("2", None, True)
    assert out["budget"]["epsilon_spent"] == "2" and out["budget"]["delta_spent"] == "0"
    message = verify_model(out["message"])
    assert message.header.columns == ["x1", "x2"] and message.header.intercept
    assert message.header.noise == "discrete_laplace" and message.header.sensitivity > 0
    assert np.allclose(message.body.coef, TRUE_COEF, atol=2.0)
    # Publisher and advertiser read the same stored message; the operator may not.
    pulled = [client.get(f"/v1/model-releases/{out['id']}", headers=h) for h in (PUB, ADV)]
    assert pulled[0].status_code == 200 and pulled[0].content == pulled[1].content
    assert ModelMessage.model_validate_json(pulled[0].content) == message
    assert client.get(f"/v1/model-releases/{out['id']}", headers=OPS).status_code == 403
    assert client.get(f"/v1/model-releases/mrel_{'0' * 24}", headers=PUB).status_code == 404
    # Issue 24.7: a malformed id is unknown (404, naming the field), as for label releases.
    for malformed in ("mrel_000", "x" * 300, "mrel_" + "Z" * 24):
        answer = client.get(f"/v1/model-releases/{malformed}", headers=PUB)
        assert answer.status_code == 404, (malformed, answer.status_code)
        assert answer.json()["errors"][0]["field"] == "model_release_id"
    with client.app.state.services.db.read() as conn:
        entry = ledger.public_entry(ledger.entries(conn)[-1])
    assert (entry["kind"], entry["epsilon"], entry.get("delta")) == ("model", "2", None)
    assert entry["parameters"]["model_release_id"] == out["id"]
    header = message.header
    assert entry["parameters"] == {
        "model_release_id": out["id"],
        "estimator": "ols",
        "privacy": "label",
        "features_id": header.features_id,
        "features_sha256": header.features_sha256,
        "columns": ["x1", "x2"],
        "n": header.n,
        "params": header.params,
        "noise": "discrete_laplace",
        "noise_scale": header.noise_scale,
        "sensitivity": header.sensitivity,
    }
    assert entry["message_sha256"] == message.header.body_sha256
    report = verify(client)
    assert report.ok, report.problems


def test_eptr_release_charges_epsilon_and_delta_exactly(client: Any) -> None:
    setup_dataset(client)
    params = {"r_x": 4.0, "r_theta": 60.0, "c0": 0.1}
    for _ in range(3):
        answer = model_release(
            client, estimator="ols", privacy="eptr", epsilon="0.1", delta="0.0001", params=params
        )
        assert answer.status_code == 201, answer.text
    message = verify_model(answer.json()["message"])
    assert message.header.delta == "0.0001" and message.header.noise == "gaussian"
    assert "gamma" not in answer.text and "release_probability" not in answer.text
    view = client.get("/v1/datasets/ds", headers=ADV).json()
    assert (view["epsilon_spent"], view["delta_spent"], view["delta_left"]) == (
        "0.3",
        "0.0003",
        "0.0007",
    )
    report = verify(client)
    assert report.ok, report.problems
    assert report.spent["ds"] == Decimal("0.3")


def test_the_delta_budget_is_held_exactly(client: Any) -> None:
    setup_dataset(client, delta_budget="0.0002")
    params = {"r_x": 4.0, "r_theta": 60.0, "c0": 0.1}
    body = {"estimator": "ols", "privacy": "eptr", "epsilon": "0.5", "params": params}
    for _ in range(2):
        assert model_release(client, **body, delta="0.0001").status_code == 201
    before = state(client)
    refused = model_release(client, **body, delta="0.00000001")
    assert refused.status_code == 409, refused.text
    assert [e["field"] for e in refused.json()["errors"]] == ["delta"]
    assert state(client) == before
    # Epsilon is still there for label privacy (no delta).
    assert model_release(client, estimator="ols", privacy="label", epsilon="1").status_code == 201
    view = client.get("/v1/datasets/ds", headers=ADV).json()
    assert (view["epsilon_spent"], view["delta_spent"]) == ("2", "0.0002")
    assert verify(client).ok


def test_a_dataset_without_delta_budget_refuses_eptr(client: Any) -> None:
    setup_dataset(client, delta_budget="0")
    before = state(client)
    answer = model_release(
        client, estimator="ols", privacy="eptr", epsilon="1", delta="0.001",
        params={"r_x": 4.0, "r_theta": 60.0, "c0": 0.1},
    )  # fmt: skip
    assert answer.status_code == 409 and answer.json()["errors"][0]["field"] == "delta"
    assert state(client) == before


def test_epsilon_budget_refusal_spends_nothing(client: Any) -> None:
    setup_dataset(client, epsilon_budget="1")
    before = state(client)
    answer = model_release(client, estimator="ols", privacy="label", epsilon="1.5")
    assert answer.status_code == 409 and answer.json()["errors"][0]["field"] == "epsilon"
    assert state(client) == before


def test_nadaraya_watson_releases_on_the_named_grid(client: Any) -> None:
    setup_dataset(client)
    grid = [[a, b] for a in (-1.0, 0.0, 1.0) for b in (-1.0, 0.0, 1.0)]
    answer = model_release(
        client, estimator="nw", privacy="label", epsilon="4",
        params={"bandwidth": 0.5, "queries": grid},
    )  # fmt: skip
    assert answer.status_code == 201, answer.text
    message = verify_model(answer.json()["message"])
    assert message.body.queries == grid and len(message.body.values) == 9
    truth = np.array(grid) @ TRUE_COEF[:2] + TRUE_COEF[2]
    assert np.mean(np.abs(np.array(message.body.values) - truth)) < 10  # smoothing bias + noise
    answer = model_release(
        client, estimator="nw", privacy="eptr", epsilon="4", delta="0.0001",
        params={"bandwidth": 0.5, "queries": grid, "r_f": 100.0, "c0": 0.01},
    )  # fmt: skip
    assert answer.status_code == 201, answer.text
    assert verify_model(answer.json()["message"]).header.params == {
        "bandwidth": 0.5,
        "r_f": 100.0,
        "c0": 0.01,
    }
    assert verify(client).ok


def test_bayes_releases_priors_and_means(client: Any) -> None:
    setup_dataset(client)
    answer = model_release(
        client, estimator="bayes", privacy="eptr", epsilon="4", delta="0.0001",
        params={"n_classes": 2, "r_x": 4.0, "c0": 0.05},
    )  # fmt: skip
    assert answer.status_code == 201, answer.text
    message = verify_model(answer.json()["message"])
    assert len(message.body.priors) == 2 and np.isclose(sum(message.body.priors), 1.0)
    assert verify(client).ok


GOOD_EPTR = {"r_x": 4.0, "r_theta": 60.0, "c0": 0.1}
GRID = [[0.0, 0.0], [1.0, 1.0]]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"estimator": "ols", "privacy": "eptr", "epsilon": 1, "params": GOOD_EPTR}, "delta"),
        ({"estimator": "ols", "privacy": "label", "epsilon": 1, "delta": "0.001"}, "delta"),
        ({"estimator": "ols", "privacy": "eptr", "epsilon": 1, "delta": 1, "params": GOOD_EPTR},
         "delta"),
        ({"estimator": "ols", "privacy": "eptr", "epsilon": 1, "delta": 0, "params": GOOD_EPTR},
         "delta"),
        ({"estimator": "ols", "privacy": "eptr", "epsilon": 1, "delta": "-0.1",
          "params": GOOD_EPTR}, "delta"),
        ({"estimator": "bayes", "privacy": "label", "epsilon": 1}, "privacy"),
        ({"estimator": "nw", "privacy": "label", "epsilon": 1,
          "params": {"bandwidth": 0.5, "queries": [[0.0, 0.0, 0.0]]}}, "params.queries"),
        ({"estimator": "nw", "privacy": "label", "epsilon": 1,
          "params": {"bandwidth": 0.5, "queries": [[0.0], [1.0]]}}, "params.queries"),
        ({"estimator": "nw", "privacy": "label", "epsilon": 1,
          "params": {"bandwidth": 0.01, "queries": [[1e6, 1e6]]}}, "params.queries"),
        ({"estimator": "nw", "privacy": "label", "epsilon": 1, "params": {"queries": GRID}},
         "params.bandwidth"),
        ({"estimator": "ols", "privacy": "label", "epsilon": 1, "params": {"r_x": 1.0}},
         "params.r_x"),
        ({"estimator": "ols", "privacy": "eptr", "epsilon": 1, "delta": "0.001",
          "params": {**GOOD_EPTR, "c0": -1}}, "params.c0"),
        ({"estimator": "bayes", "privacy": "eptr", "epsilon": 1, "delta": "0.001",
          "params": {"n_classes": 2, "r_x": 1.0, "c0": 0.9}}, "params.c0"),
        ({"estimator": "ols", "privacy": "label", "epsilon": 0}, "epsilon"),
        ({"estimator": "ols", "privacy": "label", "epsilon": 1,
          "public_features": f"pf_{'0' * 24}"}, "public_features"),
        # The intercept column (norm 1) joins after the features' projection: r_x must be > 1.
        ({"estimator": "ols", "privacy": "eptr", "epsilon": 1, "delta": "0.001",
          "params": {**GOOD_EPTR, "r_x": 1.0}}, "params.r_x"),
    ],
)  # fmt: skip
def test_bad_model_release_names_the_field_and_spends_nothing(
    client: Any, body: dict[str, Any], field: str
) -> None:
    setup_dataset(client)
    before = state(client)
    answer = model_release(client, **body)
    assert 400 <= answer.status_code < 500, answer.text
    assert field in {e["field"] for e in answer.json()["errors"]}, answer.json()
    assert state(client) == before
    assert verify(client).ok


def _features_then_release(client: Any, csv_text: str) -> Any:
    answer = upload(client, "ds", csv_text, "text/csv")
    assert answer.status_code == 201, answer.text
    return model_release(client, estimator="ols", privacy="label", epsilon="1")


def test_singular_design_and_too_few_rows_are_refused_before_spending(client: Any) -> None:
    ids, x = setup_dataset(client)
    before = state(client)
    collinear = np.column_stack([x[:, 0], 2.0 * x[:, 0]])
    for csv_text in (
        _csv(ids, collinear),  # X^T X singular
        _csv(ids[:2], x[:2]),  # 2 rows, 3 columns with the intercept
        _csv(ids, np.ones((N, 1)), ("constant",)),  # a constant column beside the intercept
    ):
        answer = _features_then_release(client, csv_text)
        assert answer.status_code == 422, answer.text
        assert answer.json()["errors"][0]["field"] == "public_features"
        assert state(client) == before
    # Non-finite features never get in (refused at upload), so nothing to fit on them.
    assert upload(client, "ds", "example_id,x1\nex-0000,inf\n", "text/csv").status_code == 422


def test_an_unknown_public_feature_set_is_a_422_whatever_its_shape(client: Any) -> None:
    """Issue 24.7: a malformed name was a 422 and a well-formed unknown one a 409."""
    setup_dataset(client)
    before = state(client)
    for name in (f"pf_{'0' * 24}", "pf_nope", "x" * 100):
        answer = model_release(
            client, estimator="ols", privacy="label", epsilon="1", public_features=name
        )
        assert answer.status_code == 422, (name, answer.text)
        assert answer.json()["errors"][0]["field"] == "public_features"
    assert state(client) == before


def test_no_public_features_is_a_conflict(client: Any) -> None:
    create_dataset(client, "bare", delta_budget="0.001")
    register(client, "bare", ["a", "b"])
    answer = model_release(client, "bare", estimator="ols", privacy="label", epsilon="1")
    assert answer.status_code == 409 and answer.json()["errors"][0]["field"] == "dataset"


def test_cli_verify_reports_both_totals(client: Any, db_path: Any) -> None:
    setup_dataset(client)
    body = {"estimator": "ols", "privacy": "eptr", "epsilon": "0.25", "delta": "0.0001"}
    assert model_release(client, **body, params=GOOD_EPTR).status_code == 201
    done = cli("ledger", "verify", "--db", str(db_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "dataset ds: epsilon spent 0.25\ndataset ds: delta spent 0.0001\n" in done.stdout


def test_openapi_documents_model_releases(client: Any) -> None:
    spec = client.get("/openapi.json").json()
    for path in (
        "/v1/datasets/{name}/public-features",
        "/v1/datasets/{name}/model-releases",
        "/v1/model-releases/{model_release_id}",
    ):
        assert path in spec["paths"], path
    refs = set(re.findall(r'"#/components/schemas/([^"]+)"', json.dumps(spec)))
    assert "ModelReleaseCreate" in refs and refs <= set(spec["components"]["schemas"])


def test_production_model_randomness_is_the_os_csprng(make_client: Any) -> None:
    client = make_client(seed=None)
    assert isinstance(client.app.state.services.model_releases._rng_factory(), SystemRandom)


def test_labels_changing_during_the_fit_are_refitted_and_charged_once(
    client: Any, monkeypatch: Any
) -> None:
    """A fit whose labels changed before the write lock is discarded unseen and redone."""
    from labels_party.releasing import model_releases

    setup_dataset(client)
    real = model_releases.fit
    calls = []

    def fit_while_labels_change(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:  # an ingest commits while the first fit runs (it bumps the version)
            with client.app.state.services.db.write() as conn:
                conn.execute(update(datasets).values(data_version=datasets.c.data_version + 1))
        return real(*args, **kwargs)

    monkeypatch.setattr(model_releases, "fit", fit_while_labels_change)
    answer = model_release(client, estimator="ols", privacy="label", epsilon="1")
    assert answer.status_code == 201, answer.text
    assert len(calls) == 2
    with client.app.state.services.db.read() as conn:
        kinds = [entry["kind"] for entry in ledger.entries(conn)]
    assert kinds.count("model") == 1
    assert client.get("/v1/datasets/ds", headers=ADV).json()["epsilon_spent"] == "1"
    assert verify(client).ok


def test_an_archived_dataset_refuses_model_releases_features_and_top_ups(client: Any) -> None:
    """Issue 24.3: after archive a model release answered 201, spent, ran on default labels and
    set the state back to 'released' (after which top-ups and a second archive succeeded);
    the example ids stayed in public_feature_sets."""
    ids, x = setup_dataset(client)
    made = model_release(client, estimator="ols", privacy="label", epsilon="1")
    assert made.status_code == 201, made.text
    archived = client.post(
        "/v1/datasets/ds/archive", headers=OPS, json={"reason": "contract ended"}
    )
    assert archived.status_code == 200, archived.text
    before = state(client)
    assert before[-1] == "archived"
    attempts = [
        model_release(client, estimator="ols", privacy="label", epsilon="1"),
        upload(client, "ds", _csv(ids, x), "text/csv"),
        client.post("/v1/datasets/ds/budget", headers=OPS, json={"add": 1, "reason": "x"}),
        client.post("/v1/datasets/ds/archive", headers=OPS, json={"reason": "again"}),
    ]
    for answer in attempts:
        assert answer.status_code == 409, answer.text
        assert answer.json()["errors"][0]["field"] == "dataset"
    assert state(client) == before  # nothing spent, nothing ledgered, still archived
    with client.app.state.services.db.read() as conn:
        kept = conn.execute(select(public_feature_sets.c.ids, public_feature_sets.c.n)).all()
    assert [(row.ids, row.n) for row in kept] == [("", N)]  # the ids are gone, the size stays
    # The model release made before the archive is still readable (it is public already).
    assert client.get(f"/v1/model-releases/{made.json()['id']}", headers=PUB).status_code == 200


def test_the_dataset_listing_counts_model_releases(client: Any) -> None:
    """Issue 24.7: the views counted model releases nowhere ("Releases 0" with 2.5 of 3 spent)."""
    setup_dataset(client)
    for _ in range(2):
        assert (
            model_release(client, estimator="ols", privacy="label", epsilon="1").status_code == 201
        )
    (item,) = client.get("/v1/datasets", headers=OPS).json()["datasets"]
    assert (item["n_releases"], item["n_model_releases"], item["epsilon_spent"]) == (0, 2, "2")


def test_the_dataset_view_counts_model_releases_as_the_listing_does(client: Any) -> None:
    """The dataset's own view (and the answers of a top-up, an archive and a creation, which
    are that view) carry the listing's ``n_model_releases``: an audit found it only there."""
    created = create_dataset(client, "other")
    assert created["n_model_releases"] == 0
    setup_dataset(client)
    for _ in range(2):
        assert (
            model_release(client, estimator="ols", privacy="label", epsilon="1").status_code == 201
        )
    listed = {d["name"]: d for d in client.get("/v1/datasets", headers=OPS).json()["datasets"]}
    for role in (OPS, ADV, PUB):
        view = client.get("/v1/datasets/ds", headers=role)
        assert view.status_code == 200, view.text
        assert view.json()["n_model_releases"] == 2 == listed["ds"]["n_model_releases"]
    assert client.get("/v1/datasets/other", headers=OPS).json()["n_model_releases"] == 0
    topped = client.post("/v1/datasets/ds/budget", headers=OPS, json={"add": 1, "reason": "x"})
    assert topped.status_code == 200 and topped.json()["n_model_releases"] == 2
    archived = client.post("/v1/datasets/ds/archive", headers=OPS, json={"reason": "done"})
    assert archived.status_code == 200 and archived.json()["n_model_releases"] == 2


def test_dry_run_previews_the_charge_and_spends_nothing(client: Any) -> None:
    """Issue 22, item 2: a model release's preview makes every check a release makes before
    it reads a label, answers the charge in epsilon and delta and the budget after it, and
    spends nothing; a bad request is the same 4xx as without dry_run."""
    setup_dataset(client)
    before = state(client)
    body = {"estimator": "ols", "privacy": "eptr", "epsilon": "0.5", "delta": "0.0001",
            "params": GOOD_EPTR, "dry_run": True}  # fmt: skip
    answer = model_release(client, **body)
    assert answer.status_code == 200, answer.text
    preview = answer.json()
    assert preview["dry_run"] is True and preview["charge"] == {"epsilon": "0.5", "delta": "0.0001"}
    assert preview["budget"]["fits"] is True and preview["intercept"] is True
    assert preview["budget"]["after"]["epsilon_spent"] == "0.5"
    assert preview["budget"]["after"]["delta_left"] == "0.0009"
    assert state(client) == before
    too_much = model_release(client, **{**body, "delta": "0.01"})
    assert too_much.status_code == 200 and too_much.json()["budget"]["fits"] is False
    bad = model_release(client, **{**body, "params": {**GOOD_EPTR, "r_x": 1.0}})
    assert bad.status_code == 422 and bad.json()["errors"][0]["field"] == "params.r_x"
    assert state(client) == before
    # The same request without dry_run is charged exactly what the preview said.
    done = model_release(client, **{**body, "dry_run": False})
    assert done.status_code == 201, done.text
    view = client.get("/v1/datasets/ds", headers=ADV).json()
    assert (view["epsilon_spent"], view["delta_spent"]) == ("0.5", "0.0001")


_NW = {"bandwidth": 0.5, "queries": [[0.0, 0.0]]}
_BAYES = {"n_classes": 2, "r_x": 4.0, "c0": 0.05}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ('{"estimator":"ols","privacy":"label","epsilon":1e-320}', "epsilon"),
        ('{"estimator":"ols","privacy":"label","epsilon":"1e-310"}', "epsilon"),
        ('{"estimator":"ols","privacy":"label","epsilon":"1e-400"}', "epsilon"),
        ('{"estimator":"ols","privacy":"eptr","epsilon":1,"delta":"1e-400"}', "delta"),
        ('{"estimator":"ols","privacy":"eptr","epsilon":1,"delta":"1e-330"}', "delta"),
        ('{"estimator":"ols","privacy":"eptr","epsilon":1,"delta":1e-320}', "delta"),
        ('{"estimator":"bayes","privacy":"eptr","epsilon":"2.3e-308","delta":0.001,'
         '"params":{"n_classes":2,"r_x":4.0,"c0":0.05}}', "epsilon"),
        ('{"estimator":"ols","privacy":"label","epsilon":"9.9e-101"}', "epsilon"),
    ],
)  # fmt: skip
def test_an_amount_below_the_model_floor_is_refused_by_name(
    client: Any, body: str, field: str
) -> None:
    """Was a 500 (the JSON encoder met an infinite noise scale, ePTR's 1/delta divided by 0,
    Bayes' constant search overflowed): below MIN_MODEL_AMOUNT (1e-100), a 422."""
    setup_dataset(client, delta_budget="0.5")
    before = state(client)
    answer = client.post("/v1/datasets/ds/model-releases", content=body.encode(),
                         headers={**ADV, "content-type": "application/json"})  # fmt: skip
    assert answer.status_code == 422, answer.text
    assert answer.json()["errors"][0]["field"] == field
    assert state(client) == before


@pytest.mark.parametrize(
    "body",
    [
        {"estimator": "ols", "privacy": "label", "epsilon": "1e-100"},
        {"estimator": "ols", "privacy": "eptr", "epsilon": "1e-100", "delta": "1e-100"},
        {"estimator": "nw", "privacy": "label", "epsilon": "1e-100", "params": _NW},
        {"estimator": "nw", "privacy": "eptr", "epsilon": "1e-100", "delta": "1e-100",
         "params": {"queries": [[0.0, 0.0]]}},
        {"estimator": "bayes", "privacy": "eptr", "epsilon": "1e-100", "delta": "1e-100",
         "params": _BAYES},
    ],
)  # fmt: skip
def test_the_smallest_model_amounts_release_or_refuse_by_name(client: Any, body: Any) -> None:
    setup_dataset(client, delta_budget="0.5")
    answer = client.post("/v1/datasets/ds/model-releases", json=body, headers=ADV)
    assert answer.status_code in (201, 409, 422), answer.text
    if answer.status_code == 201:
        message = verify_model(answer.json()["message"])
        assert message.header.estimator == body["estimator"]


@pytest.mark.parametrize(
    ("case", "labels_a", "labels_b"),
    [
        ("bayes_r_x", [float(i % 2) for i in range(100)], [0.0] * 100),
        ("ols_c0", [0.0, 0.0], [1e15, 1e15]),
    ],
)
def test_an_alpha_no_finite_noise_covers_is_a_charged_no_reply_whatever_the_labels(
    client: Any, case: str, labels_a: list[float], labels_b: list[float]
) -> None:
    """Found by an audit: where the product chooses a constant from the labels (Bayes' c0 from a
    noisy smallest class count, OLS's r_theta from a noisy mean square) and the request gives
    another at an extreme (r_x 1e153, c0 1e-293), ePTR's alpha overflowed for some labels and
    not others: a 422 that spent nothing, repeatable, so a test of the labels for free. Now
    such an alpha is the charged "no reply", and the outcome is the same for both label sets."""
    n = len(labels_a)
    x = np.random.default_rng(0).normal(size=(n, 2 if case == "bayes_r_x" else 1))
    columns = ("x1", "x2") if case == "bayes_r_x" else ("x1",)
    if case == "bayes_r_x":
        bounds = {"label_min": 0.0, "label_max": 1.0}
        body = {"estimator": "bayes", "epsilon": "10", "params": {"n_classes": 2, "r_x": 1e153}}
    else:
        bounds = {"label_min": -1e15, "label_max": 1e15}
        body = {
            "estimator": "ols", "epsilon": "1000",
            "params": {"intercept": False, "r_x": 1.0, "c0": 1e-293},
        }  # fmt: skip
    outcomes = []
    for name, labels in (("a", labels_a), ("b", labels_b)):
        ids = [f"ex-{i:03d}" for i in range(n)]
        create_dataset(client, name, epsilon_budget="5000", delta_budget="0.001", **bounds)
        register(client, name, ids)
        assert put_labels(client, name, list(zip(ids, labels, strict=True))).status_code == 200
        assert upload(client, name, _csv(ids, x, columns), "text/csv").status_code == 201
        answer = model_release(client, name, privacy="eptr", delta="0.00001", **body)
        assert answer.status_code == 201, answer.text
        view = client.get(f"/v1/datasets/{name}", headers=ADV).json()
        assert Decimal(view["epsilon_spent"]) == Decimal(body["epsilon"])  # type: ignore[arg-type]
        outcomes.append(answer.json()["released"])
    if case == "ols_c0":  # alpha beyond every finite noise for both label sets
        assert outcomes == [False, False]
    assert verify(client).ok


@pytest.mark.parametrize(
    ("estimator", "params"),
    [
        ("ols", {"intercept": False, "r_x": 1e200, "r_theta": 1.0, "c0": 0.1}),
        ("ols", {"intercept": True, "r_x": 1.7e308, "r_theta": 1.0, "c0": 0.1}),
        ("ols", {"intercept": False, "r_x": 1.0, "r_theta": 1.0, "c0": 1e-320}),
        ("ols", {"intercept": False, "r_x": 1e-300, "r_theta": 1e-300, "c0": 0.4}),
        ("bayes", {"n_classes": 2, "r_x": 1e200, "c0": 0.1}),
        ("bayes", {"n_classes": 2, "r_x": 1.0, "c0": 1e-320}),
        ("nw", {"bandwidth": 1.0, "c0": 1e-320, "queries": [[0.0, 0.0]]}),
    ],
)
def test_given_constants_no_noise_covers_are_refused_before_anything_is_read(
    client: Any, estimator: str, params: dict[str, Any]
) -> None:
    """Every constant given fixes ePTR's alpha (public): where no finite noise covers it (or it
    underflows to 0) the release could only be a charged "no reply". It is a 422 naming the
    parameters, in the dry run too, and nothing is spent. Before, some of these were 500s (r_x^2
    overflowing in Python floats, c0^2 underflowing to 0) and the others a charged no reply."""
    setup_dataset(client, delta_budget="0.5")
    for dry_run in (True, False):
        answer = model_release(
            client, estimator=estimator, privacy="eptr", epsilon="1", delta="0.00001",
            params=params, dry_run=dry_run,
        )  # fmt: skip
        assert answer.status_code == 422, answer.text
        assert answer.json()["errors"][0]["field"] == "params"
        assert "no finite noise covers" in answer.json()["detail"] or (
            "underflows to 0" in answer.json()["detail"]
        )
    view = client.get("/v1/datasets/ds", headers=ADV).json()
    assert Decimal(view["epsilon_spent"]) == 0 and view["state"] == "open"


@pytest.mark.parametrize(
    ("estimator", "params"),
    [
        ("ols", {"intercept": True, "r_x": 1e200, "c0": 0.1}),
        ("ols", {"intercept": True, "r_x": 1e200, "r_theta": 1.0}),
        ("ols", {"intercept": False, "c0": 1e-320}),
        ("bayes", {"n_classes": 2, "r_x": 1e200}),
        ("bayes", {"n_classes": 2, "c0": 1e-320}),
    ],
)
def test_an_extreme_given_constant_beside_chosen_ones_is_never_a_500(
    client: Any, estimator: str, params: dict[str, Any]
) -> None:
    """With some constants chosen by the product alpha is not public: the release is charged
    (its "no reply" where no noise covers alpha) or refused for a reason the request alone
    decides; never a 500 (an intercept's design at r_x 1e200 was NaN rows, then a 500)."""
    setup_dataset(client, delta_budget="0.5")
    answer = model_release(
        client, estimator=estimator, privacy="eptr", epsilon="1", delta="0.00001", params=params
    )
    assert answer.status_code in (201, 422), answer.text
    spent = Decimal(client.get("/v1/datasets/ds", headers=ADV).json()["epsilon_spent"])
    assert spent == (1 if answer.status_code == 201 else 0)


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"bandwidth": 0.5, "r_f": 5e-324}, "params"),
        ({"bandwidth": 0.5, "reference_first": 1e308}, "params.reference"),
    ],
)
def test_an_nw_release_whose_public_rules_cannot_run_is_refused_in_the_dry_run_too(
    client: Any, params: dict[str, Any], field: str
) -> None:
    """Found by a fuzzer: with c0 chosen per query from a public reference, every ePTR-NW
    constant is public, yet a reference point at 1e308 (no finite c0) or an r_f of 5e-324 (an
    alpha that underflows to 0) passed the dry run and was refused only by the release, after
    the labels were read. Both are now the same 422 in the dry run and the release, nothing
    spent."""
    setup_dataset(client, delta_budget="0.5")
    reference = [[0.0, 0.0], [0.5, 0.5], [1.0, 0.0]]
    if params.pop("reference_first", None) is not None:
        reference[0][0] = 1e308
    request = {"queries": [[0.0, 0.0], [1.0, 1.0]], "reference": reference, **params}
    for dry_run in (True, False):
        answer = model_release(
            client, estimator="nw", privacy="eptr", epsilon="1", delta="0.0001",
            params=request, dry_run=dry_run,
        )  # fmt: skip
        assert answer.status_code == 422, answer.text
        assert answer.json()["errors"][0]["field"] == field
    assert Decimal(client.get("/v1/datasets/ds", headers=ADV).json()["epsilon_spent"]) == 0


@pytest.mark.parametrize("body", ['{"x": 1}', '{"rows": [{"example_id": "a", "x1": 1}]}'])
def test_public_features_for_an_unknown_dataset_are_a_404_whatever_the_body(
    client: Any, body: str
) -> None:
    """The dataset first, then the body, as for labels and examples (found by a fuzzer: a
    body of the wrong shape was a 422 naming rows, before the dataset was looked up)."""
    answer = upload(client, "nope", body, "application/json")
    assert answer.status_code == 404, answer.text
    assert answer.json()["errors"][0]["field"] == "dataset"


def test_a_dataset_lists_its_model_releases_newest_first_for_every_role(client: Any) -> None:
    setup_dataset(client)
    listing = client.get("/v1/datasets/ds/model-releases", headers=PUB)
    assert listing.status_code == 200 and listing.json() == {"dataset": "ds", "model_releases": []}
    first = model_release(client, estimator="ols", privacy="label", epsilon="1").json()
    second = model_release(
        client, estimator="ols", privacy="eptr", epsilon="0.5", delta="0.0001"
    ).json()
    for headers in (ADV, PUB, OPS):
        answer = client.get("/v1/datasets/ds/model-releases", headers=headers)
        assert answer.status_code == 200, answer.text
        items = answer.json()["model_releases"]
        assert [item["id"] for item in items] == [second["id"], first["id"]]
        for item, made in zip(items, (second, first), strict=True):
            same = ("dataset", "estimator", "privacy", "epsilon", "delta", "features_id", "n")
            assert {key: item[key] for key in same} == {key: made[key] for key in same}
            assert item["message_sha256"] == made["message_sha256"]
            assert item["created"] == made["created"] and item["actor_role"] == "advertiser"
    assert client.get("/v1/datasets/ds/model-releases").status_code == 401
    assert client.get("/v1/datasets/none/model-releases", headers=OPS).status_code == 404
