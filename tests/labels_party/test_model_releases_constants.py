"""ePTR-OLS model releases with constants chosen by the product (issue 22, item 3), through the
real app: the preview shows the split and spends nothing, the release charges exactly the
request's (epsilon, delta) in ONE ledger entry that names the split, the header carries the
chosen constants (DP outputs), receipts and ledger verification still pass, and bad values are
still a 422 naming the field with nothing spent."""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

import pytest

from labels_party.budget import ledger
from shared.model_message import verify_model
from shared.service import receipt as rc
from tests.labels_party.conftest import ADV, PUB, cli
from tests.labels_party.test_model_releases import model_release, setup_dataset, state, verify
from tests.labels_party.test_receipts import keys_of

BODY = {"estimator": "ols", "privacy": "eptr", "epsilon": "4", "delta": "0.0001"}
SPLIT = {
    "chosen": ["r_x", "c0", "r_theta"],
    "constants": {
        "epsilon": "1",
        "delta": "0",
        "parts": {"r_x": "0.2", "c0": "0.6", "r_theta": "0.2"},
    },
    "eptr": {"epsilon": "3", "delta": "0.0001"},
}


def _last_entry(client: Any) -> dict[str, Any]:
    with client.app.state.services.db.read() as conn:
        return ledger.public_entry(ledger.entries(conn)[-1])


def check_charged_and_signed(
    client: Any,
    db_path: Any,
    out: dict[str, Any],
    params: dict[str, Any],
    *,
    split: dict[str, Any],
    tampered_c0: float,
) -> None:
    """A release whose constants the product chose: ONE ledger entry charging the request's
    (4, 0.0001) that names ``split`` and the chosen ``params``, the parts adding up, the spend
    in the dataset's view, the ledger verifying (service and CLI), and the receipt signing the
    whole header, chosen constants included (a changed c0 is named)."""
    entry = _last_entry(client)
    assert (entry["kind"], entry["epsilon"], entry["delta"]) == ("model", "4", "0.0001")
    assert entry["parameters"]["split"] == split
    assert entry["parameters"]["params"] == params  # the chosen constants, public
    parts = entry["parameters"]["split"]["constants"]["parts"].values()
    assert sum(Decimal(v) for v in parts) + Decimal(split["eptr"]["epsilon"]) == Decimal("4")
    view = client.get("/v1/datasets/ds", headers=ADV).json()
    assert (view["epsilon_spent"], view["delta_spent"]) == ("4", "0.0001")
    report = verify(client)
    assert report.ok, report.problems
    done = cli("ledger", "verify", "--db", str(db_path))
    assert done.returncode == 0, done.stdout + done.stderr
    receipt = client.get(f"/v1/model-releases/{out['id']}/receipt", headers=PUB)
    assert receipt.status_code == 200, receipt.text
    body = rc.verify(receipt.json(), keys_of(client))
    pulled = client.get(f"/v1/model-releases/{out['id']}", headers=PUB).json()
    rc.check_model_header(body, pulled["header"])
    with pytest.raises(rc.ReceiptError, match="params"):
        rc.check_model_header(body, {**pulled["header"], "params": {**params, "c0": tampered_c0}})


def check_refused(client: Any, request: dict[str, Any], field: str) -> None:
    """``request`` (a None value drops its key) is a 422 naming ``field``, as a preview and as a
    release, and nothing is spent; the ledger still verifies."""
    before = state(client)
    body = {key: value for key, value in request.items() if value is not None}
    for dry_run in (True, False):
        answer = model_release(client, **body, dry_run=dry_run)
        assert answer.status_code == 422, answer.text
        assert field in {e["field"] for e in answer.json()["errors"]}, answer.json()
        assert state(client) == before
    assert verify(client).ok


def test_preview_without_constants_shows_the_split_and_spends_nothing(client: Any) -> None:
    setup_dataset(client)
    before = state(client)
    answer = model_release(client, **BODY, dry_run=True)
    assert answer.status_code == 200, answer.text
    preview = answer.json()
    assert preview["charge"] == {"epsilon": "4", "delta": "0.0001"}  # the request's, exactly
    constants = preview["constants"]
    assert {key: constants[key] for key in SPLIT} == SPLIT
    assert len(constants["explanation"]) == 4 and "sparse vector" in constants["explanation"][0]
    assert preview["budget"]["after"]["epsilon_spent"] == "4"
    assert state(client) == before
    # All three given: no split, the preview as before.
    given = {"r_x": 4.0, "r_theta": 60.0, "c0": 0.1}
    plain = model_release(client, **BODY, params=given, dry_run=True).json()
    assert "constants" not in plain and plain["charge"] == preview["charge"]


def test_release_without_constants_names_the_split_in_its_one_ledger_entry(
    client: Any, db_path: Any
) -> None:
    setup_dataset(client)
    answer = model_release(client, **BODY)
    assert answer.status_code == 201, answer.text
    out = answer.json()
    assert (out["epsilon"], out["delta"]) == ("4", "0.0001")
    message = verify_model(out["message"])
    params = message.header.params
    for name in ("r_x", "r_theta", "c0"):
        value = params[name]
        assert isinstance(value, float) and math.isfinite(value) and value > 0, (name, value)
    assert params["r_x"] > 1.0  # the intercept's column joins after the projection
    assert params["constants_chosen"] == "r_x,c0,r_theta"
    assert (params["constants_epsilon"], params["eptr_epsilon"]) == ("1", "3")
    assert message.header.noise == "gaussian" and len(message.body.coef) == 3
    assert "gamma" not in answer.text and "release_probability" not in answer.text
    check_charged_and_signed(client, db_path, out, params, split=SPLIT, tampered_c0=1.0)


def test_given_constants_are_kept_and_only_the_rest_is_chosen(client: Any) -> None:
    setup_dataset(client)
    answer = model_release(client, **BODY, params={"r_x": 4.0, "r_theta": 60.0})
    assert answer.status_code == 201, answer.text
    params = verify_model(answer.json()["message"]).header.params
    assert (params["r_x"], params["r_theta"], params["constants_chosen"]) == (4.0, 60.0, "c0")
    assert params["c0"] > 0 and params["constants_epsilon"] == "0.6"
    split = _last_entry(client)["parameters"]["split"]
    assert split["constants"]["parts"] == {"c0": "0.6"} and split["eptr"]["epsilon"] == "3.4"
    # All three given: the release and its entry as before (no split).
    given = {"r_x": 4.0, "r_theta": 60.0, "c0": 0.1}
    assert model_release(client, **BODY, params=given).status_code == 201
    entry = _last_entry(client)
    assert "split" not in entry["parameters"] and entry["parameters"]["params"] == given
    assert verify(client).ok


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"params": {"r_x": -1.0}}, "params.r_x"),
        ({"params": {"c0": 0}}, "params.c0"),
        ({"params": {"r_theta": "2"}}, "params.r_theta"),
        ({"params": {"r_x": 1.0}}, "params.r_x"),  # <= 1 with an intercept
        ({"params": {"r_y": 1.0}}, "params.r_y"),
        ({"epsilon": "1e-320"}, "epsilon"),  # too small to split into usable doubles
        ({"delta": None}, "delta"),
    ],
)
def test_bad_values_are_a_422_naming_the_field_and_spend_nothing(
    client: Any, change: dict[str, Any], field: str
) -> None:
    setup_dataset(client)
    check_refused(client, {**BODY, **change}, field)
