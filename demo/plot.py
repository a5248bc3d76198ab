"""``labeldp demo --plot``: noisy vs. true labels, and the three test MSEs (matplotlib, Agg)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


def plot_demo(
    path: Path, summary: dict[str, Any], true: np.ndarray, noisy: np.ndarray, *, seed: int = 0
) -> None:
    """Left: each training label against its noisy release (a sample of 5,000 points).

    Right: test MSE of the private model, the non-private model and the constant TRAIN mean.
    Only the demo, which plays both parties, can draw the left panel: the publisher never
    sees the true labels.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rng = np.random.default_rng(seed)
    sample = rng.choice(true.size, size=min(5000, true.size), replace=False)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    left.scatter(true[sample], noisy[sample], s=4, alpha=0.3)
    lo, hi = summary["label_bounds"]
    left.plot([lo, hi], [lo, hi], color="grey", linewidth=1, linestyle="--")
    left.set_xlabel("true label (advertiser only)")
    left.set_ylabel("noisy label in the message")
    left.set_title(f"{summary['mechanism']} at epsilon {summary['epsilon']:g}")
    names = ["private model", "non-private model", "constant (train mean)"]
    values = [summary["mse_private"], summary["mse_nonprivate"], summary["mse_constant"]]
    bars = right.bar(names, values, color=["tab:blue", "tab:green", "tab:grey"])
    right.bar_label(bars, fmt="%.1f")
    right.set_ylabel(f"test MSE ({summary['n_test']} held-out examples)")
    right.set_title("test MSE")
    if summary.get("synthetic"):
        fig.suptitle("SYNTHETIC ad-conversion data (demo/synthetic_ads.py)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
