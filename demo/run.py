"""The whole protocol on one machine: two real services, three roles, one message.

1. start the labels party and the features party as local processes (127.0.0.1, free ports,
   SQLite files in a working folder, random tokens);
2. split the data: a TEST split is held out by the demo and never reaches either service;
3. operator: create the dataset (public bounds, default label, epsilon budget);
4. publisher: upload the training examples' features, register their ids (examples/sync);
5. advertiser: post the training labels (for conversions: only the clicks that converted);
6. advertiser: release ONE message at ``epsilon`` (histogram + mean epsilon1, randomizer epsilon2);
7. publisher: train on the message (background job), predict the test split over HTTP;
8. compare test MSE with a non-private model (same training code on the true training labels)
   and with the constant TRAIN-label mean.
"""

from __future__ import annotations

import math
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from demo.data import DemoData
from demo.progress import Progress
from demo.services import ServiceProcess, new_tokens, start_features_party, start_labels_party
from features_party.training import fit_encoder, fit_model
from shared.service.client import FeaturesPartyClient, LabelsPartyClient, ModelInfo

DATASET = "demo"


@dataclass(frozen=True, kw_only=True)
class DemoOptions:
    epsilon: float = 1.0
    mechanism: str = "auto"
    epsilon_histogram: float | str | None = "default"
    budget: float | None = None
    model: str = "auto"
    label_transform: str = "auto"
    test_share: float = 0.2
    seed: int = 0
    workdir: Path | None = None
    keep: bool = True
    plot: Path | None = None
    # A public column of the data to segment releases by (``shared.segments``); None: none.
    segment: str | None = None


def split(n: int, *, test_share: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeded train / test indices (the test split never leaves the demo)."""
    order = np.random.default_rng(seed).permutation(n)
    n_test = max(1, int(round(test_share * n)))
    return np.sort(order[n_test:]), np.sort(order[:n_test])


def summarize_params(mechanism: str, params: dict[str, Any]) -> dict[str, Any]:
    """The mechanism's public parameters, shortened for a table (numbers rounded)."""

    def short(value: Any) -> Any:
        if isinstance(value, float):
            return round(value, 4)
        if isinstance(value, list):
            return [short(v) for v in value]
        return value

    return {key: short(value) for key, value in params.items() if key not in ("mechanism",)}


def _mse(prediction: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean((np.asarray(prediction) - truth) ** 2))


def run_demo(data: DemoData, options: DemoOptions, progress: Progress) -> dict[str, Any]:
    """Run the protocol; return the summary (see module docstring)."""
    workdir = options.workdir or Path(tempfile.mkdtemp(prefix="labeldp-demo-"))
    workdir.mkdir(parents=True, exist_ok=True)
    tokens = new_tokens()
    services: list[ServiceProcess] = []
    try:
        with progress.step("starting the labels party (advertiser) on 127.0.0.1"):
            labels = start_labels_party(workdir, tokens)
            services.append(labels)
        with progress.step("starting the features party (publisher) on 127.0.0.1"):
            features = start_features_party(workdir, tokens, labels_url=labels.url)
            services.append(features)
        summary = _protocol(data, options, progress, labels, features, tokens)
        summary["workdir"] = str(workdir)
        summary["ledger"]["kept"] = options.keep
        return summary
    finally:
        for service in reversed(services):
            service.stop()
        if not options.keep:
            shutil.rmtree(workdir, ignore_errors=True)


def _protocol(
    data: DemoData,
    options: DemoOptions,
    progress: Progress,
    labels: ServiceProcess,
    features: ServiceProcess,
    tokens: dict[str, str],
) -> dict[str, Any]:
    operator = LabelsPartyClient(labels.url, token=tokens["operator"])
    advertiser = LabelsPartyClient(labels.url, token=tokens["advertiser"])
    publisher_labels = LabelsPartyClient(labels.url, token=tokens["publisher"])
    publisher = FeaturesPartyClient(features.url, token=tokens["features"])

    train, test = split(data.n, test_share=options.test_share, seed=options.seed)
    ids = data.example_ids
    train_ids = [ids[i] for i in train]
    y_train, y_test = data.labels[train], data.labels[test]
    columns_train = {name: values[train] for name, values in data.columns.items()}
    columns_test = {name: values[test] for name, values in data.columns.items()}
    categorical = [name for name, kind in data.kinds.items() if kind == "categorical"]

    budget = options.budget if options.budget is not None else max(10.0, options.epsilon)
    with progress.step("operator: create the dataset (public bounds, epsilon budget)"):
        operator.create_dataset(
            DATASET,
            label_min=data.lo,
            label_max=data.hi,
            default_label=data.default_label,
            epsilon_budget=budget,
            segment_column=options.segment,
        )
    with progress.step(f"publisher: upload features of {len(train_ids)} training examples"):
        publisher.upload_features(DATASET, train_ids, columns_train, categorical=categorical)
    with progress.step("publisher: register the example ids with the labels party"):
        publisher.sync_examples(DATASET)
    if data.post_only_nondefault:
        posted = np.flatnonzero(y_train != data.default_label)
    else:
        posted = np.arange(train.size)
    with progress.step(f"advertiser: post {posted.size} labels"):
        advertiser.post_labels(DATASET, [train_ids[i] for i in posted], y_train[posted])

    if options.epsilon_histogram in (None, "default"):
        epsilon1 = None
    else:
        epsilon1 = float(options.epsilon_histogram)
    with progress.step(f"advertiser: release ONE message at epsilon {options.epsilon:g}"):
        release = advertiser.create_release(
            DATASET,
            epsilon=options.epsilon,
            mechanism=options.mechanism,
            epsilon_histogram=epsilon1,
        )

    def show(info: ModelInfo) -> None:
        progress.status(f"{100 * info.progress:3.0f}% {info.stage}")

    with progress.step(f"publisher: train ({options.model}, labels {options.label_transform})"):
        job = publisher.create_model(
            dataset=DATASET,
            release_id=release.id,
            model=options.model,
            label_transform=options.label_transform,
            seed=options.seed,
        )
        model = publisher.wait_model(job.id, on_progress=show, timeout=3600)
    with progress.step(f"publisher: predict the {test.size} held-out test examples"):
        private_prediction = publisher.predict_columns(model.id, columns_test)

    with progress.step("non-private model on the TRUE training labels (same code)"):
        kinds = [(name, data.kinds[name]) for name in data.columns]
        encoder = fit_encoder(kinds, data.columns)
        nonprivate = fit_model(
            encoder.encode_columns(columns_train),
            y_train,
            encoder=encoder,
            model=options.model,
            label_transform="raw",
            seed=options.seed,
        )
        nonprivate_prediction = nonprivate.predict_columns(columns_test)

    dataset = operator.dataset(DATASET)
    result = model.result or {}
    summary: dict[str, Any] = {
        "data": data.name,
        "synthetic": data.synthetic,
        "n_train": int(train.size),
        "n_test": int(test.size),
        "n_labels_posted": int(posted.size),
        "label_bounds": [data.lo, data.hi],
        "epsilon": options.epsilon,
        "epsilon1": release.epsilon1,
        "epsilon2": release.epsilon2,
        "epsilon_spent": dataset.epsilon_spent,
        "epsilon_left": dataset.epsilon_left,
        "epsilon_budget": dataset.epsilon_budget,
        "mechanism": release.mechanism,
        "mechanism_params": summarize_params(release.mechanism, dict(release.params)),
        "segment_column": options.segment,
        "segment_groups": (result.get("segments") or {}).get("groups"),
        "release_id": release.id,
        "message_sha256": release.message_sha256,
        "model_id": model.id,
        "model_chosen": result.get("chosen"),
        "label_transform": result.get("label_transform"),
        "validation_mse_noisy": result.get("validation_mse_noisy"),
        "validation_mse_unbiased": result.get("validation_mse_unbiased"),
        "validation_mse_true_estimate": result.get("validation_mse_true_estimate"),
        "nonprivate_model": nonprivate.metrics["chosen"],
        "mse_private": _mse(private_prediction, y_test),
        "mse_nonprivate": _mse(nonprivate_prediction, y_test),
        # The constant baseline predicts the mean of the TRUE training labels.
        "mse_constant": _mse(np.full(test.size, float(np.mean(y_train))), y_test),
        "ledger": {
            "database": str(labels.db_path),
            "url": f"{labels.url}/v1/ledger (operator token; the service stops with the demo)",
            "verify": f"labeldp ledger verify --db {labels.db_path}",
        },
    }
    for key in ("mse_private", "mse_nonprivate", "mse_constant"):
        if not math.isfinite(summary[key]):
            raise RuntimeError(f"{key} is not finite: {summary[key]}")
    if options.plot is not None:
        with progress.step(f"plot -> {options.plot}"):
            from demo.plot import plot_demo

            pulled = publisher_labels.download_message(release.id)
            position = {eid: i for i, eid in enumerate(pulled.example_ids)}
            noisy = np.array([pulled.noisy_labels[position[eid]] for eid in train_ids])
            plot_demo(options.plot, summary, y_train, noisy, seed=options.seed)
            summary["plot"] = str(options.plot)
    return summary
