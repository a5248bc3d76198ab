"""Background training jobs: pull the message, join, fit, store; progress in the database.

One daemon worker thread runs jobs in order (training is CPU-bound; stopping the service does not
wait for it). A job's row is its only state: a restart re-queues jobs that were queued or running
when the process stopped, so an accepted job is never lost. Fitted models are pickled into the
service's own database with their sha256 (the database is the trust boundary: only this service
writes it; a blob that fails its digest is refused).
"""

from __future__ import annotations

import hashlib
import logging
import math
import pickle
import queue
import threading
import traceback
from collections import OrderedDict
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, NamedTuple

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from features_party.config import Settings
from features_party.db.models import TrainedModel
from features_party.features import load_rows, load_schema
from features_party.pull import pull_message
from features_party.training import (
    FittedModel,
    fit_encoder_rows,
    noise_variance,
    train_on_message,
)
from shared.debias import affine_coefficients, mechanism_from_header
from shared.errors import IntegrityError, LabelDPError
from shared.message import NO_MECHANISM
from shared.service.client import ServiceError

log = logging.getLogger("features_party.jobs")
# What a trained model's result says about the release it learned from (with id and epsilon).
_RELEASE_FIELDS = {"dataset", "mechanism", "params", "epsilon1", "epsilon2", "body_sha256"}


class JobError(LabelDPError):
    """A training job cannot proceed (its message is clear enough to show the caller)."""


class Joined(NamedTuple):
    """The inner join of a message with the feature rows."""

    rows: list[list[Any]]  # the feature rows of the joined examples, in message order
    labels: np.ndarray  # their noisy labels
    stats: dict[str, int]  # what fell out on each side
    positions: np.ndarray  # their places in the message body


def join_on_example_id(
    message_ids: list[str],
    noisy: np.ndarray,
    feature_ids: list[str],
    feature_rows: list[list[Any]],
) -> Joined:
    """Inner join of the message with the feature rows; counts what fell out on each side."""
    position = {eid: i for i, eid in enumerate(feature_ids)}
    rows: list[list[Any]] = []
    keep = np.zeros(len(message_ids), dtype=bool)
    for j, eid in enumerate(message_ids):
        i = position.get(eid)
        if i is not None:
            rows.append(feature_rows[i])
            keep[j] = True
    joined = int(keep.sum())
    stats = {
        "n_message": len(message_ids),
        "n_features": len(feature_ids),
        "n_joined": joined,
        "n_labels_without_features": len(message_ids) - joined,
        "n_features_without_label": len(feature_ids) - joined,
    }
    return Joined(rows, noisy[keep], stats, np.flatnonzero(keep))


TRUE_MSE_MIN_Z = 2.0  # standard errors the estimate must stand clear of zero to be reported


def true_mse_estimate(
    unbiased: float, se: float, noise_variance: float
) -> tuple[float | None, str]:
    """``validation_mse_unbiased - noise_variance`` where it is an honest estimate; else None.

    The unbiased validation MSE carries the label noise of the SAME validation labels for every
    candidate, and the simulated noise variance its own Monte Carlo error; with a small epsilon
    both dwarf the model's true MSE, the difference lands below zero for every model alike, and
    clipping it at 0 (as it was) reported 0.0 for all of them. ``se`` is the standard error of
    the difference (both parts); reported only when the difference exceeds ``TRUE_MSE_MIN_Z``
    of them, otherwise None and a note saying why.
    """
    difference = unbiased - noise_variance
    if math.isfinite(difference) and math.isfinite(se) and difference > TRUE_MSE_MIN_Z * se:
        return difference, ""
    return None, (
        f"not reported: the validation MSE against the debiased labels ({unbiased:.4g}) does not "
        f"exceed the label noise variance ({noise_variance:.4g}) by {TRUE_MSE_MIN_Z:g} standard "
        f"errors of their difference ({se:.3g}); at this epsilon the noise swamps the model's "
        "error"
    )


class JobRunner:
    """Queue of training jobs executed in order by one daemon worker thread."""

    def __init__(self, sessions: sessionmaker[Session], settings: Settings) -> None:
        self._sessions = sessions
        self._settings = settings
        # A daemon thread: stopping the service never waits for a training to finish (the job
        # stays "running" in the database and is re-queued at the next start).
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._worker = threading.Thread(target=self._loop, name="train", daemon=True)
        self._worker.start()
        self._cache: OrderedDict[str, FittedModel] = OrderedDict()
        self._lock = threading.Lock()
        self.counters = {"jobs_succeeded": 0, "jobs_failed": 0, "messages_pulled": 0}

    # -- lifecycle -------------------------------------------------------------------------
    def recover(self) -> int:
        """Re-queue jobs interrupted by a stop or crash; returns how many."""
        with self._sessions() as session:
            stale = list(
                session.scalars(
                    select(TrainedModel)
                    .where(TrainedModel.status.in_(("queued", "running")))
                    .order_by(TrainedModel.created)
                )
            )
            for job in stale:
                job.status, job.stage, job.progress = "queued", "queued (after restart)", 0.0
            session.commit()
            ids = [job.id for job in stale]
        for model_id in ids:
            self.submit(model_id)
        return len(ids)

    def shutdown(self) -> None:
        self._queue.put(None)

    def submit(self, model_id: str) -> None:
        self._queue.put(model_id)

    def _loop(self) -> None:
        while True:
            model_id = self._queue.get()
            if model_id is None:
                return
            self._run(model_id)

    # -- progress --------------------------------------------------------------------------
    def _update(self, model_id: str, **fields: Any) -> None:
        with self._sessions() as session:
            job = session.get(TrainedModel, model_id)
            if job is None:
                return
            for key, value in fields.items():
                setattr(job, key, value)
            session.commit()

    # -- the job ---------------------------------------------------------------------------
    def _run(self, model_id: str) -> None:
        try:
            self._train(model_id)
            self.counters["jobs_succeeded"] += 1
        except (ServiceError, IntegrityError, JobError, ValueError) as exc:
            log.warning("training job %s failed: %s", model_id, exc)
            self._fail(model_id, f"{type(exc).__name__}: {exc}")
        except Exception as exc:  # a bug: keep the job failed with the trace in the log
            log.error("training job %s crashed:\n%s", model_id, traceback.format_exc())
            self._fail(model_id, f"internal error: {type(exc).__name__}: {exc}")

    def _fail(self, model_id: str, error: str) -> None:
        self.counters["jobs_failed"] += 1
        self._update(
            model_id, status="failed", stage="failed", error=error, finished=datetime.now(UTC)
        )

    def _train(self, model_id: str) -> None:
        import json

        with self._sessions() as session:
            job = session.get(TrainedModel, model_id)
            if job is None:
                return
            dataset, release_id = job.dataset, job.release_id
            model, transform, seed = job.model, job.label_transform, job.seed
        self._update(model_id, status="running", stage="pulling the message", progress=0.02)

        with self._sessions() as session:
            header, message_ids, noisy, pulled_now = pull_message(
                session, self._settings, release_id=release_id, dataset=dataset
            )
            if pulled_now:
                self.counters["messages_pulled"] += 1
            self._update(model_id, stage="loading features", progress=0.08)
            schema = load_schema(session, dataset)
            if schema is None:
                raise JobError(f"dataset {dataset!r} has no features uploaded")
            feature_ids, feature_rows = load_rows(session, dataset)

        self._update(model_id, stage="joining on example id", progress=0.12)
        rows, labels, join_stats, positions = join_on_example_id(
            message_ids, noisy, feature_ids, feature_rows
        )
        if join_stats["n_joined"] == 0:
            raise JobError(
                f"no example of release {release_id!r} has features in dataset {dataset!r} "
                f"({join_stats['n_message']} labels, {join_stats['n_features']} feature rows)"
            )
        encoder = fit_encoder_rows(schema, feature_rows)
        X = encoder.encode_rows(rows)

        def progress(stage: str, fraction: float) -> None:
            self._update(model_id, stage=stage, progress=round(0.15 + 0.8 * fraction, 4))

        requested_transform = transform
        fitted = train_on_message(
            header,
            X,
            labels,
            encoder=encoder,
            positions=positions,
            model=model,
            label_transform=transform,
            seed=seed,
            progress=progress,
        )
        metrics = dict(fitted.metrics)
        if header.segments is None and header.mechanism != NO_MECHANISM:
            affine = affine_coefficients(header)
            variance = noise_variance(
                mechanism_from_header(header),
                np.asarray(header.histogram.edges),
                np.asarray(header.histogram.probs),
                affine,
                seed=seed,
                with_se=True,
            )
            variance, variance_se = variance
            metrics["noise_variance_estimate"] = variance
            metrics["noise_variance_estimate_se"] = variance_se
            estimate, note = true_mse_estimate(
                metrics["validation_mse_unbiased"],
                math.hypot(metrics["validation_mse_unbiased_se"], variance_se),
                variance,
            )
            metrics["validation_mse_true_estimate"] = estimate
            if note:
                metrics["validation_mse_true_estimate_note"] = note
        result = {
            "join": join_stats,
            "label_transform_requested": requested_transform,
            "release": {
                "id": header.release_id,
                **header.model_dump(include=_RELEASE_FIELDS),
                "epsilon": header.epsilon,
            },
            **metrics,
        }
        final = replace(fitted, metrics=result)
        blob = pickle.dumps(final, protocol=pickle.HIGHEST_PROTOCOL)
        self._update(
            model_id,
            status="succeeded",
            stage="done",
            progress=1.0,
            result_json=json.dumps(result, allow_nan=False, default=_json_default),
            blob=blob,
            blob_sha256=hashlib.sha256(blob).hexdigest(),
            finished=datetime.now(UTC),
        )
        with self._lock:
            self._cache[model_id] = final
        log.info("training job %s succeeded: %s", model_id, result["chosen"])

    # -- fitted models ---------------------------------------------------------------------
    def fitted(self, session: Session, model_id: str) -> FittedModel | None:
        """The fitted model of a succeeded job (cached; verified against its sha256)."""
        with self._lock:
            cached = self._cache.get(model_id)
            if cached is not None:
                self._cache.move_to_end(model_id)
                return cached
        job = session.get(TrainedModel, model_id)
        if job is None or job.status != "succeeded" or job.blob is None:
            return None
        if hashlib.sha256(job.blob).hexdigest() != job.blob_sha256:
            raise IntegrityError(f"stored model {model_id!r} does not match its sha256")
        fitted = pickle.loads(job.blob)  # noqa: S301 - written by this service only
        with self._lock:
            self._cache[model_id] = fitted
            while len(self._cache) > 8:
                self._cache.popitem(last=False)
        return fitted


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")
