"""ePTR-Bayes model releases with r_x and c0 chosen by the product (issue 22, item 3), through
the real app, the twins of ``test_model_releases_constants`` (ePTR-OLS): the preview shows the
split and spends nothing, the release charges exactly the request's (epsilon, delta) in ONE
ledger entry that names the split, the header carries the chosen constants (DP outputs),
receipts and the ledger still verify, and bad values are a 422 naming the field with nothing
spent."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from labels_party.budget import ledger
from shared.model_message import verify_model
from tests.labels_party.conftest import create_dataset, put_labels, register
from tests.labels_party.test_model_releases import _csv, model_release, state, upload, verify
from tests.labels_party.test_model_releases_constants import (
    check_charged_and_signed,
    check_refused,
)

N = 400
BODY = {"estimator": "bayes", "privacy": "eptr", "epsilon": "4", "delta": "0.0001"}
PARAMS = {"n_classes": 2}
SPLIT = {
    "chosen": ["r_x", "c0"],
    "constants": {"epsilon": "0.6", "delta": "0", "parts": {"r_x": "0.2", "c0": "0.4"}},
    "eptr": {"epsilon": "3.4", "delta": "0.0001"},
}


def setup_classes(client: Any, name: str = "ds") -> None:
    """N examples in two classes (labels 0 and 1, 60% / 40%) whose feature means differ."""
    rng = np.random.default_rng(0)
    classes = (rng.random(N) < 0.4).astype(float)
    x = np.round(rng.normal(size=(N, 2)) + 2.0 * classes[:, None], 6)
    ids = [f"ex-{i:04d}" for i in range(N)]
    create_dataset(client, name, epsilon_budget="10", delta_budget="0.001", label_max=1.0)
    register(client, name, ids)
    pairs = list(zip(ids, classes.tolist(), strict=True))
    assert put_labels(client, name, pairs).status_code == 200
    answer = upload(client, name, _csv(ids, x), "text/csv")
    assert answer.status_code == 201, answer.text


def _last_entry(client: Any) -> dict[str, Any]:
    with client.app.state.services.db.read() as conn:
        return ledger.public_entry(ledger.entries(conn)[-1])


def test_preview_without_constants_shows_the_split_and_spends_nothing(client: Any) -> None:
    setup_classes(client)
    before = state(client)
    answer = model_release(client, **BODY, params=PARAMS, dry_run=True)
    assert answer.status_code == 200, answer.text
    preview = answer.json()
    assert preview["charge"] == {"epsilon": "4", "delta": "0.0001"}  # the request's, exactly
    constants = preview["constants"]
    assert {key: constants[key] for key in SPLIT} == SPLIT
    explanation = constants["explanation"]
    assert len(explanation) == 3 and "sparse vector" in explanation[0]
    assert "smallest class count" in explanation[1] and explanation[2].startswith("ePTR-Bayes")
    assert state(client) == before
    # Both given: no split, the preview as before.
    given = {**PARAMS, "r_x": 4.0, "c0": 0.05}
    plain = model_release(client, **BODY, params=given, dry_run=True).json()
    assert "constants" not in plain and plain["charge"] == preview["charge"]


def test_release_without_constants_names_the_split_in_its_one_ledger_entry(
    client: Any, db_path: Any
) -> None:
    setup_classes(client)
    answer = model_release(client, **BODY, params=PARAMS)
    assert answer.status_code == 201, answer.text
    out = answer.json()
    assert (out["epsilon"], out["delta"]) == ("4", "0.0001")
    message = verify_model(out["message"])
    params = message.header.params
    for name in ("r_x", "c0"):
        value = params[name]
        assert isinstance(value, float) and math.isfinite(value) and value > 0, (name, value)
    assert params["c0"] * 2 < 1 and params["n_classes"] == 2
    assert params["constants_chosen"] == "r_x,c0"
    assert (params["constants_epsilon"], params["eptr_epsilon"]) == ("0.6", "3.4")
    assert message.header.released  # 40% of 400 in the smaller class: the test passes
    assert len(message.body.priors) == 2 and np.isclose(sum(message.body.priors), 1.0)
    assert "gamma" not in answer.text and "release_probability" not in answer.text
    check_charged_and_signed(client, db_path, out, params, split=SPLIT, tampered_c0=0.4)


def test_given_constants_are_kept_and_only_the_rest_is_chosen(client: Any) -> None:
    setup_classes(client)
    answer = model_release(client, **BODY, params={**PARAMS, "r_x": 4.0})
    assert answer.status_code == 201, answer.text
    params = verify_model(answer.json()["message"]).header.params
    assert (params["r_x"], params["constants_chosen"]) == (4.0, "c0")
    assert params["c0"] > 0 and params["constants_epsilon"] == "0.4"
    split = _last_entry(client)["parameters"]["split"]
    assert split["constants"]["parts"] == {"c0": "0.4"} and split["eptr"]["epsilon"] == "3.6"
    # Both given: the release and its entry as before (no split).
    given = {**PARAMS, "r_x": 4.0, "c0": 0.05}
    assert model_release(client, **BODY, params=given).status_code == 201
    entry = _last_entry(client)
    assert "split" not in entry["parameters"] and entry["parameters"]["params"] == given
    assert verify(client).ok


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"params": {**PARAMS, "r_x": -1.0}}, "params.r_x"),
        ({"params": {**PARAMS, "c0": 0}}, "params.c0"),
        ({"params": {**PARAMS, "c0": 0.5}}, "params.c0"),  # c0 K >= 1: refused in the preview too
        ({"params": {**PARAMS, "r_theta": 1.0}}, "params.r_theta"),
        ({"params": {}}, "params.n_classes"),
        ({"epsilon": "1e-320", "params": PARAMS}, "epsilon"),  # parts not usable doubles
        ({"delta": None, "params": PARAMS}, "delta"),
    ],
)
def test_bad_values_are_a_422_naming_the_field_and_spend_nothing(
    client: Any, change: dict[str, Any], field: str
) -> None:
    setup_classes(client)
    check_refused(client, {**BODY, **change}, field)
