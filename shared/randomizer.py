"""The two-step label randomizer: epsilon1 private histogram -> epsilon2 randomizer -> Release.

Implements Liu & Huang, RPWithPrior, Algorithm 4 and Ghazi et al. 2022, Algorithm 3
(LabelRandomizer), both with the exact discrete-Laplace histogram of ``mechanisms.histogram``
(never the papers' per-label Laplace-noised histogram). The epsilon1 step also releases a DP
label mean (``mechanisms.private_mean``) with ``default_mean_share`` of epsilon1, which the
features party anchors its predictions on (``features_party.mean_anchor``). Privacy: the
histogram (epsilon1 - epsilon_mean) and the mean (epsilon_mean) are together epsilon1-label-DP
by basic composition; every parameter below is chosen from that noisy prior alone
(post-processing); the randomizer is then applied once per label and is epsilon2-DP for any
parameters, so by parallel and basic composition the released labels are
(epsilon1 + epsilon2)-label-DP.

Only three lines of this module touch raw labels: the histogram, the mean and the final
``randomize`` call.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from shared.domain import LabelDomain, check_epsilon, check_labels
from shared.errors import InvalidParameterError
from shared.mechanisms import registry
from shared.mechanisms._count_kernels import label_statistics
from shared.mechanisms.histogram import Prior, bin_edges, noisy_histogram
from shared.mechanisms.private_mean import MEAN_LEVELS, noisy_mean
from shared.mechanisms.registry import LabelMechanism
from shared.message import NO_MECHANISM
from shared.plan import (
    AUTO,
    DEFAULT_BINS,
    ReleasePlan,
    check_mechanism,
    check_n,
    check_options,
    plan_release,
)
from shared.rng import Rng
from shared.selection import (
    DEFAULT_MODEL_DIM,
    check_model_dim,
    choose,
    model_dim_for,
    recommended_transform,
)


@dataclass(frozen=True, kw_only=True)
class Release:
    """Noisy labels plus every public parameter a receiver needs to post-process them."""

    plan: ReleasePlan  # what ran: its epsilons, label bounds and the DP mean's budget
    noisy_labels: np.ndarray
    prior: Prior
    mechanism: str
    params: dict[str, Any]
    expected_label_mse: float = field(default=math.nan)
    # "raw" or "debiased": the training target with the lower C = bias^2 + (d/n) Var under the
    # noisy prior (``shared.selection``); public, a function of the prior, n and model_dim.
    recommended_transform: str = "raw"
    # The model dimension d that ``mechanism`` and ``recommended_transform`` were chosen for.
    model_dim: int | None = None
    # The epsilon_mean-DP label mean (part of epsilon1); None when the plan spent nothing on it.
    label_mean: float | None = None

    @property
    def epsilon1(self) -> float:
        return self.plan.epsilon1_float

    @property
    def epsilon2(self) -> float:
        return self.plan.randomizer_float

    @property
    def epsilon(self) -> float:
        """Total privacy cost (basic composition of the two steps)."""
        return self.epsilon1 + self.epsilon2

    @property
    def n(self) -> int:
        return int(self.noisy_labels.size)


def build_mechanism(
    prior: Prior,
    *,
    epsilon: float,
    mechanism: str,
    n: int | None = None,
    model_dim: int | None = None,
    **params: Any,
) -> tuple[str, LabelMechanism]:
    """Choose the epsilon-DP randomizer and its parameters from the (noisy) prior alone.

    A registered ``mechanism`` (``shared.mechanisms.registry``): its family's ``build`` (for
    RPWithPrior with ``n`` and no ``select``, the candidate with the least training criterion C
    = bias^2 + (model_dim / n) Var; for RR-on-Bins the least-label-MSE optimal bins).
    ``"auto"`` with ``n``: the candidate of every family (``shared.selection.choose``) whose raw
    or debiased targets minimise C; without ``n``, the family default with the lower expected
    label MSE. Everything read here is public: the choice is post-processing.
    """
    eps = check_epsilon(epsilon, name="epsilon2")
    if n is not None:
        check_n(n)
    dim = (
        model_dim_for(model_dim, n=int(n), epsilon2=eps)
        if n is not None
        else check_model_dim(DEFAULT_MODEL_DIM if model_dim is None else model_dim)
    )
    if mechanism != AUTO:
        family = registry.get(mechanism)
        options = check_options(mechanism, params)
        sized = {"n": n, "model_dim": dim} if family.reads_n else {}
        return family.name, family.build(prior, epsilon=eps, **sized, **options)
    options = check_options(AUTO, params)
    if n is not None:
        best = choose(prior, epsilon=eps, n=int(n), model_dim=dim, **options)
        return best.name, best.mechanism
    candidates = dict(_auto_defaults(prior, epsilon=eps, options=options))
    name = min(candidates, key=lambda key: candidates[key].expected_squared_error(prior))
    return name, candidates[name]


def _auto_defaults(
    prior: Prior, *, epsilon: float, options: dict[str, Any]
) -> Iterator[tuple[str, LabelMechanism]]:
    """Each ``auto`` family's default build on ``prior``, in registration order. A family that
    cannot be realised exactly at this epsilon (e.g. RPWithPrior at epsilon2 ~ 1e-13) is
    skipped (that depends on the prior only); none at all is refused, naming every reason."""
    refusals: list[str] = []
    built_any = False
    for family in registry.families():
        if not family.in_auto:
            continue
        mine = {k: v for k, v in options.items() if k in family.options}
        try:
            built = family.build(prior, epsilon=epsilon, **mine)
        except InvalidParameterError as exc:
            refusals.append(f"{family.name}: {exc}")
            continue
        built_any = True
        yield family.name, built
    if not built_any:
        raise InvalidParameterError("no mechanism can be built: " + "; ".join(refusals))


@dataclass(frozen=True, kw_only=True)
class NoisyPrior:
    """The epsilon1 step's output: the noisy histogram and (if bought) the DP label mean."""

    prior: Prior
    label_mean: float | None = None


@dataclass(frozen=True, kw_only=True)
class LabelCounts:
    """The exact (non-private) sufficient statistics of the epsilon1 step for one plan.

    ``cells``: :func:`~shared.mechanisms.histogram.bin_counts` of the clipped labels on the
    plan's grid; ``level_sum``: :func:`~shared.mechanisms.private_mean.level_sum` (None when the
    plan buys no DP mean); ``n``: how many labels. All three are sums over the labels, so they
    add up over any partition of them (what a Spark partition computes). Never published.
    """

    cells: np.ndarray
    level_sum: int | None
    n: int

    @classmethod
    def of(cls, plan: ReleasePlan, clipped: np.ndarray) -> LabelCounts:
        """The statistics of one batch of clipped labels (any size, even 0)."""
        values = np.ascontiguousarray(clipped, dtype=np.float64)
        bin_edges(lo=plan.lo, hi=plan.hi, bins=plan.bins)  # a grid float64 cannot represent
        with_sum = plan.label_mean_float is not None
        cells, total = label_statistics(
            values,
            float(plan.lo),
            float(plan.hi),
            int(plan.bins),
            plan.bins / (plan.hi - plan.lo),
            MEAN_LEVELS,
            with_sum,
        )
        return cls(cells=cells, level_sum=int(total) if with_sum else None, n=int(values.size))

    def __add__(self, other: LabelCounts) -> LabelCounts:
        both = self.level_sum is not None and other.level_sum is not None
        return LabelCounts(
            cells=self.cells + other.cells,
            level_sum=self.level_sum + other.level_sum if both else None,  # type: ignore[operator]
            n=self.n + other.n,
        )


def noisy_prior_from_counts(
    plan: ReleasePlan, counts: LabelCounts, rng: Rng, *, histogram: Prior | None = None
) -> NoisyPrior:
    """The epsilon1 step of ``plan`` on exact ``counts``: noisy histogram, then the DP mean.

    The one place the epsilon1 noise is drawn, for the service (:func:`measure`) and the Spark
    job alike: one discrete Laplace draw per histogram cell in cell order, then one for the
    mean (``mechanisms.histogram.noisy_histogram``, ``mechanisms.private_mean.noisy_mean``).
    ``histogram``: see :func:`measure`.
    """
    if counts.n != plan.n:
        raise InvalidParameterError(f"plan is for n = {plan.n} labels, got {counts.n}")
    if histogram is None:
        histogram = noisy_histogram(
            counts.cells, n=counts.n, lo=plan.lo, hi=plan.hi, epsilon=plan.histogram_float, rng=rng
        )
    elif histogram.k != plan.bins:
        raise InvalidParameterError(f"histogram has {histogram.k} cells, the plan {plan.bins}")
    mean = None
    if plan.label_mean_float is not None:
        if counts.level_sum is None:
            raise InvalidParameterError("the plan buys a DP mean: counts need its level sum")
        mean = noisy_mean(
            counts.level_sum,
            n=counts.n,
            lo=plan.lo,
            hi=plan.hi,
            epsilon=plan.label_mean_float,
            rng=rng,
        )
    return NoisyPrior(prior=histogram, label_mean=mean)


def measure(
    plan: ReleasePlan, labels: np.ndarray, rng: Rng, *, histogram: Prior | None = None
) -> NoisyPrior:
    """The epsilon1 step of ``plan`` on the clipped ``labels``: histogram, then the DP mean.

    :func:`noisy_prior_from_counts` on ``LabelCounts.of(plan, labels)``. ``histogram``: a noisy
    histogram already bought for exactly this plan's cells and histogram epsilon (the accuracy
    benchmark shares one across the variants of a cell); it is used instead of drawing a new
    one. Draws in this order, so seeded runs reproduce. A non-private plan (an infinite mean
    epsilon, benchmarks only) gets the exact clipped mean.
    """
    if labels.size != plan.n:
        raise InvalidParameterError(f"plan is for n = {plan.n} labels, got {labels.size}")
    values = check_labels(labels)
    exact_mean = plan.label_mean_float is not None and math.isinf(plan.label_mean_float)
    if exact_mean:
        histogram_only = replace(plan, label_mean_float=None)
        counts = LabelCounts.of(histogram_only, values)
        measured = noisy_prior_from_counts(histogram_only, counts, rng, histogram=histogram)
        clipped = LabelDomain(lo=plan.lo, hi=plan.hi).clip(values)
        return replace(measured, label_mean=float(clipped.mean()))
    return noisy_prior_from_counts(plan, LabelCounts.of(plan, values), rng, histogram=histogram)


def _build_for(plan: ReleasePlan, prior: Prior) -> tuple[str, LabelMechanism]:
    return build_mechanism(
        prior,
        epsilon=plan.randomizer_float,
        mechanism=plan.mechanism,
        n=plan.n,
        model_dim=plan.model_dim,
        **plan.options,
    )


def public_randomizer(plan: ReleasePlan) -> tuple[str, LabelMechanism]:
    """A randomizer for ``plan`` built from the UNIFORM prior on the plan's grid: a function of
    the plan alone (public), the stand-in of :func:`choose_randomizer`.

    The plan's family with its default parameters (no ``n``: the least expected label MSE,
    0.2-0.6 ms for RPWithPrior and RR-on-Bins), or for ``auto`` the first family in registration
    order that is realisable (not the whole selection: 24 ms on every release for a stand-in
    that almost never runs). Refused (InvalidParameterError) only for public reasons: no family
    the plan allows can be realised at this epsilon2. Kept per public input (the unbiased LP
    costs 30-40 ms, and a service release asks twice: ``plan_for``'s up-front refusal, then
    :func:`choose_randomizer`); a refusal is not kept, so it is raised as often as asked.
    """
    inputs = [plan.lo, plan.hi, plan.bins, plan.randomizer_float, plan.mechanism]
    try:  # JSON tells -0.0 from 0.0 and round-trips every float exactly
        key = json.dumps([*inputs, dict(plan.options)], sort_keys=True)
    except (TypeError, ValueError):  # an option JSON cannot key: built afresh
        return _uniform_prior_randomizer(*inputs, dict(plan.options))
    return _kept_public_randomizer(key)


@functools.lru_cache(maxsize=64)
def _kept_public_randomizer(key: str) -> tuple[str, LabelMechanism]:
    return _uniform_prior_randomizer(*json.loads(key))


def _uniform_prior_randomizer(
    lo: float, hi: float, bins: int, eps: float, mechanism: str, options: dict[str, Any]
) -> tuple[str, LabelMechanism]:
    prior = Prior(edges=bin_edges(lo=lo, hi=hi, bins=bins), probs=np.full(bins, 1.0 / bins))
    if mechanism != AUTO:
        family = registry.get(mechanism)
        return family.name, family.build(prior, epsilon=eps, **check_options(mechanism, options))
    return next(_auto_defaults(prior, epsilon=eps, options=check_options(AUTO, options)))


def choose_randomizer(plan: ReleasePlan, measured: NoisyPrior) -> tuple[str, LabelMechanism]:
    """The epsilon2 randomizer ``plan`` asks for, built from the noisy prior alone.

    Whether a release is refused never depends on the labels: this runs after the epsilon1
    noise is drawn and (in the service) before anything is charged, so a refusal decided by
    the noisy prior (e.g. RPWithPrior's interval not realisable exactly at a tiny epsilon2,
    an unbiased LP that fails) would be an uncharged, repeatable function of the labels. So
    :func:`public_randomizer` is built first, unconditionally (its refusal is public), and
    stands in when the noisy prior's build is refused. Privacy: either randomizer is
    epsilon2-DP for any parameters, and which one runs is a function of the noisy prior and
    the public plan (post-processing of the epsilon1 outputs), as before. ANY exception of the
    build falls back (not only the refusals known today): an unforeseen one that the noisy prior
    triggers must not escape either.
    """
    fallback = public_randomizer(plan)
    try:
        return _build_for(plan, measured.prior)
    except Exception:  # noqa: BLE001 - see above: no label-dependent exception may escape
        return fallback


def execute(
    plan: ReleasePlan, labels: np.ndarray, rng: Rng, *, histogram: Prior | None = None
) -> Release:
    """Run ``plan`` on raw ``labels``: clip, measure the prior, choose, randomize once.

    Implements RPWithPrior Algorithm 4 / RR-on-Bins Algorithm 3 (module docstring). An
    infinite randomizer epsilon (a non-private plan) releases the clipped labels unchanged.
    """
    clipped = clip(plan, labels)
    return randomize_measured(plan, measure(plan, clipped, rng, histogram=histogram), clipped, rng)


def clip(plan: ReleasePlan, labels: np.ndarray) -> np.ndarray:
    """The labels checked and clipped into the plan's public bounds."""
    return LabelDomain(lo=plan.lo, hi=plan.hi).clip(check_labels(labels))


def randomize_measured(
    plan: ReleasePlan, measured: NoisyPrior, clipped: np.ndarray, rng: Rng
) -> Release:
    """The epsilon2 step of ``plan``: choose the randomizer from ``measured`` (the epsilon1
    step's output, or any post-processing of it) and randomize the ``clipped`` labels once."""
    if math.isinf(plan.randomizer_float):
        return describe(plan, measured, NO_MECHANISM, None, clipped)
    name, randomizer = choose_randomizer(plan, measured)
    return describe(plan, measured, name, randomizer, randomizer.randomize(clipped, rng))


def describe(
    plan: ReleasePlan,
    measured: NoisyPrior,
    name: str,
    randomizer: LabelMechanism | None,
    noisy: np.ndarray,
) -> Release:
    """The release of ``plan``: ``noisy`` labels with every public value a receiver needs.

    ``noisy`` is empty where the labels are written elsewhere (the Spark job's Parquet body);
    ``randomizer`` is None for a non-private plan (infinite epsilon2: the clipped labels as they
    are). Every other field is a function of the plan and the noisy prior alone.
    """
    chosen: dict[str, Any] = {"params": {}, "expected_label_mse": 0.0}
    if randomizer is not None:
        chosen = {
            "params": randomizer.public_params(),
            **_prior_summaries(plan, measured.prior, randomizer),
            "model_dim": plan.model_dim,
        }
    return Release(
        plan=plan,
        noisy_labels=noisy,
        prior=measured.prior,
        mechanism=name,
        label_mean=measured.label_mean,
        **chosen,
    )


def _prior_summaries(plan: ReleasePlan, prior: Prior, randomizer: LabelMechanism) -> dict[str, Any]:
    """The randomizer's expected label MSE and recommended transform under the noisy prior, or
    {} (``Release``'s public defaults: NaN and "raw") if computing them raises.

    They are computed after the noise is drawn and, in the service, before anything is charged
    (as :func:`choose_randomizer`'s build is): an exception here that the noisy prior triggers
    would be an uncharged, repeatable signal about the labels, so none may escape. Either result
    is post-processing of the epsilon1 output; which one the message carries too.
    """
    try:
        return {
            "expected_label_mse": float(randomizer.expected_squared_error(prior)),
            "recommended_transform": recommended_transform(
                randomizer, prior, n=plan.n, model_dim=plan.model_dim
            ),
        }
    except Exception:  # noqa: BLE001 - see above: no label-dependent exception may escape
        return {}


def label_randomizer(
    labels: np.ndarray,
    *,
    lo: float,
    hi: float,
    epsilon1: float,
    epsilon2: float,
    mechanism: str,
    rng: Rng,
    bins: int | None = None,
    model_dim: int | None = None,
    mean_share: float | None = None,
    allow_nonprivate: bool = False,
    **params: Any,
) -> Release:
    """``execute(plan_release(...), labels, rng)`` for a given (epsilon1, epsilon2).

    A convenience for tests and benchmarks (the services plan from the total). An infinite
    epsilon1 (exact prior) or epsilon2 (clipped labels unchanged) is refused unless
    ``allow_nonprivate`` (the benchmarks' non-private rows).
    """
    plan = plan_release(
        n=int(np.asarray(labels).size) or 1,
        lo=lo,
        hi=hi,
        epsilon1=epsilon1,
        epsilon2=epsilon2,
        mechanism=mechanism,
        bins=bins,
        model_dim=model_dim,
        mean_share=mean_share,
        options=params,
        allow_nonprivate=allow_nonprivate,
    )
    return execute(plan, labels, rng)


__all__ = [
    "DEFAULT_BINS",
    "DEFAULT_MODEL_DIM",
    "LabelCounts",
    "LabelMechanism",
    "NoisyPrior",
    "Release",
    "build_mechanism",
    "check_mechanism",
    "choose_randomizer",
    "clip",
    "execute",
    "label_randomizer",
    "measure",
    "noisy_prior_from_counts",
    "randomize_measured",
]
