"""bench.accuracy.segments: segmented against ordinary releases, run by run (a smoke run)."""

from __future__ import annotations

from bench.accuracy import data, segments


def test_segments_beat_the_constant_where_the_segments_carry_the_signal() -> None:
    """Two runs on 10,000 synthetic ad clicks at epsilon 2: the campaign segments make groups,
    and the segmented release's model is below the same run's DP constant."""
    rows = segments.runs(data.make_ads(10_000), epsilon=2.0, trials=range(2))
    assert len(rows) == 2
    for row in rows:
        assert row.groups >= 2
        assert 0.0 < row.segmented < 1.0, row
        assert 0.0 < row.ordinary < 1.1, row


def test_the_table_reports_medians_worsts_and_the_ratio() -> None:
    Run = segments.Run
    text = segments.table({"toy": {1.0: [Run(1.0, 0.9, 3), Run(0.8, 0.8, 4)]}})
    assert text.splitlines()[-1] == (
        "| toy | 1 | 2 | 3-4 | 0.900 / 1.000 | **0.850 / 0.900** | 0.950 / 1.000 |"
    )
