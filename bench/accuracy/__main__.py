"""Command line: ``python -m bench.accuracy --dataset crime --epsilons 0.1,1,8 --trials 3``.

The full protocol of the papers (13 epsilons, 10 trials, every mechanism, the papers' network
and the features party's models) is one command per data set::

    python -m bench.accuracy --dataset crime --epsilons all --trials 10 --model mlp,ridge,gbm,auto

Records are appended to ``bench/accuracy/records/<dataset>.jsonl.gz`` (a rerun of the same cell
replaces it) and ``bench/results/accuracy_<dataset>.md`` + PNGs are regenerated from all of
them. ``--quick`` (1 trial, 3 epsilons, a small subsample, short MLP) writes nothing unless
``--out`` is given; it is what the test suite runs.
"""

from __future__ import annotations

import argparse
import fcntl
import gzip
import json
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from bench.accuracy import data as datasets
from bench.accuracy import mechanisms as mech
from bench.accuracy import report, runner
from bench.accuracy.models import MLP_EPOCHS, MODELS

HERE = Path(__file__).resolve().parent
RECORDS_DIR = HERE / "records"
RESULTS_DIR = HERE.parent / "results"
QUICK_EPSILONS = (0.1, 1.0, 8.0)
QUICK_N = 300
QUICK_EPOCHS = 10


def _epsilons(text: str) -> list[float]:
    if text == "all":
        return list(runner.PROTOCOL_EPSILONS)
    values = []
    for part in text.split(","):
        value = float(part)  # accepts "inf"
        if not value > 0:
            raise argparse.ArgumentTypeError(f"epsilon ({part!r}) must be > 0")
        values.append(value)
    return values


def _choices(text: str, allowed: Sequence[str], what: str) -> list[str]:
    values = [part.strip() for part in text.split(",") if part.strip()]
    bad = [v for v in values if v not in allowed]
    if bad or not values:
        raise argparse.ArgumentTypeError(f"{what} must be among {', '.join(allowed)}; got {text!r}")
    return values


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.accuracy", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--dataset", required=True, choices=sorted(datasets.LOADERS))
    parser.add_argument("--epsilons", default="all", help="comma list or 'all' (the protocol)")
    parser.add_argument("--trials", type=int, default=10, help="number of 80/20 splits")
    parser.add_argument("--first-trial", type=int, default=0, help="index of the first split")
    parser.add_argument("--model", default="mlp", help=f"comma list of {', '.join(MODELS)}")
    parser.add_argument(
        "--mechanisms", default="all", help=f"comma list of {', '.join(mech.VARIANTS)} or 'all'"
    )
    parser.add_argument("--subsample", type=int, default=None, help="training rows per split")
    parser.add_argument("--json", action="store_true", help="print one JSON object per cell")
    parser.add_argument("--quick", action="store_true", help="smoke run (used by the tests)")
    parser.add_argument("--out", type=Path, default=None, help="where to write md / png")
    parser.add_argument("--report-only", action="store_true", help="regenerate from records")
    args = parser.parse_args(argv)
    try:
        args.epsilon_list = _epsilons(args.epsilons)
        args.model_list = _choices(args.model, MODELS, "--model")
        args.variant_list = (
            list(mech.VARIANTS)
            if args.mechanisms == "all"
            else _choices(args.mechanisms, list(mech.VARIANTS), "--mechanisms")
        )
    except (argparse.ArgumentTypeError, ValueError) as exc:
        parser.error(str(exc))
    if args.trials < 1:
        parser.error("--trials must be >= 1")
    if args.quick:
        args.trials = 1
        args.epsilon_list = list(QUICK_EPSILONS)
        args.subsample = QUICK_N if args.subsample is None else args.subsample
    return args


def _records_path(dataset: str) -> Path:
    """Where a data set's records are kept: JSON lines, gzip-compressed (about 10x smaller)."""
    return RECORDS_DIR / f"{dataset}.jsonl.gz"


def _load_records(dataset: str) -> list[runner.Record]:
    path = _records_path(dataset)
    if not path.is_file():
        return []
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        return [runner.Record.from_json(json.loads(line)) for line in lines if line.strip()]


def _key(r: runner.Record) -> tuple:
    return (r.model, r.n_train, r.variant, r.transform, r.epsilon, r.trial)


def _cell(r: runner.Record) -> tuple:
    """One run of one variant for one model: every transform it fitted comes from that run."""
    return (r.model, r.n_train, r.variant, r.epsilon, r.trial)


def merge_records(
    stored: Sequence[runner.Record], new: Sequence[runner.Record]
) -> list[runner.Record]:
    """``stored`` with every run ``new`` re-ran replaced by the new run's records.

    A run replaces its whole cell, not record by record: a rerun may fit other transforms than
    the stored run (the features party's ``auto`` fits "auto" when the message offers both
    transforms and "raw" otherwise), and a stored record the rerun did not repeat would
    otherwise be averaged with the new ones as a second split.
    """
    rerun = {_cell(r) for r in new}
    merged = {_key(r): r for r in stored if _cell(r) not in rerun}
    merged.update({_key(r): r for r in new})
    return list(merged.values())


def _save_records(
    dataset: str, new: Sequence[runner.Record], command: str
) -> tuple[list[runner.Record], list[str]]:
    """Merge ``new`` into the stored records (a rerun of a cell replaces it), under a lock."""
    RECORDS_DIR.mkdir(parents=True, exist_ok=True)
    with open(RECORDS_DIR / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two runs of one data set may finish together
        records = merge_records(_load_records(dataset), new)
        text = "".join(json.dumps(r.to_json(), sort_keys=True) + "\n" for r in records)
        # mtime 0: the same records compress to the same bytes (no diff without a change).
        _records_path(dataset).write_bytes(gzip.compress(text.encode("utf-8"), mtime=0))
        commands = [*_commands(dataset), command]
        (RECORDS_DIR / f"{dataset}.commands.txt").write_text(
            "\n".join(commands) + "\n", encoding="utf-8"
        )
    return records, commands


def _commands(dataset: str) -> list[str]:
    path = RECORDS_DIR / f"{dataset}.commands.txt"
    return path.read_text(encoding="utf-8").splitlines() if path.is_file() else []


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        data = datasets.load(args.dataset)
    except datasets.DatasetUnavailable as exc:
        print(f"skipped: {exc}", file=sys.stderr)
        return 0
    log = (lambda message: print(message, file=sys.stderr)) if args.json else print
    command = "python -m bench.accuracy " + " ".join(
        shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv)
    )
    new: list[runner.Record] = []
    if not args.report_only:
        started = time.perf_counter()
        new = list(
            runner.run(
                data,
                epsilons=args.epsilon_list,
                trials=range(args.first_trial, args.first_trial + args.trials),
                model_names=args.model_list,
                variants=args.variant_list,
                subsample=args.subsample,
                mlp_epochs=QUICK_EPOCHS if args.quick else MLP_EPOCHS,
                progress=log,
            )
        )
        log(f"{len(new)} fits in {time.perf_counter() - started:.0f}s")
    if args.json:
        for row in report.json_rows(new if new else _load_records(args.dataset)):
            print(json.dumps(row))
    if args.quick and args.out is None:
        return 0
    if args.quick:
        records, commands = new, [command]
    else:
        if new:
            records, commands = _save_records(args.dataset, new, command)
        else:
            records, commands = _load_records(args.dataset), _commands(args.dataset)
    if not records:
        log("no records: nothing to report")
        return 0
    out = args.out if args.out is not None else RESULTS_DIR
    out.mkdir(parents=True, exist_ok=True)
    path = report.write_report(data, records, out_dir=out, command_lines=commands)
    log(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
