"""Empirical privacy audit of the DP estimates behind ePTR-OLS's chosen constants (issue 22,
item 3; ``shared.estimators.constants``), with the harness of ``test_empirical_audit``
(``tests.privacy.auditor``: the event chosen on selection samples, Clopper-Pearson bounds on
independent test samples). The neighbours change one WHOLE example (ePTR protects features and
label), chosen where each estimate moves most:

- r_x (sparse vector on the grid of radii): one row's norm moved from the middle of the others
  to far above them, and from below them all to above them all;
- lambda_min (Laplace, sensitivity r_x^2): a zero row against a row of norm r_x on the design's
  weakest direction (the move that reaches the sensitivity);
- the labels' mean square (Laplace, sensitivity 1 / n): one label from 0 to the bound;
- the whole release (all three estimates, then ePTR-OLS) on a small data set, its joint output
  against the request's (epsilon, delta): one example from (0, 0) to (far out, the bound).

Measured lower bounds (the seeds here): r_x 0.29 of 1 and 0.79 of 2 (the sparse vector's
analysis is worst-case over the threshold noise, rarely tight for one change), lambda_min 0.86
of 1, the mean square 0.88 of 1, the whole release 0.59 of 16 (a sanity check of the
composition: at n = 16 ePTR mostly answers "no reply").

Flake budget: the probability that any audit here fails although every estimate is as private
as claimed is at most ``FAMILY_ALPHA`` = 0.001, split evenly over the audits (the seeds are fixed,
so a given tree passes or fails every time). The analytic checks are in
tests/estimators/test_constants.py (the sparse vector's exact output distribution; the
sensitivities by brute force).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from shared.estimators import constants as C
from shared.estimators.ols import eptr_design
from tests.privacy.auditor import AuditResult, Sampler, audit, repeat

FAMILY_ALPHA = 1e-3
RNG = np.random.default_rng(2026)
NORMS = np.exp(RNG.normal(0.0, 0.4, size=24))
MIDDLE = float(np.median(NORMS))


def quantile_sampler(*, epsilon: float) -> Sampler:
    """r_x's estimate: the released radius (a grid value)."""
    above = C.target_above(NORMS.size, epsilon)
    return repeat(
        lambda norms, rng: C.dp_norm_quantile(norms, epsilon=epsilon, above=above, rng=rng)
    )


# A design with a weak third direction: its zero row replaced by a row of norm R_X along it.
R_X = 2.0
DESIGN = np.vstack([np.diag([2.0, 2.0, 0.5]), np.diag([1.5, 1.5, 0.0]), np.zeros((1, 3))])


def lambda_sampler(*, epsilon: float) -> Sampler:
    """lambda_min's estimate for the design whose last row is ``labels`` (its weak-axis
    coordinate): a zero row against (0, 0, R_X)."""

    def one(last: np.ndarray, rng: np.random.Generator) -> float:
        design = DESIGN.copy()
        design[-1] = [0.0, 0.0, float(last[0])]
        rows = eptr_design(design, R_X)
        return C.noisy_lambda_min(rows, r_x=R_X, epsilon=epsilon, rng=rng)

    return repeat(one)


LABELS = np.array([1.0, -2.0, 0.5, 3.0, -1.0, 2.0, 0.0, -3.0, 1.5])
BOUND = 4.0


def moment_sampler(*, epsilon: float) -> Sampler:
    """The labels' mean square estimate, the first label moved (0 against the bound)."""

    def one(first: np.ndarray, rng: np.random.Generator) -> float:
        labels = np.concatenate([first, LABELS])
        return C.noisy_second_moment(labels, bound=BOUND, epsilon=epsilon, rng=rng)

    return repeat(one)


# The whole release on 16 examples, one feature and an intercept: the first example moves.
WHOLE_X = np.linspace(-1.0, 1.0, 15)[:, None]
WHOLE_Y = 0.8 * WHOLE_X[:, 0] + 0.1
# A large epsilon, so each estimate's part moves visibly under the one changed example.
WHOLE_EPSILON, WHOLE_DELTA = 16.0, 0.01


def whole_sampler() -> Sampler:
    """ePTR-OLS with every constant chosen: (r_x, c0, r_theta, slope, intercept) of one release;
    ``labels`` = the first example's (feature, label)."""
    split = C.ols_split(epsilon=WHOLE_EPSILON, delta=WHOLE_DELTA, chosen=C.OLS_CONSTANTS)

    def one(example: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        x = np.vstack([[example[0]], WHOLE_X])
        y = np.concatenate([[example[1]], WHOLE_Y])
        out = C.eptr_ols_chosen(
            x, y, split=split, lo=-BOUND, hi=BOUND, rng=rng, intercept=True, no_reply=-9.0
        )
        c = out.constants
        return np.array([c.r_x, c.c0, c.r_theta, *out.fit.coef])

    def sampler(labels: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
        return np.array([one(labels, rng) for _ in range(size)])

    return sampler


@dataclass(frozen=True)
class ConstantsCase:
    name: str
    sampler: Sampler
    a: tuple[float, ...]
    b: tuple[float, ...]
    epsilon: float
    n_select: int
    n_test: int
    delta: float = 0.0
    max_levels: int = 64


CASES = [
    ConstantsCase("r_x norm from the middle to far above", quantile_sampler(epsilon=1.0),
                  tuple(np.append(NORMS, MIDDLE)), tuple(np.append(NORMS, 1e6)), 1.0,
                  4_000, 20_000),
    ConstantsCase("r_x norm from below all to above all", quantile_sampler(epsilon=2.0),
                  tuple(np.append(NORMS, 0.0)), tuple(np.append(NORMS, 1e6)), 2.0,
                  4_000, 20_000),
    ConstantsCase("lambda_min zero row against the weak axis", lambda_sampler(epsilon=1.0),
                  (0.0,), (R_X,), 1.0, 4_000, 20_000),
    ConstantsCase("mean square label 0 against the bound", moment_sampler(epsilon=1.0),
                  (0.0,), (BOUND,), 1.0, 4_000, 20_000),
    ConstantsCase("whole release, one example far out", whole_sampler(), (0.0, 0.0),
                  (50.0, BOUND), WHOLE_EPSILON, 1_500, 6_000, delta=WHOLE_DELTA, max_levels=6),
]  # fmt: skip
ALPHA = FAMILY_ALPHA / len(CASES)


def _seed(name: str) -> int:
    return int.from_bytes(name.encode()[:8].ljust(8, b"\0"), "little") % 2**32 + len(name)


def audit_case(case: ConstantsCase, *, alpha: float, claimed: bool = True) -> AuditResult:
    """The audit of ``case`` at its claimed (epsilon, delta) (``claimed`` False: delta 0 and
    the default levels, as the self-tests run it), seeded by its name."""
    extra = {"delta": case.delta, "max_levels": case.max_levels} if claimed else {}
    return audit(
        case.sampler, np.array(case.a), np.array(case.b), epsilon=case.epsilon, alpha=alpha,
        n_select=case.n_select, n_test=case.n_test, seed=_seed(case.name), **extra,
    )  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_chosen_constants_estimates_pass_the_audit(case: ConstantsCase) -> None:
    result = audit_case(case, alpha=ALPHA)
    assert not result.violates, f"{case.name}: {result}"


def test_the_audit_flags_the_lambda_estimate_with_a_quarter_of_its_noise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Self-test: lambda_min's estimate with a quarter of its noise (a sensitivity bound four
    times too small) is caught at the claimed epsilon."""
    real = C.exact_laplace

    def quarter(value: float, *, sensitivity: float, epsilon: float, rng: Any) -> float:
        return real(value, sensitivity=sensitivity / 4, epsilon=epsilon, rng=rng)

    monkeypatch.setattr(C, "exact_laplace", quarter)
    result = audit_case(CASES[2], alpha=ALPHA, claimed=False)
    assert result.violates, f"the audit missed a lambda estimate with too little noise: {result}"
