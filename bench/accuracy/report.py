"""Tables, target checks, the criterion analysis and plots, from the stored records of a data set.

Everything in ``bench/results/accuracy_<dataset>.md`` is computed from the records, except the
hand-written discussion, which is read from ``bench/accuracy/analysis/<dataset>.md``.
"""

from __future__ import annotations

import io
import itertools
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.accuracy import mechanisms as mech
from bench.accuracy import papers
from bench.accuracy.data import Dataset
from bench.accuracy.runner import Record, git

HERE = Path(__file__).resolve().parent
ANALYSIS_DIR = HERE / "analysis"
MODEL_TITLES = {
    "mlp": "the papers' network (MLP 128-64, 50 epochs)",
    "ridge": "features party: ridge (penalty chosen on noisy validation)",
    "gbm": "features party: gradient boosting (depth chosen on noisy validation)",
    "auto": "features party: auto (family, penalty and label transform chosen on noisy validation)",
}
SHORT = {
    "constant": "DP mean",
    "nonprivate": "non-private",
    "laplace_clip": "Lap-clip",
    "laplace": "Lap",
    "gaussian": "Gauss",
    "staircase": "Stair",
    "staircase_discrete": "Stair-d",
    "exponential": "Exp",
    "rr_on_bins": "RRoB",
    "rp_paper": "RP-T5",
    "rp_auto": "RP-auto",
    "rp_auto_d": "RP-auto-d",
    "rp_auto_net": "RP-auto-net",
    "rp_auto_t5s": "RP-auto-t5s",
    "rr_with_prior": "RRwP",
    "unbiased": "Unb",
    "auto": "auto",
    "auto_net": "auto-net",
}
ORDER = ["constant", *mech.VARIANTS]
# Rows the report shows: the records of variants since retired (the engine absorbed them: the
# proposals ``auto_k`` and ``auto_crit``) stay in the jsonl files as run, unreported.
REPORTED = frozenset({*ORDER, mech.NONPRIVATE})
# Variants whose mechanism recommends a training transform (records' extra["mech_transform"]).
RECOMMENDING = (
    "auto",
    "auto_net",
    "rp_auto",
    "rp_auto_d",
    "rp_auto_net",
    "rp_auto_t5s",
)
PRODUCT_MODEL = "auto"  # the features party's model="auto"
TRANSFORM_TAG = {"raw": "", "debiased": " deb", "auto": " (auto t.)", "rec": " rec"}


@dataclass(frozen=True)
class Cell:
    mean: float
    std: float
    k: int
    label_mse: float
    target_mse: float
    bias2: float
    variance: float
    n_train: int
    extras: tuple[dict[str, Any], ...]
    # (trial, test MSE) of every split behind the mean: run-by-run ratios pair them by trial.
    by_trial: tuple[tuple[int, float], ...] = ()


def column_name(variant: str, transform: str) -> str:
    return SHORT.get(variant, variant) + TRANSFORM_TAG.get(transform, " " + transform)


def _nanmean(values: Iterable[float]) -> float:
    array = np.array([v for v in values if v is not None], dtype=float)
    return float(np.nanmean(array)) if array.size and np.any(np.isfinite(array)) else math.nan


def reported(records: Iterable[Record]) -> list[Record]:
    """The records of the variants the report shows (``REPORTED``), in their order."""
    return [r for r in records if r.variant in REPORTED]


def aggregate(records: Sequence[Record]) -> dict[tuple, Cell]:
    """(model, n_train, variant, transform, epsilon) -> mean/std over trials and mean stats."""
    groups: dict[tuple, list[Record]] = defaultdict(list)
    offers_both = {
        (r.model, r.n_train, r.variant, r.epsilon) for r in records if r.transform == "auto"
    }
    for r in records:
        # The features party's ``auto`` records "auto" in a split whose message offered both
        # transforms and "raw" in one that offered raw targets only (that is what it chose).
        # Where some split offered both, its raw splits belong to the "auto" row (which then
        # averages every split) and to no "raw" row: a "raw" row of those splits alone would be
        # a subset's mean, not comparable with the others. A variant that never offers both
        # keeps its "raw" row (``product_cell`` reads out of the box there too).
        both = (r.model, r.n_train, r.variant, r.epsilon) in offers_both
        transform = "auto" if r.transform == "raw" and both else r.transform
        groups[(r.model, r.n_train, r.variant, transform, r.epsilon)].append(r)
        # auto(-net) and RP-auto(-d, -net, -t5s) recommend a transform: file it under "rec".
        if r.extra.get("mech_transform") == r.transform and r.variant in RECOMMENDING:
            groups[(r.model, r.n_train, r.variant, "rec", r.epsilon)].append(r)
    out = {}
    for key, rs in groups.items():
        mse = np.array([r.test_mse for r in rs])
        out[key] = Cell(
            mean=float(mse.mean()),
            std=float(mse.std(ddof=1)) if mse.size > 1 else 0.0,
            k=mse.size,
            label_mse=_nanmean(r.label_mse for r in rs),
            target_mse=_nanmean(r.target_mse for r in rs),
            bias2=_nanmean(r.bias2 for r in rs),
            variance=_nanmean(r.variance for r in rs),
            n_train=key[1],
            extras=tuple(r.extra for r in rs),
            by_trial=tuple((int(r.trial), float(r.test_mse)) for r in rs),
        )
    return out


def paired_ratios(numerator: Cell | None, denominator: Cell | None) -> list[float]:
    """numerator / denominator test MSE split by split, on the splits both ran."""
    if numerator is None or denominator is None:
        return []
    below = dict(denominator.by_trial)
    return [mse / below[t] for t, mse in numerator.by_trial if below.get(t, 0.0) > 0.0]


def json_rows(records: Sequence[Record]) -> list[dict[str, Any]]:
    """One object per (model, mechanism, transform, epsilon): the ``--json`` output."""
    rows = []
    cells = aggregate(reported(records))
    for (model, n_train, variant, transform, eps), cell in sorted(
        cells.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][4], kv[0][2])
    ):
        rows.append(
            {
                "model": model,
                "n_train": n_train,
                "mechanism": variant,
                "transform": transform,
                "epsilon": "inf" if math.isinf(eps) else eps,
                "trials": cell.k,
                "test_mse_mean": cell.mean,
                "test_mse_std": cell.std,
                "label_mse_mean": None if math.isnan(cell.label_mse) else cell.label_mse,
            }
        )
    return rows


def _fmt(value: float, std: float | None = None) -> str:
    if math.isnan(value):
        return "-"
    # 3 significant digits from 1 (4 below 1 and from 1,000, where .3g would write 1.63e+03).
    digits = 4 if abs(value) < 1 or 1e3 <= abs(value) < 1e4 else 3
    text = f"{value:.{digits}g}"
    if std is not None:
        text += f" ± {std:.2g}"
    return text


def _eps(eps: float) -> str:
    return "inf" if math.isinf(eps) else f"{eps:g}"


def _columns(cells: dict[tuple, Cell], model: str, n_train: int) -> list[tuple[str, str]]:
    present = {(v, t) for (m, n, v, t, _e) in cells if m == model and n == n_train}
    present.discard(("nonprivate", "raw"))
    order = {name: i for i, name in enumerate(ORDER)}
    tr_order = {"raw": 0, "debiased": 1, "auto": 2, "rec": 3}
    return sorted(present, key=lambda vt: (order.get(vt[0], 99), tr_order.get(vt[1], 9)))


def _epsilons(cells: dict[tuple, Cell], model: str, n_train: int) -> list[float]:
    return sorted({e for (m, n, _v, _t, e) in cells if m == model and n == n_train})


def best_cell(
    cells: dict[tuple, Cell], model: str, n_train: int, eps: float, *, exclude: Sequence[str] = ()
) -> tuple[tuple[str, str], Cell] | None:
    candidates = [
        ((v, t), c)
        for (m, n, v, t, e), c in cells.items()
        if m == model
        and n == n_train
        and e == eps
        and v not in exclude
        and v != "nonprivate"
        and t != "rec"  # a copy of the raw or debiased cell
    ]
    if not candidates:
        return None
    return min(candidates, key=lambda vc: vc[1].mean)


def mse_table(cells: dict[tuple, Cell], model: str, n_train: int, *, stat: str = "test") -> str:
    """Markdown table: epsilon rows x (mechanism, transform) columns, best test MSE in bold."""
    columns = _columns(cells, model, n_train)
    lines = [
        "| eps | " + " | ".join(column_name(v, t) for v, t in columns) + " |",
        "|---|" + "---|" * len(columns),
    ]
    for eps in _epsilons(cells, model, n_train):
        if math.isinf(eps):
            cell = cells.get((model, n_train, "nonprivate", "raw", eps))
            if cell is not None and stat == "test":
                text = f"non-private (exact labels): {_fmt(cell.mean, cell.std)}"
                lines.append(f"| inf | {text} |" + " |" * (len(columns) - 1))
            continue
        best = best_cell(cells, model, n_train, eps)
        row = []
        for v, t in columns:
            cell = cells.get((model, n_train, v, t, eps))
            if cell is None:
                row.append("")
                continue
            if stat == "test":
                text = _fmt(cell.mean, cell.std)
                if best is not None and best[0] == (v, t):
                    text = f"**{text}**"
            else:
                text = _fmt(cell.label_mse if t == "raw" else cell.target_mse)
            row.append(text)
        lines.append(f"| {_eps(eps)} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def paper_table_md(dataset: str) -> str:
    table = papers.paper_table(dataset)
    if not table:
        return "_No paper reports this data set._"
    lines = [
        "| eps | " + " | ".join(papers.COLUMNS) + " |",
        "|---|" + "---|" * len(papers.COLUMNS),
    ]
    for eps, row in table.items():
        best = min(row.values(), key=lambda ms: ms[0])
        texts = []
        for column in papers.COLUMNS:
            mean, std = row[column]
            text = f"{mean:g} ± {std:g}"
            texts.append(f"**{text}**" if (mean, std) == best else text)
        lines.append(f"| {_eps(eps)} | " + " | ".join(texts) + " |")
    return "\n".join(lines)


def _git_commit() -> str:
    return git("rev-parse", "--short", "HEAD") or "unknown"


def runs_summary(records: Sequence[Record]) -> str:
    """Exactly what was run: per (model, n_train) the trials, epsilons and mechanisms."""
    groups: dict[tuple[str, int], list[Record]] = defaultdict(list)
    for r in records:
        groups[(r.model, r.n_train)].append(r)
    lines = [
        "| model | n_train | n_test | trials | epsilons | mechanisms | fits | code |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for (model, n_train), rs in sorted(groups.items()):
        trials = sorted({r.trial for r in rs})
        epsilons = sorted({r.epsilon for r in rs})
        variants = [v for v in ORDER if any(r.variant == v for r in rs)]
        # A mechanism run on fewer splits than the rest is averaged over fewer trials: say so.
        fewer: dict[tuple[int, ...], list[str]] = defaultdict(list)
        for v in variants:
            own = tuple(sorted({r.trial for r in rs if r.variant == v}))
            if list(own) != trials:
                fewer[own].append(SHORT.get(v, v))
        partial = "".join(
            f"; {', '.join(names)}: {len(own)} ({', '.join(map(str, own))})"
            for own, names in sorted(fewer.items())
        )
        lines.append(
            f"| {model} | {n_train} | {rs[0].n_test} | "
            f"{len(trials)} ({', '.join(map(str, trials))}){partial} | "
            f"{', '.join(_eps(e) for e in epsilons)} | "
            f"{', '.join(SHORT.get(v, v) for v in variants)} | {len(rs)} | "
            f"{', '.join(sorted({r.commit for r in rs}))} |"
        )
    return "\n".join(lines)


def full_n(records: Sequence[Record], model: str) -> int | None:
    sizes = [r.n_train for r in records if r.model == model]
    return max(sizes) if sizes else None


PAPERS_MODEL = "mlp"  # the papers' network


def product_cell(cells: dict[tuple, Cell], n_train: int, eps: float) -> Cell | None:
    """Out of the box at ``eps``: the labels party's ``auto`` trained by the features party's,
    over every split (:func:`aggregate`): its "auto" row, or its "raw" row where no split's
    message offered both transforms (every release picked a mechanism whose outputs are
    already unbiased, say)."""
    found = cells.get((PRODUCT_MODEL, n_train, "auto", "auto", eps))
    return found if found is not None else cells.get((PRODUCT_MODEL, n_train, "auto", "raw", eps))


def headline(cells: dict[tuple, Cell], dataset: str) -> str:
    """The table a results file opens with: per epsilon, the product out of the box, the best
    mechanism with the product's model and with the papers' network, the papers' best, the DP
    constant; a last row without privacy. Test MSE means at the full training set."""
    models = [m for m in (PRODUCT_MODEL, PAPERS_MODEL) if full_n_cells(cells, m) is not None]
    sizes = {m: full_n_cells(cells, m) for m in models}
    paper_best = papers.paper_best(dataset)
    reference = models[-1]  # the DP constant's and the epsilons' model (the same test sets)
    titles = {
        PRODUCT_MODEL: "best mechanism, features party `auto`",
        PAPERS_MODEL: "best mechanism, papers' network",
    }

    def mean(cell: Cell | None) -> str:
        return _fmt(cell.mean) if cell is not None else "-"

    def paper(eps: float) -> list[str]:
        found = paper_best.get(eps)
        return [f"{found[1]:g} ({found[0]})" if found else "-"] if paper_best else []

    head = ["eps", "product out of the box (labels `auto` + features `auto`)"]
    head += [titles[m] for m in models] + (["papers' best"] if paper_best else []) + ["DP constant"]
    head += ["out of the box / best", "out of the box / DP constant: mean / worst split"]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    product_n = sizes.get(PRODUCT_MODEL, -1)
    for eps in _epsilons(cells, reference, sizes[reference]):
        if math.isinf(eps):
            continue
        product = product_cell(cells, product_n, eps)
        row = [_eps(eps), mean(product)]
        for m in models:
            best = best_cell(cells, m, sizes[m], eps, exclude=(mech.CONSTANT,))
            row.append(f"{_fmt(best[1].mean)}, {column_name(*best[0])}" if best else "-")
        constant = cells.get((reference, sizes[reference], mech.CONSTANT, "raw", eps))
        own_best = best_cell(cells, PRODUCT_MODEL, product_n, eps, exclude=(mech.CONSTANT,))
        to_best = (
            f"{product.mean / own_best[1].mean:.3f}"
            if product is not None and own_best is not None
            else "-"
        )
        own_constant = cells.get((PRODUCT_MODEL, product_n, mech.CONSTANT, "raw", eps))
        runs = paired_ratios(product, own_constant)
        to_constant = (
            f"{product.mean / own_constant.mean:.3f} / {max(runs):.3f}"
            if product is not None and own_constant is not None and runs
            else "-"
        )
        cells_out = [*row, *paper(eps), mean(constant), to_best, to_constant]
        lines.append("| " + " | ".join(cells_out) + " |")
    exact = [mean(cells.get((m, sizes[m], mech.NONPRIVATE, "raw", math.inf))) for m in models]
    tail = ["no privacy", "-", *exact, *paper(math.inf), "-", "-", "-"]
    lines.append("| " + " | ".join(tail) + " |")
    return "\n".join(lines)


def headline_legend(cells: dict[tuple, Cell], dataset: str) -> str:
    """How to read :func:`headline`, with the trials behind it."""
    names = {PRODUCT_MODEL: "the features party's `auto`", PAPERS_MODEL: "the papers' network"}
    trials = {m: max((c.k for k, c in cells.items() if k[0] == m), default=0) for m in names}
    ran = ", ".join(f"{k} for {names[m]}" for m, k in trials.items() if k)
    papers_text = (
        f"the papers' best = the lowest mean any method reports ({papers.SOURCES[dataset]}; "
        "their RPWithPrior column is not honestly private); "
        if papers.paper_table(dataset)
        else "no paper reports this data set; "
    )
    return (
        "Test MSE (lower is better), mean over the random 80/20 splits (at most "
        f"{ran}), every cell at its total epsilon. Product out of the box = the labels "
        "party's `mechanism=\"auto\"` with no options, trained on by the features party's "
        '`model="auto"` with the transform it resolves from the message; best mechanism = '
        "the lowest cell of any label mechanism and transform for that model (the DP constant "
        "and the per-split `rec` mixes apart, as for the bold cells below; its name after the "
        "comma, legend below); "
        + papers_text
        + "DP constant = predicting the epsilon-DP mean of the training labels; no privacy = "
        "the model trained on the exact labels. The last two columns put the product at a "
        "glance: out of the box over the best cell of the features party's `auto` (1 = the "
        "product's automatic choice is the best the product has), and over the same splits' "
        "DP constant: the mean ratio and the worst single split (above 1: worse than "
        "releasing the mean). Every cell is from the records' runs (their commands below); "
        "the product as the code stands now, run by run on fresh splits, is in "
        "[worst_case.md](worst_case.md) and, with public segments, "
        "[segments.md](segments.md). Standard deviations, every mechanism and the label MSE "
        "per model follow below."
    )


def model_summary(cells: dict[tuple, Cell], dataset: str, model: str, n_train: int) -> str:
    """Per epsilon: our best vs the papers' best vs the DP constant vs the product pipeline."""
    paper_best = papers.paper_best(dataset)
    lines = [
        "| eps | our best (mechanism, transform) | papers' best (column) | DP constant | "
        "labels auto + features auto | ours < papers' best? | best non-constant <= constant? |",
        "|---|---|---|---|---|---|---|",
    ]
    for eps in _epsilons(cells, model, n_train):
        if math.isinf(eps):
            ours = cells.get((model, n_train, "nonprivate", "raw", eps))
            pb = paper_best.get(eps)
            lines.append(
                f"| inf | {_fmt(ours.mean, ours.std) if ours else '-'} (exact labels) | "
                + (f"{pb[1]:g} ({pb[0]})" if pb else "-")
                + " | - | - | "
                + ("yes" if ours and pb and ours.mean < pb[1] else "no" if pb and ours else "-")
                + " | - |"
            )
            continue
        best = best_cell(cells, model, n_train, eps)
        best_nc = best_cell(cells, model, n_train, eps, exclude=("constant",))
        constant = cells.get((model, n_train, "constant", "raw", eps))
        product = product_cell(cells, full_n_cells(cells, PRODUCT_MODEL) or -1, eps)
        pb = paper_best.get(eps)
        best_text = "-"
        if best is not None:
            (v, t), c = best
            best_text = f"{_fmt(c.mean, c.std)} ({column_name(v, t)})"
        beat = "-"
        if best is not None and pb is not None:
            beat = "yes" if best[1].mean < pb[1] else "**no**"
        not_worse = "-"
        if best_nc is not None and constant is not None:
            (v, t), c = best_nc
            ok = c.mean <= constant.mean
            not_worse = ("yes" if ok else "**no**") + f" ({column_name(v, t)} {_fmt(c.mean)})"
        lines.append(
            f"| {_eps(eps)} | {best_text} | "
            + (f"{pb[1]:g} ({pb[0]})" if pb else "-")
            + f" | {_fmt(constant.mean, constant.std) if constant else '-'} | "
            + (_fmt(product.mean, product.std) if product else "-")
            + f" | {beat} | {not_worse} |"
        )
    return "\n".join(lines)


def full_n_cells(cells: dict[tuple, Cell], model: str) -> int | None:
    sizes = [n for (m, n, *_rest) in cells if m == model]
    return max(sizes) if sizes else None


def rp_comparison(cells: dict[tuple, Cell], model: str, n_train: int) -> str:
    """RPWithPrior with our automatic choice vs the paper's hand-tuned Table 5 parameters.

    RP-T5 gets its best transform on the test data (as its zeta was tuned); RP-auto (engine
    default model_dim), RP-auto-d (model_dim = d) and RP-auto-net (model_dim measured for the
    papers' network) are judged with the transform they recommend (``rec``; the features
    party's ``auto`` model chooses its own); RP-auto's best transform is for reference only.
    """
    automatic = [
        v for v in ("rp_auto_d", "rp_auto_net", "rp_auto_t5s") if any(k[2] == v for k in cells)
    ]
    lines = [
        "| eps | RP-T5, best transform | RP-auto, recommended transform | RP-auto, best transform "
        "| RP-auto rec <= T5? |"
        + "".join(
            f" {SHORT[v]}, recommended transform | {SHORT[v]} rec <= T5? |" for v in automatic
        ),
        "|---|---|---|---|---|" + "---|---|" * len(automatic),
    ]

    def options(variant: str, eps: float) -> dict[str, Cell]:
        return {
            t: c
            for (m, n, vv, t, e), c in cells.items()
            if m == model and n == n_train and vv == variant and e == eps
        }

    def judged(found: dict[str, Cell], c5: Cell) -> tuple[str, str]:
        rec = found.get("rec") or found.get("auto")
        if rec is None:
            return "-", "-"
        rec_text = _fmt(rec.mean, rec.std) + (
            " (" + ", ".join(sorted({str(x.get("mech_transform")) for x in rec.extras})) + ")"
            if "rec" in found
            else " (features party's)"
        )
        verdict = (
            "yes"
            if rec.mean <= c5.mean
            else ("no, within 1 sd" if rec.mean <= c5.mean + max(c5.std, rec.std) else "**no**")
        )
        return rec_text, verdict

    for eps in _epsilons(cells, model, n_train):
        if math.isinf(eps):
            continue
        t5, auto = options("rp_paper", eps), options("rp_auto", eps)
        if not t5 or not auto:
            continue
        tp, c5 = min(t5.items(), key=lambda tc: tc[1].mean)
        ta, ca = min(((t, c) for t, c in auto.items() if t != "rec"), key=lambda tc: tc[1].mean)
        rec_text, verdict = judged(auto, c5)
        more = "".join(" {} | {} |".format(*judged(options(v, eps), c5)) for v in automatic)
        lines.append(
            f"| {_eps(eps)} | {_fmt(c5.mean, c5.std)} ({tp}) | {rec_text} | "
            f"{_fmt(ca.mean, ca.std)} ({ta}) | {verdict} |{more}"
        )
    return "\n".join(lines)


def _spearman(x: np.ndarray, y: np.ndarray) -> float:
    from scipy.stats import spearmanr

    ok = np.isfinite(x) & np.isfinite(y)
    if ok.sum() < 3:
        return math.nan
    return float(spearmanr(x[ok], y[ok]).statistic)


def _pairwise(groups: dict[Any, list[tuple[float, float]]]) -> float:
    """Share of same-epsilon pairs that the criterion orders as their test MSE (ties skipped)."""
    right = total = 0
    for items in groups.values():
        for (c1, t1), (c2, t2) in itertools.combinations(items, 2):
            if not (math.isfinite(c1) and math.isfinite(c2)) or c1 == c2 or t1 == t2:
                continue
            total += 1
            right += (c1 < c2) == (t1 < t2)
    return right / total if total else math.nan


def criterion_analysis(cells: dict[tuple, Cell], model: str, d: int) -> tuple[str, dict]:
    """Which of label MSE, bias^2, variance/n (or a mix) predicts the model's test MSE."""
    rows = []
    for (m, n, v, t, e), c in cells.items():
        if m != model or math.isinf(e) or v in ("constant", "nonprivate") or t in ("auto", "rec"):
            continue
        if not (math.isfinite(c.bias2) and math.isfinite(c.variance)):
            continue
        rows.append((n, e, v, t, c))
    if len(rows) < 4:
        return "_Not enough cells with statistics for this model._", {}
    nonprivate = {n: cells.get((model, n, "nonprivate", "raw", math.inf)) for n, *_ in rows}
    test = np.array([c.mean for *_, c in rows])
    excess = np.array(
        [c.mean - (nonprivate[n].mean if nonprivate[n] else 0.0) for n, _e, _v, _t, c in rows]
    )
    label = np.array([c.label_mse for *_, c in rows])
    target = np.array([c.target_mse for *_, c in rows])
    bias2 = np.array([c.bias2 for *_, c in rows])
    var_n = np.array([c.variance / n for n, *_rest, c in rows])
    keys = [(n, e) for n, e, *_ in rows]

    def pairwise(criterion: np.ndarray) -> float:
        groups: dict[Any, list[tuple[float, float]]] = defaultdict(list)
        for key, crit, t in zip(keys, criterion, test, strict=True):
            groups[key].append((float(crit), float(t)))
        return _pairwise(groups)

    ks = [0.0, 1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1000.0, 3000.0, 10000.0]
    mix = {k: pairwise(bias2 + k * var_n) for k in ks}
    best_k = max(mix, key=lambda k: (mix[k] if math.isfinite(mix[k]) else -1, -abs(k - d)))
    candidates = {
        "label MSE of the raw noisy labels (the old least-label-MSE `auto`)": label,
        "MSE of the training targets (after the transform)": target,
        "bias^2 of the targets": bias2,
        "variance / n of the targets": var_n,
        f"bias^2 + d * variance / n (d = {d} features)": bias2 + d * var_n,
        f"bias^2 + {best_k:g} * variance / n (best k on this grid, in-sample)": bias2
        + best_k * var_n,
    }
    lines = [
        f"{len(rows)} cells (mechanism x transform x finite epsilon"
        + (", several n" if len({n for n, *_ in rows}) > 1 else "")
        + f"), model `{model}`. Spearman rank correlation with the excess test MSE over the "
        "non-private model, and the share of same-epsilon pairs of cells the criterion puts in "
        "the same order as their test MSE (what a selection rule needs).",
        "",
        "| criterion | Spearman vs excess test MSE | same-epsilon pairs ordered right |",
        "|---|---|---|",
    ]
    summary = {}
    for name, values in candidates.items():
        rho, acc = _spearman(values, excess), pairwise(values)
        summary[name] = (rho, acc)
        lines.append(f"| {name} | {rho:.2f} | {acc:.0%} |")
    lines.append("")
    lines.append(
        "Pairwise accuracy of bias^2 + k variance/n by k: "
        + ", ".join(f"k={k:g}: {acc:.0%}" for k, acc in mix.items())
    )
    return "\n".join(lines), {"best_k": best_k, "mix": mix, "summary": summary}


def debias_vs_n(cells: dict[tuple, Cell], model: str) -> str:
    sizes = sorted({n for (m, n, *_r) in cells if m == model})
    if len(sizes) < 2:
        return ""
    lines = [
        f"Model `{model}`: test MSE of raw vs debiased targets by training-set size "
        "(same test sets; smaller n are random subsets of the training split).",
        "",
        "| mechanism | eps | " + " | ".join(f"n={n} raw / deb" for n in sizes) + " |",
        "|---|---|" + "---|" * len(sizes),
    ]
    variants = sorted({v for (m, _n, v, t, _e) in cells if m == model and t == "debiased"})
    epsilons = sorted({e for (m, _n, _v, t, e) in cells if m == model and t == "debiased"})
    for v in variants:
        for e in epsilons:
            texts = []
            for n in sizes:
                raw = cells.get((model, n, v, "raw", e))
                deb = cells.get((model, n, v, "debiased", e))
                if raw is None or deb is None:
                    texts.append("")
                    continue
                mark = "**deb**" if deb.mean < raw.mean else "raw"
                texts.append(f"{_fmt(raw.mean)} / {_fmt(deb.mean)} ({mark})")
            if sum(bool(text) for text in texts) >= 2:  # only cells measured at several n
                lines.append(f"| {SHORT.get(v, v)} | {_eps(e)} | " + " | ".join(texts) + " |")
    return "\n".join(lines)


def plot(cells: dict[tuple, Cell], dataset: str, model: str, n_train: int, path: Path) -> None:
    """Test MSE against epsilon (log x, log y), ours solid, the papers' reported numbers dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 6.5))
    finite = [e for e in _epsilons(cells, model, n_train) if math.isfinite(e)]
    cmap = plt.get_cmap("tab20")
    for i, (v, t) in enumerate(_columns(cells, model, n_train)):
        xs = [e for e in finite if (model, n_train, v, t, e) in cells]
        ys = [cells[(model, n_train, v, t, e)].mean for e in xs]
        style: dict[str, Any] = {"color": cmap(i % 20)}
        if v == "constant":
            style = {"color": "black", "linestyle": ":", "linewidth": 2}
        ax.plot(xs, ys, marker="o", markersize=3, label=column_name(v, t), **style)
    nonprivate = cells.get((model, n_train, "nonprivate", "raw", math.inf))
    if nonprivate is not None:
        ax.axhline(nonprivate.mean, color="grey", linewidth=1, label="non-private (eps = inf)")
    table = papers.paper_table(dataset)
    for j, column in enumerate(papers.COLUMNS):
        xs = [e for e in table if math.isfinite(e)]
        if xs:
            ax.plot(
                xs,
                [table[e][column][0] for e in xs],
                linestyle="--",
                linewidth=1,
                color=plt.get_cmap("Dark2")(j),
                label=f"paper: {column}",
            )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("total epsilon (log scale)")
    ax.set_ylabel("test MSE (log scale)")
    ax.set_title(f"{dataset}: {MODEL_TITLES.get(model, model)}, n_train = {n_train}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2, loc="upper right")
    fig.tight_layout()
    save_chart(fig, path)
    plt.close(fig)


def save_chart(fig: Any, path: Path) -> None:
    """``fig`` as a 256-colour palette PNG: a line chart has few colours (the anti-aliasing
    aside), so a median-cut palette without dithering looks the same at about 30% of the bytes
    of the RGBA PNG (192 -> 57 KB for the nonlinear MLP chart); the committed results stay small."""
    from PIL import Image

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90)
    buffer.seek(0)
    with Image.open(buffer) as image:
        palette = image.convert("RGB").quantize(
            colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE
        )
    palette.save(path, optimize=True)


def write_report(
    data: Dataset, records: Sequence[Record], *, out_dir: Path, command_lines: Sequence[str]
) -> Path:
    """Write ``accuracy_<dataset>.md`` and its PNGs into ``out_dir``; return the md path."""
    records = reported(records)
    cells = aggregate(records)
    models = [m for m in ("mlp", "ridge", "gbm", "auto") if any(r.model == m for r in records)]
    parts = [
        f"# Accuracy benchmark: {data.name}",
        "",
        headline(cells, data.name),
        "",
        headline_legend(cells, data.name),
        "",
        "## What was run (exactly)",
        "",
        f"{data.description}. Label bounds (public, fixed before reading labels): "
        f"{data.bounds_source}. Label variance (= test MSE of a constant predictor at the "
        f"exact mean): {float(np.var(data.y)):.4g}.",
        "",
        f"Generated by `bench/accuracy` at commit {_git_commit()} from "
        f"`bench/accuracy/records/{data.name}.jsonl.gz` (records of retired variants are kept "
        "there and not shown). Commands that produced the records:",
        "",
        *[f"    {line}" for line in command_lines],
        "",
        runs_summary(records),
        "",
        "Trials use different seeded 80/20 splits; total epsilon = epsilon1 + epsilon2 for the "
        "two-step mechanisms (see `bench/accuracy/mechanisms.py`). Every prior is the "
        "epsilon1-DP histogram (exact discrete Laplace, 64 cells), never the raw labels; the "
        "DP constant is the epsilon-DP mean of the clipped labels (discrete Laplace on the "
        "rounded sum), so every cell below is honestly private at its epsilon (Gaussian: "
        "(epsilon, 1e-5)).",
        "",
        "Legend: Lap-clip / Lap = Laplace clipped / unclipped; Stair(-d) = staircase "
        "(discrete); Exp = exponential; RRoB = RR-on-Bins; RP-T5 = RPWithPrior with the "
        "paper's Table 5 split and zeta (Algorithm 1 interval); RP-auto = RPWithPrior as the "
        "pipeline chooses it by default (RPWithPrior's own split, "
        "`adaptive_bins(n, epsilon1)` cells, "
        "(A1, A2, zeta) among the RPWithPrior candidates of `shared.selection` with the least "
        "bias^2 + 10 Var / n; the records of the earlier least-label-MSE RP-auto were "
        "deleted); RP-auto-d = the same with the release parameter `model_dim` = d, the "
        "publisher's number of features (the features party resolves its own transform with "
        "d); RP-auto-net = the same with `model_dim` measured for the papers' network on the "
        "features alone (`bench.model_dim.noise_model_dim`: trained on pure noise); "
        "RP-auto-t5s = RP-auto with Table 5's epsilon split where it lists one, else the split "
        "RR-on-Bins / auto share (isolates the split); "
        "RRwP = RRWithPrior; "
        'Unb = Unbiased; auto = the labels party\'s `mechanism="auto"` (records from commits '
        "before the engine's selection change: least label MSE on 64 cells; after it: "
        "`adaptive_bins(n, epsilon1)` cells and the least bias^2 + 10 Var / n, "
        "`shared.selection`); auto-net = auto with `model_dim` measured for the papers' "
        "network, as RP-auto-net; "
        "`auto rec` / `RP-auto rec` / `RP-auto-d rec` = with the transform it recommends; "
        "`deb` = debiased targets (noisy - b) / a; "
        "`(auto t.)` = transform chosen by the features party.",
    ]
    analysis_stats = {}
    for model in models:
        n_train = full_n(records, model)
        assert n_train is not None
        png = out_dir / f"accuracy_{data.name}_{model}.png"
        plot(cells, data.name, model, n_train, png)
        parts += [
            "",
            f"## Model `{model}`: {MODEL_TITLES[model]}",
            "",
            f"### Summary (n_train = {n_train})",
            "",
            model_summary(cells, data.name, model, n_train),
            "",
            "### Test MSE, mean ± std over trials (best per row in bold)",
            "",
            mse_table(cells, model, n_train),
            "",
            "### Mechanism label MSE (noisy vs true training labels; `deb` columns: debiased "
            "targets vs true labels)",
            "",
            mse_table(cells, model, n_train, stat="label"),
            "",
            "### RPWithPrior: automatic choice vs the paper's hand-tuned Table 5",
            "",
            rp_comparison(cells, model, n_train),
            "",
            "### What predicts the model's test MSE",
            "",
        ]
        text, stats = criterion_analysis(cells, model, data.d)
        analysis_stats[model] = stats
        parts += [text, "", f"![test MSE vs epsilon, {model}]({png.name})"]
        sweep = debias_vs_n(cells, model)
        if sweep:
            parts += ["", "### Debiasing as n grows", "", sweep]
    parts += [
        "",
        "## The papers' reported numbers",
        "",
        f"Source: {papers.SOURCES.get(data.name, 'none')}; copied as printed (best per row in "
        "bold). Their RPWithPrior column is not honestly private (../shared/papers/README.md).",
        "",
        paper_table_md(data.name),
    ]
    discussion = ANALYSIS_DIR / f"{data.name}.md"
    if discussion.is_file():
        parts += ["", discussion.read_text(encoding="utf-8").rstrip()]
    path = out_dir / f"accuracy_{data.name}.md"
    path.write_text("\n".join(parts) + "\n", encoding="utf-8")
    return path
