"""The accuracy harness: its --quick mode end to end, and the pieces its numbers rest on."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from bench.accuracy import __main__ as cli
from bench.accuracy import data, mechanisms, models, papers, report, runner

REPO_ROOT = Path(__file__).resolve().parents[2]
HAVE_CRIME = (data.DATASETS_DIR / "communities.data").is_file()
TWO_STEP = (
    "rr_on_bins",
    "rp_paper",
    "rp_auto",
    "rp_auto_d",
    "rp_auto_net",
    "rp_auto_t5s",
    "rr_with_prior",
    "unbiased",
    "auto",
    "auto_net",
)


def _run_quick(dataset: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> list[dict]:
    code = cli.main(
        ["--dataset", dataset, "--quick", "--model", "mlp,ridge", "--json", "--out", str(tmp_path)]
    )
    assert code == 0
    out = capsys.readouterr().out
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def _check_rows(rows: list[dict], dataset: str, tmp_path: Path) -> None:
    assert rows, "no JSON output"
    for row in rows:
        assert {"mechanism", "epsilon", "test_mse_mean", "test_mse_std", "label_mse_mean"} <= set(
            row
        )
        assert row["trials"] == 1
        assert math.isfinite(row["test_mse_mean"]) and row["test_mse_mean"] >= 0
    seen = {(r["model"], r["mechanism"], r["epsilon"]) for r in rows}
    for model in ("mlp", "ridge"):
        for eps in cli.QUICK_EPSILONS:
            assert (model, "constant", eps) in seen
            assert (model, "rp_auto", eps) in seen
            assert (model, "rr_on_bins", eps) in seen
    # Mechanism label MSE is reported for every randomized cell and, for the least-label-MSE
    # mechanism, shrinks with epsilon (RP-auto minimises bias^2 + 10 Var / n instead, which
    # may trade label MSE for less bias at a larger epsilon).
    lab = {
        r["epsilon"]: r["label_mse_mean"]
        for r in rows
        if r["model"] == "ridge" and r["mechanism"] == "rr_on_bins" and r["transform"] == "raw"
    }
    assert all(
        r["label_mse_mean"] is not None
        for r in rows
        if r["mechanism"] not in ("constant", "nonprivate") and r["transform"] == "raw"
    )
    assert lab[8.0] < lab[1.0] < lab[0.1]
    md = (tmp_path / f"accuracy_{dataset}.md").read_text()
    assert "## What was run (exactly)" in md
    assert "**" in md  # best cell per row marked
    assert (tmp_path / f"accuracy_{dataset}_mlp.png").stat().st_size > 1000


def test_quick_linear_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = _run_quick("linear", tmp_path, capsys)
    _check_rows(rows, "linear", tmp_path)


@pytest.mark.skipif(not HAVE_CRIME, reason="../shared/datasets is absent")
def test_quick_crime_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = _run_quick("crime", tmp_path, capsys)
    _check_rows(rows, "crime", tmp_path)
    md = (tmp_path / "accuracy_crime.md").read_text()
    assert "RPWithPrior arXiv Table 1" in md  # the papers' numbers beside ours


def test_missing_dataset_skips_cleanly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(data.LOADERS, "crime", lambda: data.load_crime(tmp_path))
    assert cli.main(["--dataset", "crime", "--quick"]) == 0
    assert "skipped" in capsys.readouterr().err
    with pytest.raises(data.DatasetUnavailable):
        data.load_housing(tmp_path)


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(SystemExit):
        cli.parse_args(["--dataset", "crime", "--epsilons", "0,1"])
    with pytest.raises(SystemExit):
        cli.parse_args(["--dataset", "crime", "--model", "svm"])
    with pytest.raises(SystemExit):
        cli.parse_args(["--dataset", "nope"])


def test_simulated_sets_follow_appendix_i() -> None:
    lin = data.make_linear(n=2000, d=5, seed=3)
    assert lin.x.shape == (2000, 5) and lin.lo == -lin.hi
    # y = X a exactly (the bounds clip essentially nothing at 4 sd).
    a, *_ = np.linalg.lstsq(lin.x, lin.y, rcond=None)
    assert np.allclose(lin.x @ a, lin.y, atol=1e-6 * lin.hi)
    nonlin = data.make_nonlinear(n=2000, d=5, seed=3)
    inside = nonlin.y < nonlin.hi
    assert np.allclose(nonlin.y[inside], np.exp(nonlin.x[inside]).sum(axis=1))


@pytest.mark.skipif(not HAVE_CRIME, reason="../shared/datasets is absent")
def test_real_sets_are_preprocessed_as_documented() -> None:
    crime = data.load_crime()
    assert crime.x.shape == (1994, 99)  # 100 attributes after the paper's drops, minus racepctblack
    assert abs(float(np.var(crime.y)) - 0.0543) < 5e-4
    housing = data.load_housing()
    assert housing.x.shape == (20640, 8)
    assert abs(float(np.var(housing.y)) - 1.3316) < 1e-3
    assert housing.y.max() <= 5.0


def test_splits_differ_by_trial_and_are_80_20() -> None:
    train0, test0 = runner.split_indices(1000, trial=0)
    train1, _ = runner.split_indices(1000, trial=1)
    assert test0.size == 200 and train0.size == 800
    assert not np.intersect1d(train0, test0).size
    assert not np.array_equal(train0, train1)


def test_cell_labels_are_seeded_and_independent_of_other_mechanisms() -> None:
    y = np.random.default_rng(1).uniform(0.0, 1.0, 500)
    kw = {"lo": 0.0, "hi": 1.0, "epsilon": 1.0, "trial": 0}
    alone = runner.draw_labels("toy", y, variants=["rp_auto"], **kw)
    together = runner.draw_labels("toy", y, variants=["rr_on_bins", "rp_auto"], **kw)
    again = runner.draw_labels("toy", y, variants=["rr_on_bins", "rp_auto"], **kw)
    assert np.array_equal(alone["rp_auto"].noisy, together["rp_auto"].noisy)
    assert np.array_equal(again["rr_on_bins"].noisy, together["rr_on_bins"].noisy)
    other_trial = runner.draw_labels("toy", y, variants=["rp_auto"], **{**kw, "trial": 1})
    assert not np.array_equal(other_trial["rp_auto"].noisy, alone["rp_auto"].noisy)


@pytest.mark.parametrize("eps", [0.05, 1.0, 8.0])
def test_accounting_adds_up_to_the_cell_epsilon(eps: float) -> None:
    y = np.random.default_rng(2).uniform(0.0, 5.0, 400)
    cell = runner.draw_labels(
        "housing",
        y,
        lo=0.0,
        hi=5.0,
        epsilon=eps,
        trial=0,
        variants=list(mechanisms.VARIANTS),
        model_dim_net=100,
    )
    assert set(cell) == set(mechanisms.VARIANTS)
    for key, labels in cell.items():
        built = labels.built
        assert math.isclose(built.epsilon1 + built.epsilon2, eps, rel_tol=1e-12), key
        two_step = key in TWO_STEP
        assert (built.epsilon1 > 0) == two_step, key
    # Table 5 (Housing): epsilon1 = 0.008 at eps = 1; RP-auto-t5s takes the same split.
    if eps == 1.0:
        assert cell["rp_paper"].built.epsilon1 == 0.008
        assert cell["rp_auto_t5s"].built.epsilon1 == 0.008


def test_a_prior_bought_with_another_epsilon1_is_never_reused() -> None:
    """The shared 64-cell prior costs the default epsilon1; a variant with another split must
    draw its own prior even when it also wants 64 cells (else its cell would be dishonest)."""
    y = np.random.default_rng(8).uniform(0.0, 5.0, 16000)
    ctx = mechanisms.CellContext(dataset="housing", y=y, lo=0.0, hi=5.0, epsilon=2.0)
    priors = runner.PriorCache()
    shared = mechanisms.shared_prior(ctx, priors, np.random.default_rng(1))
    rng = np.random.default_rng(2)
    same = mechanisms.VARIANTS["auto"].build(ctx, priors, rng)
    assert same.params["bins"] == 64 and same.epsilon1 == ctx.shared_split[0]
    assert same.message_prior is shared
    other = mechanisms.VARIANTS["rp_auto"].build(ctx, priors, rng)
    assert other.params["bins"] == 64 and other.epsilon1 != ctx.shared_split[0]
    assert other.message_prior is not shared


def test_target_stats_recover_bias_and_variance() -> None:
    rng = np.random.default_rng(5)
    y = rng.uniform(0.0, 1.0, 20_000)
    # A shrinking mechanism: noisy = 0.5 y + 0.25 + N(0, 0.1^2): affine (0.5, 0.25).
    draws = np.stack([0.5 * y + 0.25 + rng.normal(0.0, 0.1, y.size) for _ in range(5)])
    raw = runner._target_stats(y, draws, (0.5, 0.25), "raw")
    deb = runner._target_stats(y, draws, (0.5, 0.25), "debiased")
    expected_bias2 = float(np.mean((0.25 - 0.5 * y) ** 2))
    assert abs(raw["bias2"] - expected_bias2) < 2e-3
    assert abs(raw["variance"] - 0.01) < 1e-3
    assert deb["bias2"] < 1e-3 and abs(deb["variance"] - 0.04) < 3e-3
    assert abs(raw["label_mse"] - (expected_bias2 + 0.01)) < 2e-3


def test_transforms_follow_the_affine_expectation() -> None:
    built = mechanisms.Built(randomizer=None, epsilon1=0, epsilon2=1, affine=None, params={})
    assert mechanisms.transforms_for(built) == ("raw",)
    identity = mechanisms.Built(randomizer=None, epsilon1=0, epsilon2=1, affine=(1, 0), params={})
    assert mechanisms.transforms_for(identity) == ("raw",)
    shrink = mechanisms.Built(randomizer=None, epsilon1=0, epsilon2=1, affine=(0.5, 1), params={})
    assert mechanisms.transforms_for(shrink) == ("raw", "debiased")
    assert np.allclose(mechanisms.apply_transform(np.array([2.0]), (0.5, 1), "debiased"), [2.0])


def test_paper_tables_copied() -> None:
    crime = papers.paper_table("crime")
    assert len(crime) == 13 and crime[0.05]["RPWithPrior"] == (0.0679, 0.0070)
    assert papers.paper_best("housing")[1.0] == ("Staircase", 0.8862)
    assert papers.paper_best("crime")[math.inf] == ("RPWithPrior", 0.0177)
    assert papers.paper_table("ads") == {}


def test_pairwise_order_accuracy() -> None:
    groups = {"a": [(1.0, 10.0), (2.0, 20.0), (3.0, 15.0)]}
    assert report._pairwise(groups) == pytest.approx(2 / 3)


@pytest.mark.parametrize("eps", [0.1, 4.0])
def test_product_pipeline_resolves_auto_from_its_message_as_the_service(eps: float) -> None:
    """The labels party's ``auto`` carries its message fields; the features party's ``auto``
    model trains on the transform the service's job would resolve from that header."""
    from datetime import UTC, datetime

    from shared.debias import recommended_transform
    from shared.message import MessageHeader, NoisyHistogram, json_safe
    from shared.selection import default_model_dim

    ds = data.make_linear(n=600, d=5)
    y = ds.y[:480]
    cell = runner.draw_labels(
        ds.name, y, lo=ds.lo, hi=ds.hi, epsilon=eps, trial=0, variants=["auto", "rp_auto"], d=ds.d
    )
    rp_message = runner.message_of(cell["rp_auto"].built, y.size)
    assert rp_message is not None and rp_message.mechanism == "rpwithprior"
    built = cell["auto"].built
    message = runner.message_of(built, y.size)
    assert message is not None and message.mechanism == built.params["chosen"]
    header = MessageHeader(
        release_id="r",
        dataset=ds.name,
        created=datetime(2026, 1, 1, tzinfo=UTC),
        mechanism=message.mechanism,
        params=json_safe(built.randomizer.public_params()),
        epsilon1=built.epsilon1,
        epsilon2=built.epsilon2,
        label_min=ds.lo,
        label_max=ds.hi,
        default_label=ds.lo,
        histogram=NoisyHistogram(**json_safe(message.prior.to_dict())),
        n=y.size,
        body_sha256="0" * 64,
        model_dim=message.model_dim,
    )
    header = MessageHeader.model_validate_json(header.model_dump_json())  # as pulled
    # The plan's default d for this n and epsilon2, what the labels party chose for.
    assert header.model_dim == default_model_dim(y.size, built.epsilon2)
    expected = recommended_transform(header, model_dim=header.model_dim)
    split = models.prepare(ds.x[:480], ds.x[480:], lo=ds.lo, hi=ds.hi, standardize=False)
    _, extra = models.fit_features_party(
        split,
        cell["auto"].noisy,
        model="ridge",
        transform="auto",
        affine=built.affine,
        seed=1,
        message=message,
    )
    assert extra["label_transform"] == expected
    assert extra["label_transform_resolved"] == "header"


def test_rp_auto_d_is_the_engine_choice_with_model_dim_d() -> None:
    """RP-auto-d = ``build_mechanism("rpwithprior", model_dim=d)`` on the same noisy prior, with
    the transform the criterion recommends for d; RP-auto is the same with the plan's default
    d. Both at the labels party's RPWithPrior split, not the one RR-on-Bins / auto share, with
    the histogram's part of epsilon1 (the rest buys the DP label mean, as in the service)."""
    from shared import selection
    from shared.plan import default_split, release_mean_share, split_prior_epsilon
    from shared.randomizer import build_mechanism

    rng = np.random.default_rng(5)
    y = np.clip(rng.exponential(0.2, size=1500), 0.0, 1.0)
    ctx = mechanisms.CellContext(dataset="toy", y=y, lo=0.0, hi=1.0, epsilon=0.5, d=400)
    eps1, eps2 = default_split(0.5, n=y.size, mechanism="rpwithprior")
    assert eps1 < ctx.shared_split[0]
    built = {}
    for key in ("rp_auto", "rp_auto_d"):
        built[key] = mechanisms.VARIANTS[key].build(ctx, {}, np.random.default_rng(9))
    share = release_mean_share(eps1, eps2, n=y.size, lo=0.0, hi=1.0, mechanism="rpwithprior")
    assert share == 0.0  # RPWithPrior keeps its small epsilon1 for the histogram
    eps_hist, eps_mean = split_prior_epsilon(eps1, share)
    assert eps_mean is None and eps_hist == eps1
    bins = selection.adaptive_bins(y.size, eps_hist, max_bins=ctx.bins)
    prior = mechanisms.private_histogram(
        y, lo=0.0, hi=1.0, bins=bins, epsilon=eps_hist, rng=np.random.default_rng(9)
    )
    default = selection.default_model_dim(y.size, eps2)
    for key, dim in (("rp_auto", default), ("rp_auto_d", 400)):
        _, expected = build_mechanism(
            prior, epsilon=eps2, mechanism="rpwithprior", n=y.size, model_dim=dim
        )
        got = built[key]
        assert got.randomizer.public_params() == expected.public_params()
        assert got.params["transform"] == selection.recommended_transform(
            expected, prior, n=y.size, model_dim=dim
        )
    assert (
        built["rp_auto"].randomizer.public_params() != built["rp_auto_d"].randomizer.public_params()
    )
    # A model that averages noise over fewer labels per parameter wants less variance.
    scores = {
        key: selection.score(built[key].randomizer, prior, n=y.size, model_dim=400) for key in built
    }
    assert min(s.criterion for s in scores["rp_auto_d"].values()) <= min(
        s.criterion for s in scores["rp_auto"].values()
    )


def test_network_dim_variants_use_the_measured_model_dim() -> None:
    """RP-auto-net / auto-net: the network's model_dim is measured from features alone and is
    what their releases use; without it the variants are skipped, never silently defaulted."""
    from shared.plan import release_mean_share, split_prior_epsilon
    from shared.randomizer import build_mechanism

    ds = data.make_linear(n=600, d=5)
    split = models.prepare(ds.x[:480], ds.x[480:], lo=ds.lo, hi=ds.hi, standardize=False)
    dim = runner.network_model_dim(split, trial=0, mlp_epochs=cli.QUICK_EPOCHS)
    assert dim == runner.network_model_dim(split, trial=0, mlp_epochs=cli.QUICK_EPOCHS)
    assert 1 <= dim <= 480
    y = ds.y[:480]
    kw = {"lo": ds.lo, "hi": ds.hi, "epsilon": 1.0, "trial": 0, "d": ds.d}
    skipped: list[str] = []
    none = runner.draw_labels(ds.name, y, variants=["rp_auto_net"], log=skipped.append, **kw)
    assert none == {} and "rp_auto_net" in skipped[0]
    cell = runner.draw_labels(
        ds.name, y, variants=["rp_auto_net", "auto_net"], model_dim_net=1000, **kw
    )
    rp = cell["rp_auto_net"].built
    prior = mechanisms.private_histogram(
        y,
        lo=ds.lo,
        hi=ds.hi,
        bins=rp.params["bins"],
        epsilon=split_prior_epsilon(
            rp.epsilon1,
            release_mean_share(
                rp.epsilon1, rp.epsilon2, n=y.size, lo=ds.lo, hi=ds.hi, mechanism="rpwithprior"
            ),
        )[0],
        rng=np.random.default_rng(runner._seed("mechanism", 0, 1.0, "rp_auto_net")),
    )
    _, expected = build_mechanism(
        prior, epsilon=rp.epsilon2, mechanism="rpwithprior", n=y.size, model_dim=1000
    )
    assert rp.randomizer.public_params() == expected.public_params()
    assert rp.message_label_mean is None  # RPWithPrior releases buy no DP mean
    assert cell["auto_net"].built.message_mechanism in ("rpwithprior", "rr_on_bins")


def test_runs_summary_names_mechanisms_run_on_fewer_trials() -> None:
    """A row averaged over fewer splits than the rest must say so in "What was run"."""

    def rec(variant: str, trial: int) -> runner.Record:
        return runner.Record(
            dataset="toy",
            model="mlp",
            variant=variant,
            transform="raw",
            epsilon=1.0,
            trial=trial,
            n_train=100,
            n_test=25,
            test_mse=1.0,
            commit="abc1234",
        )

    full = [rec(v, t) for v in ("constant", "rp_auto") for t in range(3)]
    text = report.runs_summary([*full, rec("rr_on_bins", 0)])
    assert "| 3 (0, 1, 2); RRoB: 1 (0) |" in text
    assert "| 3 (0, 1, 2) |" in report.runs_summary(full)


def test_the_papers_network_is_anchored_on_a_messages_label_mean() -> None:
    """The anchor is part of the protocol: the network trained on targets whose mean is off is
    shifted to the message's (here exact) DP label mean, as the features party's models are."""
    from features_party.mean_anchor import LabelMean

    ds = data.make_linear(n=700, d=3)
    split = models.prepare(ds.x[:560], ds.x[560:], lo=ds.lo, hi=ds.hi, standardize=False)
    targets = np.full(560, ds.lo + 0.2 * (ds.hi - ds.lo))
    goal = ds.lo + 0.6 * (ds.hi - ds.lo)
    plain = models.fit_papers_mlp(split, targets, seed=0, epochs=cli.QUICK_EPOCHS)
    exact = LabelMean(value=goal, variance=0.0, lo=ds.lo, hi=ds.hi)
    anchored = models.fit_papers_mlp(
        split, targets, seed=0, epochs=cli.QUICK_EPOCHS, label_mean=exact
    )
    shift = float(np.mean(anchored - plain))
    assert shift > 0.3 * (ds.hi - ds.lo)
    assert abs(float(np.mean(anchored)) - goal) < 0.05 * (ds.hi - ds.lo)


def test_the_features_partys_auto_row_averages_every_split() -> None:
    """A split whose release offered only raw targets is filed under the features party's
    "auto" row too (that is what it chose), so the product row averages every split; a
    variant that never offers both transforms gets no "auto" row."""

    def record(variant: str, transform: str, trial: int, mse: float) -> runner.Record:
        return runner.Record(
            dataset="toy", model="auto", variant=variant, transform=transform, epsilon=0.05,
            trial=trial, n_train=100, n_test=20, test_mse=mse,
        )  # fmt: skip

    cells = report.aggregate(
        [
            record("auto", "auto", 0, 1.0),
            record("auto", "auto", 1, 3.0),
            record("auto", "raw", 2, 2.0),  # only raw targets were on offer in this split
            record("laplace", "raw", 0, 5.0),
        ]
    )
    product = cells[("auto", 100, "auto", "auto", 0.05)]
    assert (product.k, product.mean) == (3, 2.0)
    # No "raw" row of the one raw split: a subset's mean would read as a better cell.
    assert ("auto", 100, "auto", "raw", 0.05) not in cells
    assert ("auto", 100, "laplace", "auto", 0.05) not in cells


def test_headline_table_reads_the_cells_and_skips_retired_variants() -> None:
    """The table a results file opens with: at most 8 columns; the product row, the best
    non-constant mechanism per model, the DP constant and the exact-label row come from the
    cells, then the product over its best cell and over the DP constant (mean / worst split,
    paired by split); records of retired variants (auto_k) are ignored, not deleted."""

    def rec(model: str, variant: str, transform: str, eps: float, mse: float) -> runner.Record:
        return runner.Record(
            dataset="crime", model=model, variant=variant, transform=transform, epsilon=eps,
            trial=0, n_train=100, n_test=20, test_mse=mse,
        )  # fmt: skip

    records = [
        rec("auto", "auto", "auto", 1.0, 0.040),
        rec("auto", "rr_on_bins", "raw", 1.0, 0.030),
        rec("auto", "constant", "raw", 1.0, 0.010),  # the constant is its own column
        rec("auto", "auto_k", "raw", 1.0, 0.001),  # retired: never the best
        rec("auto", "nonprivate", "raw", math.inf, 0.020),
        rec("mlp", "rp_paper", "debiased", 1.0, 0.035),
        rec("mlp", "constant", "raw", 1.0, 0.050),
        rec("mlp", "nonprivate", "raw", math.inf, 0.018),
    ]
    assert [r.variant for r in report.reported(records)].count("auto_k") == 0
    lines = report.headline(report.aggregate(report.reported(records)), "crime").splitlines()
    assert len(lines[0].strip("|").split("|")) == 8
    assert lines[2] == (
        "| 1 | 0.04 | 0.03, RRoB | 0.035, RP-T5 deb | 0.0411 (RPWithPrior) | 0.05 | 1.333 | "
        "4.000 / 4.000 |"
    )
    assert lines[3] == "| no privacy | - | 0.02 | 0.018 | 0.0177 (RPWithPrior) | - | - | - |"
    # Without the papers' network and without paper numbers, those columns go.
    ads = [r for r in records if r.model == "auto"]
    head = report.headline(report.aggregate(report.reported(ads)), "ads").splitlines()[0]
    assert head.count("|") - 1 == 6 and "papers'" not in head


def test_records_are_kept_compressed_and_a_rerun_replaces_its_cell(tmp_path, monkeypatch):
    """Records live gzip-compressed (issue 23: they were 27.6 MB of the 33.8 MB tracked); a
    merge keeps every cell once and the same records compress to the same bytes."""
    monkeypatch.setattr(cli, "RECORDS_DIR", tmp_path)
    base = {"dataset": "toy", "model": "ridge", "transform": "raw", "n_train": 10, "n_test": 5}
    first = [
        runner.Record(**base, variant=v, epsilon=1.0, trial=0, test_mse=m)
        for v, m in (("auto", 1.0), ("constant", 2.0))
    ]
    cli._save_records("toy", first, "run 1")
    stored = (tmp_path / "toy.jsonl.gz").read_bytes()
    assert stored[:2] == b"\x1f\x8b"  # gzip
    rerun = [runner.Record(**base, variant="auto", epsilon=1.0, trial=0, test_mse=0.5)]
    records, commands = cli._save_records("toy", rerun, "run 2")
    assert commands == ["run 1", "run 2"]
    assert sorted((r.variant, r.test_mse) for r in cli._load_records("toy")) == [
        ("auto", 0.5),
        ("constant", 2.0),
    ]
    cli._save_records("toy", [], "run 3")
    again = (tmp_path / "toy.jsonl.gz").read_bytes()
    cli._save_records("toy", [], "run 4")
    assert (tmp_path / "toy.jsonl.gz").read_bytes() == again


def test_a_rerun_with_other_transforms_replaces_the_whole_run():
    """The features party's ``auto`` records "auto" when the message offers both transforms and
    "raw" otherwise: a rerun that fitted "raw" where the stored run fitted "auto" must not leave
    the old "auto" record beside it (the report averaged both as two splits: Crime at 0.1 showed
    a worst split of 1.141 that no current run had)."""
    base = {"dataset": "toy", "model": "auto", "n_train": 10, "n_test": 5, "epsilon": 0.1}
    old = [
        runner.Record(**base, variant="auto", transform="auto", trial=0, test_mse=9.0),
        runner.Record(**base, variant="auto", transform="auto", trial=1, test_mse=8.0),
        runner.Record(**base, variant="constant", transform="raw", trial=0, test_mse=2.0),
    ]
    new = [runner.Record(**base, variant="auto", transform="raw", trial=0, test_mse=1.0)]
    merged = cli.merge_records(old, new)
    assert sorted((r.variant, r.transform, r.trial, r.test_mse) for r in merged) == [
        ("auto", "auto", 1, 8.0),  # another split: kept
        ("auto", "raw", 0, 1.0),
        ("constant", "raw", 0, 2.0),  # another variant: kept
    ]
    cells = report.aggregate(report.reported(merged))
    assert sorted(cells[("auto", 10, "auto", "auto", 0.1)].by_trial) == [(0, 1.0), (1, 8.0)]


def test_out_of_the_box_with_raw_targets_only_is_still_the_product():
    """Where no split's message offered both transforms (every release picked a mechanism whose
    outputs are already unbiased), out of the box has "raw" records only: the product cell is
    that cell, not missing."""
    base = {"dataset": "toy", "model": "auto", "n_train": 10, "n_test": 5, "epsilon": 2.0}
    records = [
        runner.Record(**base, variant="auto", transform="raw", trial=t, test_mse=m)
        for t, m in ((0, 1.0), (1, 3.0))
    ]
    cells = report.aggregate(report.reported(records))
    assert ("auto", 10, "auto", "auto", 2.0) not in cells
    product = report.product_cell(cells, 10, 2.0)
    assert product is not None and product.mean == 2.0
    both = [*records, runner.Record(**base, variant="auto", transform="auto", trial=2, test_mse=5)]
    assert report.product_cell(report.aggregate(report.reported(both)), 10, 2.0).mean == 3.0
