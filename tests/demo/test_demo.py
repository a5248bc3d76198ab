"""``labeldp demo`` end to end (real processes), and the synthetic data it ships with."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest

from demo.synthetic_ads import CATEGORICAL, LABEL_MAX, NUMERIC, make_ads
from features_party.training import fit_encoder, fit_model
from labeldp.cli import main as labeldp

SUMMARY_KEYS = {
    "epsilon_spent",
    "epsilon_left",
    "mechanism",
    "mse_private",
    "mse_nonprivate",
    "mse_constant",
    "n_train",
    "n_test",
}


def run_demo(*args: str, timeout: float = 300) -> dict:
    """``labeldp demo --json`` in a subprocess; returns the parsed summary."""
    done = subprocess.run(
        [sys.executable, "-m", "labeldp", "demo", "--json", "--quiet", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def test_synthetic_ads_are_heavy_tailed_and_learnable():
    features, labels = make_ads(30_000, seed=5)
    assert set(features) == set(CATEGORICAL) | set(NUMERIC)
    assert all(len(column) == labels.size for column in features.values())
    assert labels.min() == 0.0 and labels.max() <= LABEL_MAX
    converted = labels[labels > 0]
    assert 0.08 < converted.size / labels.size < 0.3  # most clicks do not convert
    assert np.quantile(converted, 0.99) > 4 * np.median(converted)  # heavy tail
    again, labels_again = make_ads(30_000, seed=5)
    np.testing.assert_array_equal(labels, labels_again)
    assert not np.array_equal(make_ads(30_000, seed=6)[1], labels)
    # The label depends on the features: a model beats the mean on held-out rows.
    kinds = [(c, "categorical") for c in CATEGORICAL] + [(c, "numeric") for c in NUMERIC]
    encoder = fit_encoder(kinds, features)
    X = encoder.encode_columns(features)
    fitted = fit_model(X[:20_000], labels[:20_000], encoder=encoder, model="ridge", seed=0)
    test = labels[20_000:]
    mse = np.mean((fitted.predict_matrix(X[20_000:]) - test) ** 2)
    assert mse < 0.85 * np.mean((labels[:20_000].mean() - test) ** 2)


@pytest.mark.integration
def test_demo_at_epsilon_8_is_within_10_percent_of_non_private():
    summary = run_demo("--epsilon", "8", "--n", "40000", "--clean")
    assert SUMMARY_KEYS <= set(summary)
    # exact decimal amounts, as the labels party reports them
    assert (Decimal(summary["epsilon_spent"]), Decimal(summary["epsilon_left"])) == (8, 2)
    assert (summary["n_train"], summary["n_test"]) == (32_000, 8_000)
    # The synthetic data segment by campaign by default (--segment none turns it off).
    assert summary["segment_column"] == "campaign" and summary["mechanism"] == "segmented"
    assert summary["mse_nonprivate"] < 0.8 * summary["mse_constant"]
    assert summary["mse_private"] <= 1.10 * summary["mse_nonprivate"], summary


@pytest.mark.integration
def test_demo_at_epsilon_005_is_no_worse_than_the_constant_mean():
    summary = run_demo("--epsilon", "0.05", "--clean")  # the default n (100,000 rows)
    assert summary["n_train"] + summary["n_test"] == 100_000
    assert Decimal(summary["epsilon_spent"]) == Decimal("0.05")
    assert summary["mse_private"] <= 1.10 * summary["mse_constant"], summary


@pytest.mark.integration
def test_demo_on_a_csv_file_with_plot_and_a_verifiable_ledger(tmp_path: Path):
    rng = np.random.default_rng(0)
    path = tmp_path / "houses.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["house", "rooms", "district", "price"])
        for i in range(1500):
            rooms = int(rng.integers(1, 7))
            district = str(rng.choice(["north", "south", "east"]))
            price = 50 + 30 * rooms + (40 if district == "north" else 0) + rng.normal(0, 20)
            writer.writerow([f"h{i}", rooms, district, f"{price:.2f}"])
    plot = tmp_path / "demo.png"
    workdir = tmp_path / "work"
    summary = run_demo(
        "--data",
        str(path),
        "--label",
        "price",
        "--bounds",
        "0,400",
        "--id",
        "house",
        "--epsilon",
        "2",
        "--plot",
        str(plot),
        "--workdir",
        str(workdir),
    )
    assert (summary["n_train"], summary["n_test"]) == (1200, 300)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert summary["mse_private"] < summary["mse_constant"]
    ledger = Path(summary["ledger"]["database"])
    assert ledger.parent == workdir and ledger.exists()
    verify = subprocess.run(
        [sys.executable, "-m", "labeldp", "ledger", "verify", "--db", str(ledger)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--data", "x.csv", "--label", "y"], "--bounds"),
        (["--n", "5"], "--n"),
        (["--epsilon", "0"], "--epsilon"),
        (["--epsilon-histogram", "lots"], "--epsilon-histogram"),
        (["--data", "/nonexistent.csv", "--label", "y", "--bounds", "0,1"], "nonexistent"),
        (["--data", "x.csv", "--label", "y", "--bounds", "5,1"], "lo"),
        (["--n", "200", "--segment", "region"], "--segment"),
        # found by the CLI audit (tracebacks after both services started, or options ignored)
        (["--epsilon", "inf"], "--epsilon (inf) must be a finite number > 0"),
        (["--budget", "nan"], "--budget (nan) must be a finite number > 0"),
        (["--epsilon-histogram", "inf"], "--epsilon-histogram (inf) must be a finite number"),
        (["--seed", "-1"], "--seed (-1) must be >= 0"),
        (["--bounds", "0,10", "--label", "y"], "--label, --bounds describe --data"),
        (["--plot", "/nonexistent/p.png"], "--plot /nonexistent/p.png: its folder does not exist"),
    ],
)
def test_demo_bad_arguments_exit_2_with_a_message(capsys, args, message):
    assert labeldp(["demo", "--quiet", *args]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"y,x\n\xff\xfe,2\n", "not UTF-8 text"),
        (b"y,x\n1," + b"a" * 200_000 + b"\n", "line 2: field larger than field limit"),
        (b"y,x\n1,2\n", "1 data rows; the demo needs at least 100"),
    ],
    ids=["not UTF-8", "a huge cell", "one row"],
)
def test_a_data_file_the_demo_cannot_use_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, message: str
) -> None:
    """Found by the CLI audit: the codec's words alone, a traceback, and a one-row file that
    started both services before failing."""
    path = tmp_path / "data.csv"
    path.write_bytes(content)
    assert (
        labeldp(["demo", "--quiet", "--data", str(path), "--label", "y", "--bounds", "0,10"]) == 2
    )
    assert f"labeldp demo: {path}: {message}" in capsys.readouterr().err
