"""The estimator registry: the built-in families, and a toy estimator registered by this test
that goes end to end through both services (released, receipted, pulled, predicted)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from starlette.exceptions import StarletteDeprecationWarning

from shared.errors import IntegrityError, InvalidParameterError
from shared.estimators import registry
from shared.estimators.registry import Design, EstimatorFamily, FitArgs, Fitted
from shared.mechanisms.private_mean import private_mean, private_mean_variance
from shared.model_message import verify_model
from shared.service.client import LabelsPartyClient, columns_to_csv
from tests.mechanisms.test_registry import TOKENS, _labels_server, features_service

with warnings.catch_warnings():
    warnings.simplefilter("ignore", StarletteDeprecationWarning)

TOY = "toy_mean"


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("ols", {"intercept": True, "r_x": 3.0, "r_theta": 2.0, "c0": 0.2}),
        ("ols", {"intercept": False, "r_x": 1.5, "r_theta": 0.5, "c0": 0.05}),
        ("nw", {"bandwidth": 0.7, "c0": 0.1, "queries": [[0.0, 0.0], [0.5, -0.5], [3.0, 1.0]]}),
        ("nw", {"bandwidth": 0.3, "c0": 0.02, "r_f": 4.0, "queries": [[0.1, 0.2]]}),
        ("bayes", {"n_classes": 3, "r_x": 2.5, "c0": 0.1}),
    ],
)
def test_a_familys_public_alpha_is_the_alpha_its_fit_runs_at(
    name: str, params: dict[str, Any]
) -> None:
    """``EstimatorFamily.public_alpha`` (the service's refusal before any label is read) is the
    alpha the estimator itself computes when every constant is given: one formula, two uses."""
    from shared.estimators import bayes, kernel, ols

    rng = np.random.default_rng(5)
    x = rng.normal(size=(400, 2))
    labels = np.clip(rng.normal(size=400), -1.0, 2.0)
    family = registry.get(name)
    design = family.design("eptr", params, x, ["x1", "x2"])
    alpha = family.public_alpha("eptr", params, design, -1.0, 2.0, None)  # type: ignore[misc]
    common: dict[str, Any] = {"epsilon": 1.0, "delta": 1e-5, "rng": rng}
    if name == "ols":
        features = design.x[:, :-1] if design.intercept else design.x
        out: Any = ols.eptr_ols(
            features, labels, r_x=params["r_x"], r_theta=params["r_theta"], c0=params["c0"],
            intercept=design.intercept, **common,
        )  # fmt: skip
    elif name == "nw":
        interval = {"r_f": params["r_f"]} if "r_f" in params else {"lo": -1.0, "hi": 2.0}
        out = kernel.eptr_nw(
            x, labels, design.queries, bandwidth=params["bandwidth"], c0=params["c0"],
            **interval, **common,
        )  # fmt: skip
    else:
        classes = np.clip(np.rint(labels), 0, 2).astype(np.int64)
        out = bayes.eptr_bayes(
            x, classes, n_classes=3, r_x=params["r_x"], c0=params["c0"], **common
        )
    assert alpha == out.alpha
    # A constant the product would choose: alpha is not public, no pre-check.
    fewer = {key: value for key, value in params.items() if key != "c0"}
    split = family.split_of("eptr", fewer, Decimal(1), Decimal("1e-5"))
    assert family.public_alpha("eptr", fewer, design, -1.0, 2.0, split) is None  # type: ignore[misc]


def test_the_product_registers_ols_nw_and_bayes_with_their_privacy_kinds() -> None:
    assert registry.names()[:3] == ("ols", "nw", "bayes")
    assert set(registry.get("ols").privacies) == {"label", "eptr"}
    assert set(registry.get("bayes").privacies) == {"eptr"}  # Algorithm 3 only
    assert registry.get("ols").allowed("eptr") == {"r_x", "r_theta", "c0", "intercept"}
    with pytest.raises(InvalidParameterError, match="must be one of ols, nw, bayes"):
        registry.get("forest")
    with pytest.raises(InvalidParameterError, match="already registered"):
        registry.register(registry.get("ols"))


def _toy_fit(design: Design, labels: np.ndarray, args: FitArgs) -> Fitted:
    """The DP mean of the labels (pure epsilon-label-DP: shared.mechanisms.private_mean)."""
    mean = private_mean(labels, lo=args.lo, hi=args.hi, epsilon=args.epsilon, rng=args.rng)
    variance = private_mean_variance(lo=args.lo, hi=args.hi, epsilon=args.epsilon, n=labels.size)
    return Fitted(
        body={"coef": [mean]}, released=True, noise="discrete_laplace",
        noise_scale=float(np.sqrt(variance / 2.0)), sensitivity=(args.hi - args.lo) / labels.size,
    )  # fmt: skip


def _toy_body(header: Any, body: Any) -> None:
    if body.coef is None or len(body.coef) != 1:
        raise IntegrityError(f"{TOY} model: one coefficient, the mean")


TOY_FAMILY = EstimatorFamily(
    name=TOY,
    privacies={"label": ()},
    design=lambda privacy, params, features, columns: Design(x=features),
    fit=_toy_fit,
    check_body=_toy_body,
    predict=lambda header, body, x: np.full(x.shape[0], body.coef[0]),
    description="a constant: the labels' DP mean (a test's toy)",
)


@pytest.fixture
def toy_registered() -> Iterator[None]:
    registry.register(TOY_FAMILY)
    try:
        yield
    finally:
        registry.unregister(TOY)


def test_a_toy_estimator_is_released_verified_and_predicted_through_both_services(
    toy_registered: None, tmp_path: Path
) -> None:
    rng = np.random.default_rng(5)
    n = 400
    ids = [f"m{i:04d}" for i in range(n)]
    x = np.round(rng.normal(size=n), 6)
    y = np.clip(40 + 5 * x + rng.normal(0, 2, n), 0.0, 100.0)
    with _labels_server(tmp_path / "labels.db") as url:
        operator, advertiser, publisher = (
            LabelsPartyClient(url, token=TOKENS[role])
            for role in ("operator", "advertiser", "publisher")
        )
        operator.create_dataset(
            "toy", label_min=0.0, label_max=100.0, default_label=0.0, epsilon_budget=5
        )
        publisher.register_examples("toy", ids)
        advertiser.post_labels("toy", ids, y)
        publisher.request(
            "POST", "/v1/datasets/toy/public-features", idempotent=True,
            content=columns_to_csv(ids, {"x": x}), headers={"Content-Type": "text/csv"},
        )  # fmt: skip
        path = "/v1/datasets/toy/model-releases"
        body = {"estimator": TOY, "privacy": "label", "epsilon": "1"}
        preview = advertiser.request(
            "POST", path, idempotent=False, json_body={**body, "dry_run": True}
        ).json()
        assert preview["estimator"] == TOY and preview["charge"]["epsilon"] == "1"
        # Its declared privacy kinds are enforced (eptr is not one of them), naming the field.
        refused = advertiser._http.post(path, json={**body, "privacy": "eptr", "delta": "0.01"})
        assert refused.status_code == 422
        assert refused.json()["errors"][0]["field"] == "privacy"
        released = advertiser.request("POST", path, idempotent=False, json_body=body).json()
        message = verify_model(released["message"])
        assert message.header.estimator == TOY and len(message.body.coef) == 1
        assert abs(message.body.coef[0] - y.mean()) < 5.0  # the DP mean of the labels
        receipt = advertiser._http.get(f"/v1/model-releases/{released['id']}/receipt")
        assert receipt.status_code == 200, receipt.text

        with features_service(tmp_path, url) as features:
            created = features.post(
                "/v1/models",
                json={"dataset": "toy", "model": "released", "model_release_id": released["id"]},
            )
            assert created.status_code == 201, created.text
            assert created.json()["result"]["estimator"] == TOY
            rows = [{"features": {"x": v}} for v in (-2.0, 0.0, 3.5)]
            predicted = features.post(f"/v1/models/{created.json()['id']}/predict",
                                      json={"rows": rows})  # fmt: skip
            assert predicted.status_code == 200, predicted.text
            assert predicted.json()["predictions"] == [message.body.coef[0]] * 3
