"""Empirical privacy audit of every served mechanism and of the whole two-step release.

For each mechanism, neighbouring label sets chosen adversarially (labels at the bounds, beyond
them, at interval, window and bin edges, ties), outputs sampled many times from seeded numpy
Generators (``shared.rng.resolve_rng``), and a lower bound on epsilon from
``tests.privacy.auditor`` (event chosen on one part of the samples, Clopper-Pearson bounds on an
independent part). An audit fails when the bound exceeds the claimed epsilon. Deliberately broken
mechanisms (the self-test) must be flagged. Method and measured bounds: docs/privacy_audit.md.

Sample sizes (per label set; selection + test):
- RR-on-Bins, RPWithPrior and Unbiased (vectorised): 200,000 + 1,000,000 outputs;
- the discrete-Laplace histogram: 1,000 + 5,000 releases; the DP mean: 2,000 + 10,000;
- ePTR's release step (Algorithm 2, its Gaussian calibrated on the exact delta): 4,000 + 20,000,
  at the test's boundary (gamma = M against M - 1, estimates alpha apart), against (eps, delta);
  label-DP OLS (one label at either bound): 4,000 + 20,000;
- the whole release (``label_randomizer``): 500 + 2,500 releases, each audited four ways
  (joint output, the changed example's noisy label, histogram cell, DP mean) from the same
  samples; a segmented release (``shared.segments``, two one-example groups) two ways (joint
  output of both groups, the changed example's noisy label) against the one charge.

Flake budget: the family-wise probability that any product audit fails although the product is
as private as claimed is at most ``FAMILY_ALPHA`` = 0.001, split evenly (Bonferroni) over the
``PRODUCT_AUDITS`` audits: each is a test at confidence 1 - 0.001 / 35 (stricter than 99%).
The seeds are fixed, so a given tree either passes or fails every time; the budget bounds the
chance that a seed (or a numpy stream change) trips a false alarm. The self-test uses the same
per-audit alpha; its failure mode (a broken mechanism NOT flagged) is measured, not bounded:
every broken mechanism below clears its claim by a wide margin (docs/privacy_audit.md).
Runtime: 52 s of CPU on one core (measured; 2 min 20 s wall on a loaded shared machine).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

from shared import segments as seg
from shared.estimators.eptr import eptr_release, eptr_threshold
from shared.estimators.ols import label_dp_ols
from shared.mechanisms import histogram as histogram_module
from shared.mechanisms import rr_on_bins as rr_module
from shared.mechanisms.histogram import Prior, private_histogram
from shared.mechanisms.private_mean import private_mean
from shared.mechanisms.rp_with_prior import RPWithPrior, choose_parameters
from shared.mechanisms.rr_on_bins import RROnBins, optimal_bins_for_prior
from shared.mechanisms.unbiased import ExactUnbiased
from shared.mechanisms.unbiased import build as build_unbiased
from shared.plan import plan_release, split_prior_epsilon
from shared.randomizer import label_randomizer
from shared.randomizer import noisy_mean as randomizer_noisy_mean
from tests.privacy.auditor import (
    AuditResult,
    Sampler,
    audit,
    audit_samples,
    clopper_pearson,
    draw,
    epsilon_lower_bound,
    repeat,
    select_event,
)

FAMILY_ALPHA = 1e-3
LO, HI = 0.0, 10.0
# A public prior on [0, 10] (8 cells) to build served mechanisms from, as the pipeline does.
PRIOR = Prior(
    edges=np.linspace(LO, HI, 9), probs=np.array([0.3, 0.2, 0.1, 0.1, 0.1, 0.1, 0.05, 0.05])
)
BELOW, ABOVE = -1e9, 1e9  # far beyond the bounds


@dataclass(frozen=True)
class Case:
    """One audit: a sampler, two neighbouring label sets, the claimed epsilon and sample sizes."""

    name: str
    sampler: Sampler
    labels_a: tuple[float, ...]
    labels_b: tuple[float, ...]
    epsilon: float
    n_select: int
    n_test: int
    delta: float = 0.0

    def run(self, *, alpha: float, seed: int) -> AuditResult:
        return audit(
            self.sampler,
            np.array(self.labels_a),
            np.array(self.labels_b),
            epsilon=self.epsilon,
            alpha=alpha,
            n_select=self.n_select,
            n_test=self.n_test,
            seed=seed,
            delta=self.delta,
        )


def per_label(randomize: Callable[[np.ndarray, np.random.Generator], np.ndarray]) -> Sampler:
    """A sampler for a per-label randomizer: ``size`` independent outputs for the one label."""

    def sampler(labels: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
        (label,) = labels
        return np.asarray(randomize(np.full(size, label), rng), dtype=np.float64)

    return sampler


def rr_sampler(mechanism: RROnBins) -> Sampler:
    return per_label(mechanism.randomize)


def rp_sampler(mechanism: RPWithPrior, *, coarse: int | None = None) -> Sampler:
    """Output cell indices (``coarse`` buckets of equal size if given: a huge grid)."""

    def cells(labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        index = mechanism.randomize_cells(labels, rng)
        return index if coarse is None else index // (mechanism.grid_cells // coarse)

    return per_label(cells)


def histogram_sampler(*, bins: int, epsilon: float) -> Sampler:
    """The released prior's first cell probability (bins=2: the whole prior)."""
    return repeat(
        lambda labels, rng: private_histogram(
            labels, lo=LO, hi=HI, bins=bins, epsilon=epsilon, rng=rng
        ).probs[0]
    )


def eptr_sampler(*, epsilon: float, delta: float, alpha: float = 1.0) -> Sampler:
    """ePTR's release step (``shared.estimators.eptr.eptr_release``, Algorithm 2) on a data set
    summarised by its SaLBo value and its estimate: "labels" = (gamma, estimate). The output is
    the released value (the no-reply, -100, is an atom of its own)."""
    return repeat(
        lambda point, rng: float(
            eptr_release(
                np.array([point[1]]), gamma=float(point[0]), alpha=alpha, epsilon=epsilon,
                delta=delta, no_reply=-100.0, rng=rng,
            ).value[0]
        )
    )  # fmt: skip


# A public design for label-DP OLS: 6 rows, an intercept; the changed label is the first row's.
OLS_X = np.column_stack([np.array([0.0, 1.0, 2.0, 3.0, 4.0, 5.0]), np.ones(6)])


def ols_sampler(*, epsilon: float) -> Sampler:
    """Label-DP OLS (``shared.estimators.ols.label_dp_ols``): the released coefficients
    (slope, intercept), for labels that differ in the first row only (the other rows fixed)."""
    rest = np.array([2.0, 4.0, 6.0, 8.0, 5.0])

    def sampler(labels: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
        full = np.concatenate([labels, rest])
        return np.array(
            [label_dp_ols(OLS_X, full, lo=LO, hi=HI, epsilon=epsilon, rng=rng).coef
             for _ in range(size)]
        )  # fmt: skip

    return sampler


def mean_sampler(*, epsilon: float) -> Sampler:
    return repeat(lambda labels, rng: private_mean(labels, lo=LO, hi=HI, epsilon=epsilon, rng=rng))


VECTOR = {"n_select": 200_000, "n_test": 1_000_000}
HISTOGRAM = {"n_select": 1_000, "n_test": 5_000}
MEAN = {"n_select": 2_000, "n_test": 10_000}
EPTR = {"n_select": 4_000, "n_test": 20_000}
# ePTR's release test at its boundary: gamma = M against gamma = M - 1 (one example changed moves
# the SaLBo by at most 1), estimates alpha apart (what gamma > 0 certifies).
EPTR_M1 = eptr_threshold(epsilon=1.0, delta=1e-3)
EPTR_M4 = eptr_threshold(epsilon=4.0, delta=0.01)
RELEASE = {"n_select": 500, "n_test": 2_500}
# Few categories per column of a release: a joint event of three columns stays estimable.
RELEASE_LEVELS = 8

RR_1 = optimal_bins_for_prior(PRIOR, epsilon=1.0)  # 2 bins, threshold 3.75
RR_4 = optimal_bins_for_prior(PRIOR, epsilon=4.0)  # 4 bins
RR_8 = RROnBins(thresholds=[2.5, 5.0, 7.5], output_values=[1.0, 3.0, 6.0, 9.0], epsilon=8.0)
RR_WIDE = RROnBins(
    thresholds=np.arange(1, 32) / 3.2, output_values=np.arange(32) / 3.2, epsilon=0.1
)
THRESHOLD = float(RR_1.thresholds[0])
# A small output grid makes every cell an event the auditor can pick: windows of 8 cells.
RP_1 = RPWithPrior(a1=2.0, a2=8.0, zeta=1.0, epsilon=1.0, grid_cells=64)
RP_4 = RPWithPrior(a1=2.0, a2=8.0, zeta=1.0, epsilon=4.0, grid_cells=64)
RP_SMALL = RPWithPrior(a1=2.0, a2=8.0, zeta=1.0, epsilon=0.1, grid_cells=64)
RP_UNIFORM = RPWithPrior(a1=2.0, a2=8.0, zeta=1.0, epsilon=1.0, grid_cells=64, outside="uniform")
RP_SERVED = choose_parameters(PRIOR, epsilon=1.0)  # the served 2^24-cell grid
# The exact unbiased randomizer as served (input grid: PRIOR's 9 edges; a handful of outputs).
UNB_1 = build_unbiased(PRIOR, epsilon=1.0)
UNB_4 = build_unbiased(PRIOR, epsilon=4.0)
UNB_SMALL = build_unbiased(PRIOR, epsilon=0.1)


def unbiased_sampler(mechanism: ExactUnbiased) -> Sampler:
    return per_label(mechanism.randomize)


MECHANISM_CASES = [
    # RR-on-Bins: the two bounds, the two sides of a threshold, beyond the bounds, ties.
    Case("rr bounds", rr_sampler(RR_1), (LO,), (HI,), 1.0, **VECTOR),
    Case("rr threshold edge", rr_sampler(RR_1), (THRESHOLD,), (np.nextafter(THRESHOLD, LO),),
         1.0, **VECTOR),
    Case("rr beyond bounds", rr_sampler(RR_4), (BELOW,), (ABOVE,), 4.0, **VECTOR),
    Case("rr tie in one bin", rr_sampler(RR_4), (0.0,), (1.25 - 1e-12,), 4.0, **VECTOR),
    Case("rr eps 8", rr_sampler(RR_8), (2.5,), (np.nextafter(2.5, LO),), 8.0, **VECTOR),
    Case("rr 32 outputs eps 0.1", rr_sampler(RR_WIDE), (LO,), (HI,), 0.1, **VECTOR),
    # RPWithPrior: interval ends, beyond them, windows just touching, the uniform rule's edge.
    Case("rp interval ends", rp_sampler(RP_1), (2.0,), (8.0,), 1.0, **VECTOR),
    Case("rp beyond interval", rp_sampler(RP_1), (BELOW,), (ABOVE,), 1.0, **VECTOR),
    Case("rp adjacent windows", rp_sampler(RP_4), (3.0,), (5.0,), 4.0, **VECTOR),
    Case("rp eps 0.1", rp_sampler(RP_SMALL), (LO,), (HI,), 0.1, **VECTOR),
    Case("rp uniform rule edge", rp_sampler(RP_UNIFORM), (2.0,), (np.nextafter(2.0, LO),),
         1.0, **VECTOR),
    Case("rp uniform vs inside", rp_sampler(RP_UNIFORM), (BELOW,), (5.0,), 1.0, **VECTOR),
    Case("rp served grid", rp_sampler(RP_SERVED, coarse=64), (LO,), (HI,), 1.0, **VECTOR),
    # Unbiased: the bounds (the two extreme rows), beyond them (clipped), a small epsilon (its
    # outputs far beyond the bounds).
    Case("unbiased bounds", unbiased_sampler(UNB_1), (LO,), (HI,), 1.0, **VECTOR),
    Case("unbiased beyond bounds", unbiased_sampler(UNB_4), (BELOW,), (ABOVE,), 4.0, **VECTOR),
    Case("unbiased eps 0.1", unbiased_sampler(UNB_SMALL), (LO,), (HI,), 0.1, **VECTOR),
    # The histogram: one label at either bound; beyond a bound vs on the middle bin edge; ties.
    Case("histogram bounds", histogram_sampler(bins=2, epsilon=2.0), (LO,), (HI,), 2.0,
         **HISTOGRAM),
    Case("histogram bin edge", histogram_sampler(bins=2, epsilon=2.0), (BELOW,), (5.0,), 2.0,
         **HISTOGRAM),
    Case("histogram ties", histogram_sampler(bins=2, epsilon=1.0),
         (5.0, 5.0, np.nextafter(5.0, LO)), (5.0, 5.0, 5.0), 1.0, **HISTOGRAM),
    # The DP mean: the bounds (the largest change of the sum), beyond them, with ties.
    Case("mean bounds", mean_sampler(epsilon=1.0), (LO,), (HI,), 1.0, **MEAN),
    Case("mean beyond bounds", mean_sampler(epsilon=0.5), (BELOW,), (ABOVE,), 0.5, **MEAN),
    Case("mean ties", mean_sampler(epsilon=1.0), (HI, LO), (HI, HI), 1.0, **MEAN),
    # Label-DP OLS: one label moved across the whole range (its exact L1 sensitivity).
    Case("label-dp ols bounds", ols_sampler(epsilon=1.0), (LO,), (HI,), 1.0, **EPTR),
    # ePTR's whole release step (test + calibrated Gaussian) at the test's boundary.
    Case("eptr boundary eps 1", eptr_sampler(epsilon=1.0, delta=1e-3), (EPTR_M1, 0.0),
         (EPTR_M1 - 1.0, 1.0), 1.0, delta=1e-3, **EPTR),
    Case("eptr boundary eps 4", eptr_sampler(epsilon=4.0, delta=0.01), (EPTR_M4 - 1.0, 1.0),
         (EPTR_M4, 0.0), 4.0, delta=0.01, **EPTR),
]  # fmt: skip


@dataclass(frozen=True)
class ReleaseCase:
    """A whole release on one of two neighbouring label sets (n = 1 or 2, 2 histogram cells)."""

    name: str
    labels_a: tuple[float, ...]
    labels_b: tuple[float, ...]
    params: dict

    def release(self, labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """(histogram cell 0, DP mean, noisy label of the first example) of one release."""
        out = label_randomizer(labels, lo=LO, hi=HI, rng=rng, bins=2, **self.params)
        return np.array([out.prior.probs[0], out.label_mean, out.noisy_labels[0]])

    def claims(self) -> dict[str, tuple[list[int], float]]:
        """Audited columns and the epsilon each is claimed to cost (the release's own split)."""
        eps1, eps2, share = (self.params[k] for k in ("epsilon1", "epsilon2", "mean_share"))
        eps_hist, eps_mean = split_prior_epsilon(eps1, share)
        assert eps_mean is not None
        return {
            "joint": ([0, 1, 2], eps1 + eps2),
            "label": ([2], eps1 + eps2),
            "histogram": ([0], eps_hist),
            "mean": ([1], eps_mean),
        }

    def sample(self, *, n_select: int, n_test: int) -> tuple:
        """Selection and test releases on both label sets."""
        return draw(
            repeat(self.release),
            np.array(self.labels_a),
            np.array(self.labels_b),
            n_select=n_select,
            n_test=n_test,
            seed=_seed(self.name),
        )


RR_RELEASE = {"mechanism": "rr_on_bins", "epsilon1": 2.0, "epsilon2": 2.0, "mean_share": 0.5}
RP_RELEASE = {
    "mechanism": "rpwithprior",
    "select": "mse",
    "zeta": 1.0,
    "epsilon1": 2.0,
    "epsilon2": 2.0,
    "mean_share": 0.5,
}


@dataclass(frozen=True)
class SegmentedReleaseCase(ReleaseCase):
    """A segmented release (``shared.segments``): two segments of one example each, each its
    own group (histogram, DP mean, randomizer); the first example's label changes."""

    def release(self, labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """(group a's histogram cell 0, mean, noisy label; group b's noisy label and cell 0)."""
        groups = tuple(
            seg.SegmentGroup(
                segments=(name,),
                pooled=False,
                plan=plan_release(n=1, lo=LO, hi=HI, bins=2, allow_nonprivate=False, **self.params),
            )
            for name in ("a", "b")
        )
        plan = seg.SegmentedPlan(column="c", groups=groups, mean_share=self.params["mean_share"])
        out = seg.execute_segmented(plan, labels, ["a", "b"], rng)
        a, b = out.releases
        return np.array(
            [
                a.prior.probs[0],
                a.label_mean,
                out.noisy_labels[0],
                out.noisy_labels[1],
                b.prior.probs[0],
            ]
        )

    def claims(self) -> dict[str, tuple[list[int], float]]:
        """The whole output and the changed example's label, each against the ONE charge."""
        total = self.params["epsilon1"] + self.params["epsilon2"]
        return {"joint": ([0, 1, 2, 3, 4], total), "label": ([2], total)}


RELEASE_CASES = [
    ReleaseCase("release rr-on-bins bounds", (LO,), (HI,), RR_RELEASE),
    ReleaseCase("release rpwithprior beyond bounds vs edge", (BELOW, 7.0), (5.0, 7.0), RP_RELEASE),
    SegmentedReleaseCase("segmented release bounds", (LO, 7.0), (HI, 7.0), RR_RELEASE),
]
RELEASE_AUDITS = [(case, column) for case in RELEASE_CASES for column in case.claims()]
PRODUCT_AUDITS = len(MECHANISM_CASES) + len(RELEASE_AUDITS)
ALPHA = FAMILY_ALPHA / PRODUCT_AUDITS


def _seed(name: str) -> int:
    """A fixed seed per audit (stable across runs and Python hash seeds)."""
    return int.from_bytes(name.encode()[:8].ljust(8, b"\0"), "little") % 2**32 + len(name)


@functools.cache
def release_samples(name: str) -> tuple:
    """Selection and test releases of a product case, drawn once for its four audits."""
    (case,) = (case for case in RELEASE_CASES if case.name == name)
    return case.sample(**RELEASE)


def audit_release_column(
    selection: tuple, test: tuple, columns: list[int], epsilon: float
) -> AuditResult:
    def pick(pair: tuple) -> tuple:
        return tuple(part[:, columns] for part in pair)

    return audit_samples(
        pick(selection), pick(test), epsilon=epsilon, alpha=ALPHA, max_levels=RELEASE_LEVELS
    )


# ------------------------------------------------------------------------ the product passes
@pytest.mark.parametrize("case", MECHANISM_CASES, ids=lambda c: c.name)
def test_served_mechanism_passes_audit(case: Case) -> None:
    result = case.run(alpha=ALPHA, seed=_seed(case.name))
    assert not result.violates, f"{case.name}: {result}"
    assert math.isfinite(result.lower_bound) or case.name.startswith("rr tie")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("case", "column"), RELEASE_AUDITS, ids=[f"{c.name}: {k}" for c, k in RELEASE_AUDITS]
)
def test_whole_release_passes_audit(case: ReleaseCase, column: str) -> None:
    columns, epsilon = case.claims()[column]
    result = audit_release_column(*release_samples(case.name), columns, epsilon)
    assert not result.violates, f"{case.name} ({column}): {result}"


def test_flake_budget_is_split_over_every_product_audit() -> None:
    assert PRODUCT_AUDITS == 35  # the module docstring and docs/privacy_audit.md say 35
    assert ALPHA * PRODUCT_AUDITS <= FAMILY_ALPHA


# --------------------------------------------------- the self-test: broken mechanisms flagged
def _flagged(result: AuditResult, what: str) -> None:
    assert result.violates, f"the audit missed {what}: {result}"


def test_flags_rr_with_wrong_keep_probability(monkeypatch: pytest.MonkeyPatch) -> None:
    """RR-on-Bins whose 'other' weight is rounded 30% too low: the kept output is too likely."""
    real = rr_module.response_weights

    def broken(d: int, epsilon: float) -> tuple[int, int, int]:
        _, other, total = real(d, epsilon)
        other = int(other * 0.7)
        return total - (d - 1) * other, other, total

    monkeypatch.setattr(rr_module, "response_weights", broken)
    case = Case("broken rr", rr_sampler(RR_1), (LO,), (HI,), 1.0, **VECTOR)
    _flagged(case.run(alpha=ALPHA, seed=1), "RR with the wrong keep probability")


def test_flags_unbiased_built_at_a_larger_epsilon() -> None:
    """An unbiased randomizer solved at epsilon 3 but claimed at 1: its extreme rows differ
    by up to e^3 in some output column."""
    broken = build_unbiased(PRIOR, epsilon=3.0)
    case = Case("broken unbiased", unbiased_sampler(broken), (LO,), (HI,), 1.0, **VECTOR)
    _flagged(case.run(alpha=ALPHA, seed=4), "an unbiased randomizer on the wrong epsilon")


def test_flags_histogram_with_half_the_noise(monkeypatch: pytest.MonkeyPatch) -> None:
    """The histogram's discrete Laplace at scale 1/epsilon (sensitivity 1 instead of 2)."""
    real = histogram_module.sample_discrete_laplace
    monkeypatch.setattr(
        histogram_module, "sample_discrete_laplace", lambda rng, scale: real(rng, scale / 2)
    )
    case = Case("broken hist", histogram_sampler(bins=2, epsilon=2.0), (LO,), (HI,), 2.0,
                **HISTOGRAM)  # fmt: skip
    _flagged(case.run(alpha=ALPHA, seed=2), "a histogram with half the noise")


def test_flags_rpwithprior_leaking_the_label_at_the_bound() -> None:
    """RPWithPrior that returns a label at (or beyond) the interval's end as it is, clipped."""

    def leaky(labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        out = RP_1.randomize(labels, rng)
        return np.where(labels >= RP_1.a2, RP_1.a2, out)

    case = Case("broken rp", per_label(leaky), (RP_1.a2,), (np.nextafter(RP_1.a2, LO),), 1.0,
                **VECTOR)  # fmt: skip
    _flagged(case.run(alpha=ALPHA, seed=3), "a randomizer leaking the label at the bound")


@pytest.mark.slow
def test_flags_release_leaking_the_label_at_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole release, its randomizer passing labels at the upper bound through unchanged."""
    real = RROnBins.randomize

    def leaky(self: RROnBins, labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return np.where(labels >= HI, labels, real(self, labels, rng))

    monkeypatch.setattr(RROnBins, "randomize", leaky)
    case = ReleaseCase("broken release leak", (HI,), (np.nextafter(HI, LO),), RR_RELEASE)
    selection, test = case.sample(n_select=200, n_test=1_500)
    columns, epsilon = case.claims()["label"]
    _flagged(audit_release_column(selection, test, columns, epsilon), "a release leaking at HI")


@pytest.mark.slow
def test_flags_release_mean_on_all_of_epsilon1(monkeypatch: pytest.MonkeyPatch) -> None:
    """The release's DP mean calibrated with all of epsilon1 instead of its share of it."""
    import shared.randomizer as randomizer_module

    eps1 = RR_RELEASE["epsilon1"]
    monkeypatch.setattr(
        randomizer_module,
        "noisy_mean",
        lambda total, *, n, lo, hi, epsilon, rng: randomizer_noisy_mean(
            total, n=n, lo=lo, hi=hi, epsilon=eps1, rng=rng
        ),
    )
    case = ReleaseCase("broken release mean", (LO,), (HI,), RR_RELEASE)
    selection, test = case.sample(n_select=300, n_test=2_000)
    columns, epsilon = case.claims()["mean"]
    _flagged(audit_release_column(selection, test, columns, epsilon), "a mean on the wrong epsilon")


# ------------------------------------------------------------------- the auditor itself
@pytest.mark.parametrize(("trials", "alpha"), [(1, 0.05), (10, 0.01), (1000, 1e-4)])
def test_clopper_pearson_closed_forms_at_zero_and_all_hits(trials: int, alpha: float) -> None:
    low, high = clopper_pearson(0, trials, alpha=alpha)
    assert low == 0.0 and math.isclose(float(high), 1 - (alpha / 2) ** (1 / trials))
    low, high = clopper_pearson(trials, trials, alpha=alpha)
    assert high == 1.0 and math.isclose(float(low), (alpha / 2) ** (1 / trials))


@pytest.mark.parametrize(("hits", "trials"), [(1, 7), (13, 40), (500, 1000)])
def test_clopper_pearson_inverts_the_binomial_tails(hits: int, trials: int) -> None:
    """Brute force: at the bounds the binomial tail probabilities are exactly alpha / 2."""
    from scipy.stats import binom

    alpha = 0.01
    low, high = clopper_pearson(hits, trials, alpha=alpha)
    assert math.isclose(binom.sf(hits - 1, trials, float(low)), alpha / 2, rel_tol=1e-6)
    assert math.isclose(binom.cdf(hits, trials, float(high)), alpha / 2, rel_tol=1e-6)


def test_lower_bound_is_minus_inf_without_evidence_and_tight_with_much() -> None:
    assert epsilon_lower_bound(0, 100, 50, 100, alpha=0.01) == -math.inf
    bound = float(epsilon_lower_bound(10**8 * 0.7, 10**8, 10**8 * 0.2, 10**8, alpha=0.01))
    assert math.log(3.5) - 0.01 < bound < math.log(3.5)


def test_select_event_picks_the_separating_outputs() -> None:
    a = np.array([0] * 90 + [1] * 10 + [2] * 50)
    b = np.array([0] * 10 + [1] * 90 + [2] * 50)
    event = select_event(a, b, alpha=0.01)
    assert event.direction in ("a>b", "b>a")
    assert event.categories.tolist() == ([0] if event.direction == "a>b" else [1])


def test_false_alarm_rate_of_an_exact_mechanism_is_at_most_alpha() -> None:
    """Soundness, measured: 2,000 audits of exactly e^1-randomized response at alpha 0.2."""
    rng = np.random.default_rng(7)
    keep = math.e / (1 + math.e)

    def coin(labels: np.ndarray, size: int, gen: np.random.Generator) -> np.ndarray:
        return (gen.random(size) < keep) == (labels[0] == 1)

    alarms = sum(
        audit(coin, np.array([1]), np.array([0]), epsilon=1.0, alpha=0.2, n_select=50,
              n_test=200, seed=int(rng.integers(2**32))).violates
        for _ in range(2_000)
    )  # fmt: skip
    assert alarms <= 2_000 * 0.2  # observed: far fewer (Clopper-Pearson is conservative)
