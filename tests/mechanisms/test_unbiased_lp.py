"""The unbiased randomizer's LP (``_unbiased_lp``) solved without ``linprog``'s wrapping: the
same constraint matrix, the same HiGHS model and options, the same solution, bit for bit."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import sparse

from shared.mechanisms import _unbiased_lp as lp
from shared.mechanisms import unbiased as U
from shared.mechanisms.histogram import Prior


def kronecker_matrix(k: int, z: np.ndarray, b: float) -> sparse.csc_array:
    """The constraint matrix as it was built with ``scipy.sparse`` and handed to ``linprog``
    (``A_ub`` over ``A_eq``, as ``linprog`` stacks them for HiGHS)."""
    m = z.size
    eye_k = sparse.identity(k, format="csr")
    ones_k = np.ones((k, 1))
    a_eq = sparse.hstack(
        [
            (1.0 - b)
            * sparse.vstack(
                [
                    sparse.kron(eye_k, sparse.csr_matrix(np.ones((1, m)))),
                    sparse.kron(eye_k, sparse.csr_matrix(z[None, :])),
                ]
            ),
            b * sparse.csr_matrix(np.vstack([np.ones((k, m)), ones_k * z[None, :]])),
        ],
        format="csr",
    )
    a_ub = sparse.hstack(
        [
            sparse.identity(k * m, format="csr"),
            -sparse.kron(sparse.csr_matrix(ones_k), sparse.identity(m), format="csr"),
        ],
        format="csr",
    )
    return sparse.csc_array(sparse.vstack((a_ub, a_eq)))


@pytest.mark.parametrize("seed", range(12))
def test_the_constraint_matrix_is_the_kronecker_one_entry_for_entry(seed: int) -> None:
    gen = np.random.default_rng(seed)
    k, m = int(gen.integers(2, 30)), int(gen.integers(1, 60))
    # Even grids through 0 (an output exactly at 0: its m column drops that row) and random.
    z = np.linspace(-5.0, 5.0, m) if seed % 2 else np.sort(gen.normal(size=m))
    b = math.exp(-gen.uniform(0.01, 10.0))
    want = kronecker_matrix(k, z, b)
    indptr, indices, values = lp._constraints(z, k, b)
    assert np.array_equal(indptr, want.indptr) and indptr.dtype == np.int32
    assert np.array_equal(indices, want.indices) and indices.dtype == np.int32
    assert np.array_equal(values, want.data)


def lp_inputs(prior: Prior, epsilon: float) -> tuple[np.ndarray, ...]:
    """The first LP :func:`lp.solve` builds for ``prior`` (normalised units)."""
    grid = U.coarse_grid(prior)
    w = lp._check_weights(lp.rounding_weights(prior, grid), grid.size)
    g = (grid - 0.5 * (grid[0] + grid[-1])) / (0.5 * (grid[-1] - grid[0]))
    z = lp.default_output_grid(g, epsilon=epsilon)
    k, m = g.size, z.size
    b = math.exp(-epsilon)
    sq = w[:, None] * (z[None, :] - g[:, None]) ** 2
    cost = np.concatenate([((1.0 - b) * sq).ravel(), b * sq.sum(axis=0)])
    b_eq = np.concatenate([np.ones(k), g])
    lower = np.concatenate([np.full(k * m, -np.inf), b_eq])
    upper = np.concatenate([np.zeros(k * m), b_eq])
    return cost, lp._constraints(z, k, b), lower, upper


PRIORS = [
    Prior(edges=np.linspace(0.0, 10.0, 65), probs=np.r_[np.full(32, 3.0), np.full(32, 1.0)] / 128),
    Prior(edges=np.linspace(-5.0, 5.0, 9), probs=np.array([0, 0, 1, 0, 0, 0, 0, 1]) / 2),
    Prior(edges=np.linspace(1e6, 1e6 + 1e-3, 17), probs=np.full(16, 1 / 16)),
]


@pytest.mark.parametrize(("solver", "presolve"), lp._ATTEMPTS)
@pytest.mark.parametrize("prior", PRIORS)
@pytest.mark.parametrize("epsilon", [0.5, 2.0])
def test_the_direct_highs_call_is_linprog_bit_for_bit(
    prior: Prior, epsilon: float, solver: str, presolve: bool
) -> None:
    cost, matrix, lower, upper = lp_inputs(prior, epsilon)
    """The same solution, or (IPM on one of these) the same refusal: the fallback's status
    check is linprog's."""
    direct, message = lp._highs(cost, matrix, lower, upper, solver=solver, presolve=presolve)
    through_linprog, _ = lp._linprog(cost, matrix, lower, upper, solver=solver, presolve=presolve)
    if solver == "simplex":
        assert direct is not None and message == ""
    if direct is None:
        assert through_linprog is None
    else:
        assert through_linprog is not None and np.array_equal(direct, through_linprog)


@pytest.mark.parametrize("prior", PRIORS)
def test_solve_gives_what_linprog_gives(prior: Prior, monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole solve (refinements included) is the same with ``linprog`` underneath, as with a
    scipy whose HiGHS binding is not where this module looks."""
    grid = U.coarse_grid(prior)
    weights = lp.rounding_weights(prior, grid)
    outputs, p = lp.solve(input_grid=grid, weights=weights, epsilon=1.0, min_column=1e-9)
    monkeypatch.setattr(lp, "_highs_binding", lambda: None)
    outputs_lp, p_lp = lp.solve(input_grid=grid, weights=weights, epsilon=1.0, min_column=1e-9)
    assert np.array_equal(outputs, outputs_lp) and np.array_equal(p, p_lp)


def test_an_infeasible_lp_is_refused_by_both_paths() -> None:
    """Outputs that cannot average to the inputs: neither path returns a solution."""
    g = np.array([-1.0, 1.0])
    z = np.array([-0.5, 0.5])  # inside the inputs' range: unbiasedness is impossible
    with pytest.raises(lp.InvalidParameterError, match="LP failed"):
        lp._solve_lp(g, np.array([0.5, 0.5]), z, epsilon=1.0)
    b = math.exp(-1.0)
    cost = np.ones(6)
    b_eq = np.concatenate([np.ones(2), g])
    lower = np.concatenate([np.full(4, -np.inf), b_eq])
    upper = np.concatenate([np.zeros(4), b_eq])
    matrix = lp._constraints(z, 2, b)
    for solver, presolve in lp._ATTEMPTS:
        assert lp._highs(cost, matrix, lower, upper, solver=solver, presolve=presolve)[0] is None
        assert lp._linprog(cost, matrix, lower, upper, solver=solver, presolve=presolve)[0] is None


def test_without_presolve_the_optimum_is_the_one_linprog_found_with_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first attempt skips HiGHS' presolve; the realised mechanism is what
    ``linprog(method="highs-ds")`` with its default presolve gave (how it was built before):
    the same outputs and weights, up to a few units in 2^53 (the solver's floating noise)."""
    gen = np.random.default_rng(2)
    for trial in range(24):
        k = int(gen.choice([1, 2, 3, 8, 16, 40, 64]))
        probs = gen.integers(0, 4, k).astype(float)
        probs[-1] += probs.sum() == 0
        prior = Prior(edges=np.linspace(0.0, 10.0, k + 1), probs=probs / probs.sum())
        epsilon = float(gen.choice([0.01, 0.9, 1.0, 4.0, 30.0]))
        now = U.build(prior, epsilon=epsilon)
        with monkeypatch.context() as patch:
            patch.setattr(lp, "_highs_binding", lambda: None)
            patch.setattr(lp, "_ATTEMPTS", (("simplex", True), ("ipm", True)))
            before = U.build(prior, epsilon=epsilon)
        assert np.array_equal(now.output_values, before.output_values), trial
        assert np.max(np.abs(now.weights - before.weights)) <= 1e-11 * U.WEIGHT_TOTAL, trial


def test_a_binding_with_another_api_falls_back_to_linprog(monkeypatch: pytest.MonkeyPatch) -> None:
    """A scipy whose private HiGHS module has other names or signatures: ``linprog`` solves."""
    cost, matrix, lower, upper = lp_inputs(PRIORS[0], 1.0)
    want, _ = lp._linprog(cost, matrix, lower, upper, solver="simplex", presolve=False)
    monkeypatch.setattr(lp, "_highs_binding", lambda: object())
    got, message = lp._highs(cost, matrix, lower, upper, solver="simplex", presolve=False)
    assert message == "" and got is not None and np.array_equal(got, want)
