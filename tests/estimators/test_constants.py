"""ePTR-OLS constants chosen by the product (shared.estimators.constants): the budget rule adds up
exactly, each formula against brute force or its closed form, the sparse vector's output
distribution computed exactly and its privacy ratio checked analytically, and the constants
finite and positive on adversarial inputs."""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from scipy import integrate
from scipy.special import expit

from shared import epsilon as amounts
from shared.errors import InvalidParameterError
from shared.estimators import constants as C
from shared.estimators._checks import project_rows
from shared.estimators.eptr import eptr_noise_scale, eptr_threshold
from shared.estimators.ols import eptr_design, eptr_ols
from tests.mechanisms.test_sparse_vector import svt_distribution as exact_svt

# ---- the budget rule ------------------------------------------------------------------------

CHOICES = st.lists(st.sampled_from(C.OLS_CONSTANTS), min_size=1, max_size=3, unique=True)


@settings(max_examples=200, deadline=None)
@given(
    digits=st.integers(1, 10**9),
    exponent=st.integers(-12, 6),
    delta=st.decimals(min_value="1e-12", max_value="0.5", places=12),
    chosen=CHOICES,
)
def test_the_split_adds_up_exactly(
    digits: int, exponent: int, delta: Decimal, chosen: list[str]
) -> None:
    epsilon = Decimal(digits).scaleb(exponent)
    assume(delta > 0)
    split = C.ols_split(epsilon=epsilon, delta=delta, chosen=chosen)
    assert split.chosen == tuple(n for n in C.OLS_CONSTANTS if n in chosen)  # estimation order
    assert amounts.add(*split.parts.values()) == split.constants_epsilon
    assert amounts.add(split.constants_epsilon, split.eptr_epsilon) == epsilon  # exactly
    assert split.delta == delta  # the estimates spend no delta
    for name, part in split.parts.items():
        assert part > 0 and Decimal(split.part_float(name)) <= part  # never run above the charge
        # The documented share, up to the quantum of a short decimal (6 significant digits).
        assert abs(float(part) - C.SHARES[name] * float(epsilon)) <= 1e-5 * float(epsilon)
    assert Decimal(split.eptr_float) <= split.eptr_epsilon and split.eptr_float > 0
    public = split.public()
    assert public["constants"]["delta"] == "0" and public["eptr"]["delta"] == amounts.text(delta)
    total = sum(Decimal(v) for v in public["constants"]["parts"].values()) + Decimal(
        public["eptr"]["epsilon"]
    )
    assert total == epsilon


def test_the_documented_shares_for_epsilon_one() -> None:
    split = C.ols_split(epsilon="1", delta="0.01", chosen=C.OLS_CONSTANTS)
    assert split.public() == {
        "chosen": ["r_x", "c0", "r_theta"],
        "constants": {
            "epsilon": "0.25",
            "delta": "0",
            "parts": {"r_x": "0.05", "c0": "0.15", "r_theta": "0.05"},
        },
        "eptr": {"epsilon": "0.75", "delta": "0.01"},
    }
    only_c0 = C.ols_split(epsilon="2", delta="0.001", chosen=["c0"])
    assert (only_c0.constants_epsilon, only_c0.eptr_epsilon) == (Decimal("0.3"), Decimal("1.7"))
    assert len(split.explanation()) == 4


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"epsilon": "1e-320"}, "epsilon"),  # parts below a usable double
        ({"epsilon": "0"}, "epsilon"),
        ({"delta": "1"}, "delta"),
        ({"delta": "0"}, "delta"),
        ({"chosen": ["r_y"]}, "chosen"),
        ({"chosen": []}, "chosen"),
    ],
)
def test_the_split_refuses_bad_input_naming_it(kwargs: dict, match: str) -> None:
    args = {"epsilon": "1", "delta": "0.01", "chosen": C.OLS_CONSTANTS} | kwargs
    with pytest.raises(InvalidParameterError, match=match):
        C.ols_split(**args)


# ---- r_x: the sparse vector's output distribution, exactly ----------------------------------


def svt_distribution(norms: np.ndarray, *, epsilon: float, above: float) -> np.ndarray:
    """P(output = NORM_GRID[j]) for every j (the last entry also takes "no stop"): the exact
    law of ``sparse_vector.first_at_or_below`` on the counts #{norm > r_j}."""
    values = np.sort(norms)
    counts = values.size - np.searchsorted(values, C.NORM_GRID, side="right")
    probs = exact_svt(counts, threshold=above, epsilon=epsilon)
    return np.append(probs[:-2], probs[-2] + probs[-1])


# A short public grid (2^(j/8) from 1/32 to 32) keeps the exact distributions cheap; the
# privacy argument does not depend on the grid.
SHORT_GRID = 2.0 ** (np.arange(-40, 41) / 8.0)


@pytest.fixture
def short_grid(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(C, "NORM_GRID", SHORT_GRID)


@pytest.mark.parametrize("epsilon", [0.3, 1.0, 3.0])
@pytest.mark.usefixtures("short_grid")
def test_sparse_vector_ratio_is_within_epsilon_for_neighbouring_norms(epsilon: float) -> None:
    """Analytic privacy check: for neighbours (one row's norm moved, up or down, to each kind
    of place: below all, inside, above all), every output's probability ratio <= e^epsilon."""
    rng = np.random.default_rng(3)
    base = np.exp(rng.normal(0.0, 0.6, size=40))
    above = C.target_above(base.size, epsilon)
    worst = 0.0
    p_base = svt_distribution(base, epsilon=epsilon, above=above)
    assert p_base.sum() == pytest.approx(1.0, abs=1e-4)
    for i in (0, 7):
        for new in (0.0, 1e-3, float(np.median(base)), 40.0, 1e30):
            other = base.copy()
            other[i] = new
            p_other = svt_distribution(other, epsilon=epsilon, above=above)
            seen = (p_base > 1e-12) | (p_other > 1e-12)
            ratio = np.abs(np.log(np.maximum(p_base[seen], 1e-300) / p_other[seen]))
            worst = max(worst, float(ratio.max()))
    assert worst <= epsilon * (1 + 1e-3), worst
    assert worst > 0.3 * epsilon  # the neighbours do move the output


@pytest.mark.usefixtures("short_grid")
def test_sparse_vector_samples_follow_the_exact_distribution() -> None:
    """The implementation draws from the distribution the analytic check reasons about."""
    rng = np.random.default_rng(4)
    norms = np.exp(rng.normal(0.0, 0.5, size=30))
    epsilon, above = 1.0, C.target_above(30, 1.0)
    exact = svt_distribution(norms, epsilon=epsilon, above=above)
    draws = np.array(
        [C.dp_norm_quantile(norms, epsilon=epsilon, above=above, rng=rng) for _ in range(20000)]
    )
    index = np.searchsorted(C.NORM_GRID, draws)
    assert np.all(C.NORM_GRID[index] == draws)
    freq = np.bincount(index, minlength=C.NORM_GRID.size) / draws.size
    top = np.argsort(-exact)[:8]
    assert np.allclose(freq[top], exact[top], atol=4 * np.sqrt(exact[top] / draws.size) + 1e-3)


def test_the_norm_quantile_clips_about_the_target_on_a_large_sample() -> None:
    rng = np.random.default_rng(5)
    x = rng.normal(size=(8000, 5))
    norms = np.linalg.norm(x, axis=1)
    epsilon = 0.05
    above = C.target_above(8000, epsilon)
    assert above == 200.0  # max(8000 / 40, 10 / 0.05)
    clipped = [
        np.count_nonzero(norms > C.dp_norm_quantile(norms, epsilon=epsilon, above=above, rng=rng))
        for _ in range(200)
    ]
    assert 40 < np.median(clipped) < 400 and max(clipped) < 1000


def test_target_above_is_public_and_bounded() -> None:
    assert C.target_above(8000, 0.05) == 200.0
    assert C.target_above(8000, 0.01) == 1000.0  # the noise floor 10 / epsilon
    assert C.target_above(100, 0.001) == 25.0  # at most n / 4
    assert C.target_above(40_000, 1.0) == 1000.0  # n / 40


# ---- c0: lambda_min's sensitivity, the margin, the choice ----------------------------------


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), p=st.integers(1, 4), row=st.integers(0, 29))
def test_lambda_min_moves_by_at_most_r_x_squared(seed: int, p: int, row: int) -> None:
    """Brute force: one row replaced (zero, random, along either extreme eigenvector, huge)
    moves lambda_min of the projected design by at most r_x^2 (the Laplace sensitivity)."""
    rng = np.random.default_rng(seed)
    r_x = float(rng.uniform(0.5, 3.0))
    x = rng.normal(size=(30, p)) * rng.uniform(0.1, 3.0, size=p)
    lam = np.linalg.eigvalsh(project_rows(x, r_x).T @ project_rows(x, r_x))
    vectors = np.linalg.eigh(project_rows(x, r_x).T @ project_rows(x, r_x))[1]
    for new in (
        np.zeros(p),
        rng.normal(size=p) * 10,
        vectors[:, 0] * r_x,
        vectors[:, -1] * r_x,
        np.full(p, 1e12),
    ):
        other = x.copy()
        other[row] = new
        z = project_rows(other, r_x)
        moved = np.linalg.eigvalsh(z.T @ z)[0] - lam[0]
        assert abs(moved) <= r_x**2 * (1 + 1e-9)


def test_adding_a_row_on_the_weakest_direction_reaches_the_sensitivity() -> None:
    """The bound r_x^2 is tight (half the paper's 2 r_x^2): a design with a large eigen-gap,
    one zero row replaced by a row of norm r_x on the weakest direction."""
    x = np.vstack([np.diag([10.0, 10.0, 0.0]), np.zeros((1, 3))])
    x[2, 2] = 0.0
    z = np.vstack([x[:-1], [[0.0, 0.0, 2.0]]])
    gram = lambda a: a.T @ a  # noqa: E731
    assert np.linalg.eigvalsh(gram(z))[0] - np.linalg.eigvalsh(gram(x))[0] == pytest.approx(4.0)


def test_noisy_lambda_min_is_in_units_of_r_x_squared_with_laplace_noise() -> None:
    rng = np.random.default_rng(6)
    x = rng.normal(size=(500, 3))
    design = eptr_design(x, 2.5, intercept=True)
    exact = np.linalg.eigvalsh(design.T @ design)[0] / 2.5**2
    draws = np.array(
        [C.noisy_lambda_min(design, r_x=2.5, epsilon=0.5, rng=rng) for _ in range(4000)]
    )
    assert np.median(draws) == pytest.approx(exact, abs=0.1)
    assert draws.std() == pytest.approx(math.sqrt(2) / 0.5, rel=0.08)
    with pytest.raises(InvalidParameterError, match="norm <= r_x"):
        C.noisy_lambda_min(x * 10, r_x=1.0, epsilon=1.0, rng=rng)


def _tail(g: float, *, eptr_epsilon: float, lambda_epsilon: float) -> float:
    """P(L + T >= g) by the trapezoid rule on a fine grid (independent of the module's
    quadrature): L ~ Laplace(1 / (2 lambda_epsilon)), T ~ Logistic(2 / eptr_epsilon)."""
    s, sigma = 1.0 / (2 * lambda_epsilon), 2.0 / eptr_epsilon
    ell = np.linspace(-60 * s, g + 60 * (s + sigma), 2_000_001)
    values = np.exp(-np.abs(ell) / s) / (2 * s) * expit((ell - g) / sigma)
    return float(integrate.trapezoid(values, ell))


@pytest.mark.parametrize(
    ("eptr_epsilon", "lambda_epsilon", "no_reply"),
    [(0.75, 0.15, 1e-5), (6.0, 1.2, 1e-5), (0.1, 0.02, 1e-3), (3.0, 0.01, 1e-6)],
)
def test_release_margin_bounds_the_no_reply_probability(
    eptr_epsilon: float, lambda_epsilon: float, no_reply: float
) -> None:
    g = C.release_margin(
        eptr_epsilon=eptr_epsilon, lambda_epsilon=lambda_epsilon, no_reply=no_reply
    )
    exact = _tail(g, eptr_epsilon=eptr_epsilon, lambda_epsilon=lambda_epsilon)
    assert exact <= no_reply * (1 + 1e-4)  # the margin keeps "no reply" below the target
    assert exact >= no_reply * 0.999  # and no larger margin than that
    assert C.no_reply_probability(
        g, eptr_epsilon=eptr_epsilon, lambda_epsilon=lambda_epsilon
    ) == pytest.approx(exact, rel=1e-4)
    # Tighter than a margin for each noise on its own (Laplace tail + logistic tail).
    s, sigma = 1 / (2 * lambda_epsilon), 2 / eptr_epsilon
    separate = s * math.log(1 / no_reply) + sigma * math.log(2 / no_reply)
    assert g < separate


def test_the_margin_is_at_least_one_example_at_a_huge_epsilon() -> None:
    """At epsilon 1e6 the exact margin is below 1e-4: the test's outcome would hang on the
    rounding of lambda_min; the floor keeps the release (the service's epsilon 1e300 too)."""
    assert C.release_margin(eptr_epsilon=1e6, lambda_epsilon=1e5, no_reply=1e-5) == C.MIN_MARGIN
    rng = np.random.default_rng(14)
    x = rng.normal(size=(200, 3))
    y = x @ np.array([1.0, 2.0, 3.0]) + rng.normal(size=200)
    for epsilon in ("1e6", "1e300"):
        out = C.eptr_ols_product(
            x, y, epsilon=epsilon, delta="0.01", lo=-20, hi=20, rng=rng, intercept=True
        )
        assert out.fit.released and np.allclose(out.fit.coef[:3], [1, 2, 3], atol=0.3)


def test_choose_c0_closed_form_and_its_fallbacks() -> None:
    n, r_x, eps, delta, lam_eps = 8000, 3.7, 0.75, 0.01, 0.15
    m = eptr_threshold(epsilon=eps, delta=delta)
    g = C.release_margin(eptr_epsilon=eps, lambda_epsilon=lam_eps, no_reply=C.NO_REPLY)
    kwargs = {"r_x": r_x, "n": n, "eptr_epsilon": eps, "delta": delta, "lambda_epsilon": lam_eps}
    strong = 550.0  # lambda_min / r_x^2 of a good design (about 0.95 n / 13.7)
    assert C.choose_c0(strong, **kwargs) == pytest.approx(
        (strong - 2 * (1 + m + g)) * r_x**2 / n, rel=1e-12
    )
    weak = 2.0 * (1 + m + g)  # the margin eats it all: half the estimate instead
    assert C.choose_c0(weak, **kwargs) == pytest.approx(weak / 2 * r_x**2 / n, rel=1e-12)
    assert C.choose_c0(-50.0, **kwargs) == pytest.approx(r_x**2 / n)  # floor: alpha <= 4 R_theta
    assert C.choose_c0(1e12, **kwargs) == pytest.approx(r_x**2)  # lambda_min <= n r_x^2


def test_the_test_rarely_answers_no_reply_with_the_chosen_c0() -> None:
    """Simulated: the estimate's noise and the test's Bernoulli together; the probability of
    "no reply" over 200,000 draws is consistent with <= NO_REPLY (none seen)."""
    rng = np.random.default_rng(7)
    eps, delta, lam_eps = 0.75, 0.01, 0.15
    true_units = 550.0
    noisy = true_units + rng.laplace(0.0, 1 / lam_eps, 200_000)
    m = eptr_threshold(epsilon=eps, delta=delta)
    g = C.release_margin(eptr_epsilon=eps, lambda_epsilon=lam_eps, no_reply=C.NO_REPLY)
    c0n_units = noisy - 2 * (1 + m + g)  # the closed form (the strong branch)
    gamma = np.maximum(true_units - c0n_units - 2, 0) / 2
    release = expit(0.5 * eps * (gamma - m))
    assert float(np.mean(1 - release)) <= C.NO_REPLY


# ---- r_theta: the bound ||theta-hat|| <= ||y|| / sqrt(lambda_min) ----------------------------


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), p=st.integers(1, 5), n=st.integers(6, 60))
def test_coefficient_norm_is_bounded_by_labels_over_root_lambda(seed: int, p: int, n: int) -> None:
    rng = np.random.default_rng(seed)
    assume(n > p)
    x = rng.normal(size=(n, p)) * rng.uniform(0.01, 10, size=p) + rng.normal(size=p)
    y = rng.normal(size=n) * rng.uniform(0.1, 10) + x @ rng.normal(size=p)
    lam = np.linalg.eigvalsh(x.T @ x)[0]
    assume(lam > 1e-8 * np.linalg.eigvalsh(x.T @ x)[-1])
    theta = np.linalg.solve(x.T @ x, x.T @ y)
    assert np.linalg.norm(theta) <= np.linalg.norm(y) / math.sqrt(lam) * (1 + 1e-7)


def test_choose_r_theta_closed_form_and_clamps() -> None:
    n, r_x, bound, eps = 8000, 3.7, 5.0, 0.05
    scale = 1 / (n * eps)
    r = C.choose_r_theta(
        0.08, bound=bound, r_x=r_x, n=n, lambda_low_units=500.0, moment_epsilon=eps
    )
    assert r == pytest.approx(bound / r_x * math.sqrt(n * (0.08 + 3 * scale) / 500.0), rel=1e-12)
    # A negative noisy moment still gives a positive radius (one noise scale).
    low = C.choose_r_theta(
        -1.0, bound=bound, r_x=r_x, n=n, lambda_low_units=500.0, moment_epsilon=eps
    )
    assert low == pytest.approx(bound / r_x * math.sqrt(n * scale / 500.0), rel=1e-12)
    huge = C.choose_r_theta(
        1e300, bound=1e300, r_x=2.0**-128, n=n, lambda_low_units=1e-300, moment_epsilon=eps
    )
    assert huge == pytest.approx(2.0**256, rel=1e-12)
    tiny = C.choose_r_theta(
        0.0, bound=1e-300, r_x=2.0**128, n=n, lambda_low_units=1e300, moment_epsilon=1e300
    )
    assert tiny == pytest.approx(2.0**-256, rel=1e-12)


def test_second_moment_sensitivity_is_one_over_n() -> None:
    rng = np.random.default_rng(8)
    y = rng.uniform(-5, 5, size=50)

    def exact(values: np.ndarray) -> float:
        return float(np.mean((np.clip(values, -5, 5) / 5) ** 2))

    base = exact(y)
    for i in range(50):
        for new in (-1e9, -5.0, 0.0, 5.0, 1e9):
            other = y.copy()
            other[i] = new
            assert abs(exact(other) - base) <= 1 / 50 + 1e-15
    draws = [C.noisy_second_moment(y, bound=5.0, epsilon=2.0, rng=rng) for _ in range(4000)]
    assert np.median(draws) == pytest.approx(base, abs=0.003)
    assert np.std(draws) == pytest.approx(math.sqrt(2) / (50 * 2.0), rel=0.08)


# ---- the whole choice: finite and positive on any valid input --------------------------------


def _finite_positive(chosen: C.ChosenConstants) -> None:
    for name, value in chosen.params().items():
        assert math.isfinite(value) and value > 0, (name, value)


def _design(kind: str, n: int, p: int, rng: np.random.Generator) -> np.ndarray:
    x = rng.normal(size=(n, p))
    if kind == "zeros":
        return np.zeros((n, p))
    if kind == "huge row":
        x[0] = 1e300
        return x
    if kind == "huge":
        return x * 1e200
    if kind == "tiny":
        return x * 1e-200
    if kind == "constant":
        return np.ones((n, p))
    return x


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    kind=st.sampled_from(["normal", "zeros", "huge row", "huge", "tiny", "constant"]),
    p=st.integers(1, 4),
    extra=st.integers(1, 30),  # n = p + extra (+ intercept), down to n = p + 1
    epsilon=st.sampled_from(["1e-6", "0.01", "1", "8", "1e6"]),
    intercept=st.booleans(),
    bounds=st.sampled_from(
        [(-5.0, 5.0), (0.0, 100.0), (-1e15, 1e15), (2.0, 2.5)]
    ),  # 1e15: the limit
    chosen=CHOICES,
)
def test_constants_are_finite_and_positive_for_any_valid_input(
    seed: int, kind: str, p: int, extra: int, epsilon: str, intercept: bool,
    bounds: tuple[float, float], chosen: list[str],
) -> None:  # fmt: skip
    rng = np.random.default_rng(seed)
    n = p + int(intercept) + extra
    x = _design(kind, n, p, rng)
    y = rng.uniform(*bounds, size=n) if kind != "zeros" else np.zeros(n)
    lo, hi = bounds
    given_values = {"r_x": 3.0, "r_theta": 2.0, "c0": 0.1}
    split = C.ols_split(epsilon=epsilon, delta="0.01", chosen=chosen)
    out = C.eptr_ols_chosen(
        x, y, split=split, lo=lo, hi=hi, rng=rng, given=given_values, intercept=intercept
    )
    _finite_positive(out.constants)
    for name in C.OLS_CONSTANTS:
        if name not in chosen:
            assert out.constants.params()[name] == given_values[name]
    if "r_x" in chosen and intercept:
        assert out.constants.r_x > 1.0
    assert out.fit.coef.shape == (p + int(intercept),)
    assert np.all(np.isfinite(out.fit.coef))
    # The fit is Algorithm 4 at ePTR's share with exactly these constants.
    r_x, r_theta, c0 = out.constants.r_x, out.constants.r_theta, out.constants.c0
    assert out.fit.alpha == pytest.approx(4 * r_x**2 * r_theta / (c0 * n), rel=1e-9)
    if math.isfinite(out.fit.noise_scale) and out.fit.alpha < 1e250:
        expected = eptr_noise_scale(alpha=out.fit.alpha, epsilon=split.eptr_float, delta=0.01)
        assert out.fit.noise_scale == pytest.approx(expected, rel=1e-12)


def test_one_huge_row_does_not_move_the_chosen_radius() -> None:
    rng = np.random.default_rng(9)
    x = rng.normal(size=(4000, 3))
    y = x @ np.array([0.5, 0.2, -0.1]) + rng.normal(size=4000)
    split = C.ols_split(epsilon="2", delta="0.01", chosen=C.OLS_CONSTANTS)
    base = C.eptr_ols_chosen(x, y, split=split, lo=-5, hi=5, rng=np.random.default_rng(1))
    x2 = x.copy()
    x2[0] = 1e300
    moved = C.eptr_ols_chosen(x2, y, split=split, lo=-5, hi=5, rng=np.random.default_rng(1))
    assert moved.constants.r_x == base.constants.r_x  # same noise, one row's norm: same grid point
    assert base.constants.r_x < 4.5 and base.fit.released


def test_explicit_constants_are_used_as_given_and_the_rest_chosen() -> None:
    rng = np.random.default_rng(10)
    x = rng.normal(size=(3000, 2))
    y = x @ np.array([1.0, -0.5]) + rng.normal(size=3000)
    split = C.ols_split(epsilon="4", delta="0.001", chosen=["c0"])
    out = C.eptr_ols_chosen(
        x, y, split=split, lo=-10, hi=10, rng=rng, given={"r_x": 3.0, "r_theta": 2.0}
    )
    assert (out.constants.r_x, out.constants.r_theta) == (3.0, 2.0)
    assert out.header_params() == {
        "c0": out.constants.c0,
        "constants_chosen": "c0",
        "constants_epsilon": "0.6",
        "eptr_epsilon": "3.4",
    }
    with pytest.raises(InvalidParameterError, match="r_theta must be given"):
        C.eptr_ols_chosen(x, y, split=split, lo=-10, hi=10, rng=rng, given={"r_x": 3.0})
    with pytest.raises(InvalidParameterError, match="fewer rows"):
        C.eptr_ols_chosen(x[:2], y[:2], split=split, lo=-10, hi=10, rng=rng, intercept=True,
                          given={"r_x": 3.0, "r_theta": 2.0})  # fmt: skip


def test_the_product_is_close_to_ols_on_the_papers_design() -> None:
    """Section 4.3's design at n = 8000, epsilon 2: every constant chosen, the release is
    within a few times OLS's own error of theta (the benchmark measures it properly)."""
    rng = np.random.default_rng(11)
    theta = 1.0 / np.arange(1, 6)
    theta /= np.linalg.norm(theta)
    errors = []
    for _ in range(5):
        x = rng.normal(size=(8000, 5))
        y = x @ theta + rng.normal(size=8000)
        out = C.eptr_ols_product(x, y, epsilon=2.0, delta=0.01, lo=-5, hi=5, rng=rng)
        assert out.fit.released
        assert 3.0 < out.constants.r_x < 4.5 and 0.5 < out.constants.c0 < 0.95
        assert 1.0 < out.constants.r_theta < 2.0
        errors.append(np.sum((out.fit.coef - theta) ** 2))
    assert np.mean(errors) < 0.01


def test_the_projection_keeps_rows_within_the_chosen_radius() -> None:
    rng = np.random.default_rng(12)
    x = rng.normal(size=(500, 3)) * 4
    for intercept in (False, True):
        split = C.ols_split(epsilon=1, delta=0.01, chosen=["r_x"])
        out = C.eptr_ols_chosen(
            x, rng.normal(size=500), split=split, lo=-3, hi=3, rng=rng, intercept=intercept,
            given={"r_theta": 1.0, "c0": 0.1},
        )  # fmt: skip
        rows = eptr_design(x, out.constants.r_x, intercept=intercept)
        assert np.all(np.linalg.norm(rows, axis=1) <= out.constants.r_x * (1 + 1e-12))


def test_the_fit_is_eptr_ols_with_the_chosen_constants() -> None:
    """Same rng stream: eptr_ols_chosen = the estimates, then eptr_ols with their outputs."""
    rng_data = np.random.default_rng(13)
    x = rng_data.normal(size=(2000, 2))
    y = x @ np.array([0.7, 0.1]) + rng_data.normal(size=2000)
    split = C.ols_split(epsilon=3, delta=0.001, chosen=C.OLS_CONSTANTS)
    out = C.eptr_ols_chosen(x, y, split=split, lo=-5, hi=5, rng=np.random.default_rng(99))
    replay = np.random.default_rng(99)
    constants = C.choose_ols_constants(
        x, np.clip(y, -5, 5), bound=5.0, split=split, given={}, intercept=False, rng=replay
    )
    assert constants == out.constants
    fit = eptr_ols(
        x, np.clip(y, -5, 5), epsilon=split.eptr_float, delta=split.delta_float,
        r_x=constants.r_x, r_theta=constants.r_theta, c0=constants.c0, rng=replay,
    )  # fmt: skip
    assert np.array_equal(fit.coef, out.fit.coef)


@pytest.mark.parametrize("epsilon", [0.05, 1.0, 8.0])
@pytest.mark.parametrize("sensitivity", [1.0, 1.0 / 7919, 3.5e6])
def test_exact_laplace_is_epsilon_dp_for_neighbours_a_sensitivity_apart(
    epsilon: float, sensitivity: float
) -> None:
    """Analytic check: the output (k + Z) h with k = round(value / h) has the exact pmf of a
    discrete Laplace of scale 1025 / epsilon around k; for values a sensitivity apart (and
    points between, where the rounding differs) the log-ratio of every output's probability
    is at most epsilon, with equality reached (the bound is tight up to the rounding)."""
    h = Fraction(sensitivity) / C.LAPLACE_RESOLUTION
    scale = Fraction(C.LAPLACE_RESOLUTION + 1) / Fraction(epsilon)

    def centre(value: float) -> int:
        return round(Fraction(value) / h)

    worst = 0.0
    for base in (0.0, 0.37 * sensitivity, -12.5 * sensitivity):
        for shift in (sensitivity, 0.5 * sensitivity, float(h) * 0.5001):
            k, k2 = centre(base), centre(base + shift)
            assert abs(k - k2) <= C.LAPLACE_RESOLUTION + 1
            # log P(m | k) - log P(m | k2) = (|m - k2| - |m - k|) / scale: max |k - k2| / scale
            worst = max(worst, abs(k - k2) / float(scale))
    assert worst <= epsilon * (1 + 1e-12)
    assert worst >= epsilon * (C.LAPLACE_RESOLUTION - 1) / (C.LAPLACE_RESOLUTION + 1)


def test_exact_laplace_outputs_lie_on_one_grid_whatever_the_value() -> None:
    """Every output is an integer multiple of h = sensitivity / 1024, so the SET of possible
    outputs does not depend on the value (a float Laplace's does: Mironov 2012), and the noise
    has the discrete Laplace's spread."""
    h = 0.5 / C.LAPLACE_RESOLUTION
    rng = np.random.default_rng(11)
    for value in (0.0, 0.123456789, 1e6 + 1 / 3):
        draws = np.array(
            [C.exact_laplace(value, sensitivity=0.5, epsilon=2.0, rng=rng) for _ in range(3000)]
        )
        units = draws / h
        assert np.all(units == np.round(units))
        assert np.median(draws) == pytest.approx(value, abs=0.05)
        assert draws.std() == pytest.approx(math.sqrt(2) * 0.5 * 1025 / 1024 / 2.0, rel=0.08)
