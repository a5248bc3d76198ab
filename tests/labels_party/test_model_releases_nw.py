"""ePTR-NW model releases clip the labels to the dataset's public [label_min, label_max] when the
request omits ``r_f`` (alpha proportional to label_max - label_min), and keep ``r_f``'s meaning
[-r_f, r_f] when it is given; without bandwidth and/or c0 the product chooses them
(``shared.estimators.nw_constants``) inside the same charge. Through the real app, with the
features party's prediction and the message checks on the same message."""

from __future__ import annotations

import hashlib
import re
from typing import Any

import numpy as np
import pytest

from features_party.released_models import predict_matrix
from labels_party.budget import ledger
from shared import epsilon as amounts
from shared.errors import IntegrityError
from shared.estimators import nw_constants
from shared.estimators.eptr import eptr_noise_scale
from shared.estimators.families import NW_REFERENCE_MAX_ROWS
from shared.estimators.kernel import (
    eptr_nw,
    interpolate,
    kernel_bound,
    nw_alpha,
    query_overlap,
    smooth_interpolate,
)
from shared.model_message import verify_model
from shared.rng import SystemRandom
from tests.labels_party.conftest import create_dataset, put_labels, register
from tests.labels_party.test_model_releases import (
    N,
    _csv,
    _data,
    model_release,
    setup_dataset,
    state,
    upload,
    verify,
)

GRID = [[a, b] for a in (-1.0, 0.0, 1.0) for b in (-1.0, 0.0, 1.0)]
BANDWIDTH, C0 = 0.5, 0.01
BODY = {"estimator": "nw", "privacy": "eptr", "epsilon": "4", "delta": "0.0001"}


def expected_noise_scale(
    span: float,
    *,
    epsilon: str = "4",
    delta: str = "0.0001",
    bandwidth: float = BANDWIDTH,
    c0: float = C0,
) -> float:
    """Algorithm 2's noise for ePTR-NW's alpha = span K_max sqrt(min(m, 2 G)) / (c0 n), at the
    floats the service runs (never above the exact charge)."""
    queries = np.array(GRID)
    overlap = min(float(len(GRID)), 2.0 * query_overlap(queries, bandwidth=bandwidth))
    alpha = nw_alpha(span=span, k_max=kernel_bound(2, bandwidth), c0=c0, n=N, overlap=overlap)
    return eptr_noise_scale(
        alpha=alpha,
        epsilon=amounts.float_at_most(amounts.exact(epsilon)),
        delta=amounts.float_at_most(amounts.exact(delta)),
    )


def small_range_dataset(client: Any, name: str = "small") -> None:
    """Labels in the public [0, 5] (the paper would need R_f = 5, i.e. [-5, 5])."""
    ids, x, y = _data()
    create_dataset(
        client, name, label_min=0.0, label_max=5.0, epsilon_budget="10", delta_budget="0.001"
    )
    register(client, name, ids)
    pairs = list(zip(ids, (y / 20.0).tolist(), strict=True))
    assert put_labels(client, name, pairs).status_code == 200
    assert upload(client, name, _csv(ids, x), "text/csv").status_code == 201


def test_without_r_f_the_noise_is_the_one_for_label_max_minus_label_min(client: Any) -> None:
    small_range_dataset(client)
    params = {"bandwidth": BANDWIDTH, "queries": GRID, "c0": C0}
    answer = model_release(client, "small", **BODY, params=params)
    assert answer.status_code == 201, answer.text
    header = verify_model(answer.json()["message"]).header
    assert header.params == {"bandwidth": BANDWIDTH, "c0": C0}  # no r_f: [label_min, label_max]
    assert (header.label_min, header.label_max) == (0.0, 5.0)
    assert header.noise == "gaussian"
    assert header.noise_scale == pytest.approx(expected_noise_scale(5.0), rel=1e-12)
    # r_f = 5 keeps its meaning [-5, 5]: a span of 10, twice the noise.
    given = model_release(client, "small", **BODY, params={**params, "r_f": 5.0})
    assert given.status_code == 201, given.text
    header_given = verify_model(given.json()["message"]).header
    assert header_given.params == {"bandwidth": BANDWIDTH, "c0": C0, "r_f": 5.0}
    assert header_given.noise_scale == pytest.approx(expected_noise_scale(10.0), rel=1e-12)
    assert header_given.noise_scale == pytest.approx(2.0 * header.noise_scale, rel=1e-9)
    assert verify(client).ok


def test_the_ledger_entry_and_the_features_party_agree_on_a_release_without_r_f(
    client: Any,
) -> None:
    setup_dataset(client)  # labels in [0, 100]
    answer = model_release(
        client, **BODY, params={"bandwidth": BANDWIDTH, "queries": GRID, "c0": C0}
    )
    assert answer.status_code == 201, answer.text
    out = answer.json()
    message = verify_model(out["message"])  # the message checks (the family's check_body)
    assert message.header.noise_scale == pytest.approx(expected_noise_scale(100.0), rel=1e-12)
    assert message.header.released and len(message.body.values) == len(GRID)
    with client.app.state.services.db.read() as conn:
        entry = ledger.public_entry(ledger.entries(conn)[-1])
    assert (entry["kind"], entry["mechanism"]) == ("model", "eptr_nw")
    assert (entry["epsilon"], entry["delta"]) == ("4", "0.0001")
    assert entry["parameters"]["params"] == {"bandwidth": BANDWIDTH, "c0": C0}
    # The features party predicts with the family's predict: interpolation of the released
    # grid, a released value at a query point itself.
    points = np.array([[0.0, 0.0], [0.3, -0.4], [2.0, 2.0]])
    predicted = predict_matrix(message, points)
    queries, values = np.array(message.body.queries), np.array(message.body.values)
    assert predicted.tolist() == interpolate(queries, values, points).tolist()
    assert predicted[0] == values[GRID.index([0.0, 0.0])]
    # Without r_f the estimate is a weighted mean of labels in [0, 100]: the released values are
    # that plus noise of the header's scale (10 scales: a bound that fails with p < 1e-20).
    slack = 10.0 * message.header.noise_scale
    assert np.all(values >= -slack) and np.all(values <= 100.0 + slack)
    assert verify(client).ok


def test_the_preview_of_a_release_without_r_f_spends_nothing(client: Any) -> None:
    setup_dataset(client)
    before = state(client)
    params = {"bandwidth": BANDWIDTH, "queries": GRID, "c0": C0}
    answer = model_release(client, **BODY, params=params, dry_run=True)
    assert answer.status_code == 200, answer.text
    preview = answer.json()
    assert preview["charge"] == {"epsilon": "4", "delta": "0.0001"} and "constants" not in preview
    assert state(client) == before


@pytest.mark.parametrize(
    ("body", "field"),
    [
        # r_f is ePTR-NW's only: label-DP NW uses the bounds' exact sensitivity.
        ({"privacy": "label", "epsilon": "1", "delta": None,
          "params": {"bandwidth": BANDWIDTH, "queries": GRID, "r_f": 5.0}}, "params.r_f"),
        ({"params": {"bandwidth": BANDWIDTH, "queries": GRID, "c0": C0, "r_f": 1e308}},
         "params.r_f"),
        ({"params": {"bandwidth": BANDWIDTH, "queries": GRID, "c0": C0, "r_f": 0.0}},
         "params.r_f"),
        ({"params": {"bandwidth": BANDWIDTH, "queries": GRID, "c0": C0, "r_f": "5"}},
         "params.r_f"),
        # K_max = sigma^-d (2 pi)^(-d/2) overflows a double: refused before any label is read.
        ({"params": {"bandwidth": 1e-200, "queries": GRID, "c0": C0}}, "params.bandwidth"),
        # bandwidth omitted: the product's rule needs query points that differ.
        ({"params": {"queries": [[0.0, 0.0]], "c0": C0}}, "params.bandwidth"),
        ({"params": {"queries": [[0.5, 0.5], [0.5, 0.5]]}}, "params.bandwidth"),
        # ... and a rule bandwidth whose K_max overflows is refused like a given one.
        ({"params": {"queries": [[1e-300, 0.0], [0.0, 0.0]]}}, "params.bandwidth"),
        # c0 omitted: an epsilon too small to split is refused naming it.
        ({"epsilon": "1e-320", "params": {"bandwidth": BANDWIDTH, "queries": GRID}}, "epsilon"),
        ({"params": {"bandwidth": BANDWIDTH, "c0": C0}}, "params.queries"),
        # Found by a fuzzer (500s before): ragged query points; a bandwidth whose square is no
        # double, under either privacy; label-DP NW whose K_max overflows (it cancels in W).
        ({"params": {"bandwidth": BANDWIDTH, "c0": C0, "queries": [[0.0, 0.0], [1.0]]}},
         "params.queries"),
        ({"privacy": "label", "epsilon": "1", "delta": None,
          "params": {"bandwidth": 0.5, "queries": [[0.0, 0.0], []]}}, "params.queries"),
        ({"privacy": "label", "epsilon": "1", "delta": None,
          "params": {"bandwidth": 1e308, "queries": GRID}}, "params.bandwidth"),
        ({"privacy": "label", "epsilon": "1", "delta": None,
          "params": {"bandwidth": 1e-300, "queries": GRID}}, "params.bandwidth"),
        ({"params": {"bandwidth": 5e-324, "queries": GRID, "c0": C0}}, "params.bandwidth"),
    ],
)  # fmt: skip
def test_bad_nw_parameters_name_the_field_and_spend_nothing(
    client: Any, body: dict[str, Any], field: str
) -> None:
    setup_dataset(client)
    before = state(client)
    request = {key: value for key, value in {**BODY, **body}.items() if value is not None}
    answer = model_release(client, **request)
    assert 400 <= answer.status_code < 500, answer.text
    assert field in {e["field"] for e in answer.json()["errors"]}, answer.json()
    assert state(client) == before
    assert verify(client).ok


# ---- constants chosen by the product (issue 22, item 5) -----------------------------------

SPLIT = {
    "chosen": ["bandwidth", "c0"],
    "constants": {"epsilon": "0.4", "delta": "0", "parts": {"c0": "0.4"}},
    "eptr": {"epsilon": "3.6", "delta": "0.0001"},
}


def _last_entry(client: Any) -> dict[str, Any]:
    with client.app.state.services.db.read() as conn:
        return ledger.public_entry(ledger.entries(conn)[-1])


def test_the_preview_without_bandwidth_and_c0_shows_the_split_and_spends_nothing(
    client: Any,
) -> None:
    setup_dataset(client)
    before = state(client)
    answer = model_release(client, **BODY, params={"queries": GRID}, dry_run=True)
    assert answer.status_code == 200, answer.text
    preview = answer.json()
    assert preview["charge"] == {"epsilon": "4", "delta": "0.0001"}  # the request's, exactly
    constants = preview["constants"]
    assert {key: constants[key] for key in SPLIT} == SPLIT
    assert len(constants["explanation"]) == 3 and "n^(-1/(d+4))" in constants["explanation"][0]
    assert state(client) == before


def test_a_release_without_bandwidth_and_c0_charges_once_and_names_them(client: Any) -> None:
    setup_dataset(client)  # labels in [0, 100]
    answer = model_release(client, **BODY, params={"queries": GRID})
    assert answer.status_code == 201, answer.text
    out = answer.json()
    assert (out["epsilon"], out["delta"]) == ("4", "0.0001")
    message = verify_model(out["message"])
    params = message.header.params
    # The bandwidth is the public rule on the request's queries and n; c0 a DP output.
    assert params["bandwidth"] == nw_constants.rule_bandwidth(np.array(GRID), n=N)
    assert isinstance(params["c0"], float) and params["c0"] > 0
    assert params["constants_chosen"] == "bandwidth,c0"
    assert (params["constants_epsilon"], params["eptr_epsilon"]) == ("0.4", "3.6")
    # ePTR-NW ran at the rest of epsilon with the reported constants and [label_min, label_max].
    expected = expected_noise_scale(
        100.0, epsilon="3.6", bandwidth=params["bandwidth"], c0=params["c0"]
    )
    assert message.header.noise_scale == pytest.approx(expected, rel=1e-12)
    assert "gamma" not in answer.text and "release_probability" not in answer.text
    entry = _last_entry(client)
    assert (entry["kind"], entry["epsilon"], entry["delta"]) == ("model", "4", "0.0001")
    assert entry["parameters"]["split"] == SPLIT and entry["parameters"]["params"] == params
    points = np.array([[0.0, 0.0], [0.3, -0.4]])
    queries, values = np.array(message.body.queries), np.array(message.body.values)
    assert predict_matrix(message, points).tolist() == interpolate(queries, values, points).tolist()
    assert verify(client).ok


def test_a_release_without_bandwidth_only_costs_nothing_for_it(client: Any) -> None:
    setup_dataset(client)
    answer = model_release(client, **BODY, params={"queries": GRID, "c0": C0})
    assert answer.status_code == 201, answer.text
    params = verify_model(answer.json()["message"]).header.params
    assert params["c0"] == C0 and params["constants_chosen"] == "bandwidth"
    assert (params["constants_epsilon"], params["eptr_epsilon"]) == ("0", "4")
    split = _last_entry(client)["parameters"]["split"]
    assert split["chosen"] == ["bandwidth"] and split["constants"]["parts"] == {}
    assert split["eptr"] == {"epsilon": "4", "delta": "0.0001"}


# ---- c0 per query from a public reference (issue 22, item 4) ---------------------------------
# c0 omitted and ``reference`` given (points the caller will predict at): one public c0 per
# query point from the reference's density (``nw_constants.reference_c0``), the noise scaled per
# query, the interpolation by epsilon's public rule (``families.nw_interpolation``); nothing of
# epsilon is spent on the constants. Without ``reference`` nothing changes (the tests above).

# Query points where N(0, I) features are dense enough for the floor's 20 neighbours, and a
# reference drawn from the features' distribution (public: the caller's own points).
DENSE = [[a, b] for a in (-0.5, 0.0, 0.5) for b in (-0.5, 0.0, 0.5)]
REFERENCE = np.round(np.random.default_rng(7).normal(size=(200, 2)), 6).tolist()
REFERENCE_SPLIT = {
    "chosen": ["c0"],
    "constants": {"epsilon": "0", "delta": "0", "parts": {}},
    "eptr": {"epsilon": "4", "delta": "0.0001"},
}


def test_the_preview_with_a_reference_shows_the_per_query_c0_and_spends_nothing(
    client: Any,
) -> None:
    setup_dataset(client)
    before = state(client)
    params = {"queries": DENSE, "bandwidth": BANDWIDTH, "reference": REFERENCE}
    answer = model_release(client, **BODY, params=params, dry_run=True)
    assert answer.status_code == 200, answer.text
    preview = answer.json()
    assert preview["charge"] == {"epsilon": "4", "delta": "0.0001"}
    constants = preview["constants"]
    assert {key: constants[key] for key in REFERENCE_SPLIT} == REFERENCE_SPLIT
    c0, interpolation, eptr = constants["explanation"]
    assert "one public value per query point" in c0 and "reference" in c0 and "epsilon 0" in c0
    assert "Gaussian smoother" in interpolation and "0.5 x the bandwidth" in interpolation
    assert eptr.startswith("ePTR-NW: epsilon 4, delta 0.0001")
    # Below epsilon 2 the preview names inverse distance; without bandwidth the rule's line too.
    low = model_release(
        client, **{**BODY, "epsilon": "1"}, params={"queries": GRID, "reference": REFERENCE},
        dry_run=True,
    )  # fmt: skip
    assert low.status_code == 200, low.text
    lines = low.json()["constants"]["explanation"]
    assert "n^(-1/(d+4))" in lines[0] and "inverse distance" in lines[2]
    assert low.json()["constants"]["chosen"] == ["bandwidth", "c0"]
    assert state(client) == before


def test_a_release_with_a_reference_carries_the_per_query_c0_and_the_smoother(
    client: Any,
) -> None:
    _, x, y = _data()
    setup_dataset(client)  # labels in [0, 100]
    params = {"queries": DENSE, "bandwidth": BANDWIDTH, "reference": REFERENCE}
    answer = model_release(client, **BODY, params=params)
    assert answer.status_code == 201, answer.text
    out = answer.json()
    assert (out["epsilon"], out["delta"]) == ("4", "0.0001")
    message = verify_model(out["message"])  # the message checks accept the new params
    header = message.header.params
    # c0: the public rule on the queries, the reference, n, the bandwidth, epsilon and delta.
    c0 = nw_constants.reference_c0(
        np.array(DENSE), np.array(REFERENCE), n=N, bandwidth=BANDWIDTH, epsilon=4.0,
        delta=0.0001,
    )  # fmt: skip
    digest = "sha256:" + hashlib.sha256(np.array(REFERENCE, dtype="<f8").tobytes()).hexdigest()
    assert header == {
        "bandwidth": BANDWIDTH,
        "reference": digest,  # the rows stay out of the message and the ledger
        "reference_rows": len(REFERENCE),
        "c0_per_query": ",".join(repr(float(v)) for v in c0),
        "noise_power": 0.5,
        "interpolation": "smooth",
        "smooth_bandwidth": 0.5 * BANDWIDTH,
        "constants_chosen": "c0",
        "constants_epsilon": "0",
        "eptr_epsilon": "4",
    }
    # ePTR-NW ran on the whole charge with these c_q and the noise scaled per query: the noise
    # scale is a function of public values (any rng gives the same).
    fit = eptr_nw(
        x, y, np.array(DENSE), epsilon=4.0, delta=0.0001, bandwidth=BANDWIDTH, c0=c0,
        rng=SystemRandom(), lo=0.0, hi=100.0, noise_power=0.5,
    )  # fmt: skip
    assert message.header.noise_scale == fit.noise_scale
    assert message.header.released  # dense queries: the test passes (p ~ 1)
    assert "gamma" not in answer.text and "release_probability" not in answer.text
    entry = _last_entry(client)
    assert (entry["kind"], entry["epsilon"], entry["delta"]) == ("model", "4", "0.0001")
    assert entry["parameters"]["params"] == header
    assert entry["parameters"]["split"] == REFERENCE_SPLIT
    # Predictions (the features party's function) use the released interpolation.
    points = np.array([[0.0, 0.0], [0.3, -0.4], [2.0, 2.0]])
    queries, values = np.array(message.body.queries), np.array(message.body.values)
    expected = smooth_interpolate(queries, values, points, bandwidth=0.5 * BANDWIDTH)
    assert predict_matrix(message, points).tolist() == expected.tolist()
    assert verify(client).ok


def test_the_reference_constants_are_computed_once_per_request(
    client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The per-query c0 (``reference_c0``, one kernel sum per query and reference row) is
    computed once for a release's alpha check and its fit (``EstimatorFamily.bind``), and once
    for a preview."""
    setup_dataset(client)
    calls: list[int] = []
    rule = nw_constants.reference_c0

    def counted(*args: Any, **kwargs: Any) -> np.ndarray:
        calls.append(1)
        return rule(*args, **kwargs)

    monkeypatch.setattr(nw_constants, "reference_c0", counted)
    params = {"queries": DENSE, "bandwidth": BANDWIDTH, "reference": REFERENCE}
    preview = model_release(client, **BODY, params=params, dry_run=True)
    assert preview.status_code == 200, preview.text
    assert len(calls) == 1
    answer = model_release(client, **BODY, params=params)
    assert answer.status_code == 201, answer.text
    assert len(calls) == 2


def test_a_release_with_a_reference_below_epsilon_2_interpolates_by_distance(
    client: Any,
) -> None:
    setup_dataset(client)
    params = {"queries": GRID, "reference": REFERENCE}
    answer = model_release(client, **{**BODY, "epsilon": "1"}, params=params)
    assert answer.status_code == 201, answer.text
    message = verify_model(answer.json()["message"])
    header = message.header.params
    bandwidth = nw_constants.rule_bandwidth(np.array(GRID), n=N)
    assert header["bandwidth"] == bandwidth
    c0 = nw_constants.reference_c0(
        np.array(GRID), np.array(REFERENCE), n=N, bandwidth=bandwidth, epsilon=1.0,
        delta=0.0001,
    )  # fmt: skip
    assert header["c0_per_query"] == ",".join(repr(float(v)) for v in c0)
    assert header["interpolation"] == "inverse_distance" and "smooth_bandwidth" not in header
    assert header["constants_chosen"] == "bandwidth,c0"
    assert (header["constants_epsilon"], header["eptr_epsilon"]) == ("0", "1")
    assert _last_entry(client)["parameters"]["split"] == {
        **REFERENCE_SPLIT, "chosen": ["bandwidth", "c0"],
        "eptr": {"epsilon": "1", "delta": "0.0001"},
    }  # fmt: skip
    points = np.array([[0.0, 0.0], [0.3, -0.4]])
    queries, values = np.array(message.body.queries), np.array(message.body.values)
    assert predict_matrix(message, points).tolist() == interpolate(queries, values, points).tolist()
    assert verify(client).ok


@pytest.mark.parametrize(
    "body",
    [
        # Beyond the documented maximum (families.NW_REFERENCE_MAX_ROWS rows).
        {"params": {"queries": GRID, "reference": [[0.0, 0.0]] * (NW_REFERENCE_MAX_ROWS + 1)}},
        {"params": {"queries": GRID, "reference": []}},
        # Malformed: not a list of points of numbers.
        {"params": {"queries": GRID, "reference": "everywhere"}},
        {"params": {"queries": GRID, "reference": [[0.0, "x"]]}},
        {"params": {"queries": GRID, "reference": [0.0, 1.0]}},
        # Mis-dimensioned: the features have 2 columns.
        {"params": {"queries": GRID, "reference": [[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]]}},
        {"params": {"queries": GRID, "reference": [[0.0, 0.0], [1.0]]}},
        {"params": {"queries": GRID, "reference": [[0.0], [1.0]]}},
        # A reference chooses c0: not with a given c0, not for label-DP NW.
        {"params": {"queries": GRID, "c0": C0, "reference": REFERENCE}},
        {"privacy": "label", "epsilon": "1", "delta": None,
         "params": {"bandwidth": BANDWIDTH, "queries": GRID, "reference": REFERENCE}},
    ],
)  # fmt: skip
@pytest.mark.parametrize("dry_run", [False, True])
def test_a_bad_reference_is_refused_naming_it_and_spends_nothing(
    client: Any, body: dict[str, Any], dry_run: bool
) -> None:
    setup_dataset(client)
    before = state(client)
    request = {key: value for key, value in {**BODY, **body}.items() if value is not None}
    answer = model_release(client, **request, dry_run=dry_run)
    assert answer.status_code == 422, answer.text
    fields = {e["field"] for e in answer.json()["errors"]}
    assert any(field.startswith("params.reference") for field in fields), answer.json()
    assert state(client) == before
    assert verify(client).ok


def _tampered(message: dict[str, Any], **params: Any) -> dict[str, Any]:
    """The message with header params changed (the body and its sha256 untouched)."""
    header = {**message["header"], "params": {**message["header"]["params"], **params}}
    return {**message, "header": header}


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"interpolation": "cubic"}, "params.interpolation"),
        ({"interpolation": 1.0}, "params.interpolation"),
        ({"smooth_bandwidth": None}, "params.smooth_bandwidth"),
        ({"smooth_bandwidth": -0.1}, "params.smooth_bandwidth"),
        ({"smooth_bandwidth": True}, "params.smooth_bandwidth"),
        ({"interpolation": "inverse_distance"}, "params.smooth_bandwidth"),
        ({"c0_per_query": "0.1,0.2"}, "params.c0_per_query"),
        ({"c0_per_query": ",".join(["0.1"] * 8 + ["nan"])}, "params.c0_per_query"),
        ({"c0_per_query": ",".join(["0.1"] * 8 + ["-1"])}, "params.c0_per_query"),
        ({"c0_per_query": ",".join(["0.1"] * 8 + ["x"])}, "params.c0_per_query"),
        ({"c0_per_query": 0.1}, "params.c0_per_query"),
        ({"noise_power": 2.0}, "params.noise_power"),
        ({"reference": "sha256:abc"}, "params.reference"),
        ({"reference": 1.0}, "params.reference"),
        ({"reference_rows": 0}, "params.reference_rows"),
        ({"reference_rows": True}, "params.reference_rows"),
        ({"reference_rows": None}, "params.reference_rows"),
    ],
)  # fmt: skip
def test_the_message_check_refuses_malformed_nw_params_naming_them(
    client: Any, params: dict[str, Any], field: str
) -> None:
    setup_dataset(client)
    request = {"queries": DENSE, "bandwidth": BANDWIDTH, "reference": REFERENCE}
    answer = model_release(client, **BODY, params=request)
    assert answer.status_code == 201, answer.text
    message = answer.json()["message"]
    verify_model(message)
    with pytest.raises(IntegrityError, match=re.escape(field)):
        verify_model(_tampered(message, **params))
