"""Empirical privacy audit of ePTR-Bayes with constants chosen by the product (issue 22, item 3;
``shared.estimators.bayes.eptr_bayes_chosen``), with the harness of ``test_constants_audit``
(``tests.privacy.auditor``). r_x's estimate is ePTR-OLS's sparse vector, audited there; here:

- c0's estimate, the smallest class count plus Laplace(1 / epsilon): one example's label moved
  out of the smallest class (the move that reaches the sensitivity 1);
- the whole release (r_x, c0, then ePTR-Bayes) on 17 examples: one example from (0, class 0)
  to (far out, class 1), its joint output against the request's (epsilon, delta).

Measured lower bounds (the seeds here): the count 0.88 of 1; the whole release 0.29 of 16 (a
sanity check of the composition: the continuous outputs are cut into few levels). Flake
budget: at most ``FAMILY_ALPHA`` = 0.001 over the audits here (the seeds are fixed). The
analytic checks are in tests/estimators/test_bayes_constants.py (the sensitivities by brute
force).
"""

from __future__ import annotations

import numpy as np
import pytest

from shared.estimators import bayes as B
from tests.privacy.auditor import Sampler, repeat
from tests.privacy.test_constants_audit import ConstantsCase, audit_case

FAMILY_ALPHA = 1e-3
# Class 0 is the smallest (3 + the moved example), classes 1 and 2 have 6 each.
BASE = np.array([0] * 3 + [1] * 6 + [2] * 6)


def count_sampler(*, epsilon: float) -> Sampler:
    """c0's estimate with the last example's class given by ``labels`` (0 against 1)."""

    def one(last: np.ndarray, rng: np.random.Generator) -> float:
        classes = np.append(BASE, int(last[0]))
        return B.noisy_min_count(classes, n_classes=3, epsilon=epsilon, rng=rng)

    return repeat(one)


# The whole release on 17 examples in two classes, one feature: the first example moves.
rng0 = np.random.default_rng(2026)
WHOLE_X = np.concatenate([rng0.normal(-1.0, 0.5, 8), rng0.normal(1.0, 0.5, 8)])[:, None]
WHOLE_Y = np.array([0] * 8 + [1] * 8)
WHOLE_EPSILON, WHOLE_DELTA = 16.0, 0.01


def whole_sampler() -> Sampler:
    """ePTR-Bayes with r_x and c0 chosen: (r_x, c0, priors, means) of one release; ``labels`` =
    the first example's (feature, class)."""
    split = B.bayes_split(epsilon=WHOLE_EPSILON, delta=WHOLE_DELTA, chosen=B.BAYES_CONSTANTS)

    def one(example: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        x = np.vstack([[example[0]], WHOLE_X])
        y = np.concatenate([[int(example[1])], WHOLE_Y])
        out = B.eptr_bayes_chosen(x, y, n_classes=2, split=split, rng=rng)
        return np.array([out.r_x, out.c0, *out.fit.priors, *out.fit.means.ravel()])

    def sampler(labels: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
        return np.array([one(labels, rng) for _ in range(size)])

    return sampler


CASES = [
    ConstantsCase("smallest count: a label out of the smallest class", count_sampler(epsilon=1.0),
              (0.0,), (1.0,), 1.0, 4_000, 20_000),
    ConstantsCase("whole release, one example far out in the other class", whole_sampler(),
              (0.0, 0.0), (50.0, 1.0), WHOLE_EPSILON, 1_500, 6_000, delta=WHOLE_DELTA,
              max_levels=6),
]  # fmt: skip
ALPHA = FAMILY_ALPHA / len(CASES)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_bayes_chosen_constants_pass_the_audit(case: ConstantsCase) -> None:
    result = audit_case(case, alpha=ALPHA)
    assert not result.violates, f"{case.name}: {result}"


def test_the_audit_flags_the_count_estimate_with_a_quarter_of_its_noise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Self-test: the smallest count with discrete Laplace(1 / (4 epsilon)) (a sensitivity
    bound four times too small) is caught at the claimed epsilon."""
    real = B.discrete_laplace_samples
    monkeypatch.setattr(
        B, "discrete_laplace_samples", lambda rng, scale, size: real(rng, scale / 4, size)
    )
    result = audit_case(CASES[0], alpha=ALPHA, claimed=False)
    assert result.violates, f"the audit missed a count estimate with too little noise: {result}"
