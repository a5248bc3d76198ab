"""Goodness-of-fit checks on the OS CSPRNG, which no seed can make repeatable.

A test on fresh (unseeded) randomness that fails whenever one sample's p-value is below alpha
fails by chance with probability alpha on every run: 22 such checks at 1e-4 fail about one CI
run in 450 for no reason (one did: ``test_system_random_integers_are_uniform[3]``, p = 6.7e-5,
on a sampler uniform over 10^8 further draws). :func:`assert_fits` draws a second, independent
sample when the first is rejected and fails only if that one is rejected too: a chance failure
has probability alpha^2, while a sampler that is really off is rejected by both samples.
"""

from __future__ import annotations

from collections.abc import Callable

ALPHA = 1e-4


def assert_fits(pvalue_of_fresh_draws: Callable[[], float], *, alpha: float = ALPHA) -> None:
    """Assert that a goodness-of-fit test on fresh draws is not rejected at ``alpha`` twice in a
    row; ``pvalue_of_fresh_draws`` draws a NEW sample on every call and returns its p-value."""
    first = float(pvalue_of_fresh_draws())
    if first > alpha:
        return
    second = float(pvalue_of_fresh_draws())
    assert second > alpha, (
        f"rejected on two independent samples: p = {first:.3g}, then {second:.3g} (alpha {alpha:g})"
    )
