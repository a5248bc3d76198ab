"""The models trained on noisy labels: the papers' network, and the features party's own fitting.

* ``mlp``: the network of Liu & Huang Sec. 5.1/5.3 (two hidden ReLU layers of 128 and 64 units,
  Adam, learning rate 1e-3 divided by 10 after epoch 25, weight decay 1e-4, batch 256, 50
  epochs, no early stopping), in scikit-learn. Two translations, stated here because they
  matter: scikit-learn's ``alpha`` penalises ``alpha/2 |W|^2 / batch`` against half the mean
  squared error, so PyTorch's ``weight_decay = 1e-4`` on the mean squared error is ``alpha = 1e-4
  * 256 / 2``; the learning-rate drop is a second ``fit`` with ``warm_start`` (scikit-learn
  restarts Adam's moment estimates there; PyTorch's StepLR keeps them).
* ``ridge``, ``gbm``, ``auto``: ``features_party.training.fit_model``, i.e. exactly what a
  publisher gets from the service (hyper-parameters, and for ``auto`` also the family and the
  label transform, chosen on held-out NOISY labels with the one-standard-error rule).

Every model sees features only through public preprocessing (standardisation with training-split
statistics, or none where the source already normalises them), targets only through the public
affine map onto [-1/2, 1/2] given by the label bounds, and every prediction is clipped into the
public bounds [lo, hi] (free post-processing that the true labels satisfy).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.neural_network import MLPRegressor

from features_party.mean_anchor import LabelMean, mean_anchor
from shared.mechanisms.histogram import Prior

MODELS: tuple[str, ...] = ("mlp", "ridge", "gbm", "auto")
MLP_EPOCHS = 50
MLP_DECAY_EPOCH = 25
MLP_BATCH = 256
MLP_WEIGHT_DECAY = 1e-4  # the papers' PyTorch weight_decay
MLP_ALPHA = MLP_WEIGHT_DECAY * MLP_BATCH / 2.0  # the same penalty in scikit-learn's convention


@dataclass(frozen=True, kw_only=True)
class Message:
    """The public header fields the features party reads to resolve ``label_transform="auto"``."""

    mechanism: str  # "rpwithprior" | "rr_on_bins"
    params: dict[str, Any]  # the randomizer's full public_params()
    prior: Prior  # the epsilon1-DP histogram the randomizer was built from
    n: int  # number of labels in the message
    model_dim: int | None = None  # the d the labels party chose the randomizer for
    label_mean: LabelMean | None = None  # the DP label mean the features party anchors on
    epsilon2: float | None = None  # the randomizer's epsilon (header field epsilon2)


@dataclass(frozen=True, kw_only=True)
class Split:
    """Features of one train / test split, prepared once for every model."""

    x_train: np.ndarray  # as loaded (the features party does its own preprocessing)
    x_test: np.ndarray
    z_train: np.ndarray  # float32, standardised or as-is: the papers' network's input
    z_test: np.ndarray
    lo: float
    hi: float


def prepare(
    x_train: np.ndarray, x_test: np.ndarray, *, lo: float, hi: float, standardize: bool
) -> Split:
    """Standardise with training-split statistics (features are not private)."""
    if standardize:
        mean, sd = x_train.mean(axis=0), x_train.std(axis=0)
        sd[sd == 0] = 1.0
        z_train, z_test = (x_train - mean) / sd, (x_test - mean) / sd
    else:
        z_train, z_test = x_train, x_test
    return Split(
        x_train=x_train,
        x_test=x_test,
        z_train=np.ascontiguousarray(z_train, dtype=np.float32),
        z_test=np.ascontiguousarray(z_test, dtype=np.float32),
        lo=lo,
        hi=hi,
    )


def fit_papers_mlp(
    split: Split,
    targets: np.ndarray,
    *,
    seed: int,
    epochs: int = MLP_EPOCHS,
    label_mean: LabelMean | None = None,
) -> np.ndarray:
    """Train the papers' network on ``targets`` and return clipped test predictions.

    With ``label_mean`` (a message's DP label mean) the predictions are anchored on it exactly
    as the features party anchors its own models (``features_party.mean_anchor``, from the
    network's predictions on its training rows): the anchor belongs to the protocol, not to a
    model family.
    """
    centre, width = 0.5 * (split.lo + split.hi), split.hi - split.lo
    scaled = ((targets - centre) / width).astype(np.float32)
    first = min(MLP_DECAY_EPOCH, epochs)
    mlp = MLPRegressor(
        hidden_layer_sizes=(128, 64),
        activation="relu",
        solver="adam",
        learning_rate_init=1e-3,
        alpha=MLP_ALPHA,
        batch_size=MLP_BATCH,
        max_iter=first,
        shuffle=True,
        tol=0.0,
        n_iter_no_change=10**9,  # always the full number of epochs, as the papers
        early_stopping=False,
        random_state=seed,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        mlp.fit(split.z_train, scaled)
        if epochs > first:
            mlp.set_params(warm_start=True, learning_rate_init=1e-4, max_iter=epochs - first)
            mlp.fit(split.z_train, scaled)
    prediction = mlp.predict(split.z_test).astype(np.float64) * width + centre
    if label_mean is not None:
        fitted = mlp.predict(split.z_train).astype(np.float64) * width + centre
        anchor = mean_anchor(label_mean, predictions=fitted, targets=targets)
        prediction = prediction + anchor.offset
    return np.clip(prediction, split.lo, split.hi)


def fit_features_party(
    split: Split,
    noisy: np.ndarray,
    *,
    model: str,
    transform: str,
    affine: tuple[float, float] | None,
    seed: int,
    message: Message | None = None,
) -> tuple[np.ndarray, dict[str, Any]]:
    """``features_party.training.fit_model`` as the service runs it; clipped test predictions.

    With ``message`` (the public header fields of a message the service sends), ``transform =
    "auto"`` is resolved first by ``training.resolve_label_transform``, exactly as the service's
    training job does; without it, ``fit_model`` chooses the transform on noisy validation.
    """
    from features_party import training

    d = split.x_train.shape[1]
    encoder = training.Encoder(columns=tuple((f"x{j}", "numeric") for j in range(d)), vocab={})
    requested = transform
    if message is not None:
        # As the service's job (one encoded column per numeric feature).
        model_dim = training.criterion_model_dim(message.model_dim, d)
        if message.epsilon2 is not None:
            model, transform = training.model_for_message(
                model, transform, n=int(noisy.size), epsilon2=message.epsilon2, model_dim=model_dim
            )
        transform = training.resolve_label_transform(transform, message, model_dim=model_dim)
    fitted = training.fit_model(
        split.x_train,
        noisy,
        encoder=encoder,
        affine=affine if affine is not None else (1.0, 0.0),
        model=model,
        label_transform=transform,
        seed=seed,
        label_mean=message.label_mean if message is not None else None,
    )
    prediction = np.clip(fitted.predict_matrix(split.x_test), split.lo, split.hi)
    metrics = fitted.metrics
    extra = {"chosen": metrics["chosen"], "label_transform": metrics["label_transform"]}
    if message is not None and requested == "auto":
        extra["label_transform_resolved"] = "header"
    return prediction, extra
