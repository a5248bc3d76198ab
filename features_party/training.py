"""Train a model on noisy labels: encode features, transform labels, select, fit, evaluate.

Pure functions (arrays in, fitted objects out; randomness from an explicit seed), used by the
features-party service, the demo (for its non-private comparison) and the accuracy benchmark.

Label transforms (``shared.debias``):
  * ``raw``: train on the noisy labels as received (what the papers do);
  * ``debiased``: train on (noisy - b) / a, unbiased for y (RPWithPrior, y inside its interval) or
    for y's bin value (RR-on-Bins); much noisier at small epsilon, but unbiased.

Model selection on noisy labels (why it is sound). Let z' be the debiased label of a validation
example, m(y) = E[z' | y] (y itself inside the RPWithPrior interval, its bin value for
RR-on-Bins). The randomizer never sees the features, so for any model f fitted on OTHER examples,
E[(f(x) - z')^2] = E[(f(x) - m(y))^2] + E[Var(z' | y)]: the held-out MSE against debiased noisy
labels is the MSE against m(y) plus a constant that does not depend on f. Comparing candidates
by it therefore ranks them as their true MSE would, at no privacy cost (the message is already
public to us). What it does NOT give: the true MSE itself (the constant is only estimated, from
the noisy prior), nor the error from clipping / binning (m(y) differs from y outside the
interval or inside a bin). Because the noisy estimate has a large variance at small epsilon,
the choice uses the one-standard-error rule (Hastie, Tibshirani & Friedman, ESL 7.10): the
simplest candidate within one paired standard error of the best. With few labels or a tiny
epsilon that is the constant (or a ridge so strong it is almost constant), never a noise fit.
"""

from __future__ import annotations

import math
import warnings
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np
from sklearn.compose import ColumnTransformer, TransformedTargetRegressor
from sklearn.dummy import DummyRegressor
from sklearn.ensemble import HistGradientBoostingRegressor
from sklearn.exceptions import ConvergenceWarning
from sklearn.impute import SimpleImputer
from sklearn.linear_model import Ridge
from sklearn.neural_network import MLPRegressor
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler
from threadpoolctl import threadpool_limits

from features_party.mean_anchor import LabelMean, mean_anchor, message_label_mean
from features_party.segments import (
    SegmentOffsets,
    group_anchors,
    group_index,
    segment_offsets,
    segment_targets,
)
from shared.debias import (
    PublicRandomizer,
    affine_coefficients,
    debias_by,
    recommended_transform,
)
from shared.errors import InvalidParameterError
from shared.message import MessageHeader
from shared.plan import labels_can_train

Kind = Literal["numeric", "categorical"]
Progress = Callable[[str, float], None]

MODELS: tuple[str, ...] = ("auto", "gbm", "ridge", "mlp", "constant")
TRANSFORMS: tuple[str, ...] = ("auto", "raw", "debiased")
MIN_EXAMPLES = 20
VALIDATION_SHARE = 0.2
# Model selection cross-validates on CV_FOLDS folds up to this many examples (fold_indices).
CV_FOLDS = 5
MAX_CV_EXAMPLES = 100_000
# HistGradientBoosting accepts at most 255 categories per feature: keep the 254 most frequent,
# code 254 is "any other category".
MAX_CATEGORIES = 254
OTHER_CODE = MAX_CATEGORIES
# Ridge penalties relative to n: lambda * n with lambda from 1e-6 (almost OLS) to 1e2 (the
# coefficients are then ~1e-2 of OLS or less: an almost constant model).
RIDGE_LAMBDAS: tuple[float, ...] = tuple(float(x) for x in np.logspace(-6, 2, 9))
GBM_DEPTHS: tuple[int, ...] = (2, 4, 8)


def _no_progress(stage: str, fraction: float) -> None:
    return None


# --------------------------------------------------------------------------------------------
# Features
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Encoder:
    """Feature columns -> one float matrix: numeric values and category codes (NaN = missing).

    Fitted on the publisher's own feature table (no labels involved); unknown categories at
    prediction time map to the "other" code.
    """

    columns: tuple[tuple[str, Kind], ...]
    vocab: Mapping[str, Mapping[str, int]]

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.columns]

    @property
    def categorical_mask(self) -> np.ndarray:
        return np.array([kind == "categorical" for _, kind in self.columns], dtype=bool)

    def _code(self, name: str, values: Sequence[Any]) -> np.ndarray:
        table = self.vocab[name]
        out = np.empty(len(values), dtype=np.float64)
        for i, value in enumerate(values):
            if value is None:
                out[i] = np.nan
            else:
                out[i] = table.get(str(value), OTHER_CODE)
        return out

    def encode_rows(self, rows: Sequence[Sequence[Any]]) -> np.ndarray:
        """Rows of cells in schema order (floats / strings / None) -> float matrix."""
        if not rows:
            return np.empty((0, len(self.columns)))
        transposed = list(zip(*rows, strict=True))
        return self.encode_columns(
            {name: transposed[j] for j, (name, _) in enumerate(self.columns)}
        )

    def encode_columns(self, columns: Mapping[str, Sequence[Any] | np.ndarray]) -> np.ndarray:
        """A mapping name -> values (numeric: numbers or None/NaN; categorical: labels)."""
        missing = [name for name in self.names if name not in columns]
        if missing:
            raise InvalidParameterError(f"missing feature column(s): {', '.join(missing)}")
        out = []
        for name, kind in self.columns:
            values = columns[name]
            if kind == "numeric":
                array = np.asarray(
                    [np.nan if v is None else v for v in values]
                    if not isinstance(values, np.ndarray)
                    else values,
                    dtype=np.float64,
                )
                out.append(array)
            else:
                out.append(self._code(name, list(_category_labels(values))))
        return np.column_stack(out) if out else np.empty((0, 0))


def _category_labels(values: Sequence[Any] | np.ndarray) -> list[str | None]:
    """Normalise categories the way the upload does (3 and 3.0 and "3" are one category)."""
    labels: list[str | None] = []
    for value in values.tolist() if isinstance(values, np.ndarray) else values:
        if value is None or (isinstance(value, float) and not math.isfinite(value)):
            labels.append(None)
        elif isinstance(value, bool):
            labels.append("true" if value else "false")
        elif isinstance(value, float) and value.is_integer():
            labels.append(str(int(value)))
        elif isinstance(value, float):
            labels.append(repr(value))
        else:
            labels.append(str(value))
    return labels


def fit_encoder(
    columns: Sequence[tuple[str, Kind]], data: Mapping[str, Sequence[Any] | np.ndarray]
) -> Encoder:
    """Vocabulary of each categorical column: its 254 most frequent labels get codes 0..253."""
    vocab: dict[str, dict[str, int]] = {}
    for name, kind in columns:
        if kind not in ("numeric", "categorical"):
            raise InvalidParameterError(f"column {name!r} has unknown kind {kind!r}")
        if kind == "categorical":
            counts = Counter(v for v in _category_labels(data[name]) if v is not None)
            ranked = sorted(counts, key=lambda label: (-counts[label], label))[:MAX_CATEGORIES]
            vocab[name] = {label: code for code, label in enumerate(ranked)}
    return Encoder(columns=tuple((n, k) for n, k in columns), vocab=vocab)


def fit_encoder_rows(columns: Sequence[tuple[str, Kind]], rows: Sequence[Sequence[Any]]) -> Encoder:
    """:func:`fit_encoder` on rows of cells in schema order."""
    transposed = list(zip(*rows, strict=True)) if rows else [() for _ in columns]
    return fit_encoder(columns, {name: transposed[j] for j, (name, _) in enumerate(columns)})


# --------------------------------------------------------------------------------------------
# Candidate models
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Candidate:
    """One (family, hyper-parameters, label transform) configuration."""

    family: Literal["constant", "ridge", "gbm", "mlp"]
    transform: Literal["raw", "debiased"]
    params: Mapping[str, Any] = field(default_factory=dict)
    complexity: float = 0.0

    @property
    def name(self) -> str:
        args = ",".join(
            f"{key}={value:g}" if isinstance(value, float) else f"{key}={value}"
            for key, value in self.params.items()
        )
        return f"{self.family}({args})/{self.transform}"


def _linear_preprocessor(encoder: Encoder) -> ColumnTransformer:
    mask = encoder.categorical_mask
    numeric = [int(j) for j in np.flatnonzero(~mask)]
    categorical = [int(j) for j in np.flatnonzero(mask)]
    parts: list[tuple[str, Any, list[int]]] = []
    if numeric:
        parts.append(
            (
                "num",
                Pipeline(
                    [
                        (
                            "impute",
                            SimpleImputer(
                                strategy="mean", add_indicator=True, keep_empty_features=True
                            ),
                        ),
                        ("scale", StandardScaler()),
                    ]
                ),
                numeric,
            )
        )
    if categorical:
        parts.append(
            ("cat", OneHotEncoder(handle_unknown="ignore", sparse_output=False), categorical)
        )
    return ColumnTransformer(parts, remainder="drop")


def build_estimator(candidate: Candidate, encoder: Encoder, *, n: int, seed: int) -> Any:
    """A fresh, unfitted scikit-learn estimator for ``candidate`` on ``n`` training rows."""
    if candidate.family == "constant":
        return DummyRegressor(strategy="mean")
    if candidate.family == "ridge":
        alpha = float(candidate.params["lambda"]) * n
        return Pipeline([("prep", _linear_preprocessor(encoder)), ("ridge", Ridge(alpha=alpha))])
    if candidate.family == "gbm":
        mask = encoder.categorical_mask
        return HistGradientBoostingRegressor(
            max_depth=int(candidate.params["max_depth"]),
            max_leaf_nodes=31,
            learning_rate=0.15,
            max_iter=300,
            min_samples_leaf=40,
            l2_regularization=1.0,
            # Early stopping on a held-out part of the (noisy) training labels.
            early_stopping=True,
            validation_fraction=0.15,
            n_iter_no_change=10,
            categorical_features=mask if mask.any() else None,
            random_state=seed,
        )
    if candidate.family == "mlp":
        # The papers' network: two hidden layers (128, 64), Adam, lr 1e-3, L2 1e-4, batch 256.
        mlp = MLPRegressor(
            hidden_layer_sizes=(128, 64),
            solver="adam",
            learning_rate_init=1e-3,
            alpha=1e-4,
            batch_size=min(256, max(n, 1)),
            max_iter=200,
            early_stopping=True,
            validation_fraction=0.1,
            n_iter_no_change=10,
            random_state=seed,
        )
        return TransformedTargetRegressor(
            regressor=Pipeline([("prep", _linear_preprocessor(encoder)), ("mlp", mlp)]),
            transformer=StandardScaler(),
        )
    raise InvalidParameterError(f"unknown model family {candidate.family!r}")


def candidates_for(model: str, transform: str, *, identity: bool) -> list[Candidate]:
    """The configurations ``model`` x ``transform`` explores, simplest first.

    ``auto`` explores the constant, ridge over its penalty grid and GBM over its depth grid
    (not the MLP: it is slow and never won on our data; ask for it by name).
    """
    if model not in MODELS:
        raise InvalidParameterError(f"model ({model!r}) must be one of {', '.join(MODELS)}")
    if transform not in TRANSFORMS:
        raise InvalidParameterError(
            f"label_transform ({transform!r}) must be one of {', '.join(TRANSFORMS)}"
        )
    # Without randomization (identity affine map) the two transforms coincide.
    transforms: list[Literal["raw", "debiased"]]
    if identity:
        transforms = ["raw"]
    elif transform == "auto":
        transforms = ["debiased", "raw"]
    else:
        transforms = [transform]  # type: ignore[list-item]
    configs: list[tuple[str, dict[str, Any], float]] = []
    if model in ("auto", "constant"):
        configs.append(("constant", {}, 0.0))
    if model in ("auto", "ridge"):
        # Larger penalty = simpler; complexity increases as lambda decreases.
        for rank, lam in enumerate(sorted(RIDGE_LAMBDAS, reverse=True)):
            configs.append(("ridge", {"lambda": lam}, 1.0 + rank))
    if model in ("auto", "gbm"):
        for rank, depth in enumerate(GBM_DEPTHS):
            configs.append(("gbm", {"max_depth": depth}, 100.0 + rank))
    if model == "mlp":
        configs.append(("mlp", {"hidden": "128,64"}, 200.0))
    out = []
    for family, params, complexity in configs:
        for shift, t in enumerate(transforms):
            out.append(
                Candidate(
                    family=family,  # type: ignore[arg-type]
                    transform=t,
                    params=params,
                    complexity=complexity + 0.1 * shift,
                )
            )
    return out


class RidgePath:
    """Ridge (unpenalised intercept) for many penalties from ONE eigendecomposition.

    Same estimator as ``sklearn.linear_model.Ridge(alpha)``: w = (Zc'Zc + alpha I)^-1 Zc'yc on
    centred data; decomposing Zc'Zc = V diag(s) V' once makes each further penalty O(p^2)
    instead of a new O(n p^2) solve (the penalty grid is explored on every training job).
    """

    def __init__(self, Z_train: np.ndarray, Z_val: np.ndarray) -> None:
        self._mean = Z_train.mean(axis=0)
        centred = Z_train - self._mean
        self._centred_t = centred.T
        self._s, self._v = np.linalg.eigh(centred.T @ centred)
        self._s = np.maximum(self._s, 0.0)
        self._val = (Z_val - self._mean) @ self._v

    def predict(self, y: np.ndarray, *, alpha: float) -> np.ndarray:
        y_mean = float(np.mean(y))
        projected = self._v.T @ (self._centred_t @ (y - y_mean))
        return self._val @ (projected / (self._s + alpha)) + y_mean


def _fit(estimator: Any, X: np.ndarray, y: np.ndarray) -> Any:
    with warnings.catch_warnings():
        # MLP / early stopping may stop at max_iter: a regularised fit, not an error.
        warnings.simplefilter("ignore", ConvergenceWarning)
        estimator.fit(X, y)
    return estimator


# --------------------------------------------------------------------------------------------
# Selection and the fitted model
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class CandidateScore:
    name: str
    family: str
    transform: str
    params: Mapping[str, Any]
    val_mse_unbiased: float
    val_mse_noisy: float
    se_vs_best: float = 0.0


@dataclass(frozen=True, kw_only=True)
class FittedModel:
    """The chosen configuration refitted on every joined example, plus how it was chosen."""

    encoder: Encoder
    estimator: Any
    candidate: Candidate
    affine: tuple[float, float]
    metrics: Mapping[str, Any]
    # Added to every prediction: the shift towards the message's DP label mean
    # (``features_party.mean_anchor``); 0 when none was applied (and in older pickles).
    offset: float = 0.0
    # A segmented message's per-segment baselines (``features_party.segments``), added too.
    segments: SegmentOffsets | None = None

    def predict_matrix(self, X: np.ndarray) -> np.ndarray:
        prediction = np.asarray(self.estimator.predict(X), dtype=np.float64) + self.offset
        if self.segments is not None:
            prediction = prediction + self.segments.of(X)
        return prediction

    def predict_rows(self, rows: Sequence[Sequence[Any]]) -> np.ndarray:
        return self.predict_matrix(self.encoder.encode_rows(rows))

    def predict_columns(self, columns: Mapping[str, Sequence[Any] | np.ndarray]) -> np.ndarray:
        return self.predict_matrix(self.encoder.encode_columns(columns))


def split_indices(n: int, *, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A seeded 80 / 20 train / validation split (at least 10 validation rows)."""
    if n < MIN_EXAMPLES:
        raise InvalidParameterError(
            f"only {n} examples have both features and a label; need at least {MIN_EXAMPLES}"
        )
    order = np.random.default_rng(seed).permutation(n)
    n_val = max(10, int(round(VALIDATION_SHARE * n)))
    return np.sort(order[n_val:]), np.sort(order[:n_val])


def fold_indices(n: int, *, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """(train, validation) index pairs: K-fold cross-validation up to ``MAX_CV_EXAMPLES``.

    K = 1 / VALIDATION_SHARE = 5 folds, every example validated once, while n <= 100,000; a
    single seeded 80 / 20 split above that. Why: the validation targets are noisy labels, so
    the held-out loss of a candidate has a standard error that only more validated examples
    shrink; on Crime (1,595 rows) at epsilon 0.3-1 one 20% split ranked a good ridge fit (0.5x
    the constant's test MSE) and a noise fit (1.3x) at the same z against the constant
    (bench/results/worst_case.md). Five folds validate every example at 5x the fits (the demo's
    80,000 rows: from the constant, 1.00x, to 0.92x the constant's test MSE at epsilon 1, median
    of 10 runs; the whole demo 25.2 s instead of 16.5 s, median of 3 side by side with
    farm-bench, peak memory 594 vs 640 MiB); above 100,000 rows one split validates 20,000.
    """
    train, val = split_indices(n, seed=seed)
    if n > MAX_CV_EXAMPLES:
        return [(train, val)]
    order = np.random.default_rng(seed).permutation(n)
    chunks = np.array_split(order, CV_FOLDS)
    return [
        (np.sort(np.concatenate(chunks[:k] + chunks[k + 1 :])), np.sort(chunks[k]))
        for k in range(CV_FOLDS)
    ]


def select_one_se(
    losses: Mapping[str, np.ndarray], complexity: Mapping[str, float]
) -> tuple[str, dict[str, float]]:
    """The simplest candidate whose mean loss is within one paired standard error of the best.

    ``losses[name]`` are per-example validation losses (same examples for every candidate).
    Returns the choice and each candidate's paired standard error against the best.
    """
    means = {name: float(np.mean(loss)) for name, loss in losses.items()}
    best = min(means, key=lambda name: (means[name], complexity[name]))
    ses: dict[str, float] = {}
    for name, loss in losses.items():
        diff = loss - losses[best]
        ses[name] = float(np.std(diff, ddof=1) / math.sqrt(diff.size)) if diff.size > 1 else 0.0
    for name in sorted(losses, key=lambda key: complexity[key]):
        if means[name] - means[best] <= ses[name]:
            return name, ses
    return best, ses


def criterion_model_dim(header_model_dim: int | None, n_columns: int) -> int:
    """The d of the training criterion for a message: the one its randomizer was chosen for.

    The labels party tunes the randomizer's parameters (interval, zeta, bins) for the d in the
    header; resolving the transform with another d pairs parameters and transform that were
    never meant together: on Crime (99 features) a randomizer chosen for d = 10 and a transform
    resolved for d = 99 cost 21-32% test MSE at epsilon 1-1.5 against a consistent pair
    (bench/results/accuracy_crime.md). Version-1 messages carry no d: then the number of encoded
    feature columns.
    """
    return int(header_model_dim) if header_model_dim is not None else max(int(n_columns), 1)


def model_for_message(
    model: str, label_transform: str, *, n: int, epsilon2: float, model_dim: int
) -> tuple[str, str]:
    """(model, label_transform), with ``auto`` narrowed to the constant on unbiased targets
    where ``n`` labels randomized at ``epsilon2`` cannot train a model of dimension
    ``model_dim`` better than the DP mean (``shared.plan.labels_can_train``, the rule by which
    the labels party's plan releases mean first).

    Why: there validation cannot tell a model from the constant, and picking the best of 24
    candidates on noise chose worse models in some runs (up to 1.42x the DP constant's test
    MSE; bench/results/worst_case.md). The constant of the debiased targets is an unbiased mean,
    so the anchor pools it with the DP mean by inverse variance (``features_party.mean_anchor``);
    a raw target's mean is pulled towards the prior and would not pool.
    """
    if model != "auto" or labels_can_train(n=n, epsilon2=epsilon2, model_dim=model_dim):
        return model, label_transform
    return "constant", "debiased" if label_transform == "auto" else label_transform


def resolve_label_transform(
    label_transform: str, message: PublicRandomizer, *, model_dim: int
) -> str:
    """``label_transform``, with "auto" replaced by the message's recommended transform.

    Noisy validation compares model families well but picks the label transform poorly when the
    debiased targets are very noisy (tiny epsilon), so "auto" is resolved BEFORE fitting by the
    exact training criterion C = bias^2 + (model_dim / n) Var (``shared.selection``) under the
    message's public parameters: its mechanism and params, its epsilon1-DP histogram and its n
    (``shared.debias.recommended_transform``). Used by the service's training jobs and by the
    accuracy benchmark, so both resolve it identically. Public inputs only: no privacy cost.
    """
    if label_transform != "auto":
        return label_transform
    return recommended_transform(message, model_dim=model_dim)


def fit_model(
    X: np.ndarray,
    noisy: np.ndarray,
    *,
    encoder: Encoder,
    affine: tuple[float, float] = (1.0, 0.0),
    model: str = "gbm",
    label_transform: str = "auto",
    seed: int = 0,
    progress: Progress = _no_progress,
    threads: int | None = 1,
    label_mean: LabelMean | None = None,
) -> FittedModel:
    """Select a configuration by held-out noisy-label MSE, then refit it on all rows.

    ``X`` rows are ``encoder``-encoded features joined with ``noisy`` labels; ``affine`` is the
    mechanism's (a, b) (``shared.debias.affine_coefficients``; (1, 0) for exact labels).
    ``label_mean``: the message's DP label mean over exactly these rows' labels; the refitted
    model's mean is then anchored on it (``features_party.mean_anchor``).
    ``threads`` caps the OpenMP / BLAS threads (None: library default). One thread is the
    default: on a busy machine OpenMP's spinning made HistGradientBoosting 5-50x slower than a
    single thread, and a single thread keeps the service's API responsive while it trains.
    """
    with threadpool_limits(limits=threads):
        return _fit_model(
            X,
            noisy,
            encoder=encoder,
            affine=affine,
            model=model,
            label_transform=label_transform,
            seed=seed,
            progress=progress,
            label_mean=label_mean,
        )


def train_on_message(
    header: MessageHeader,
    X: np.ndarray,
    noisy: np.ndarray,
    *,
    encoder: Encoder,
    positions: np.ndarray | None = None,
    model: str = "auto",
    label_transform: str = "auto",
    seed: int = 0,
    progress: Progress = _no_progress,
    threads: int | None = 1,
) -> FittedModel:
    """Fit a model on a message's noisy labels joined with features, as the service's job does.

    ``X`` rows are the joined examples, ``noisy`` their labels, ``positions`` their places in
    the message body (needed for a segmented message: :func:`fit_segmented`). Otherwise the
    transform "auto" is the header's recommendation (format >= 4) or resolved by the training
    criterion with the d the randomizer was chosen for (:func:`resolve_label_transform`,
    :func:`criterion_model_dim`), and the model is anchored on the header's DP mean when every
    labelled example joined (``features_party.mean_anchor.message_label_mean``). The service
    and the accuracy benchmarks both train through here.
    """
    if header.segments is not None:
        if positions is None:
            raise InvalidParameterError("a segmented message needs the joined rows' positions")
        return fit_segmented(
            X,
            noisy,
            group=group_index(header)[positions],
            header=header,
            encoder=encoder,
            model=model,
            label_transform=label_transform,
            seed=seed,
            progress=progress,
            threads=threads,
        )
    model_dim = criterion_model_dim(header.model_dim, X.shape[1])
    model, transform = model_for_message(
        model,
        label_transform,
        n=int(np.asarray(noisy).size),
        epsilon2=header.epsilon2,
        model_dim=model_dim,
    )
    if transform == "auto" and header.recommended_transform is not None:
        transform = header.recommended_transform
    transform = resolve_label_transform(transform, header, model_dim=model_dim)
    return fit_model(
        X,
        noisy,
        encoder=encoder,
        affine=affine_coefficients(header),
        model=model,
        label_transform=transform,
        seed=seed,
        progress=progress,
        threads=threads,
        label_mean=message_label_mean(header, n_joined=int(np.asarray(noisy).size)),
    )


def fit_segmented(
    X: np.ndarray,
    noisy: np.ndarray,
    *,
    group: np.ndarray,
    header: MessageHeader,
    encoder: Encoder,
    model: str = "gbm",
    label_transform: str = "auto",
    seed: int = 0,
    progress: Progress = _no_progress,
    threads: int | None = 1,
) -> FittedModel:
    """:func:`fit_model` for a segmented message (``features_party.segments``): each group's
    targets, one model, and each group's mean anchored on its own DP mean by segment.

    ``group``: the message group of each row of ``X`` (rows joined from the body's positions,
    ``features_party.segments.group_index``); the segment column ``header.segments.column``
    must be one of ``encoder``'s columns.
    """
    if header.segments is None:
        raise InvalidParameterError("fit_segmented needs a segmented message")
    parts = header.parts()
    column = header.segments.column
    if column not in encoder.names:
        raise InvalidParameterError(
            f"the message is segmented by {column!r}: the features need a column {column!r}"
        )
    targets, transforms = segment_targets(noisy, group, parts, transform=label_transform)
    fitted = fit_model(
        X,
        targets,
        encoder=encoder,
        model=model,
        label_transform="raw",
        seed=seed,
        progress=progress,
        threads=threads,
    )
    predictions = fitted.predict_matrix(X)
    # First the whole model's mean on the groups' pooled DP mean (the most precise one), then
    # each group's mean on its own.
    pooled = message_label_mean(header, n_joined=int(np.asarray(noisy).size))
    shift = 0.0
    if pooled is not None:
        shift = mean_anchor(pooled, predictions=predictions, targets=targets).offset
    anchors = group_anchors(
        predictions + shift, targets, group, parts, lo=header.label_min, hi=header.label_max
    )
    offsets = [shift + (0.0 if anchor is None else anchor.offset) for anchor in anchors]
    lookup = segment_offsets(
        column=column,
        names=encoder.names,
        encode=_segment_codes(encoder, column, [s for part in parts for s in part.segments]),
        parts=parts,
        offsets=offsets,
    )
    metrics = dict(fitted.metrics)
    metrics["segments"] = {
        "column": column,
        "groups": len(parts),
        "pooled_shift": shift,
        "label_transforms": list(transforms),
        # Each segment's group anchor (``features_party.mean_anchor``), or None without a mean.
        "anchors": {
            segment: None if anchors[g] is None else anchors[g].to_dict()  # type: ignore[union-attr]
            for g, part in enumerate(parts)
            for segment in part.segments
        },
    }
    return replace(fitted, segments=lookup, metrics=metrics)


def _segment_codes(encoder: Encoder, column: str, segments: Sequence[str]) -> dict[str, float]:
    """Each segment value's encoded value in ``column`` (categories the encoder keeps; numbers
    of a numeric column); segments it cannot encode are left out."""
    kinds = dict(encoder.columns)
    if column not in kinds:
        return {}
    if kinds[column] == "categorical":
        vocab = encoder.vocab[column]
        return {s: float(vocab[s]) for s in segments if s in vocab}
    codes: dict[str, float] = {}
    for segment in segments:
        try:
            value = float(segment)
        except ValueError:
            continue
        if math.isfinite(value):
            codes[segment] = value
    return codes


def _fit_model(
    X: np.ndarray,
    noisy: np.ndarray,
    *,
    encoder: Encoder,
    affine: tuple[float, float],
    model: str,
    label_transform: str,
    seed: int,
    progress: Progress,
    label_mean: LabelMean | None,
) -> FittedModel:
    X = np.asarray(X, dtype=np.float64)
    noisy = np.asarray(noisy, dtype=np.float64)
    if X.ndim != 2 or X.shape[0] != noisy.size:
        raise InvalidParameterError(f"X has shape {X.shape} for {noisy.size} labels")
    if not np.all(np.isfinite(noisy)):
        raise InvalidParameterError("labels must be finite")
    a, b = float(affine[0]), float(affine[1])
    if not (math.isfinite(a) and math.isfinite(b) and a > 0):
        raise InvalidParameterError(f"affine coefficients ({a}, {b}) need a finite a > 0")
    identity = a == 1.0 and b == 0.0
    candidates = candidates_for(model, label_transform, identity=identity)
    debiased = debias_by((a, b), noisy)
    targets = {"raw": noisy, "debiased": debiased}

    folds = fold_indices(noisy.size, seed=seed)
    val = np.sort(np.concatenate([held for _, held in folds]))
    # The selection target: unbiased labels (see the module docstring).
    z_val = debiased[val]
    losses: dict[str, np.ndarray] = {}
    noisy_mse: dict[str, float] = {}
    by_name = {c.name: c for c in candidates}
    predictions = {c.name: np.empty(noisy.size) for c in candidates}
    steps = len(candidates) * len(folds)
    for k, (train, held) in enumerate(folds):
        # One fold at a time: its ridge path (the encoded fold, decomposed once for every
        # penalty) is dropped before the next fold's is built, so memory holds one fold's.
        ridge_path: RidgePath | None = None
        for i, candidate in enumerate(candidates):
            progress(
                f"fold {k + 1}/{len(folds)}: fitting {candidate.name} ({i + 1}/{len(candidates)})",
                0.9 * (k * len(candidates) + i) / steps,  # below the refit's 0.95
            )
            y_train = targets[candidate.transform][train]
            if candidate.family == "ridge":
                if ridge_path is None:
                    prep = _linear_preprocessor(encoder).fit(X[train])
                    ridge_path = RidgePath(prep.transform(X[train]), prep.transform(X[held]))
                alpha = float(candidate.params["lambda"]) * train.size
                predictions[candidate.name][held] = ridge_path.predict(y_train, alpha=alpha)
            else:
                estimator = build_estimator(candidate, encoder, n=train.size, seed=seed)
                _fit(estimator, X[train], y_train)
                predictions[candidate.name][held] = estimator.predict(X[held])
        del ridge_path
    for candidate in candidates:
        prediction = predictions[candidate.name][val]
        losses[candidate.name] = (prediction - z_val) ** 2
        noisy_mse[candidate.name] = float(np.mean((prediction - noisy[val]) ** 2))

    complexity = {c.name: c.complexity for c in candidates}
    chosen_name, ses = select_one_se(losses, complexity)
    chosen = by_name[chosen_name]
    progress(f"refitting {chosen.name} on all {noisy.size} examples", 0.95)
    estimator = _fit(
        build_estimator(chosen, encoder, n=noisy.size, seed=seed), X, targets[chosen.transform]
    )
    fitted_val = np.asarray(estimator.predict(X[val]), dtype=np.float64)
    scores = [
        CandidateScore(
            name=c.name,
            family=c.family,
            transform=c.transform,
            params=dict(c.params),
            val_mse_unbiased=float(np.mean(losses[c.name])),
            val_mse_noisy=noisy_mse[c.name],
            se_vs_best=ses[c.name],
        )
        for c in candidates
    ]
    metrics: dict[str, Any] = {
        "chosen": chosen.name,
        "family": chosen.family,
        "params": dict(chosen.params),
        "label_transform": chosen.transform,
        "affine": {"a": a, "b": b},
        "n_train": int(folds[0][0].size),
        "n_validation": int(val.size),
        "folds": len(folds),
        "n_fit": int(noisy.size),
        "validation_mse_noisy": noisy_mse[chosen.name],
        "validation_mse_unbiased": float(np.mean(losses[chosen.name])),
        "validation_mse_unbiased_se": float(
            np.std(losses[chosen.name], ddof=1) / math.sqrt(val.size)
        ),
        # How constant the final model is (0 = it predicts one value).
        "prediction_std": float(np.std(fitted_val)),
        "candidates": [score.__dict__ | {"params": dict(score.params)} for score in scores],
    }
    if chosen.family == "gbm":
        metrics["gbm_iterations"] = int(estimator.n_iter_)
    offset = 0.0
    if label_mean is not None:
        anchor = mean_anchor(
            label_mean,
            predictions=np.asarray(estimator.predict(X), dtype=np.float64),
            targets=targets[chosen.transform],
            # The model named "constant" (asked for, or auto where labels cannot train) IS
            # the DP constant: the message's DP mean, whatever the noisy labels' own mean.
            exact=model == "constant",
        )
        offset = anchor.offset
        metrics["mean_anchor"] = anchor.to_dict()
    return FittedModel(
        encoder=encoder,
        estimator=estimator,
        candidate=chosen,
        affine=(a, b),
        metrics=metrics,
        offset=offset,
    )


def noise_variance(
    mechanism: Any,
    prior_edges: np.ndarray,
    prior_probs: np.ndarray,
    affine: tuple[float, float],
    *,
    samples: int = 100_000,
    seed: int = 0,
    with_se: bool = False,
) -> Any:
    """E[Var(z' | y)] of the debiased labels, y drawn from the public (noisy) prior.

    ``with_se``: also its Monte Carlo standard error, as ``(estimate, se)``.

    Two independent randomizations of the same y: E[(z'1 - z'2)^2] / 2 = E[Var(z' | y)]
    without needing E[z' | y]. Uses only public information (post-processing).
    """
    rng = np.random.default_rng(seed)
    probs = np.asarray(prior_probs, dtype=np.float64)
    edges = np.asarray(prior_edges, dtype=np.float64)
    cells = rng.choice(probs.size, size=samples, p=probs / probs.sum())
    y = edges[cells] + rng.random(samples) * (edges[cells + 1] - edges[cells])
    first = debias_by(affine, mechanism.randomize(y, rng))
    second = debias_by(affine, mechanism.randomize(y, rng))
    halves = (first - second) ** 2 / 2.0
    if with_se:
        return float(np.mean(halves)), float(np.std(halves, ddof=1) / math.sqrt(samples))
    return float(np.mean(halves))
