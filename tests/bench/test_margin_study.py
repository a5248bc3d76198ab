"""bench.accuracy.margin_study: the registry swap is undone, and each choice's ratio is seen."""

from __future__ import annotations

import numpy as np

from bench.accuracy import margin_study
from shared import selection
from shared.mechanisms import registry
from shared.mechanisms.histogram import Prior


def test_family_as_swaps_and_restores_in_order() -> None:
    order, before = registry.names(), registry.get("unbiased")
    with margin_study.family_as("unbiased", in_auto=False):
        assert not registry.get("unbiased").in_auto
        assert registry.names() == order
    assert registry.names() == order and registry.get("unbiased") is before
    assert before.in_auto


def test_each_choice_records_the_unbiased_over_the_best_other_c() -> None:
    prior = Prior.from_samples(
        np.random.default_rng(3).uniform(0.0, 5.0, 5000), lo=0.0, hi=5.0, bins=16
    )
    seen: list[float] = []
    with margin_study.recorded_ratios(seen):
        chosen = selection.choose(prior, epsilon=2.0, n=10**6, model_dim=8)
    found = selection.candidates(prior, epsilon=2.0, n=10**6, model_dim=8)
    mine = min(c.score.criterion for c in found if c.name == "unbiased")
    other = min(c.score.criterion for c in found if c.name != "unbiased")
    assert seen == [mine / other]
    assert chosen == min(found, key=lambda c: c.score.criterion)  # unchanged: the least C
    assert selection.pick is not None and selection.pick.__module__ == "shared.selection"
