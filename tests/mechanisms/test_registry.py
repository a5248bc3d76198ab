"""The mechanism registry: one protocol, and a new mechanism is one module plus its registration.

The toy ``grid_rr`` (``tests/mechanisms/toy_grid_rr.py``) is registered here and then released,
pulled and debiased end to end through both services: the labels party runs as a real uvicorn
server on 127.0.0.1 in this process (so it sees the registration), the features party in-process.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import uvicorn
from starlette.exceptions import StarletteDeprecationWarning

from features_party.config import Settings as FeaturesSettings
from features_party.main import create_app as create_features_app
from labels_party.config import Settings, Tokens
from labels_party.main import create_app as create_labels_app
from shared.debias import affine_debias, mechanism_from_header
from shared.errors import InvalidParameterError
from shared.mechanisms import registry
from shared.mechanisms.histogram import Prior
from shared.mechanisms.rp_with_prior import RPWithPrior
from shared.mechanisms.rr_on_bins import RROnBins
from shared.plan import mechanisms
from shared.service.client import LabelsPartyClient, columns_to_csv
from tests.mechanisms import toy_grid_rr

with warnings.catch_warnings():
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from fastapi.testclient import TestClient

TOKENS = {"advertiser": "adv-toy-0123456789", "publisher": "pub-toy-0123456789"}
TOKENS["operator"] = "ops-toy-0123456789"


def test_served_mechanisms_register_once_in_a_fixed_order() -> None:
    assert registry.names()[:2] == ("rpwithprior", "rr_on_bins")  # auto's comparison order
    assert mechanisms()[-1] == "auto"
    assert registry.name_of(RPWithPrior(a1=0, a2=1, zeta=0.5, epsilon=1)) == "rpwithprior"
    with pytest.raises(InvalidParameterError, match="already registered"):
        registry.register(registry.get("rr_on_bins"))
    with pytest.raises(InvalidParameterError, match="must be one of"):
        registry.get("laplace")


@pytest.mark.parametrize(
    "mechanism",
    [
        RPWithPrior(a1=2.0, a2=7.0, zeta=1.5, epsilon=0.8),
        RPWithPrior(a1=2.0, a2=7.0, zeta=1.5, epsilon=0.8, outside="uniform"),
        RROnBins(thresholds=[3.0, 6.0], output_values=[1.0, 4.5, 8.0], epsilon=1.2),
        toy_grid_rr.GridRR(lo=0.0, hi=10.0, points=5, epsilon=0.7),
    ],
    ids=["rp-project", "rp-uniform", "rr", "toy"],
)
def test_every_mechanism_honours_the_protocol(mechanism) -> None:
    """Moments against Monte Carlo, the affine expectation against the moments, and the
    epsilon-DP ratio of the output probabilities on labels at, inside and beyond the bounds."""
    assert isinstance(mechanism, registry.LabelMechanism)
    labels = np.array([-3.0, 0.0, 2.0, 4.4, 7.0, 10.0, 14.0])
    rng = np.random.default_rng(7)
    draws = np.stack([mechanism.randomize(labels, rng) for _ in range(20_000)])
    mean, var = mechanism.conditional_moments(labels)
    sd = np.sqrt(var / draws.shape[0]) + 1e-9
    assert np.all(np.abs(draws.mean(axis=0) - mean) < 6 * sd)
    np.testing.assert_allclose(draws.var(axis=0), var, rtol=0.08, atol=1e-6)
    # Every observed output has positive probability, and any two labels' probabilities of it
    # are within e^epsilon (exactly the DP inequality, on the realised odds).
    outputs = np.unique(draws)[:50]
    probs = np.stack([mechanism.output_probability(outputs, y) for y in labels])
    assert np.all(probs > 0)
    assert np.max(probs.max(axis=0) / probs.min(axis=0)) <= np.exp(mechanism.epsilon) * (1 + 1e-12)
    a, b = mechanism.affine_expectation()
    assert a > 0 and np.isfinite(b)
    rebuilt = type(mechanism).from_params(mechanism.public_params())
    assert rebuilt.public_params() == mechanism.public_params()
    prior = Prior(edges=np.linspace(0.0, 10.0, 6), probs=np.full(5, 0.2))
    assert mechanism.expected_squared_error(prior) > 0


@pytest.fixture
def toy_registered() -> Iterator[None]:
    toy_grid_rr.register()
    try:
        yield
    finally:
        registry.unregister(toy_grid_rr.NAME)


@contextlib.contextmanager
def _labels_server(db: Path) -> Iterator[str]:
    """The labels-party app on a real uvicorn server (127.0.0.1, a free port, this process)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    settings = Settings(database_url=f"sqlite:///{db}", tokens=Tokens(**TOKENS))
    config = uvicorn.Config(
        create_labels_app(settings), host="127.0.0.1", port=port, log_level="warning"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "the labels party did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


@contextlib.contextmanager
def features_service(tmp_path: Path, url: str) -> Iterator[TestClient]:
    """The features-party app in this process, pulling from the labels party at ``url``."""
    token = "features-toy-0123456789"
    settings = FeaturesSettings(
        db_path=tmp_path / "features.db",
        labels_url=url,
        labels_token=TOKENS["publisher"],
        features_token=token,
    )
    with TestClient(create_features_app(settings)) as features:
        features.headers["Authorization"] = f"Bearer {token}"
        yield features


def test_a_toy_mechanism_is_released_pulled_and_debiased_through_both_services(
    toy_registered: None, tmp_path: Path
) -> None:
    assert toy_grid_rr.NAME in mechanisms()
    rng = np.random.default_rng(11)
    n = 3000
    ids = [f"t{i:05d}" for i in range(n)]
    x = rng.uniform(0.0, 1.0, size=n)
    y = np.clip(10.0 * x + rng.normal(0, 0.5, n), 0.0, 10.0)
    with _labels_server(tmp_path / "labels.db") as url:
        operator, advertiser, publisher = (
            LabelsPartyClient(url, token=TOKENS[role])
            for role in ("operator", "advertiser", "publisher")
        )
        operator.create_dataset(
            "toy", label_min=0.0, label_max=10.0, default_label=0.0, epsilon_budget=5
        )
        publisher.register_examples("toy", ids)
        advertiser.post_labels("toy", ids, y)
        preview = advertiser.preview_release("toy", epsilon=3, mechanism=toy_grid_rr.NAME)
        assert preview["plan"]["mechanism"] == toy_grid_rr.NAME
        release = advertiser.create_release("toy", epsilon=3, mechanism=toy_grid_rr.NAME)
        assert release.mechanism == toy_grid_rr.NAME
        pulled = publisher.download_message(release.id)
        assert pulled.header.mechanism == toy_grid_rr.NAME
        toy = mechanism_from_header(pulled.header)
        assert isinstance(toy, toy_grid_rr.GridRR)
        assert set(np.unique(pulled.noisy_labels)) <= set(toy.values)
        # Debiased from the header alone: unbiased for the grid value of each label.
        debiased = affine_debias(pulled.header, pulled.noisy_labels)
        grid_truth = toy.values[toy._index(y)]  # ids are sorted as the message is
        se = debiased.std() / np.sqrt(n)
        assert abs(debiased.mean() - grid_truth.mean()) < 5 * se

        # The features party trains on it, debiased through the same registry.
        with features_service(tmp_path, url) as features:
            job, (low, high) = train_and_predict(
                features, "toy", ids, x, release.id, label_transform="debiased"
            )
            assert job["result"]["label_transform"] == "debiased"
            assert high > low + 3  # the signal (slope 10) is learnt from the toy's labels


def test_realisable_skips_what_cannot_be_built_and_keeps_the_first_of_each_key() -> None:
    def refused() -> int:
        raise InvalidParameterError("not realisable at this epsilon")

    attempts = [lambda: 3, refused, lambda: 13, lambda: 4, refused]
    assert registry.realisable(attempts, key=lambda m: m % 10) == [3, 4]
    assert registry.realisable([refused], key=lambda m: m) == []


def test_the_api_schema_of_release_options_is_built_from_the_families_specs() -> None:
    """Each family declares its options (type, values, bounds) once; the request schema is
    made of them (labels_party.schemas.ReleaseOptions), so a new family's options appear."""
    from labels_party.schemas import ReleaseOptions

    declared = {name for f in registry.families() for name in f.option_specs}
    assert declared == {"select", "zeta", "outside", "loss", "max_bins"}
    assert set(ReleaseOptions.model_fields) == declared | {"bins", "model_dim"}
    for family in registry.families():
        assert set(family.option_specs) == set(family.options)
    schema = ReleaseOptions.model_json_schema()["properties"]
    assert schema["zeta"]["anyOf"][0] == {"exclusiveMinimum": 0.0, "type": "number"}
    assert schema["loss"]["anyOf"][0]["enum"] == ["squared", "absolute", "poisson"]
    with pytest.raises(ValueError):
        ReleaseOptions.model_validate({"select": "best"})
    with pytest.raises(ValueError):
        ReleaseOptions.model_validate({"unknown_option": 1})


def train_and_predict(
    features: Any, dataset: str, ids: list[str], x: np.ndarray, release_id: str, **model: Any
) -> tuple[dict[str, Any], list[float]]:
    """Through the features service: upload feature ``x`` for ``ids``, train a ridge on the
    release (``model``: more request fields), wait for it to succeed, and predict at x = 0.1
    and 0.9. Returns the finished job and the two predictions."""
    upload = features.post(
        f"/v1/datasets/{dataset}/features",
        content=columns_to_csv(ids, {"x": np.round(x, 6)}),
        headers={"content-type": "text/csv"},
    )
    assert upload.status_code == 200, upload.text
    created = features.post(
        "/v1/models",
        json={"dataset": dataset, "release_id": release_id, "model": "ridge", **model},
    )
    assert created.status_code == 202, created.text
    deadline = time.monotonic() + 120
    while (job := features.get(f"/v1/models/{created.json()['id']}").json())["status"] not in (
        "succeeded",
        "failed",
    ):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert job["status"] == "succeeded", job.get("error")
    predictions = features.post(
        f"/v1/models/{job['id']}/predict",
        json={"rows": [{"features": {"x": 0.1}}, {"features": {"x": 0.9}}]},
    ).json()["predictions"]
    return job, predictions
