"""External (Spark) releases through the app: charged before any noise, then published or
failed (labels_party.releasing.external_releases); the job's side is played with the engine
itself."""

from __future__ import annotations

import hashlib
import hmac
import json
import sqlite3
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from labels_party.budget import ledger
from labels_party.db.engine import Database, create_schema, make_engine
from shared.message import body_sha256, header_for, json_safe, new_release_id, universe_digest
from shared.plan import ReleaseRequest
from shared.randomizer import choose_randomizer, describe, measure
from tests.labels_party.conftest import ADV, OPS, PUB, create_dataset, register

N = 300
IDS = sorted(f"c{i:04d}" for i in range(N))
PATH = "/v1/datasets/{name}/external-releases"


def charge_body(release_id: str, *, n: int = N, epsilon: str = "1", **extra: Any) -> dict[str, Any]:
    plan = ReleaseRequest(epsilon=Decimal(epsilon)).plan(n=n, lo=0.0, hi=100.0)
    return {"epsilon": epsilon, "release_id": release_id, "n": n,
            "plan": json_safe(plan.public()), **extra}  # fmt: skip


def staged_header(
    release_id: str, *, name: str = "ds", epsilon: str = "1", n: int = N, **request: Any
) -> dict[str, Any]:
    """What the job writes after the charge: the engine's draw and its header (``request``:
    ``ReleaseRequest``'s mechanism and options)."""
    plan = ReleaseRequest(epsilon=Decimal(epsilon), **request).plan(n=n, lo=0.0, hi=100.0)
    labels = np.random.default_rng(1).uniform(0, 100, n)
    rng = np.random.default_rng(2)
    measured = measure(plan, labels, rng)
    mechanism, randomizer = choose_randomizer(plan, measured)
    noisy = randomizer.randomize(labels, rng)
    header = header_for(
        describe(plan, measured, mechanism, randomizer, np.empty(0)),
        release_id=release_id,
        dataset=name,
        default_label=0.0,
        n=n,
        body_sha256=body_sha256(["\n".join(IDS[:n])], noisy),
        created=datetime.now(UTC),
    )
    return json.loads(header.model_dump_json())


UNIVERSE = universe_digest(["\n".join(IDS).encode()])


def publish(client: Any, release_id: str, header: dict[str, Any], universe: str = UNIVERSE):
    return client.post(
        PATH.format(name="ds") + f"/{release_id}/publication",
        json={"universe_sha256": universe, "header": header},
        headers=ADV,
    )


def spent(client: Any) -> Decimal:
    return Decimal(client.get("/v1/datasets/ds", headers=OPS).json()["epsilon_spent"])


def kinds(client: Any) -> list[str]:
    return [e["kind"] for e in client.get("/v1/ledger", headers=OPS).json()["entries"]]


def verify(db_path: Path) -> ledger.VerifyReport:
    engine = make_engine(f"sqlite:///{db_path}")
    create_schema(engine)
    with Database(engine).read() as conn:
        return ledger.verify(conn)


def test_charge_then_publish_records_the_chosen_randomizer_and_the_message(client, db_path):
    create_dataset(client, "ds")
    release_id = new_release_id()
    charged = client.post(PATH.format(name="ds"), json=charge_body(release_id), headers=ADV)
    assert charged.status_code == 201, charged.text
    assert charged.json()["state"] == "charged" and charged.json()["message_sha256"] == ""
    assert spent(client) == 1 and kinds(client) == ["dataset", "histogram", "randomizer"]
    assert verify(db_path).ok
    # Nothing to read yet: no header, no message.
    assert client.get(f"/v1/releases/{release_id}/header", headers=ADV).status_code == 404
    replay = client.post(PATH.format(name="ds"), json=charge_body(release_id), headers=ADV)
    assert replay.status_code == 200 and spent(client) == 1  # charged once
    header = staged_header(release_id)
    published = publish(client, release_id, header)
    assert published.status_code == 201, published.text
    meta = published.json()
    assert meta["state"] == "released" and meta["mechanism"] == header["mechanism"]
    assert meta["message_sha256"] == header["body_sha256"]
    assert kinds(client)[-1] == "publication" and spent(client) == 1
    entry = client.get("/v1/ledger", headers=OPS).json()["entries"][-1]
    assert (entry["epsilon"], entry["message_sha256"]) == ("0", header["body_sha256"])
    assert entry["parameters"]["universe_sha256"] == UNIVERSE
    got = client.get(f"/v1/releases/{release_id}/header", headers=ADV).json()
    assert got == header
    assert publish(client, release_id, header).status_code == 200  # a replay
    other = {**header, "label_mean": (header["label_mean"] or 0.0) + 1.0}
    conflict = publish(client, release_id, other)
    assert conflict.status_code == 409 and conflict.json()["errors"][0]["field"] == "header"
    fail = client.post(
        PATH.format(name="ds") + f"/{release_id}/failure", json={"reason": "x"}, headers=ADV
    )
    assert fail.status_code == 409  # published: it cannot fail any more
    assert verify(db_path).ok


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"n": N + 1}, "plan.n"),
        ({"plan": {"epsilon": "2"}}, "plan.bins"),
        ({"release_id": "rel_x"}, "release_id"),
        ({"epsilon": "20"}, "epsilon"),
    ],
)
def test_a_bad_charge_is_refused_naming_the_field_and_spends_nothing(client, change, field):
    create_dataset(client, "ds")
    if "epsilon" in change:  # a consistent plan, over the budget of 10
        body = charge_body(new_release_id(), epsilon=change["epsilon"])
    else:
        body = {**charge_body(new_release_id()), **change}
    answer = client.post(PATH.format(name="ds"), json=body, headers=ADV)
    assert 400 <= answer.status_code < 500, answer.text
    assert field in [e["field"] for e in answer.json()["errors"]], answer.text
    assert spent(client) == 0 and kinds(client) == ["dataset"]


def test_a_charge_for_other_than_the_registered_examples_is_refused(client):
    create_dataset(client, "ds")
    register(client, "ds", IDS[:-1])
    answer = client.post(PATH.format(name="ds"), json=charge_body(new_release_id()), headers=ADV)
    assert answer.status_code == 422 and answer.json()["errors"][0]["field"] == "n"
    assert spent(client) == 0


def test_a_failed_release_keeps_its_charge_and_is_never_published(client, db_path):
    create_dataset(client, "ds")
    release_id = new_release_id()
    assert client.post(PATH.format(name="ds"), json=charge_body(release_id), headers=ADV)
    failure = PATH.format(name="ds") + f"/{release_id}/failure"
    failed = client.post(failure, json={"reason": "executor lost"}, headers=ADV)
    assert failed.status_code == 200 and failed.json()["state"] == "failed"
    assert client.post(failure, json={"reason": "again"}, headers=ADV).status_code == 200
    assert kinds(client).count("failure") == 1  # idempotent
    assert spent(client) == 1
    refused = publish(client, release_id, staged_header(release_id))
    assert refused.status_code == 409 and "failed" in refused.json()["detail"]
    listed = client.get("/v1/datasets/ds/releases", headers=OPS).json()["releases"]
    assert [r["id"] for r in listed] == [release_id]
    assert verify(db_path).ok
    unknown = client.post(
        PATH.format(name="ds") + f"/{new_release_id()}/failure", json={"reason": "x"}, headers=ADV
    )
    assert unknown.status_code == 404 and unknown.json()["errors"][0]["field"] == "release_id"


def test_a_publication_must_be_what_the_charge_planned(client):
    create_dataset(client, "ds")
    release_id = new_release_id()
    assert client.post(PATH.format(name="ds"), json=charge_body(release_id), headers=ADV)
    header = staged_header(release_id)
    wrong_id = publish(client, release_id, {**header, "release_id": new_release_id()})
    assert wrong_id.status_code == 422
    assert wrong_id.json()["errors"][0]["field"] == "header.release_id"
    # Another epsilon than the charge paid for: the header's split is not the charged plan's.
    richer = staged_header(release_id, epsilon="2")
    refused = publish(client, release_id, richer)
    assert refused.status_code == 422 and refused.json()["errors"][0]["field"].startswith("header.")
    unknown = publish(client, new_release_id(), header)
    assert unknown.status_code == 422  # the header names the charged release, not this one
    assert kinds(client) == ["dataset", "histogram", "randomizer"]


def test_ledger_verify_catches_a_state_the_entries_do_not_support(client, db_path):
    create_dataset(client, "ds")
    release_id = new_release_id()
    assert client.post(PATH.format(name="ds"), json=charge_body(release_id), headers=ADV)
    with sqlite3.connect(db_path) as conn:
        conn.execute("UPDATE releases SET state = 'released' WHERE id = ?", (release_id,))
    report = verify(db_path)
    assert not report.ok
    assert any(release_id in p and "disagrees" in p for p in report.problems), report.problems


def test_a_zeta_out_of_range_is_refused_on_every_path(client) -> None:
    """The plan checks it (RPWithPrior's family), so a service release and an external charge
    both answer 422 naming params.zeta, nothing spent."""
    create_dataset(client, "ds")
    register(client, "ds", IDS)
    params = {"zeta": 1e12}
    own = client.post(
        "/v1/datasets/ds/releases",
        json={"epsilon": "1", "mechanism": "rpwithprior", "params": params},
        headers=ADV,
    )
    assert own.status_code == 422 and own.json()["errors"][0]["field"] == "params.zeta"
    body = {**charge_body(new_release_id()), "mechanism": "rpwithprior", "params": params}
    charged = client.post(PATH.format(name="ds"), json=body, headers=ADV)
    assert charged.status_code == 422, charged.text
    assert charged.json()["errors"][0]["field"] == "params.zeta"
    assert spent(client) == 0


def test_an_archived_dataset_refuses_external_charges_and_publications(client, db_path):
    """Issue 24: after archive the Spark path can neither charge nor publish (409 naming the
    dataset's state); nothing is spent, and the ledger still verifies."""
    create_dataset(client, "ds")
    charged_id = new_release_id()
    assert client.post(PATH.format(name="ds"), json=charge_body(charged_id), headers=ADV).is_success
    archived = client.post("/v1/datasets/ds/archive", json={"reason": "retention"}, headers=OPS)
    assert archived.status_code == 200, archived.text
    before = (spent(client), kinds(client))
    charge = client.post(PATH.format(name="ds"), json=charge_body(new_release_id()), headers=ADV)
    assert charge.status_code == 409, charge.text
    assert charge.json()["errors"][0] == {"field": "dataset", "message": "archived"}
    published = publish(client, charged_id, staged_header(charged_id))
    assert published.status_code == 409, published.text
    assert published.json()["errors"][0] == {"field": "dataset", "message": "archived"}
    assert (spent(client), kinds(client)) == before
    assert client.get(f"/v1/releases/{charged_id}/header", headers=ADV).status_code == 404
    assert verify(db_path).ok


@pytest.mark.parametrize("epsilon", [10.0, "bad"])
def test_a_publication_whose_randomizer_ran_at_another_epsilon_is_refused(client, epsilon):
    """The header's split matches the charge, but its randomizer's own parameters say it ran
    at another epsilon than the epsilon2 paid for (a job that randomized at 10 where 0.9 was
    charged): not what the charged plan produces, so a 422 naming header.params.epsilon and
    nothing published, rather than a ledger that under-states what the message cost."""
    create_dataset(client, "ds")
    release_id = new_release_id()
    assert client.post(PATH.format(name="ds"), json=charge_body(release_id), headers=ADV)
    header = staged_header(release_id)
    richer = {**header, "params": {**header["params"], "epsilon": epsilon}}
    refused = publish(client, release_id, richer)
    assert refused.status_code == 422
    assert refused.json()["errors"][0]["field"] == "header.params.epsilon"
    assert kinds(client) == ["dataset", "histogram", "randomizer"]
    assert publish(client, release_id, header).status_code == 201


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (("label_mean",), True, "header.label_mean"),
        (("label_mean",), "1_0", "header.label_mean"),
        (("created",), -1, "header.created"),
        (("histogram", "probs"), ["0.5"], "header.histogram.probs"),
        (("params", "epsilon"), 10**400, "header.params.epsilon"),
        (("params", "output_values"), "\uff11", "header.params"),
        (("params", "output_values"), [True], "header.params"),
        (("params", "thresholds"), [10**400], "header.params"),
    ],
)
def test_a_publication_header_is_read_as_the_wire_format_has_it(client, path, value, field):
    """Found by a fuzzer: the header was validated leniently (true and "1_0" as numbers, a
    number as `created`, a string as the output values), then stored as sent and signed into
    the receipt; a 400-digit integer was a 500. Now JSON types only, and the randomizer's
    parameters must be its own statement of them: a 422 naming the field, nothing recorded."""
    create_dataset(client, "ds")
    release_id = new_release_id()
    assert client.post(PATH.format(name="ds"), json=charge_body(release_id), headers=ADV)
    header = staged_header(release_id)
    bad = json.loads(json.dumps(header))
    target = bad
    for key in path[:-1]:
        target = target[key]
    if path == ("histogram", "probs"):
        value = [str(p) for p in header["histogram"]["probs"]]
    if path[-1] in ("output_values", "thresholds") and path[-1] not in header["params"]:
        pytest.skip(f"the staged randomizer ({header['mechanism']}) has no {path[-1]}")
    target[path[-1]] = value
    refused = publish(client, release_id, bad)
    assert refused.status_code == 422, refused.text
    assert refused.json()["errors"][0]["field"].startswith(field), refused.json()
    assert kinds(client) == ["dataset", "histogram", "randomizer"]
    assert publish(client, release_id, header).status_code == 201


def test_the_labels_input_digest_is_kept_keyed_never_as_sent(client, db_path) -> None:
    """The job's sha256 of its labels files is what a ledger reader (an operator, the export)
    could test guessed labels against; the ledger and the release views keep only its HMAC
    under this database's key (migration 0013), equal for the same input in both datasets,
    so ``ledger verify`` still names them (before: the digest itself, as sent)."""
    digest = "ab" * 32
    for name in ("ds", "ds2"):
        create_dataset(client, name)
        body = charge_body(new_release_id(), labels_sha256=digest)
        assert client.post(PATH.format(name=name), json=body, headers=ADV).status_code == 201
    with sqlite3.connect(db_path) as conn:
        (key,) = conn.execute("SELECT value FROM instance_secrets").fetchone()
    keyed = hmac.new(key, digest.encode("ascii"), hashlib.sha256).hexdigest()
    entries = client.get("/v1/ledger", headers=OPS).json()["entries"]
    randomizers = [e["parameters"] for e in entries if e["kind"] == "randomizer"]
    assert [p["labels_input_hmac"] for p in randomizers] == [keyed, keyed]
    listing = client.get("/v1/datasets/ds/releases", headers=OPS)
    assert listing.status_code == 200 and len(listing.json()["releases"]) == 1
    seen = json.dumps(entries) + listing.text
    assert digest not in seen and len(key) == 32
    report = verify(db_path)
    assert not report.ok and any(f"labels input {keyed[:16]}" in p for p in report.problems)
    bad = charge_body(new_release_id(), labels_sha256="AB" * 32)
    refused = client.post(PATH.format(name="ds"), json=bad, headers=ADV)
    assert refused.status_code == 422 and "labels_sha256" in refused.text


@pytest.mark.parametrize("n", [2**53 + 1, 2**63, 10**20])
def test_an_n_beyond_any_universe_is_refused_naming_it(client, n) -> None:
    """Was a 500 (the insert overflowed the database's 64-bit integer) for 2^63; 2^63 - 1 was
    charged. The plan admits n <= 2^53 (shared.plan.MAX_EXAMPLES)."""
    create_dataset(client, "ds")
    answer = client.post(PATH.format(name="ds"), json=charge_body(new_release_id()) | {"n": n},
                         headers=ADV)  # fmt: skip
    assert answer.status_code == 422 and answer.json()["errors"][0]["field"] == "n", answer.text
    assert spent(client) == 0 and kinds(client) == ["dataset"]


def test_a_lake_universe_binds_n_as_well_as_its_digest(client) -> None:
    """A dataset without registered examples: its first publication fixes the universe (its
    digest AND its n); a later charge for another n is refused before it spends, and a release
    charged before the universe was fixed cannot publish another n over the same ids."""
    create_dataset(client, "ds")
    first, early = new_release_id(), new_release_id()
    assert (
        client.post(PATH.format(name="ds"), json=charge_body(first), headers=ADV).status_code == 201
    )
    assert client.post(PATH.format(name="ds"), json=charge_body(early, n=50),
                       headers=ADV).status_code == 201  # fmt: skip
    assert publish(client, first, staged_header(first)).status_code == 201
    late = client.post(
        PATH.format(name="ds"), json=charge_body(new_release_id(), n=50), headers=ADV
    )
    assert late.status_code == 422 and late.json()["errors"][0]["field"] == "n", late.text
    assert spent(client) == 2
    refused = publish(client, early, staged_header(early, n=50))
    assert refused.status_code == 409 and refused.json()["errors"][0]["field"] == "n"
    assert kinds(client).count("publication") == 1


def test_a_replayed_publication_must_name_the_same_universe(client) -> None:
    create_dataset(client, "ds")
    release_id = new_release_id()
    assert client.post(PATH.format(name="ds"), json=charge_body(release_id), headers=ADV)
    header = staged_header(release_id)
    assert publish(client, release_id, header).status_code == 201
    assert publish(client, release_id, header).status_code == 200  # a replay: nothing new
    other = publish(client, release_id, header, universe="0" * 64)
    assert other.status_code == 409 and other.json()["errors"][0]["field"] == "universe_sha256"
    assert kinds(client).count("publication") == 1


def test_a_charge_freezes_the_dataset_until_and_after_its_publication(client) -> None:
    """Found by an audit: the charge spent but left the dataset open, so labels could change
    between a charge and its publication, and a publisher who registered one more example made
    the publication impossible (a 422 naming n) and the advertiser's charge a loss. The charge
    now freezes the dataset in its spend's transaction, as the service's release does: the late
    example and label are 409s naming the dataset, and the publication goes through."""
    create_dataset(client, "ds")
    register(client, "ds", IDS)
    release_id = new_release_id()
    charged = client.post(PATH.format(name="ds"), json=charge_body(release_id), headers=ADV)
    assert charged.status_code == 201
    assert client.get("/v1/datasets/ds", headers=OPS).json()["state"] == "released"
    late = client.post("/v1/datasets/ds/examples", json={"example_ids": ["zzz-late"]}, headers=PUB)
    assert late.status_code == 409 and late.json()["errors"][0]["field"] == "dataset"
    label = client.post(
        "/v1/datasets/ds/labels", json={"labels": [{"example_id": IDS[0], "value": 1.0}]},
        headers=ADV,
    )  # fmt: skip
    assert label.status_code == 409 and label.json()["errors"][0]["field"] == "dataset"
    assert publish(client, release_id, staged_header(release_id)).status_code == 201
    assert kinds(client).count("publication") == 1


def test_examples_registered_during_a_publication_refuse_it(client, monkeypatch) -> None:
    """The universe is read before the write transaction; examples registered in between (a
    concurrent write that got past the charge's freeze, forced here by a direct update) make
    the publication a 409 to retry: no release is recorded over a universe that is no longer
    the dataset's."""
    from sqlalchemy import update

    from labels_party.db.models import datasets
    from labels_party.releasing import external_releases as ext

    create_dataset(client, "ds")
    register(client, "ds", IDS)
    release_id = new_release_id()
    assert client.post(PATH.format(name="ds"), json=charge_body(release_id), headers=ADV)
    real, db = ext.check_against_plan, client.app.state.services.db

    def racing(*args: Any, **kwargs: Any) -> None:
        real(*args, **kwargs)
        with db.write() as conn:
            conn.execute(update(datasets).values(n_examples=datasets.c.n_examples + 1))

    monkeypatch.setattr(ext, "check_against_plan", racing)
    raced = publish(client, release_id, staged_header(release_id))
    assert raced.status_code == 409 and raced.json()["errors"][0]["field"] == "dataset"
    assert "publication" not in kinds(client)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda plan: plan | {"n": float(N)}, "plan.n"),  # 300.0 is not the plan's 300
        (lambda plan: plan | {"bins": float(plan["bins"])}, "plan.bins"),
        (lambda plan: plan | {"not_a_plan_key": None}, "plan.not_a_plan_key"),
        (lambda plan: {k: v for k, v in plan.items() if k != "model_dim"}, "plan.model_dim"),
    ],
)
def test_the_charged_plan_must_be_the_recomputed_one_to_the_type(client, change, field) -> None:
    """The plan a job sends is compared as JSON (1, 1.0 and true differ; a key missing or extra
    is a difference even where its value would be null)."""
    create_dataset(client, "ds")
    body = charge_body(new_release_id())
    body["plan"] = change(body["plan"])
    answer = client.post(PATH.format(name="ds"), json=body, headers=ADV)
    assert answer.status_code == 422 and answer.json()["errors"][0]["field"] == field, answer.text
    assert spent(client) == 0


def test_the_published_randomizer_ran_with_the_charged_options(client) -> None:
    """RPWithPrior charged with zeta 5 and outside "uniform": a header whose randomizer ran
    with other options is refused (the ledger's charge and publication would disagree)."""
    create_dataset(client, "ds")
    release_id, options = new_release_id(), {"zeta": 5.0, "outside": "uniform"}
    request = {"mechanism": "rpwithprior", "options": options}
    plan = ReleaseRequest(epsilon=Decimal("1"), **request).plan(n=N, lo=0.0, hi=100.0)
    body = {"epsilon": "1", "mechanism": "rpwithprior", "params": options,
            "release_id": release_id, "n": N, "plan": json_safe(plan.public())}  # fmt: skip
    assert client.post(PATH.format(name="ds"), json=body, headers=ADV).status_code == 201
    other = staged_header(
        release_id, mechanism="rpwithprior", options={"zeta": 0.01, "outside": "uniform"}
    )
    refused = publish(client, release_id, other)
    assert refused.status_code == 422, refused.text
    assert refused.json()["errors"][0]["field"] == "header.params.zeta"
    mixed = staged_header(release_id, mechanism="rpwithprior", options={"zeta": 5.0})
    refused = publish(client, release_id, mixed)  # outside "project", the default
    assert refused.json()["errors"][0]["field"] == "header.params.outside"
    true = publish(client, release_id, staged_header(release_id, **request))
    assert true.status_code == 201, true.text
    assert true.json()["params"]["zeta"] == 5.0 and true.json()["params"]["outside"] == "uniform"


def test_a_refused_charge_leaves_a_trace_for_the_operator(client) -> None:
    """As a refused release through /releases does (GET /v1/audit): the request, the status
    and the error the job was told; nothing spent."""
    create_dataset(client, "ds")
    answer = client.post(PATH.format(name="ds"), json=charge_body(new_release_id(), epsilon="20"),
                         headers=ADV)  # fmt: skip
    assert answer.status_code == 409
    (entry,) = client.get("/v1/audit", headers=OPS).json()["entries"]
    assert entry["dataset"] == "ds" and entry["actor_role"] == "advertiser"
    assert entry["status"] == 409 and entry["request"]["epsilon"] == "20"
    assert entry["errors"] == answer.json()["errors"] and spent(client) == 0
