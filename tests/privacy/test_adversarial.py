"""Adversarial privacy checks: the REAL samplers' exact pmfs at extreme parameters.

Every check here derives probabilities from the sampler itself, driven by a scripted rng (so a
rounding in the sampler that its own ``*_probability`` method does not model is caught), and
compares likelihood ratios with e^eps in exact rational / 100-digit decimal arithmetic: no
float tolerance can hide a violation.
"""

from __future__ import annotations

import math
import warnings
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.errors import InvalidParameterError
from shared.mechanisms import rr_on_bins as rr
from shared.mechanisms.histogram import Prior, private_histogram, project_to_simplex
from shared.mechanisms.rp_with_prior import RPWithPrior
from shared.mechanisms.unbiased import MIN_EPSILON, ExactUnbiased
from shared.plan import default_split, split_epsilon
from shared.randomizer import build_mechanism, label_randomizer
from shared.rng import SystemRandom

EXTREME_EPS = [5e-324, 1e-300, 1e-17, 1e-15, 1e-12, 1e-9, 1e-6, 0.01, 0.1, 1 / 3, 1.0, 2.0,
               8.0, 36.0, 40.0, 100.0, 745.0, 800.0, 1e308]  # fmt: skip
GRID = 2**53


def log_ratio_at_most(num: int | Fraction, den: int | Fraction, eps: float) -> bool:
    """Exactly whether num / den <= e^eps (100-digit logarithms; num, den > 0)."""
    ratio = Fraction(num) / Fraction(den)
    if ratio <= 1:
        return True
    with localcontext() as ctx:
        ctx.prec = 100
        log = Decimal(ratio.numerator).ln() - Decimal(ratio.denominator).ln()
        return log <= Decimal(eps)


class ScriptedRng(np.random.Generator):
    """Answers ``random`` with ``u`` and ``integers(low, high)`` with ``low + answers[high]``.

    Records the calls, so a test can tell which draws the sampler made and over what range.
    (A Generator subclass, because the samplers refuse anything but a real rng.)
    """

    def __init__(self, u: float = 0.0, answers: dict[int, int] | None = None) -> None:
        super().__init__(np.random.PCG64(0))
        self.u = u
        self.answers = answers or {}
        self.calls: list[tuple[str, int]] = []

    def random(self, size: int | None = None) -> np.ndarray:  # type: ignore[override]
        self.calls.append(("random", -1))
        return np.full(1 if size is None else int(size), self.u)

    def integers(self, low: int, high: int, size: int | None = None) -> np.ndarray:  # type: ignore[override]
        self.calls.append(("integers", int(high)))
        value = self.answers.get(int(high), 0)
        return np.full(1 if size is None else int(size), int(low) + value, dtype=np.int64)


def _first_true(predicate, lo: int, hi: int) -> int:
    """Smallest x in [lo, hi] with predicate(x) (predicate monotone; hi if none below)."""
    while lo < hi:
        mid = (lo + hi) // 2
        if predicate(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


# ------------------------------------------------------------------------------- RR-on-Bins
def rr_realised_keep(mechanism: rr.RROnBins, label: float) -> Fraction:
    """P(output = the label's own bin) of the REAL sampler, exactly (by probing its draws)."""
    labels = np.array([label])
    home = int(mechanism.phi(labels)[0])
    d = mechanism.d
    probe = ScriptedRng()
    mechanism.randomize(labels, probe)
    if probe.calls[0][0] == "random":  # keep-or-switch on a 2^-53 grid uniform

        def switches(j: int) -> bool:
            out = mechanism.randomize(labels, ScriptedRng(u=j / GRID))
            return out[0] != mechanism.output_values[home]

        # switching happens for the uniforms below a threshold: count them
        first_kept = _first_true(lambda j: not switches(j), 0, GRID)
        return Fraction(GRID - first_kept, GRID)
    kind, total = probe.calls[0]
    assert kind == "integers" and total > d - 1

    def kept(v: int) -> bool:
        out = mechanism.randomize(labels, ScriptedRng(answers={total: v}))
        return out[0] == mechanism.output_values[home]

    keep = _first_true(lambda v: not kept(v), 0, total)
    assert all(kept(v) for v in (0, keep - 1)) and not kept(total - 1)
    return Fraction(keep, total)


@pytest.mark.parametrize("eps", EXTREME_EPS)
@pytest.mark.parametrize("d", [2, 3, 7, 129, 1000])
def test_rr_real_sampler_is_exactly_epsilon_dp(d: int, eps: float) -> None:
    mechanism = rr.RROnBins(
        thresholds=np.arange(1.0, d), output_values=np.arange(float(d)), epsilon=eps
    )
    keep = rr_realised_keep(mechanism, 0.5)
    other = (1 - keep) / (d - 1)
    assert 0 < other and 0 < keep < 1  # every output reachable from every label
    assert log_ratio_at_most(keep, other, eps) and log_ratio_at_most(other, keep, eps)
    # The pmf the mechanism reports is the realised one (used for debiasing and the loss).
    probs = mechanism.output_probabilities(0.5)
    assert probs[0] == float(keep) and np.all(probs[1:] == float(other))


def test_rr_sampler_chooses_the_other_outputs_by_an_exact_split() -> None:
    d = 5
    mechanism = rr.RROnBins(
        thresholds=np.arange(1.0, d), output_values=np.arange(float(d)), epsilon=1.3
    )
    keep, other, total = rr.response_weights(d, 1.3)
    assert keep + (d - 1) * other == total
    label = np.array([2.5])  # bin 2
    expected = {0: 2, keep - 1: 2, keep: 0, keep + other - 1: 0, keep + other: 1,
                keep + 2 * other: 3, keep + 3 * other: 4, total - 1: 4}  # fmt: skip
    for v, bin_ in expected.items():
        out = mechanism.randomize(label, ScriptedRng(answers={total: v}))
        assert out[0] == bin_, v


@pytest.mark.parametrize("eps", EXTREME_EPS)
@pytest.mark.parametrize("d", [1, 2, 3, 64, 4097, 100_003])
def test_rr_response_weights_are_exact_for_every_epsilon(d: int, eps: float) -> None:
    keep, other, total = rr.response_weights(d, eps)
    if d == 1:
        assert (keep, other, total) == (1, 0, 1)
        return
    assert keep + (d - 1) * other == total and total < 2**63
    assert 0 < other <= keep
    assert log_ratio_at_most(keep, other, eps)
    # and nearly tight: off by the float-error margin (1e-13 relative) and the grid step 1 / M
    ideal = Fraction(1) / (1 + (d - 1) * Fraction(math.exp(-eps)))
    gap = abs(Fraction(keep, total) - ideal)
    assert gap <= (1 - ideal) * Fraction(1, 10**12) + Fraction(2 * d, 2**62)


# ------------------------------------------------------------------------------- RPWithPrior
def rp_realised(mech: RPWithPrior, label: float) -> tuple[Fraction, Fraction, int, bool]:
    """(per-cell P in window, per-cell P outside, window start, uniform?) of the REAL sampler."""
    labels = np.array([label])
    n_cells, m = mech.grid_cells, mech.window_cells

    def cell(u: float, **answers: int) -> int:
        table = {n_cells - m: answers.get("outside", 0), m: answers.get("inside", 0)}
        if "uniform" in answers:
            table = {n_cells: answers["uniform"]}
        return int(mech.randomize_cells(labels, ScriptedRng(u=u, answers=table))[0])

    if mech.outside == "uniform" and not mech.a1 <= label <= mech.a2:
        for r in {0, n_cells // 2, n_cells - 1}:  # one uniform draw over the whole grid
            assert cell(0.0, uniform=r) == r
        return Fraction(1, n_cells), Fraction(1, n_cells), -1, True
    start = cell(0.0)
    assert cell(0.0, inside=m - 1) == start + m - 1 and 0 <= start <= n_cells - m
    # One uniform decides: in the window for u below the threshold (u on the 2^-53 grid).
    threshold = _first_true(lambda j: cell(j / GRID) != start, 0, GRID)
    if m == n_cells:
        assert threshold == GRID
        return Fraction(1, n_cells), Fraction(0), start, False
    # the out-of-window draw r (uniform on [0, N - m)) skips the window
    for r in {0, max(start - 1, 0), min(start, n_cells - m - 1), n_cells - m - 1}:
        assert cell(threshold / GRID, outside=r) == (r + m if r >= start else r)
    p_out = Fraction(GRID - threshold, GRID * (n_cells - m))
    return Fraction(threshold, GRID * m), p_out, start, False


def check_rp_exactly_private(mech: RPWithPrior, labels: list[float]) -> None:
    eps = mech.epsilon
    values = set()
    for y in labels:
        p_in, p_out, start, uniform = rp_realised(mech, y)
        if not uniform:
            # the reported pmf is the realised one
            pmf = mech.cell_probability(np.array([start, start + mech.window_cells - 1]), y)
            assert pmf.tolist() == [float(p_in)] * 2
        values |= {p_in} | ({p_out} if p_out else set())
        assert p_out > 0 or mech.window_cells == mech.grid_cells
    top, bottom = max(values), min(values)
    assert bottom > 0 and log_ratio_at_most(top, bottom, eps)


RP_LABELS = [-1e300, -5.0, -1.0, 0.0, 1e-300, 0.3, 1.0, 1.7, 2.5, 2.5000000000000004, 3.0, 1e300]


@pytest.mark.parametrize("outside", ["project", "uniform"])
@pytest.mark.parametrize("eps", EXTREME_EPS)
@pytest.mark.parametrize("cells", [1, 2, 7, 1000, 2**24])
def test_rp_real_sampler_is_exactly_epsilon_dp(outside: str, eps: float, cells: int) -> None:
    try:
        mech = RPWithPrior(
            a1=-1.0, a2=2.5, zeta=0.4, epsilon=eps, outside=outside, grid_cells=cells
        )
    except InvalidParameterError as exc:  # a clear refusal is allowed, a silent breach is not
        assert "too small" in str(exc) and eps < 1e-6
        return
    check_rp_exactly_private(mech, RP_LABELS)


@pytest.mark.parametrize("zeta", [1e-300, 1e-12, 0.4, 1e6, 8e307])
def test_rp_zeta_tiny_or_huge_relative_to_the_range(zeta: float) -> None:
    for a1, a2 in ((-1.0, 2.5), (1.0, 1.0)):
        try:
            mech = RPWithPrior(a1=a1, a2=a2, zeta=zeta, epsilon=1.0)
        except InvalidParameterError as exc:  # e.g. [1 - 1e-300, 1 + 1e-300] has no width
            assert "empty" in str(exc) and a1 == a2
            continue
        assert 1 <= mech.window_cells <= mech.grid_cells
        check_rp_exactly_private(mech, RP_LABELS)


# ------------------------------------------------------- mechanisms as the pipeline builds them
@st.composite
def adversarial_priors(draw: st.DrawFn) -> Prior:
    k = draw(st.integers(1, 40))
    lo = draw(st.sampled_from([0.0, -1.0, 1e-300, -1e6, 123.456]))
    width = draw(st.sampled_from([1e-6, 1.0, 1e3, 1e9]))
    shape = draw(st.sampled_from(["one-hot", "uniform", "sparse", "edges"]))
    probs = np.zeros(k)
    if shape == "one-hot":
        probs[draw(st.integers(0, k - 1))] = 1.0
    elif shape == "uniform":
        probs[:] = 1.0
    elif shape == "edges":
        probs[0] = probs[-1] = 1.0
    else:
        masses = draw(st.lists(st.integers(0, 3), min_size=k, max_size=k))
        probs[:] = masses
        if probs.sum() == 0:
            probs[-1] = 1.0
    return Prior(edges=np.linspace(lo, lo + width, k + 1), probs=probs / probs.sum())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    prior=adversarial_priors(),
    eps=st.one_of(st.sampled_from(EXTREME_EPS), st.floats(1e-3, 60.0)),
    outside=st.sampled_from(["project", "uniform"]),
    select=st.sampled_from(["mse", "paper"]),
)
def test_pipeline_rpwithprior_is_exactly_epsilon2_dp_for_any_prior(
    prior: Prior, eps: float, outside: str, select: str
) -> None:
    try:
        _, mech = build_mechanism(
            prior, epsilon=eps, mechanism="rpwithprior", outside=outside, select=select
        )
    except InvalidParameterError as exc:
        assert "too small" in str(exc) and eps < 1e-6
        return
    assert isinstance(mech, RPWithPrior)
    a1, a2 = mech.a1, mech.a2
    labels = [prior.lo, prior.hi, a1, a2, 0.5 * (a1 + a2), prior.lo - 1e9, prior.hi + 1e9,
              float(np.nextafter(a1, -np.inf)), float(np.nextafter(a2, np.inf))]  # fmt: skip
    check_rp_exactly_private(mech, labels)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    prior=adversarial_priors(),
    eps=st.one_of(st.sampled_from(EXTREME_EPS), st.floats(1e-3, 60.0)),
    loss=st.sampled_from(["squared", "absolute"]),
)
def test_pipeline_rr_on_bins_is_exactly_epsilon2_dp_for_any_prior(
    prior: Prior, eps: float, loss: str
) -> None:
    _, mechanism = build_mechanism(prior, epsilon=eps, mechanism="rr_on_bins", loss=loss)
    assert np.all(np.isfinite(mechanism.output_values))
    if mechanism.d == 1:
        out = mechanism.randomize(np.array([prior.lo, prior.hi]), SystemRandom())
        assert np.all(out == mechanism.output_values[0])
        return
    for label in (prior.lo, prior.hi, float(mechanism.thresholds[0])):
        keep = rr_realised_keep(mechanism, label)
        other = (1 - keep) / (mechanism.d - 1)
        assert other > 0
        assert log_ratio_at_most(keep, other, eps) and log_ratio_at_most(other, keep, eps)


# ------------------------------------------------------------------------------- Unbiased
class QueuedRng(np.random.Generator):
    """Answers each ``integers`` call with the next of ``answers`` (then 0), in order."""

    def __init__(self, *answers: int) -> None:
        super().__init__(np.random.PCG64(0))
        self.answers = list(answers)
        self.highs: list[int] = []

    def integers(self, low: int, high: int, size: int | None = None) -> np.ndarray:  # type: ignore[override]
        self.highs.append(int(high))
        value = self.answers.pop(0) if self.answers else 0
        assert 0 <= value < int(high) - int(low)
        return np.full(1 if size is None else int(size), int(low) + value, dtype=np.int64)


def unbiased_realised_rows(mechanism: ExactUnbiased, labels: list[float]) -> list[list[int]]:
    """Each label's output counts over the response draw v in [0, D), from the REAL sampler
    (rounding draw 0: a label at or beyond a grid end, or on a grid point, is one row)."""
    probe = QueuedRng()
    mechanism.randomize(np.array([labels[0]]), probe)
    assert len(probe.highs) == 2
    total = probe.highs[1]
    outputs = mechanism.output_values
    rows = []
    for label in labels:

        def index(v: int, label: float = label) -> int:
            out = mechanism.randomize(np.array([label]), QueuedRng(0, v))[0]
            return int(np.searchsorted(outputs, out))

        # The output index is nondecreasing in v: its jumps are the cumulative weights.
        ends = [_first_true(lambda v, j=j: index(v) > j, 0, total) for j in range(outputs.size)]
        rows.append(np.diff([0, *ends]).tolist())
    return rows


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    prior=adversarial_priors(), eps=st.one_of(st.sampled_from(EXTREME_EPS), st.floats(1e-3, 60.0))
)
def test_pipeline_unbiased_is_exactly_epsilon2_dp_for_any_prior(prior: Prior, eps: float) -> None:
    """Every output's probability, read off the real sampler's integer draws for labels at the
    grid's ends, beyond them and on inner grid points (the rows every label mixes), is > 0 and
    within e^eps across labels, in 100-digit arithmetic."""
    try:
        _, mechanism = build_mechanism(prior, epsilon=eps, mechanism="unbiased")
    except InvalidParameterError as exc:
        assert eps < MIN_EPSILON and "too small" in str(exc)
        return
    assert isinstance(mechanism, ExactUnbiased)
    grid = mechanism.input_grid
    picks = sorted({0, 1, grid.size // 2, grid.size - 1})
    labels = [prior.lo - 1e9, prior.hi + 1e9, *(float(grid[i]) for i in picks)]
    rows = unbiased_realised_rows(mechanism, labels)
    assert [list(map(int, mechanism.weights[i])) for i in picks] == rows[2:]
    for column in zip(*rows, strict=True):
        assert min(column) > 0
        assert log_ratio_at_most(max(column), min(column), eps)


# ------------------------------------------------------------------------------- histogram
@pytest.mark.parametrize("eps", [1e-18, 1e-300, 5e-324])
def test_private_histogram_survives_absurdly_small_epsilon(eps: float) -> None:
    labels = np.linspace(0.0, 1.0, 100)
    prior = private_histogram(
        labels, lo=0.0, hi=1.0, bins=4, epsilon=eps, rng=np.random.default_rng(3)
    )
    assert prior.probs.sum() == pytest.approx(1.0) and np.all(prior.probs >= 0)


def test_projection_is_robust_to_counts_far_beyond_the_total() -> None:
    for counts in ([1e18 + 3, -1e18, 5.0], [9.2e18, 9.2e18, -9.2e18], [1e300, 2.0, -1e300]):
        projected = project_to_simplex(np.array(counts), total=100.0)
        assert np.all(projected >= 0) and projected.sum() <= 100.0 * (1 + 1e-12)


# ------------------------------------------------------------------------------- domain
@pytest.mark.parametrize(
    ("lo", "hi", "bins"),
    [(-1e308, 1e308, 4), (0.0, 5e-320, 4), (1e15, 1e15 + 1, 64), (1.0, 1.0000000000000002, 4)],
)
def test_unrepresentable_label_grids_get_a_clear_error(lo: float, hi: float, bins: int) -> None:
    labels = np.array([lo, hi, 0.5 * lo + 0.5 * hi])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no RuntimeWarning on the way to the error
        for mechanism in ("rpwithprior", "rr_on_bins"):
            with pytest.raises(InvalidParameterError):
                label_randomizer(
                    labels, lo=lo, hi=hi, epsilon1=1.0, epsilon2=1.0, mechanism=mechanism,
                    rng=np.random.default_rng(0), bins=bins,
                )  # fmt: skip


# ------------------------------------------------------------------------------- accounting
@pytest.mark.parametrize("n", [1, 10, 1000, 10**7])
def test_default_split_never_sums_above_the_requested_epsilon(n: int) -> None:
    for epsilon in np.concatenate([np.linspace(0.001, 10.0, 997), [1e-300, 0.3, 1e308]]):
        for mechanism in ("auto", "rr_on_bins", "rpwithprior"):
            eps1, eps2 = default_split(float(epsilon), n=n, mechanism=mechanism)
            assert eps1 > 0 and eps2 > 0
            # Each part runs at the float just below its short decimal charge: never above.
            assert Fraction(eps1) + Fraction(eps2) <= Fraction(float(epsilon))


def test_an_explicit_split_never_sums_above_the_total() -> None:
    rng = np.random.default_rng(5)
    for total, first in zip(rng.uniform(0.01, 20, 3000), rng.uniform(0, 1, 3000), strict=True):
        eps1, eps2 = split_epsilon(float(total), float(total * first) or 1e-3)
        assert eps2 > 0 and Fraction(eps1) + Fraction(eps2) <= Fraction(float(total))
    for total, first in ((1.0, 1.0), (1.0, 2.0), (5e-324, 5e-324)):
        with pytest.raises(InvalidParameterError):
            split_epsilon(total, first)


# ------------------------------------------------------------------------------- randomness
def test_system_random_integers_on_a_span_of_exactly_two_to_the_32() -> None:
    draws = SystemRandom().integers(0, 2**32, 10_000)
    assert draws.min() >= 0 and draws.max() < 2**32 and draws.max() >= 2**31
