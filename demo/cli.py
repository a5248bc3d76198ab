"""``labeldp demo``: the whole two-party protocol on this machine, in one command."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from shared.errors import LabelDPError
from shared.plan import mechanisms
from shared.service.cli_args import from_args

DEFAULT_N = 100_000


def register_commands(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``demo`` to ``labeldp``."""
    parser = commands.add_parser(
        "demo",
        help="run the whole protocol locally and compare private / non-private / constant",
        description=(
            "Starts both services on 127.0.0.1 (SQLite in a temporary folder, random tokens), "
            "posts labels as the advertiser, registers the examples, releases ONE message, "
            "trains as the publisher and prints test MSEs. Default data: SYNTHETIC ad "
            f"conversions ({DEFAULT_N} rows, 20% held out for testing)."
        ),
    )
    parser.add_argument("--epsilon", type=float, default=1.0, help="total epsilon (default 1)")
    parser.add_argument("--mechanism", default="auto", choices=mechanisms())
    parser.add_argument(
        "--epsilon-histogram",
        default="default",
        help="epsilon1 for the histogram and the DP label mean: a number, or 'default' (the "
        "labels party's split: see shared.plan.default_epsilon1)",
    )
    parser.add_argument("--budget", type=float, help="dataset budget (default max(10, epsilon))")
    parser.add_argument(
        "--model", default="auto", choices=["auto", "gbm", "ridge", "mlp", "constant"]
    )
    parser.add_argument("--label-transform", default="auto", choices=["auto", "raw", "debiased"])
    parser.add_argument(
        "--n", type=int, default=DEFAULT_N, help=f"synthetic rows (default {DEFAULT_N})"
    )
    parser.add_argument("--seed", type=int, default=0, help="data, split and training seed")
    parser.add_argument("--test-share", type=float, default=0.2)
    parser.add_argument("--data", type=Path, help="a CSV file with a header instead")
    parser.add_argument("--label", help="label column of --data")
    parser.add_argument("--bounds", help="public label bounds LO,HI (required with --data)")
    parser.add_argument("--id", dest="id_column", help="example id column of --data")
    parser.add_argument(
        "--segment",
        metavar="COLUMN",
        default="auto",
        help="a PUBLIC column to segment the release by: one prior, DP mean and randomizer "
        "per segment; 'auto' (default): the campaign for the synthetic data, none for --data; "
        "'none': no segments",
    )
    parser.add_argument("--plot", type=Path, help="write a PNG (noisy vs true, test MSEs)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("--workdir", type=Path, help="folder for databases and logs")
    parser.add_argument(
        "--clean", action="store_true", help="delete the working folder (and ledger) at the end"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    parser.set_defaults(func=demo_command)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def format_table(summary: dict[str, Any]) -> str:
    """The short human summary."""
    params = ", ".join(f"{k}={_fmt(v)}" for k, v in summary["mechanism_params"].items())
    if len(params) > 160:
        params = params[:157] + "..."
    c = summary["mse_constant"]
    rows = [
        ("data", summary["data"]),
        ("examples", f"{summary['n_train']} train (sent), {summary['n_test']} test (held out)"),
        (
            "epsilon",
            f"spent {summary['epsilon_spent']:g} (histogram + mean {summary['epsilon1']:.4g} + "
            f"randomizer {summary['epsilon2']:.4g}), left {summary['epsilon_left']:g} "
            f"of {summary['epsilon_budget']:g}",
        ),
        (
            "mechanism",
            f"{summary['mechanism']} ({params})"
            if not summary.get("segment_column")
            else f"segmented by {summary['segment_column']!r}: "
            f"{summary.get('segment_groups')} groups, each its own prior, DP mean and randomizer",
        ),
        ("private model", f"{summary['model_chosen']}"),
        (
            "test MSE private",
            f"{summary['mse_private']:.2f}  ({summary['mse_private'] / c:.3f} x constant)",
        ),
        (
            "test MSE non-private",
            f"{summary['mse_nonprivate']:.2f}  ({summary['mse_nonprivate'] / c:.3f} x constant; "
            f"{summary['nonprivate_model']})",
        ),
        ("test MSE constant", f"{c:.2f}  (mean of the TRUE train labels)"),
        (
            "ledger",
            f"{summary['ledger']['database']}  (verify: {summary['ledger']['verify']})"
            if summary["ledger"].get("kept", True)
            else f"{summary['ledger']['database']}  (deleted at exit: --clean)",
        ),
    ]
    if summary.get("plot"):
        rows.append(("plot", summary["plot"]))
    width = max(len(key) for key, _ in rows)
    return "\n".join(f"{key.ljust(width)}  {value}" for key, value in rows)


def _amount(option: str, value: float) -> float:
    """``value`` if it is a finite number > 0, else a LabelDPError naming ``option`` (inf and
    NaN passed, started both services, then failed as a traceback: found by the CLI audit)."""
    if not (math.isfinite(value) and value > 0):
        raise LabelDPError(f"{option} ({value}) must be a finite number > 0")
    return value


def _check_options(args: argparse.Namespace) -> None:
    """The options' own rules, before any data is read or service started (LabelDPError)."""
    _amount("--epsilon", args.epsilon)
    if args.budget is not None:
        _amount("--budget", args.budget)
    if not 0.0 < args.test_share < 0.9:
        raise LabelDPError(f"--test-share ({args.test_share}) must be in (0, 0.9)")
    if args.seed < 0:
        raise LabelDPError(f"--seed ({args.seed}) must be >= 0")
    if args.data is None:
        given = [o for o, v in (("--label", args.label), ("--bounds", args.bounds),
                                ("--id", args.id_column)) if v is not None]  # fmt: skip
        if given:
            raise LabelDPError(f"{', '.join(given)} describe --data: give --data FILE too")
    if args.plot is not None and not args.plot.resolve().parent.is_dir():
        raise LabelDPError(f"--plot {args.plot}: its folder does not exist")


def demo_command(args: argparse.Namespace) -> int:
    """Run the demo; exit 0 on success, 2 on bad arguments, 1 on failure."""
    from demo.data import MIN_ROWS, from_csv, parse_bounds, synthetic
    from demo.progress import Progress
    from demo.run import DemoOptions, run_demo

    try:
        _check_options(args)
        if args.data is not None:
            if not args.label or not args.bounds:
                raise LabelDPError("--data needs --label COLUMN and --bounds LO,HI (public bounds)")
            data = from_csv(
                args.data,
                label=args.label,
                bounds=parse_bounds(args.bounds),
                id_column=args.id_column,
            )
        else:
            if args.n < MIN_ROWS:
                raise LabelDPError(f"--n ({args.n}) must be at least {MIN_ROWS}")
            data = synthetic(args.n, seed=args.seed)
        if args.segment == "auto":
            args.segment = data.default_segment
        elif args.segment == "none":
            args.segment = None
        if args.segment is not None and args.segment not in data.columns:
            raise LabelDPError(
                f"--segment ({args.segment!r}) must be a column of the data: "
                f"{', '.join(sorted(data.columns))}"
            )
        histogram = args.epsilon_histogram
        if histogram != "default":
            try:
                histogram = _amount("--epsilon-histogram", float(histogram))
            except ValueError:
                raise LabelDPError(
                    f"--epsilon-histogram ({histogram!r}) must be a number or 'default'"
                ) from None
    except (LabelDPError, OSError, ValueError) as exc:
        print(f"labeldp demo: {exc}", file=sys.stderr)
        return 2

    options = from_args(DemoOptions, args, epsilon_histogram=histogram, keep=not args.clean)
    progress = Progress(enabled=not args.quiet)
    try:
        summary = run_demo(data, options, progress)
    except (LabelDPError, OSError, RuntimeError) as exc:
        print(f"labeldp demo failed: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
    else:
        print(format_table(summary))
    return 0
