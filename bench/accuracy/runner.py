"""The protocol: trials of 80/20 splits x epsilons x mechanisms x label transforms x models.

For each (trial, epsilon) cell the noisy training labels of every mechanism are drawn ONCE
(seeded: the same cell always gives the same labels, whichever other mechanisms or models run)
and reused by every model and transform. Each record also carries the mechanism's own label
MSE (noisy vs true training labels) and, for the analysis of what predicts model quality, the
bias^2 and variance of the training targets, estimated from ``MC_DRAWS`` further independent
randomizations of the same labels with the same (public) mechanism parameters.
"""

from __future__ import annotations

import math
import subprocess
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from bench.accuracy import mechanisms as mech
from bench.accuracy import models
from bench.accuracy.data import Dataset
from bench.model_dim import noise_model_dim
from shared.mechanisms.histogram import Prior
from shared.mechanisms.private_mean import private_mean

PROTOCOL_EPSILONS: tuple[float, ...] = (
    0.05,
    0.1,
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    3.0,
    4.0,
    6.0,
    8.0,
    math.inf,
)
SEED = 20_261_121
MC_DRAWS = 4
TEST_SHARE = 0.2


@dataclass(frozen=True, kw_only=True)
class Record:
    """One model trained on one mechanism's labels in one (trial, epsilon) cell."""

    dataset: str
    model: str
    variant: str
    transform: str
    epsilon: float
    trial: int
    n_train: int
    n_test: int
    test_mse: float
    label_mse: float = math.nan
    target_mse: float = math.nan
    bias2: float = math.nan
    variance: float = math.nan
    epsilon1: float = 0.0
    epsilon2: float = 0.0
    seconds: float = 0.0
    commit: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["epsilon"] = "inf" if math.isinf(self.epsilon) else self.epsilon
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Record:
        data = dict(data)
        data["epsilon"] = math.inf if data["epsilon"] == "inf" else float(data["epsilon"])
        for key in ("label_mse", "target_mse", "bias2", "variance"):
            if data.get(key) is None:
                data[key] = math.nan
        return cls(**data)


@dataclass(frozen=True, kw_only=True)
class Labels:
    """One mechanism's noisy training labels in one cell, with its accounting and statistics."""

    variant: str
    noisy: np.ndarray
    built: mech.Built
    stats: dict[str, dict[str, float]]  # transform -> label/target statistics


REPO = Path(__file__).resolve().parents[2]


def git(*args: str) -> str | None:
    """``git args`` at the checkout's root, its output stripped; None where git cannot tell."""
    try:
        run = subprocess.run(["git", *args], capture_output=True, text=True, check=True, cwd=REPO)
    except (OSError, subprocess.CalledProcessError):
        return None
    return run.stdout.strip()


def git_commit() -> str:
    """The checkout's HEAD (short), recorded with every result; "+dirty" if code differs.

    The records and results are outputs, not code: a run that follows another in the same
    checkout must not call itself dirty because the first one appended its records.
    """
    head = git("rev-parse", "--short", "HEAD")
    code = ("shared", "features_party", "bench/accuracy", ":(exclude)bench/accuracy/records")
    dirty = git("status", "--porcelain", "--", *code)
    if head is None or dirty is None:
        return "unknown"
    return head + ("+dirty" if dirty else "")


def _seed(*parts: int | str | float) -> list[int]:
    words = [SEED]
    for part in parts:
        if isinstance(part, str):
            words.append(zlib.crc32(part.encode()))
        elif isinstance(part, float):
            words.append(-1 if math.isinf(part) else int(round(part * 1000)))
            words[-1] &= 0xFFFFFFFF
        else:
            words.append(int(part))
    return words


def split_indices(n: int, *, trial: int) -> tuple[np.ndarray, np.ndarray]:
    """The trial's 80/20 train / test split (a different seeded permutation per trial)."""
    order = np.random.default_rng(_seed("split", trial)).permutation(n)
    n_test = int(round(TEST_SHARE * n))
    return np.sort(order[n_test:]), np.sort(order[:n_test])


class PriorCache(dict[str, Prior]):
    """The cell's shared epsilon1 histogram, drawn from its own seeded generator."""


def _target_stats(
    y: np.ndarray, draws: np.ndarray, affine: tuple[float, float] | None, transform: str
) -> dict[str, float]:
    """Label MSE of the first draw, and bias^2 / variance of the targets over all draws."""
    targets = mech.apply_transform(draws, affine, transform)
    r = targets.shape[0]
    mean = targets.mean(axis=0)
    variance = float(targets.var(axis=0, ddof=1).mean())
    # E[(mean_r - y)^2] = bias^2 + variance / r: remove the sampling term.
    bias2 = max(float(np.mean((mean - y) ** 2)) - variance / r, 0.0)
    return {
        "label_mse": float(np.mean((draws[0] - y) ** 2)),
        "target_mse": float(np.mean((targets[0] - y) ** 2)),
        "bias2": bias2,
        "variance": variance,
    }


def draw_labels(
    dataset: str,
    y: np.ndarray,
    *,
    lo: float,
    hi: float,
    epsilon: float,
    trial: int,
    variants: Sequence[str],
    mc_draws: int = MC_DRAWS,
    d: int = 1,
    model_dim_net: int | None = None,
    log: Callable[[str], None] = print,
) -> dict[str, Labels]:
    """Every requested mechanism's noisy labels for one (trial, epsilon) cell (finite epsilon)."""
    ctx = mech.CellContext(
        dataset=dataset, y=y, lo=lo, hi=hi, epsilon=epsilon, d=d, model_dim_net=model_dim_net
    )
    priors = PriorCache()
    priors["shared"] = mech.private_histogram(
        y,
        lo=lo,
        hi=hi,
        bins=ctx.bins,
        epsilon=ctx.shared_split[0],
        rng=np.random.default_rng(_seed("prior", trial, epsilon)),
    )
    out: dict[str, Labels] = {}
    for key in variants:
        rng = np.random.default_rng(_seed("mechanism", trial, epsilon, key))
        try:
            built = mech.VARIANTS[key].build(ctx, priors, rng)
        except mech.MechanismUnavailable as exc:
            log(f"  skip {key}: {exc}")
            continue
        draws = np.stack([built.randomizer.randomize(y, rng) for _ in range(1 + mc_draws)])
        stats = {t: _target_stats(y, draws, built.affine, t) for t in mech.transforms_for(built)}
        out[key] = Labels(variant=key, noisy=draws[0], built=built, stats=stats)
    return out


def _fit(
    model: str,
    split: models.Split,
    noisy: np.ndarray,
    *,
    affine: tuple[float, float] | None,
    transform: str,
    seed: int,
    mlp_epochs: int,
    message: models.Message | None = None,
) -> tuple[np.ndarray, dict[str, Any]]:
    if model == "mlp":
        targets = mech.apply_transform(noisy, affine, transform)
        label_mean = message.label_mean if message is not None else None
        fitted = models.fit_papers_mlp(
            split, targets, seed=seed, epochs=mlp_epochs, label_mean=label_mean
        )
        return fitted, {}
    return models.fit_features_party(
        split, noisy, model=model, transform=transform, affine=affine, seed=seed, message=message
    )


def network_model_dim(split: models.Split, *, trial: int, mlp_epochs: int) -> int:
    """The papers' network's d for C on this split, from its features alone (no label).

    ``bench.model_dim.noise_model_dim``: the network is trained on pure noise around the
    middle of the label range and its test-row predictions are measured.
    """
    centre = 0.5 * (split.lo + split.hi)
    n = int(split.z_train.shape[0])

    def fit_predict(noise: np.ndarray) -> np.ndarray:
        seed = int(np.random.default_rng(_seed("noise_dim_model", trial)).integers(2**31))
        fitted = models.fit_papers_mlp(split, centre + noise, seed=seed, epochs=mlp_epochs)
        return fitted - centre

    rng = np.random.default_rng(_seed("noise_dim", trial))
    return noise_model_dim(fit_predict, n, scale=split.hi - split.lo, rng=rng)


def message_of(built: mech.Built, n: int) -> models.Message | None:
    """The header fields of the message a service-run variant would send (None otherwise)."""
    if built.message_mechanism is None or built.message_prior is None:
        return None
    return models.Message(
        mechanism=built.message_mechanism,
        params=dict(built.randomizer.public_params()),
        prior=built.message_prior,
        n=n,
        model_dim=built.message_model_dim,
        label_mean=built.message_label_mean,
        epsilon2=built.epsilon2,
    )


# A model trained on the exact labels: every label error statistic is 0.
EXACT = {"label_mse": 0.0, "target_mse": 0.0, "bias2": 0.0, "variance": 0.0}


@dataclass(frozen=True)
class _Scorer:
    """Records of one (split, epsilon, model): ``at``'s fields, scored on ``y_test``."""

    at: dict[str, Any]
    y_test: np.ndarray

    def __call__(
        self, variant: str, transform: str, pred: np.ndarray | float, **fields: Any
    ) -> Record:
        test_mse = float(np.mean((pred - self.y_test) ** 2))
        return Record(**self.at, variant=variant, transform=transform, test_mse=test_mse, **fields)


def run(
    data: Dataset,
    *,
    epsilons: Sequence[float],
    trials: Sequence[int],
    model_names: Sequence[str],
    variants: Sequence[str],
    subsample: int | None = None,
    mlp_epochs: int = models.MLP_EPOCHS,
    progress: Callable[[str], None] = print,
) -> Iterator[Record]:
    """Yield one :class:`Record` per (trial, epsilon, model, mechanism, transform)."""
    commit = git_commit()
    with threadpool_limits(1):  # 2-core machine shared with others: one BLAS / OpenMP thread
        for trial in trials:
            train, test = split_indices(data.n, trial=trial)
            if subsample is not None and subsample < train.size:
                pick = np.random.default_rng(_seed("subsample", trial, subsample))
                train = np.sort(pick.choice(train, size=subsample, replace=False))
            split = models.prepare(
                data.x[train], data.x[test], lo=data.lo, hi=data.hi, standardize=data.standardize
            )
            y_train, y_test = data.y[train], data.y[test]
            net_dim = None
            if set(variants) & set(mech.NETWORK_DIM_VARIANTS):
                net_dim = network_model_dim(split, trial=trial, mlp_epochs=mlp_epochs)
                progress(f"[{data.name} trial {trial}] network model_dim {net_dim}")
            base: dict[str, Any] = {"dataset": data.name, "trial": trial, "n_train": train.size}
            base |= {"n_test": test.size, "commit": commit}
            for epsilon in epsilons:
                started = time.perf_counter()
                if math.isinf(epsilon):
                    cell: dict[str, Labels] = {}
                else:
                    cell = draw_labels(
                        data.name,
                        y_train,
                        lo=data.lo,
                        hi=data.hi,
                        epsilon=epsilon,
                        trial=trial,
                        variants=variants,
                        d=data.d,
                        model_dim_net=net_dim,
                        log=progress,
                    )
                    constant = private_mean(
                        y_train,
                        lo=data.lo,
                        hi=data.hi,
                        epsilon=epsilon,
                        rng=np.random.default_rng(_seed("constant", trial, epsilon)),
                    )
                progress(
                    f"[{data.name} trial {trial} eps {epsilon:g}] labels "
                    f"{time.perf_counter() - started:.1f}s"
                )
                for model in model_names:
                    score = _Scorer({**base, "model": model, "epsilon": epsilon}, y_test)
                    seed = int(
                        np.random.default_rng(_seed("model", trial, epsilon, model)).integers(2**31)
                    )
                    if math.isinf(epsilon):
                        tic = time.perf_counter()
                        pred, extra = _fit(
                            model,
                            split,
                            y_train,
                            affine=None,
                            transform="raw",
                            seed=seed,
                            mlp_epochs=mlp_epochs,
                        )
                        seconds = time.perf_counter() - tic
                        yield score(
                            mech.NONPRIVATE, "raw", pred, seconds=seconds, extra=extra, **EXACT
                        )
                        continue
                    yield score(
                        mech.CONSTANT, "raw", constant, epsilon2=epsilon, extra={"value": constant}
                    )
                    for key, labels in cell.items():
                        transforms = mech.transforms_for(labels.built)
                        if model == "auto":
                            transforms = ("auto",) if len(transforms) > 1 else ("raw",)
                        for transform in transforms:
                            tic = time.perf_counter()
                            pred, extra = _fit(
                                model,
                                split,
                                labels.noisy,
                                affine=labels.built.affine,
                                transform=transform,
                                seed=seed,
                                mlp_epochs=mlp_epochs,
                                message=message_of(labels.built, labels.noisy.size),
                            )
                            stats = labels.stats.get(transform, labels.stats["raw"])
                            if transform == "auto":
                                stats = labels.stats[extra.get("label_transform", "raw")]
                            for name in ("chosen", "transform", "bins"):
                                if name in labels.built.params:
                                    extra = {**extra, f"mech_{name}": labels.built.params[name]}
                            built = labels.built
                            yield score(
                                key, transform, pred, epsilon1=built.epsilon1,
                                epsilon2=built.epsilon2, seconds=time.perf_counter() - tic,
                                extra=extra, **stats,
                            )  # fmt: skip
                progress(
                    f"[{data.name} trial {trial} eps {epsilon:g}] done "
                    f"{time.perf_counter() - started:.1f}s"
                )
