"""Numba kernel for the epsilon1 step's exact statistics: one pass over the labels.

``label_statistics`` returns what :func:`shared.mechanisms.histogram.bin_counts` and
:func:`shared.mechanisms.private_mean.level_sum` return, computed with the same floating-point
expressions in the same order (so the same cells and levels, bit for bit; numba does not fuse
or reorder them without ``fastmath``), but in one pass without temporary arrays: at 10^6 labels
the two numpy versions make six full-size temporaries.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def label_statistics(
    labels: np.ndarray, lo: float, hi: float, bins: int, scale: float, levels: int, with_sum: bool
) -> tuple[np.ndarray, int]:
    """(cell counts, level sum) of ``labels`` clipped to [lo, hi].

    Cell: floor((y - lo) * scale) capped at bins - 1 with ``scale = bins / (hi - lo)``, as
    ``histogram.bin_index``; level: rint((y - lo) / (hi - lo) * levels), as
    ``private_mean.mean_levels`` (summed only ``with_sum``).
    """
    counts = np.zeros(bins, dtype=np.int64)
    total = 0
    span = hi - lo
    for i in range(labels.size):
        y = min(max(labels[i], lo), hi)
        cell = np.int64(np.floor((y - lo) * scale))
        if cell > bins - 1:
            cell = bins - 1
        counts[cell] += 1
        if with_sum:
            total += np.int64(np.rint((y - lo) / span * levels))
    return counts, total
