"""Laplace, Gaussian, staircase (continuous and discrete) and exponential baselines.

For each: the DP inequality checked analytically on a grid of (y, y', output) including labels at
and beyond the bounds (Gaussian: its exact (epsilon, delta) hockey-stick condition), the density
against its own normalisation and moments, and a seeded chi-square test of the sampler against
the density.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, stats

from bench.baselines import (
    DiscreteStaircase,
    ExponentialMechanism,
    Gaussian,
    Laplace,
    Staircase,
    analytic_gaussian_sigma,
    discrete_staircase_r,
    gaussian_delta,
    staircase_gamma,
)
from bench.baselines.staircase import discrete_staircase_moment, staircase_moment

LO, HI = -1.0, 3.0
EPSILONS = (0.05, 0.5, 1.0, 3.0, 8.0)
RTOL = 1e-9
# Labels at, inside and beyond the bounds.
LABELS = np.array([LO - 7.0, LO - 0.1, LO, LO + 1e-9, -0.3, 0.0, 1.0, 2.5, HI - 1e-9, HI, HI + 5])


def assert_ratio_bounded(p: np.ndarray, q: np.ndarray, epsilon: float) -> None:
    """p <= e^eps q everywhere (up to RTOL relative): no division, so zeros are handled."""
    bound = math.exp(epsilon) * q * (1.0 + RTOL)
    worst = np.max(p - bound, initial=-np.inf)
    assert worst <= 0.0, f"DP ratio violated by {worst:.3g}"


def output_grid(width: float, *, rng: np.random.Generator, n: int = 1501) -> np.ndarray:
    """Outputs around the bounds, jittered so that no point sits exactly on a staircase step."""
    base = np.linspace(LO - 4 * width, HI + 4 * width, n)
    return np.sort(np.concatenate([base + rng.uniform(-1e-3, 1e-3, n) * width, [LO, HI]]))


def check_pure_dp(mech, epsilon: float, outputs: np.ndarray) -> None:
    """Density and atoms of every label pair within a factor e^eps, both ways."""
    dens = mech.density(outputs[None, :], LABELS[:, None])  # (labels, outputs)
    _, atoms = mech.atoms(LABELS)
    for i in range(LABELS.size):
        for j in range(LABELS.size):
            assert_ratio_bounded(dens[i], dens[j], epsilon)
            assert_ratio_bounded(atoms[i], atoms[j], epsilon)


def _support(mech, y: float) -> tuple[float, float]:
    """Where the density of label y is non-negligible (mass outside < e^-60)."""
    half = max(80.0 * (HI - LO) / mech.epsilon, 40.0 * getattr(mech, "sigma", 0.0))
    lo_out, hi_out = mech.output_range
    return max(lo_out, y - half), min(hi_out, y + half)


def integral(mech, y: float, a: float, c: float, *, points: int = 20_000) -> float:
    """Integral of the density over [a, c] (composite midpoint rule, vectorised)."""
    lower, upper = _support(mech, y)
    a, c = max(a, lower), min(c, upper)
    if c <= a:
        return 0.0
    dx = (c - a) / points
    t = a + dx * (np.arange(points) + 0.5)
    return float(mech.density(t, y).sum() * dx)


def total_mass(mech, y: float) -> float:
    """Integral of the density plus the atoms: must be 1."""
    lower, upper = _support(mech, y)
    return integral(mech, y, lower, upper, points=4_000_000) + float(mech.atoms(y)[1].sum())


def chi_square_pvalue(mech, y: float, samples: np.ndarray, *, bins: int = 40) -> float:
    """Chi-square of samples against density + atoms on quantile bins of the output."""
    atom_values, atom_probs = mech.atoms(y)
    is_atom = np.isin(samples, atom_values)
    continuous = samples[~is_atom]
    edges = np.unique(np.quantile(continuous, np.linspace(0.0, 1.0, bins + 1)))
    edges[0], edges[-1] = -np.inf, np.inf
    expected = [integral(mech, y, a, c) for a, c in zip(edges[:-1], edges[1:], strict=True)]
    observed = list(np.histogram(continuous, bins=edges)[0])
    for value, prob in zip(atom_values, atom_probs[0], strict=True):
        observed.append(int(np.count_nonzero(samples == value)))
        expected.append(float(prob))
    expected_arr = np.array(expected)
    # The midpoint rule is off by ~1e-5 on the staircase's steps; the sum checks the atoms too.
    assert abs(expected_arr.sum() - 1.0) < 1e-4, expected_arr.sum()
    expected_arr *= samples.size / expected_arr.sum()
    return float(stats.chisquare(np.array(observed), expected_arr).pvalue)


# ---------------------------------------------------------------- Laplace


@pytest.mark.parametrize("epsilon", EPSILONS)
@pytest.mark.parametrize("clip_output", [True, False])
@pytest.mark.parametrize("mechanism", [Laplace, Staircase])
def test_laplace_and_staircase_dp_ratio(
    mechanism: type, epsilon: float, clip_output: bool, rng: np.random.Generator
) -> None:
    mech = mechanism(epsilon=epsilon, lo=LO, hi=HI, clip_output=clip_output)
    check_pure_dp(mech, epsilon, output_grid(HI - LO, rng=rng))


def test_laplace_ratio_is_tight() -> None:
    """The worst pair (lo, hi) reaches e^eps: the scale is not larger than it must be."""
    mech = Laplace(epsilon=1.0, lo=LO, hi=HI, clip_output=False)
    ratio = mech.density(LO - 1.0, LO) / mech.density(LO - 1.0, HI)
    assert ratio == pytest.approx(math.e, rel=1e-12)


@pytest.mark.parametrize("clip_output", [True, False])
def test_laplace_density_normalised(clip_output: bool) -> None:
    mech = Laplace(epsilon=1.0, lo=LO, hi=HI, clip_output=clip_output)
    for y in (LO, 0.3, HI):
        assert total_mass(mech, y) == pytest.approx(1.0, abs=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("clip_output", [True, False])
@pytest.mark.parametrize("y", [LO, 0.7, HI + 2.0])
def test_laplace_sampler_matches_density(clip_output: bool, y: float) -> None:
    mech = Laplace(epsilon=1.5, lo=LO, hi=HI, clip_output=clip_output)
    samples = mech.randomize(np.full(100_000, y), np.random.default_rng(7))
    assert chi_square_pvalue(mech, y, samples) > 1e-4


def test_laplace_unclipped_is_unbiased() -> None:
    mech = Laplace(epsilon=0.5, lo=LO, hi=HI, clip_output=False)
    assert mech.affine_expectation() == (1.0, 0.0)
    for y in (LO, 0.4, HI):
        mean = integrate.quad(lambda t, y=y: t * float(mech.density(t, y)), -np.inf, np.inf)[0]
        assert mean == pytest.approx(y, abs=1e-8)
    n = 400_000
    samples = mech.randomize(np.full(n, 0.4), np.random.default_rng(3))
    se = math.sqrt(2.0) * mech.scale / math.sqrt(n)
    assert abs(samples.mean() - 0.4) < 5 * se
    assert Laplace(epsilon=0.5, lo=LO, hi=HI).affine_expectation() is None


# ---------------------------------------------------------------- Gaussian


def hockey_stick(mech: Gaussian, y: float, y2: float) -> float:
    """delta(eps) = integral of max(0, p_y - e^eps p_y2) plus the atoms' excess, numerically."""
    e = math.exp(mech.epsilon)
    lo_out, hi_out = mech.output_range
    s = mech.sigma

    def excess(t: float) -> float:
        return max(0.0, float(mech.density(t, y)) - e * float(mech.density(t, y2)))

    yc, y2c = np.clip([y, y2], mech.lo, mech.hi)
    if yc == y2c:
        cont = 0.0
    else:
        # The region where p_y > e^eps p_y2 is a half-line ending at the crossing point.
        cross = 0.5 * (yc + y2c) - mech.epsilon * s * s / (y2c - yc)
        if yc < y2c:
            a, c = max(lo_out, yc - 40 * s), min(hi_out, cross)
        else:
            a, c = max(lo_out, cross), min(hi_out, yc + 40 * s)
        cont = (
            integrate.quad(excess, a, c, epsabs=1e-15, epsrel=1e-12, limit=500)[0] if c > a else 0
        )
    _, atoms = mech.atoms(np.array([y, y2]))
    return cont + float(np.maximum(atoms[0] - e * atoms[1], 0.0).sum())


@pytest.mark.parametrize("epsilon", [0.1, 1.0, 4.0])
@pytest.mark.parametrize("delta", [1e-5, 1e-2])
@pytest.mark.parametrize("clip_output", [True, False])
def test_gaussian_eps_delta_condition(epsilon: float, delta: float, clip_output: bool) -> None:
    mech = Gaussian(epsilon=epsilon, delta=delta, lo=LO, hi=HI, clip_output=clip_output)
    worst = 0.0
    for y in LABELS:
        for y2 in LABELS:
            worst = max(worst, hockey_stick(mech, float(y), float(y2)))
    assert worst <= delta * (1.0 + RTOL) + 1e-14
    if not clip_output:  # the worst pair is at distance hi - lo and meets the bound exactly
        assert worst == pytest.approx(delta, rel=1e-6)


def test_gaussian_analytic_sigma_is_tight_and_closed_form_matches() -> None:
    d, eps, delta = HI - LO, 0.7, 1e-6
    sigma = analytic_gaussian_sigma(epsilon=eps, delta=delta, sensitivity=d)
    assert gaussian_delta(sigma=sigma, epsilon=eps, sensitivity=d) <= delta
    assert gaussian_delta(sigma=sigma * (1 - 1e-6), epsilon=eps, sensitivity=d) > delta
    mech = Gaussian(epsilon=eps, delta=delta, lo=LO, hi=HI, clip_output=False)
    assert hockey_stick(mech, LO, HI) == pytest.approx(delta, rel=1e-6)
    # Classic calibration is valid (and looser) for epsilon < 1.
    classic = Gaussian(epsilon=eps, delta=delta, lo=LO, hi=HI, calibration="classic")
    assert classic.sigma > sigma
    assert gaussian_delta(sigma=classic.sigma, epsilon=eps, sensitivity=d) <= delta


def test_gaussian_is_not_pure_dp() -> None:
    mech = Gaussian(epsilon=1.0, delta=1e-5, lo=LO, hi=HI, clip_output=False)
    assert mech.pure_dp is False and mech.public_params()["pure_dp"] is False
    far = LO - 8 * mech.sigma  # the ratio grows without bound away from the labels
    assert mech.density(far, LO) / mech.density(far, HI) > math.exp(mech.epsilon)


@pytest.mark.slow
@pytest.mark.parametrize("clip_output", [True, False])
def test_gaussian_sampler_matches_density(clip_output: bool) -> None:
    mech = Gaussian(epsilon=2.0, delta=1e-5, lo=LO, hi=HI, clip_output=clip_output)
    samples = mech.randomize(np.full(100_000, 2.8), np.random.default_rng(11))
    assert chi_square_pvalue(mech, 2.8, samples) > 1e-4


# ---------------------------------------------------------------- Staircase


def test_staircase_gamma_is_the_optimum() -> None:
    """gamma* = 1/(1 + e^(eps/2)) minimises E|X|; the l2 gamma matches Geng & Viswanath's cubic."""
    grid = np.linspace(1e-4, 1 - 1e-4, 20001)
    for eps in (0.1, 1.0, 3.0, 8.0):
        l1 = staircase_moment(epsilon=eps, gamma=grid, sensitivity=1.0, power=1)
        assert staircase_gamma(eps) == pytest.approx(grid[np.argmin(l1)], abs=1e-4)
        b = math.exp(-eps)
        closed = -b / (1 - b) + (b - 2 * b**2 + 2 * b**4 - b**5) ** (1 / 3) / (
            2 ** (1 / 3) * (1 - b) ** 2
        )
        assert staircase_gamma(eps, cost="l2") == pytest.approx(closed, abs=1e-6)


@pytest.mark.parametrize("epsilon", [0.3, 2.0])
def test_staircase_moments_match_density(epsilon: float) -> None:
    mech = Staircase(epsilon=epsilon, lo=LO, hi=HI, clip_output=False)
    width = HI - LO
    x = np.linspace(-400 * width / epsilon, 400 * width / epsilon, 4_000_001)
    h = mech.noise_density(x)
    dx = x[1] - x[0]
    assert h.sum() * dx == pytest.approx(1.0, abs=2e-4)
    for power in (1, 2):
        exact = staircase_moment(epsilon=epsilon, gamma=mech.gamma, sensitivity=width, power=power)
        assert (np.abs(x) ** power * h).sum() * dx == pytest.approx(float(exact), rel=1e-3)


def test_staircase_ratio_is_tight() -> None:
    mech = Staircase(epsilon=2.0, lo=LO, hi=HI, clip_output=False)
    inner = 0.5 * mech.gamma * (HI - LO)  # central step for y = lo, outer step for y = hi
    assert mech.density(LO + inner, LO) / mech.density(LO + inner, HI) == pytest.approx(
        math.exp(2.0), rel=1e-12
    )


@pytest.mark.parametrize("clip_output", [True, False])
def test_staircase_density_normalised(clip_output: bool) -> None:
    mech = Staircase(epsilon=1.0, lo=LO, hi=HI, clip_output=clip_output)
    for y in (LO, 0.3, HI):
        # The midpoint rule is off by ~2e-5 across the steps; the tail below is exact.
        assert total_mass(mech, y) == pytest.approx(1.0, abs=1e-4)


def test_staircase_tail_is_exact() -> None:
    mech = Staircase(epsilon=1.3, lo=LO, hi=HI, clip_output=False)
    width, b = HI - LO, math.exp(-1.3)
    assert float(mech.noise_tail(0.0)) == pytest.approx(0.5, abs=1e-15)
    for s in (0.1, 0.9, 2.0, 3.99, 7.5):
        # One period further out is exactly a factor e^-eps lower.
        assert float(mech.noise_tail(s + width)) == pytest.approx(b * float(mech.noise_tail(s)))
        edges = np.sort(
            np.concatenate(
                [np.arange(0, 40) * width, np.arange(0, 40) * width + mech.gamma * width]
            )
        )
        edges = np.concatenate([[s], edges[edges > s]])
        mids = 0.5 * (edges[:-1] + edges[1:])
        exact = float(np.sum(mech.noise_density(mids) * np.diff(edges)))  # piecewise constant
        assert float(mech.noise_tail(s)) == pytest.approx(exact, rel=1e-9, abs=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("clip_output", [True, False])
@pytest.mark.parametrize("epsilon", [0.5, 4.0])
def test_staircase_sampler_matches_density(clip_output: bool, epsilon: float) -> None:
    mech = Staircase(epsilon=epsilon, lo=LO, hi=HI, clip_output=clip_output)
    samples = mech.randomize(np.full(100_000, 0.2), np.random.default_rng(5))
    assert chi_square_pvalue(mech, 0.2, samples) > 1e-4


def test_staircase_unclipped_is_unbiased() -> None:
    mech = Staircase(epsilon=1.0, lo=LO, hi=HI, clip_output=False)
    assert mech.affine_expectation() == (1.0, 0.0)
    n = 400_000
    samples = mech.randomize(np.full(n, 0.4), np.random.default_rng(4))
    sd = math.sqrt(float(staircase_moment(epsilon=1.0, gamma=mech.gamma, sensitivity=4.0, power=2)))
    assert abs(samples.mean() - 0.4) < 5 * sd / math.sqrt(n)


# ---------------------------------------------------------------- discrete staircase

D_LO, D_HI = 0, 6
D_LABELS = np.array([-5.0, -0.4, 0.0, 1.0, 2.6, 3.0, 5.0, 6.0, 6.2, 40.0])


def test_discrete_staircase_r_is_the_optimum() -> None:
    for eps in (0.1, 1.0, 3.0):
        for d in (1, 2, 7, 50):
            for cost, power in (("l1", 1), ("l2", 2)):
                r = discrete_staircase_r(eps, sensitivity=d, cost=cost)
                brute = [
                    float(discrete_staircase_moment(epsilon=eps, r=c, sensitivity=d, power=power))
                    for c in range(1, d + 1)
                ]
                assert r == 1 + int(np.argmin(brute))


@pytest.mark.parametrize("epsilon", [0.2, 2.0])
def test_discrete_staircase_pmf_and_moments(epsilon: float) -> None:
    mech = DiscreteStaircase(epsilon=epsilon, lo=D_LO, hi=D_HI, r=2, clip_output=False)
    x = np.arange(-20_000, 20_001)
    p = mech.noise_pmf(x)
    assert p.sum() == pytest.approx(1.0, abs=1e-12)
    for power in (1, 2):
        exact = discrete_staircase_moment(epsilon=epsilon, r=2, sensitivity=6, power=power)
        assert (np.abs(x) ** power * p).sum() == pytest.approx(float(exact), rel=1e-10)
    assert float(mech.noise_pmf(0.5)) == 0.0
    # Tails agree with the pmf.
    for s in (0, 1, 5, 6, 13):
        assert float(mech.noise_tail(s)) == pytest.approx(p[x >= s].sum(), rel=1e-10)


@pytest.mark.parametrize("epsilon", EPSILONS)
@pytest.mark.parametrize("clip_output", [True, False])
@pytest.mark.parametrize("r", [None, 1, 6])
def test_discrete_staircase_dp_ratio(epsilon: float, clip_output: bool, r: int | None) -> None:
    mech = DiscreteStaircase(epsilon=epsilon, lo=D_LO, hi=D_HI, r=r, clip_output=clip_output)
    outputs = np.arange(D_LO - 30, D_HI + 31, dtype=float)
    pmf = mech.pmf(outputs[None, :], D_LABELS[:, None])
    if clip_output:  # all the mass is on [lo, hi]
        inside = (outputs >= D_LO) & (outputs <= D_HI)
        assert np.allclose(pmf[:, inside].sum(axis=1), 1.0, atol=1e-12)
    for i in range(D_LABELS.size):
        for j in range(D_LABELS.size):
            assert_ratio_bounded(pmf[i], pmf[j], epsilon)


@pytest.mark.slow
@pytest.mark.parametrize("clip_output", [True, False])
def test_discrete_staircase_sampler_matches_pmf(clip_output: bool) -> None:
    mech = DiscreteStaircase(epsilon=1.0, lo=D_LO, hi=D_HI, clip_output=clip_output)
    n = 200_000
    samples = mech.randomize(np.full(n, 2.0), np.random.default_rng(9))
    assert np.all(samples == np.rint(samples))
    values, counts = np.unique(samples, return_counts=True)
    support = np.arange(values.min() - 1, values.max() + 2)
    probs = mech.pmf(support, 2.0)
    observed = np.array([counts[values == v].sum() for v in support])
    # Merge the sparse tails into their neighbours so every expected count is >= 5.
    keep = probs * n >= 5
    obs, exp = observed[keep], probs[keep] * n
    assert np.all(observed[probs == 0.0] == 0)  # never an impossible output
    if (1.0 - probs[keep].sum()) * n > 1e-6:
        obs = np.append(obs, observed[~keep].sum())
        exp = np.append(exp, (1.0 - probs[keep].sum()) * n)
    assert stats.chisquare(obs, exp * (n / exp.sum())).pvalue > 1e-4


# ---------------------------------------------------------------- exponential


def test_exponential_density_includes_normaliser() -> None:
    mech = ExponentialMechanism(epsilon=1.0, lo=LO, hi=HI)
    for y in (LO - 3, LO, 0.5, HI, HI + 1):
        mass = integrate.quad(lambda t, y=y: float(mech.density(t, y)), LO, HI, epsabs=1e-13)[0]
        assert mass == pytest.approx(1.0, abs=1e-10)
    assert float(mech.density(HI + 0.1, 0.5)) == 0.0


@pytest.mark.parametrize("epsilon", EPSILONS)
@pytest.mark.parametrize("calibration", ["paper", "tight"])
def test_exponential_dp_ratio(epsilon: float, calibration: str, rng: np.random.Generator) -> None:
    mech = ExponentialMechanism(
        epsilon=epsilon, lo=LO, hi=HI, calibration=calibration, sampler="inverse_cdf"
    )
    outputs = output_grid(HI - LO, rng=rng)
    check_pure_dp(mech, epsilon, outputs)
    # The true worst ratio (normaliser included) is exp(c (hi - lo)): e^(eps/2) with the paper's
    # scale 2 (hi - lo) / eps, e^eps with the tight one. Without Z(y) it would differ.
    dens = mech.density(outputs[None, :], LABELS[:, None])
    inside = (outputs >= LO) & (outputs <= HI)
    worst = max(
        float(np.max(dens[i, inside] / dens[j, inside]))
        for i in range(LABELS.size)
        for j in range(LABELS.size)
    )
    expected = epsilon / 2 if calibration == "paper" else epsilon
    assert mech.effective_epsilon == pytest.approx(expected, rel=1e-12)
    assert math.log(worst) == pytest.approx(expected, rel=1e-9)


def test_exponential_normaliser_matters() -> None:
    """Dropping Z(y) would change the ratio: between lo and the midpoint it is not e^{c d}."""
    mech = ExponentialMechanism(epsilon=2.0, lo=LO, hi=HI, calibration="tight")
    mid = 0.5 * (LO + HI)
    ratio = float(mech.density(LO, LO) / mech.density(LO, mid))
    c, d = mech.rate, mid - LO
    numerators_only = math.exp(c * d)
    assert ratio == pytest.approx(
        numerators_only * float(mech.normaliser(mid) / mech.normaliser(LO))
    )
    assert ratio > numerators_only * 1.1


@pytest.mark.slow
@pytest.mark.parametrize("sampler", ["rejection", "inverse_cdf"])
@pytest.mark.parametrize("calibration", ["paper", "tight"])
@pytest.mark.parametrize("y", [LO, 0.9, HI])
def test_exponential_sampler_matches_density(sampler: str, calibration: str, y: float) -> None:
    mech = ExponentialMechanism(epsilon=2.0, lo=LO, hi=HI, sampler=sampler, calibration=calibration)
    samples = mech.randomize(np.full(100_000, y), np.random.default_rng(13))
    grid = np.linspace(LO, HI, 20_001)
    dens = mech.density(grid, y)
    # Trapezoid CDF of the density (smooth between grid points, error ~1e-9).
    table = np.concatenate([[0.0], np.cumsum(0.5 * (dens[1:] + dens[:-1]) * np.diff(grid))])
    assert table[-1] == pytest.approx(1.0, abs=1e-7)
    assert stats.kstest(samples, lambda t: np.interp(t, grid, table)).pvalue > 1e-4


def test_exponential_rejection_refuses_hopeless_epsilon() -> None:
    from shared.errors import InvalidParameterError

    with pytest.raises(InvalidParameterError, match="inverse_cdf"):
        ExponentialMechanism(epsilon=1e-5, lo=LO, hi=HI)
    out = ExponentialMechanism(epsilon=1e-5, lo=LO, hi=HI, sampler="inverse_cdf").randomize(
        np.zeros(1000), np.random.default_rng(0)
    )
    assert np.all((out >= LO) & (out <= HI))
