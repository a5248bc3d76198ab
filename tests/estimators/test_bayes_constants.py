"""ePTR-Bayes constants chosen by the product (shared.estimators.bayes, ``eptr_bayes_chosen``):
the budget rule adds up exactly, the two estimates' sensitivities by brute force on neighbouring
data sets (the smallest class count under a changed label or a changed whole example; the norm
counts of r_x under a changed row), c0's closed form and clamps, the fit equal to
``eptr_bayes`` with the chosen constants, and finite releases on adversarial inputs (an empty
class, all rows zero, huge norms)."""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from shared import epsilon as amounts
from shared.errors import InvalidParameterError
from shared.estimators import bayes as B
from shared.estimators import constants as C
from shared.estimators import registry
from shared.estimators._checks import row_norms
from shared.estimators.eptr import eptr_release_probability, eptr_threshold
from shared.mechanisms.discrete_laplace import discrete_laplace_samples


def _data(n: int, priors: tuple[float, ...], rng: np.random.Generator, gap: float = 3.0):
    k = len(priors)
    y = rng.choice(k, size=n, p=priors)
    return gap * np.eye(k, 10)[y] + rng.normal(size=(n, 10)), y


# ---- the budget rule ------------------------------------------------------------------------

CHOICES = st.lists(st.sampled_from(B.BAYES_CONSTANTS), min_size=1, max_size=2, unique=True)


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
    split = B.bayes_split(epsilon=epsilon, delta=delta, chosen=chosen)
    assert isinstance(split, B.BayesConstantsSplit)
    assert split.chosen == tuple(n for n in B.BAYES_CONSTANTS if n in chosen)  # estimation order
    assert amounts.add(*split.parts.values()) == split.constants_epsilon
    assert amounts.add(split.constants_epsilon, split.eptr_epsilon) == epsilon  # exactly
    assert split.delta == delta  # the estimates spend no delta
    for name, part in split.parts.items():
        assert part > 0 and Decimal(split.part_float(name)) <= part  # never run above the charge
        assert abs(float(part) - B.SHARES[name] * float(epsilon)) <= 1e-5 * float(epsilon)
    assert Decimal(split.eptr_float) <= split.eptr_epsilon and split.eptr_float > 0
    public = split.public()
    assert public["constants"]["delta"] == "0" and public["eptr"]["delta"] == amounts.text(delta)
    total = sum(Decimal(v) for v in public["constants"]["parts"].values()) + Decimal(
        public["eptr"]["epsilon"]
    )
    assert total == epsilon
    assert len(split.explanation()) == len(split.chosen) + 1


def test_the_documented_shares_for_epsilon_one() -> None:
    split = B.bayes_split(epsilon="1", delta="0.01", chosen=["c0", "r_x"])
    assert split.public() == {
        "chosen": ["r_x", "c0"],
        "constants": {"epsilon": "0.15", "delta": "0", "parts": {"r_x": "0.05", "c0": "0.1"}},
        "eptr": {"epsilon": "0.85", "delta": "0.01"},
    }
    lines = split.explanation()
    assert "sparse vector" in lines[0] and "smallest class count" in lines[1]
    assert lines[2].startswith("ePTR-Bayes: epsilon 0.85")
    only = B.bayes_split(epsilon="4", delta="0.0001", chosen=["c0"]).public()
    assert only["constants"]["parts"] == {"c0": "0.4"} and only["eptr"]["epsilon"] == "3.6"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"epsilon": "1", "delta": "0.01", "chosen": []}, "chosen"),
        ({"epsilon": "1", "delta": "0.01", "chosen": ["r_theta"]}, "chosen"),
        ({"epsilon": "1e-320", "delta": "0.01", "chosen": ["c0"]}, "epsilon"),
        ({"epsilon": "1", "delta": "1", "chosen": ["c0"]}, "delta"),
    ],
)
def test_the_split_refuses_bad_input_naming_it(kwargs: dict, match: str) -> None:
    with pytest.raises(InvalidParameterError, match=match):
        B.bayes_split(**kwargs)


def test_the_family_chooses_through_the_registry_hooks() -> None:
    family = registry.get("bayes")
    assert family.privacies == {"eptr": ("n_classes",)}
    assert family.chosen == {"eptr": B.BAYES_CONSTANTS}
    eps, dlt = Decimal("2"), Decimal("0.001")
    split = family.split_of("eptr", {"n_classes": 3}, eps, dlt)
    assert split.public()["constants"]["parts"] == {"r_x": "0.1", "c0": "0.2"}
    split = family.split_of("eptr", {"n_classes": 3, "r_x": 4.0}, eps, dlt)
    assert split.chosen == ("c0",)
    assert family.split_of("eptr", {"n_classes": 3, "r_x": 4.0, "c0": 0.1}, eps, dlt) is None


# ---- sensitivities by brute force on neighbouring data sets --------------------------------


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), k=st.integers(2, 5), n=st.integers(4, 40))
def test_the_smallest_count_moves_by_at_most_one_over_every_neighbour(
    seed: int, k: int, n: int
) -> None:
    """Every neighbour: one example's label replaced by every class (label DP), and its
    features too (whole-example DP: the counts ignore features). |min count change| <= 1, and
    1 is reached where the smallest class loses its example."""
    rng = np.random.default_rng(seed)
    classes = rng.integers(0, k, size=n)
    base = np.bincount(classes, minlength=k).min()
    reached = 0
    for row in range(n):
        for new in range(k):
            moved = classes.copy()
            moved[row] = new
            change = abs(int(np.bincount(moved, minlength=k).min()) - int(base))
            assert change <= 1
            reached = max(reached, change)
    smallest = np.bincount(classes, minlength=k)
    if smallest.min() > 0 and np.sum(smallest == smallest.min()) == 1:
        assert reached == 1  # the sensitivity is tight


def test_the_noisy_count_is_the_smallest_count_plus_laplace_one_over_epsilon() -> None:
    classes = np.array([0, 0, 1, 1, 1, 2, 2, 2, 2])
    got = B.noisy_min_count(classes, n_classes=4, epsilon=0.5, rng=np.random.default_rng(3))
    noise = discrete_laplace_samples(np.random.default_rng(3), Fraction(2), 1)[0]
    assert got == float(noise)  # class 3 is empty: the smallest count is 0; exact integer noise
    # The features never enter: the same classes with any features give the same draw.
    draws = [
        B.noisy_min_count(classes, n_classes=3, epsilon=2.0, rng=np.random.default_rng(s))
        for s in range(4000)
    ]
    assert np.mean(draws) == pytest.approx(2.0, abs=0.05)
    # E|Z| of the discrete Laplace of scale t = 1 / 2: 2 e^(-1/t) / (1 - e^(-2/t)).
    expected = 2 * math.exp(-2.0) / (1 - math.exp(-4.0))
    assert np.mean(np.abs(np.array(draws) - 2.0)) == pytest.approx(expected, rel=0.06)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), row=st.integers(0, 19), scale=st.floats(1e-3, 1e3))
def test_the_norm_counts_of_r_x_move_by_one_in_one_direction(
    seed: int, row: int, scale: float
) -> None:
    """r_x's queries #{||x_i|| > r} over the public grid, under a changed row (whole example):
    each moves by at most 1, all in the same direction (monotone: the sparse vector's proof in
    ``constants.dp_norm_quantile``); a changed label alone moves none (r_x reads no label)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(20, 3))
    moved = x.copy()
    moved[row] = rng.normal(size=3) * scale

    def counts(rows: np.ndarray) -> np.ndarray:
        norms = np.sort(row_norms(rows))
        return norms.size - np.searchsorted(norms, C.NORM_GRID, side="right")

    diff = counts(moved) - counts(x)
    assert np.all(np.abs(diff) <= 1)
    assert np.all(diff >= 0) or np.all(diff <= 0)


# ---- c0 from the noisy count (post-processing) ---------------------------------------------


def test_choose_c0_closed_form_its_fallback_and_clamps() -> None:
    kw = {"n": 10_000, "n_classes": 3, "eptr_epsilon": 0.85, "delta": 0.01, "c0_epsilon": 0.1}
    m = eptr_threshold(epsilon=0.85, delta=0.01)
    g = C.release_margin(eptr_epsilon=0.85, lambda_epsilon=0.05, no_reply=C.NO_REPLY)
    assert B.choose_bayes_c0(1000.0, **kw) == pytest.approx((1000.0 - 1.0 - m - g) / 10_000)
    # Too small for the margin: half the estimate (Theorem 3.3's pi_min / 2 at the estimate).
    assert B.choose_bayes_c0(200.0, **kw) == pytest.approx(100.0 / 10_000)
    # At least one example's worth, at most floor(n / K) - 1 counts (c0 K < 1).
    assert B.choose_bayes_c0(-50.0, **kw) == 1.0 / 10_000
    assert B.choose_bayes_c0(1e300, **kw) == (10_000 // 3 - 1) / 10_000
    with pytest.raises(InvalidParameterError, match="n_classes"):
        B.choose_bayes_c0(5.0, **{**kw, "n": 5})


@settings(max_examples=200, deadline=None)
@given(
    count=st.floats(-1e300, 1e300),
    n=st.integers(4, 10**9),
    k=st.integers(2, 64),
    eps=st.sampled_from([0.01, 0.5, 1.0, 8.0, 1e3]),
)
def test_the_chosen_c0_is_a_valid_constant_for_any_estimate(
    count: float, n: int, k: int, eps: float
) -> None:
    assume(n >= 2 * k)
    c0 = B.choose_bayes_c0(
        count, n=n, n_classes=k, eptr_epsilon=eps, delta=1e-6, c0_epsilon=eps / 5
    )
    assert np.isfinite(c0) and c0 >= 1.0 / n and c0 * k < 1.0


def test_the_test_rarely_answers_no_reply_with_the_chosen_c0() -> None:
    """On data whose smallest class is large enough for the margin, the release test's average
    no-reply probability over the estimate's noise is below constants.NO_REPLY (its bound)."""
    rng = np.random.default_rng(5)
    n, k, count, eps_e, dlt, eps_c = 10_000, 3, 1000, 0.85, 0.01, 0.1
    no_reply = []
    for _ in range(4000):
        noisy = count + discrete_laplace_samples(rng, 1 / Fraction(eps_c), 1)[0]
        c0 = B.choose_bayes_c0(
            noisy, n=n, n_classes=k, eptr_epsilon=eps_e, delta=dlt, c0_epsilon=eps_c
        )
        gamma = B.bayes_gamma(np.array([count, 4000.0, 5000.0]), n=n, c0=c0)
        no_reply.append(1.0 - eptr_release_probability(gamma=gamma, epsilon=eps_e, delta=dlt))
    assert np.mean(no_reply) < 1e-4


# ---- the whole fit --------------------------------------------------------------------------


def test_the_fit_is_eptr_bayes_with_the_chosen_constants() -> None:
    x, y = _data(3000, (0.6, 0.25, 0.15), np.random.default_rng(11))
    split = B.bayes_split(epsilon="2", delta="0.001", chosen=B.BAYES_CONSTANTS)
    out = B.eptr_bayes_chosen(x, y, n_classes=3, split=split, rng=np.random.default_rng(4))
    # Replay the same draws by hand: r_x, then c0, then ePTR-Bayes at the rest.
    rng = np.random.default_rng(4)
    r_x = C.choose_r_x(x, split.part_float("r_x"), intercept=False, rng=rng)
    noisy = B.noisy_min_count(y, n_classes=3, epsilon=split.part_float("c0"), rng=rng)
    c0 = B.choose_bayes_c0(
        noisy, n=3000, n_classes=3, eptr_epsilon=split.eptr_float, delta=0.001,
        c0_epsilon=split.part_float("c0"),
    )  # fmt: skip
    fit = B.eptr_bayes(
        x, y, n_classes=3, epsilon=split.eptr_float, delta=0.001, r_x=r_x, c0=c0, rng=rng
    )
    assert (out.r_x, out.c0) == (r_x, c0)
    assert np.array_equal(out.fit.priors, fit.priors) and np.array_equal(out.fit.means, fit.means)
    assert out.fit.released and split.eptr_float == 1.7
    assert out.header_params() == {
        "r_x": r_x, "c0": c0, "constants_chosen": "r_x,c0", "constants_epsilon": "0.3",
        "eptr_epsilon": "1.7",
    }  # fmt: skip
    # The chosen c0 sits between half the smallest share and the share itself.
    share = np.bincount(y).min() / 3000
    assert share / 2 - 0.01 < c0 < share


def test_given_constants_are_used_as_given_and_the_rest_chosen() -> None:
    x, y = _data(2000, (0.5, 0.5), np.random.default_rng(2))
    split = B.bayes_split(epsilon="1", delta="0.01", chosen=["c0"])
    out = B.eptr_bayes_chosen(
        x, y, n_classes=2, split=split, rng=np.random.default_rng(0), given={"r_x": 7.5}
    )
    assert out.r_x == 7.5 and out.header_params()["constants_chosen"] == "c0"
    assert "r_x" not in out.header_params()
    split = B.bayes_split(epsilon="1", delta="0.01", chosen=["r_x"])
    out = B.eptr_bayes_chosen(
        x, y, n_classes=2, split=split, rng=np.random.default_rng(0), given={"c0": 0.2}
    )
    assert out.c0 == 0.2 and out.r_x > 0


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"given": {}, "chosen": ["c0"]}, "r_x must be given"),
        ({"given": {"c0": 0.5}, "chosen": ["r_x"]}, "c0"),  # c0 K >= 1
        ({"given": {"c0": -1.0}, "chosen": ["r_x"]}, "c0"),
        ({"given": {"r_x": float("inf")}, "chosen": ["c0"]}, "r_x"),
        ({"y": np.array([0, 1, 2, 1] * 5)}, "class labels"),
        ({"n_classes": 1}, "n_classes"),
        ({"rows": 3}, "fewer rows"),
    ],
)
def test_bad_input_is_refused_before_anything_is_drawn(change: dict, match: str) -> None:
    rows = change.get("rows", 20)
    x = np.ones((rows, 2))
    y = change.get("y", np.arange(rows) % 2)
    split = B.bayes_split(epsilon="1", delta="0.01", chosen=change.get("chosen", B.BAYES_CONSTANTS))

    class NoDraws:
        def __getattr__(self, name: str) -> object:
            raise AssertionError("drew randomness before validating")

    with pytest.raises(InvalidParameterError, match=match):
        B.eptr_bayes_chosen(
            x[: len(y)], y, n_classes=change.get("n_classes", 2), split=split,
            rng=NoDraws(), given=change.get("given"),  # type: ignore[arg-type]
        )  # fmt: skip


@pytest.mark.parametrize(
    "case", ["one class empty", "all rows zero", "huge norms", "n = 2 K", "one huge row"]
)
def test_adversarial_inputs_give_finite_constants_and_a_valid_release(case: str) -> None:
    rng = np.random.default_rng(8)
    x, y = _data(400, (0.5, 0.3, 0.2), rng)
    if case == "one class empty":
        y = np.where(y == 2, 0, y)
    elif case == "all rows zero":
        x = np.zeros_like(x)
    elif case == "huge norms":
        x = x * 1e300
    elif case == "n = 2 K":
        x, y = x[:6], np.array([0, 1, 2, 0, 1, 2])
    else:
        x[0] = 1e300
    for seed in range(5):
        out = B.eptr_bayes_product(
            x, y, n_classes=3, epsilon="1", delta="0.01", rng=np.random.default_rng(seed)
        )
        assert np.isfinite(out.r_x) and 0 < out.r_x <= C.NORM_GRID[-1]
        assert np.isfinite(out.c0) and out.c0 * 3 < 1 and out.c0 >= 1 / x.shape[0]
        assert np.all(np.isfinite(out.fit.priors)) and out.fit.priors.sum() == pytest.approx(1)
        assert np.all(np.isfinite(out.fit.means))
        if case == "one class empty":
            assert not out.fit.released  # gamma = 0: below delta, never at these seeds
        if case == "all rows zero":
            assert out.r_x < 1e-35  # the grid's bottom (its first radius is 2^-128 = 2.9e-39)
        if case == "one huge row":
            assert out.r_x < 20.0  # one row does not move the chosen radius
