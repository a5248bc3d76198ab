"""Public segments against the ordinary release, run by run (issue 25, item 3).

``python -m bench.accuracy.segments [--datasets ads,housing,crime] [--epsilons 0.1,0.3,1,2]
[--runs 10] [--ads-n N] [--out bench/results/segments.md]``

Each run is one trial of the accuracy runner (its 80/20 split, fresh noise) and goes through
the product as a user runs it, end to end: the labels party plans and executes the release
(``shared.plan`` / ``shared.segments``), writes the message header (``shared.message``), and
the features party trains on it with ``features_party.training.train_on_message``, the
function its service's job calls (the segment is one more categorical feature column). Three
releases per run, all at the same total epsilon on the same split:

* the DP constant: the epsilon-DP mean of the training labels (the runner's own);
* ordinary: ``mechanism="auto"``, no segments;
* segmented: the same request on the data set's public attribute (``Dataset.segments``:
  ads the campaign, Housing the latitude band, Crime the state); where the grouping rule
  leaves fewer than two groups, the release is the ordinary one.

Reports test-MSE ratios to the same run's DP constant (median and worst) and segmented over
ordinary. Nothing is appended to the records.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import NamedTuple

import numpy as np
from threadpoolctl import threadpool_limits

from bench import emit
from bench.accuracy import data as datasets
from bench.accuracy import runner
from features_party.training import Encoder, train_on_message
from shared.epsilon import exact
from shared.mechanisms.private_mean import private_mean
from shared.message import body_sha256, header_for
from shared.plan import ReleaseRequest
from shared.randomizer import execute
from shared.segments import execute_segmented, plan_segmented, segment_counts

EPSILONS = (0.1, 0.3, 1.0, 2.0)
DATASETS = ("ads", "housing", "crime")


class Run(NamedTuple):
    ordinary: float  # ordinary release's test MSE / DP constant's
    segmented: float  # segmented release's test MSE / DP constant's
    groups: int  # the segmented plan's groups (1: it fell back to the ordinary release)


def _train_and_score(
    data: datasets.Dataset,
    release: object,
    *,
    train: np.ndarray,
    test: np.ndarray,
    order: np.ndarray,
    seed: int,
) -> float:
    """Header -> the features party's model -> test MSE; ``order``: the body's row order."""
    assert data.segments is not None and data.segment_column is not None
    ids = [f"r{i}" for i in range(train.size)]
    noisy = np.asarray(release.noisy_labels)[order]  # type: ignore[attr-defined]
    header = header_for(
        release,  # type: ignore[arg-type]
        release_id="rel_bench",
        dataset=data.name,
        default_label=data.lo,
        n=train.size,
        body_sha256=body_sha256(ids, noisy),
        created=datetime.now(UTC),
    )
    levels = sorted(set(data.segments.tolist()))
    code = {level: float(i) for i, level in enumerate(levels)}
    names = [f"x{j}" for j in range(data.d)]
    encoder = Encoder(
        columns=(*((name, "numeric") for name in names), (data.segment_column, "categorical")),
        vocab={data.segment_column: {level: int(v) for level, v in code.items()}},
    )

    def matrix(rows: np.ndarray) -> np.ndarray:
        codes = np.array([code[s] for s in data.segments[rows]])
        return np.column_stack([data.x[rows], codes])

    fitted = train_on_message(
        header,
        matrix(train)[order],
        noisy,
        encoder=encoder,
        positions=np.arange(train.size),
        seed=seed,
    )
    prediction = np.clip(fitted.predict_matrix(matrix(test)), data.lo, data.hi)
    return float(np.mean((prediction - data.y[test]) ** 2))


def runs(data: datasets.Dataset, *, epsilon: float, trials: Sequence[int]) -> list[Run]:
    """One :class:`Run` per trial at ``epsilon``."""
    assert data.segments is not None and data.segment_column is not None
    out = []
    for trial in trials:
        train, test = runner.split_indices(data.n, trial=trial)
        y = data.y[train]
        constant = private_mean(
            y,
            lo=data.lo,
            hi=data.hi,
            epsilon=epsilon,
            rng=np.random.default_rng(runner._seed("constant", trial, epsilon)),
        )
        constant_mse = float(np.mean((data.y[test] - constant) ** 2))
        seed = int(np.random.default_rng(runner._seed("model", trial, epsilon)).integers(2**31))
        request = ReleaseRequest(epsilon=exact(repr(epsilon)))
        rng = np.random.default_rng(runner._seed("ordinary", trial, epsilon))
        plain = execute(request.plan(n=train.size, lo=data.lo, hi=data.hi), y, rng)
        identity = np.arange(train.size)
        ordinary = _train_and_score(data, plain, train=train, test=test, order=identity, seed=seed)
        segments = data.segments[train]
        plan = plan_segmented(
            request, segment_counts(segments), column=data.segment_column, lo=data.lo, hi=data.hi
        )
        if plan is None:
            segmented, groups = ordinary, 1
        else:
            rng = np.random.default_rng(runner._seed("segmented", trial, epsilon))
            release = execute_segmented(plan, y, segments, rng)
            segmented = _train_and_score(
                data, release, train=train, test=test, order=release.order, seed=seed
            )
            groups = len(plan.groups)
        out.append(Run(ordinary / constant_mse, segmented / constant_mse, groups))
    return out


def table(results: dict[str, dict[float, list[Run]]]) -> str:
    lines = [
        "| data set | eps | runs | groups | ordinary / DP constant: median / worst | segmented / "
        "DP constant: median / worst | segmented / ordinary: median / worst |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, by_eps in results.items():
        for eps, rows in by_eps.items():
            o = [r.ordinary for r in rows]
            s = [r.segmented for r in rows]
            ratio = [r.segmented / r.ordinary for r in rows]
            groups = sorted({r.groups for r in rows})
            spread = f"{groups[0]}" if len(groups) == 1 else f"{groups[0]}-{groups[-1]}"
            lines.append(
                f"| {name} | {eps:g} | {len(rows)} | {spread} "
                f"| {statistics.median(o):.3f} / {max(o):.3f} "
                f"| **{statistics.median(s):.3f} / {max(s):.3f}** "
                f"| {statistics.median(ratio):.3f} / {max(ratio):.3f} |"
            )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.accuracy.segments")
    datasets.grid_arguments(parser, datasets=DATASETS, epsilons=EPSILONS, runs=10)
    args = parser.parse_args(argv)

    def measure(data: datasets.Dataset) -> dict[float, list[Run]]:
        out = {}
        for eps in datasets.epsilons_of(args):
            out[eps] = runs(data, epsilon=eps, trials=range(args.runs))
            print(table({data.name: {eps: out[eps]}}).splitlines()[-1], flush=True)
        return out

    with threadpool_limits(1):
        results = datasets.measure_each(args, measure)
    emit(table(results), args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
