"""A release's plan: what one release will spend on what, decided from public inputs only.

Implements the epsilon split of Liu & Huang, RPWithPrior, Algorithm 4 and Ghazi et al. 2022,
Algorithm 3 (LabelRandomizer: epsilon1 on a private histogram, epsilon2 on the randomizer), with
this project's additions: the DP label mean bought with part of epsilon1, and adaptive histogram
cells. :func:`plan_release` is the ONE place those choices are made; the labels-party service,
the release preview, the Spark job and the accuracy benchmark all run what it returns
(``shared.randomizer.execute``).

Privacy of the split (basic composition). The plan charges exact decimals
(``shared.epsilon``): epsilon1 = histogram + mean and epsilon2, adding up to the requested
total EXACTLY. Each step runs at a float no larger than its charge (``float_at_most``), the
histogram is epsilon_h-label-DP, the mean epsilon_m-label-DP, the randomizer epsilon2-DP for any
parameters, and every parameter is post-processing of the first two; so the message is
(epsilon_h + epsilon_m + epsilon2) <= total label-DP. The plan reads n, the public bounds and the
request, never a label.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from types import MappingProxyType
from typing import Any

import numpy as np

from shared import epsilon as amounts
from shared.domain import LabelDomain, check_epsilon
from shared.errors import InvalidParameterError
from shared.mechanisms import registry
from shared.mechanisms.histogram import check_bins
from shared.mechanisms.private_mean import anchor_can_use, private_mean_variance
from shared.selection import (
    DEFAULT_MODEL_DIM,
    MAX_DEFAULT_MODEL_DIM,
    SIGNAL_PER_DIM,
    adaptive_bins,
    check_model_dim,
    model_dim_for,
)

AUTO = "auto"


def mechanisms() -> tuple[str, ...]:
    """What a release may request: every registered mechanism, and ``auto``."""
    return (*registry.names(), AUTO)


def mechanism_options(mechanism: str) -> frozenset[str]:
    """The options a requested mechanism reads (``auto``: every family's); ``model_dim`` and
    ``bins`` are plan inputs of their own and apply to every mechanism."""
    if mechanism == AUTO:
        return frozenset().union(*(f.options for f in registry.families() if f.in_auto))
    return registry.get(mechanism).options


# The histogram size the default split of RR-on-Bins / auto assumes, and the cap of
# ``adaptive_bins``.
DEFAULT_BINS = 64
# RR-on-Bins / auto: the histogram never gets more than this share of the total budget once
# epsilon is large (RR-on-Bins paper, Sec. 3.2 suggests epsilon1 = sqrt(k / n), which is tiny
# for large n) ...
MAX_HISTOGRAM_SHARE = 0.25
# ... but it always gets at least this much absolute epsilon (or 90% of a smaller total): the
# prior's accuracy must not shrink with the total budget, and below epsilon ~ 0.1 the per-label
# randomizer carries almost no signal ((e^eps2 - 1) ~ eps2) while the prior's mean, which every
# mechanism's outputs and the features party's constant model inherit, carries most of it.
MIN_HISTOGRAM_EPSILON = 0.05
MAX_SMALL_BUDGET_SHARE = 0.9
# RPWithPrior needs far less of the prior: its interval is robust to a noisy histogram, while
# RR-on-Bins outputs the prior's posterior means. epsilon1 = sqrt(k / n) with
# k = max(1, 4 eps^2), at most 40% of the total (bench/results/split_study.md). The floor above
# still applies below epsilon 0.1 and fades out linearly by 0.3. Known weakness: on heavy-tailed
# labels so cheap a prior can misplace the window (bench/results/accuracy_nonlinear.md); callers
# with such labels should pass epsilon1 themselves.
RP_SCALE_FLOOR = 1.0
RP_SCALE_PER_EPSILON = 2.0
RP_MAX_HISTOGRAM_SHARE = 0.4
RP_FLOOR_FADE = (0.1, 0.3)
# The share of epsilon1 spent on the DP label mean (the rest buys the histogram), piecewise
# linear in the TOTAL epsilon between these (epsilon, share) knots and constant beyond them.
# Why (bench/results/accuracy_ads.md, _crime.md, _housing.md): below epsilon ~0.1 the features
# party's model is the mean, so the mean gets most of epsilon1; around 0.3-1 the histogram's
# mean biases the raw targets on sparse labels; from 2 on the histogram shapes RR-on-Bins'
# outputs and nothing is spent on the mean.
MEAN_SHARE_KNOTS: tuple[tuple[float, float], ...] = ((0.1, 0.9), (0.3, 0.3), (1.0, 0.3), (2.0, 0.0))
# Mean first (issue 25, item 2). The unbiased targets of an epsilon2-LDP randomizer have noise
# variance of at least about (hi - lo)^2 / epsilon2^2 at small epsilon2 (randomized response on
# the two bounds is the best case: Duchi, Jordan & Wainwright 2013's minimax rate for locally
# private means), so a model of d effective parameters fitted on n of them pays about
# d (hi - lo)^2 / (n epsilon2^2) of test MSE, while no model gains more over the constant than
# the labels' variance. For labels whose standard deviation is at most (hi - lo) / sqrt(20)
# (bounds at 4.5 standard deviations or wider; the benchmark data sets have theirs at 4.3 to 10)
# the noisy labels cannot beat the DP mean when n epsilon2^2 < LABEL_SIGNAL_MIN d
# (:func:`labels_can_train`). There ``auto`` releases mean first: the histogram and the
# randomizer get MEAN_FIRST_SIDE_SHARE of the total each, the DP mean the rest (99%), and the
# features party's ``auto`` fits the DP constant. Measured: bench/results/worst_case.md.
LABEL_SIGNAL_MIN = 20.0
MEAN_FIRST_SIDE_SHARE = 0.005
MEAN_FIRST_EPSILON1_SHARE = 1.0 - MEAN_FIRST_SIDE_SHARE
MEAN_FIRST_MEAN_SHARE = (1.0 - 2.0 * MEAN_FIRST_SIDE_SHARE) / MEAN_FIRST_EPSILON1_SHARE


def check_mechanism(mechanism: str) -> str:
    """Refuse a mechanism name the pipeline does not know."""
    if mechanism not in mechanisms():
        raise InvalidParameterError(
            f"mechanism ({mechanism!r}) must be one of {', '.join(mechanisms())}"
        )
    return mechanism


def _light_prior(mechanism: str) -> bool:
    """Whether the requested family needs little of the prior (registry.MechanismFamily)."""
    return mechanism != AUTO and registry.get(mechanism).light_prior


# The largest number of examples a plan accepts: 2^53, so that n is exact as a float (the
# plan divides by it) and fits every store's 64-bit integer; 10^10 ids are a 180 GB message.
MAX_EXAMPLES = 2**53


def check_n(n: int) -> int:
    """The number of examples: an integer in [1, :data:`MAX_EXAMPLES`]."""
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or not 1 <= n <= MAX_EXAMPLES:
        raise InvalidParameterError(f"n ({n!r}) must be an integer in [1, 2^53]")
    return int(n)


def default_epsilon1(epsilon: Decimal, *, n: int, mechanism: str = AUTO) -> Decimal:
    """The default histogram-and-mean charge epsilon1 of a total ``epsilon``: public inputs only.

    Ghazi et al. 2022, Sec. 3.2's epsilon1 = sqrt(k / n), tuned per mechanism (see the constants
    above). ``"rr_on_bins"`` / ``"auto"``: max(min(sqrt(64 / n), 0.25 eps), min(0.05, 0.9 eps));
    ``"rpwithprior"``: max(min(max(1, 2 eps) / sqrt(n), 0.4 eps), f(eps) min(0.05, 0.9 eps))
    with f = 1 up to epsilon 0.1, 0 from 0.3, linear between. Rounded to a short decimal
    (``shared.epsilon.short_part``: 6 significant digits of the total), so that the ledger shows
    1 = 0.0533 + 0.9467 (n = 22,524), not two binary expansions.
    """
    count = check_n(n)
    check_mechanism(mechanism)
    total = float(epsilon)
    floor = min(MIN_HISTOGRAM_EPSILON, MAX_SMALL_BUDGET_SHARE * total)
    if _light_prior(mechanism):
        scale = max(RP_SCALE_FLOOR, RP_SCALE_PER_EPSILON * total)
        sqrt_rule = min(scale / math.sqrt(count), RP_MAX_HISTOGRAM_SHARE * total)
        start, end = RP_FLOOR_FADE
        floor *= min(1.0, max(0.0, (end - total) / (end - start)))
    else:
        sqrt_rule = min(math.sqrt(DEFAULT_BINS / count), MAX_HISTOGRAM_SHARE * total)
    first = amounts.short_part(max(sqrt_rule, floor), whole=epsilon)
    if _parts_are_floats(first, epsilon):
        return first
    # A total within a few digits of the smallest float: its short parts are not floats.
    step = math.ulp(total)
    return amounts.exact(math.ceil(max(sqrt_rule, floor) / step) * step, name="epsilon1")


def _parts_are_floats(part: Decimal, whole: Decimal) -> bool:
    """Whether ``part`` and ``whole - part`` each have a positive float at most them (not so
    for short parts of a whole within a few digits of the smallest float)."""
    rest = amounts.subtract(whole, part)
    return amounts.float_at_most(part) > 0.0 and amounts.float_at_most(rest) > 0.0


def default_split(epsilon: float, *, n: int, mechanism: str = AUTO) -> tuple[float, float]:
    """(epsilon1, epsilon2): the floats a release of total ``epsilon`` runs at by default.

    :func:`default_epsilon1` of the float's exact value, and the rest; each the largest float
    not above its charge, so epsilon1 + epsilon2 <= epsilon exactly.
    """
    total = amounts.exact(check_epsilon(epsilon))
    first = default_epsilon1(total, n=n, mechanism=mechanism)
    return amounts.float_at_most(first), amounts.float_at_most(amounts.subtract(total, first))


def split_epsilon(epsilon: float, epsilon1: float) -> tuple[float, float]:
    """(epsilon1, epsilon2) floats with epsilon2 > 0 and epsilon1 + epsilon2 <= epsilon EXACTLY.

    epsilon2 is the largest float not above the exact difference.
    """
    total = check_epsilon(epsilon)
    first = check_epsilon(epsilon1, name="epsilon1")
    if not first < total:
        raise InvalidParameterError(f"epsilon1 ({epsilon1!r}) must be < epsilon ({epsilon!r})")
    second = total - first
    if Fraction(first) + Fraction(second) > Fraction(total):
        second = math.nextafter(second, 0.0)
    if not second > 0.0:
        raise InvalidParameterError(
            f"epsilon - epsilon1 ({epsilon!r} - {epsilon1!r}) is not a positive float"
        )
    return first, second


def default_mean_share(epsilon: float) -> float:
    """The share of epsilon1 a release spends on the DP label mean at total ``epsilon``.

    Piecewise linear through ``MEAN_SHARE_KNOTS`` (0.9 up to 0.1, 0.3 from 0.3 to 1, 0 from 2):
    public, a function of the total epsilon only.
    """
    total = check_epsilon(epsilon, allow_inf=True)
    xs, ys = zip(*MEAN_SHARE_KNOTS, strict=True)
    return float(np.interp(total, xs, ys)) if math.isfinite(total) else 0.0


def check_mean_share(mean_share: float) -> float:
    """The share of epsilon1 spent on the DP label mean: a float in [0, 1)."""
    share = float(mean_share)
    if not (math.isfinite(share) and 0.0 <= share < 1.0):
        raise InvalidParameterError(f"mean_share ({mean_share!r}) must be in [0, 1)")
    return share


def labels_can_train(*, n: int, epsilon2: float, model_dim: int) -> bool:
    """Whether ``n`` labels randomized at ``epsilon2`` can train a model of dimension
    ``model_dim`` better than the DP mean: n epsilon2^2 >= LABEL_SIGNAL_MIN d (the constants'
    comment above says why). Public: both parties decide it from the plan or the header."""
    eps = float(epsilon2)  # eps * eps: inf, never OverflowError, for a huge epsilon2
    return n * eps * eps >= LABEL_SIGNAL_MIN * check_model_dim(model_dim)


def mean_first_epsilon1(
    total: Decimal, *, ordinary: Decimal, n: int, lo: float, hi: float, model_dim: int
) -> Decimal | None:
    """epsilon1 of ``auto``'s mean-first release of ``total``, or None for the ordinary split
    (``ordinary``: :func:`default_epsilon1` of ``total`` for ``auto``).

    Mean first when the ordinary default split's randomizer could not train a model of
    dimension ``model_dim`` (:func:`labels_can_train`), unless even 99% of the total buys a
    mean too noisy for the features party to use (``private_mean.anchor_can_use``). Public
    inputs only.
    """
    if total.is_infinite():
        return None
    rest = amounts.float_at_most(amounts.subtract(total, ordinary))
    if labels_can_train(n=n, epsilon2=rest, model_dim=model_dim):
        return None
    first = amounts.short_part(MEAN_FIRST_EPSILON1_SHARE * float(total), whole=total)
    if not _parts_are_floats(first, total):
        return None
    mean = MEAN_FIRST_MEAN_SHARE * amounts.float_at_most(first)
    if not anchor_can_use(lo=lo, hi=hi, epsilon=mean, n=n):
        return None
    return first


def _default_first(
    total: Decimal,
    *,
    n: int,
    domain: LabelDomain,
    mechanism: str,
    model_dim: int,
    mean_share_given: bool,
) -> tuple[Decimal, str, str]:
    """(epsilon1, split, the plan's sentence) of a release without a given epsilon1: the
    default split, or ``auto``'s mean first (:func:`mean_first_epsilon1`)."""
    ordinary = default_epsilon1(total, n=n, mechanism=mechanism)
    if mechanism == AUTO and not mean_share_given:
        first = mean_first_epsilon1(
            total, ordinary=ordinary, n=n, lo=domain.lo, hi=domain.hi, model_dim=model_dim
        )
        if first is not None:
            return (
                first,
                "mean_first",
                (
                    f"mean first: {n} labels randomized at epsilon "
                    f"{_short(amounts.subtract(total, ordinary))} could not train a model of "
                    f"dimension {model_dim} better than the DP mean (n epsilon2^2 < "
                    f"{LABEL_SIGNAL_MIN:g} d), so epsilon1 is {_short(first)} of "
                    f"{_short(total)} and the features party's auto model is the DP constant"
                ),
            )
    return (
        ordinary,
        "default",
        (
            f"epsilon1 {_short(ordinary)} of {_short(total)} by the default split for {mechanism} "
            f"at n = {n} (histogram ~ sqrt(k / n), with a floor at small epsilon)"
        ),
    )


def release_mean_share(
    epsilon1: float, epsilon2: float, *, n: int, lo: float, hi: float, mechanism: str = "auto"
) -> float:
    """The share of epsilon1 a default release spends on the DP label mean.

    ``default_mean_share(epsilon1 + epsilon2)``; 0 for a ``light_prior`` family (RPWithPrior),
    whose epsilon1 is kept minimal by design (bench/results/accuracy_housing.md); 0 where that mean
    would be too noisy for the features party ever to use it (``private_mean.anchor_can_use``),
    so the histogram keeps all of epsilon1 there. Public quantities only.
    """
    if _light_prior(mechanism):
        return 0.0
    share = default_mean_share(epsilon1 + epsilon2)
    if share == 0.0 or math.isinf(epsilon1):
        return share
    part = share * epsilon1  # 0.0 where it underflows: no mean can be bought with it
    if not (part > 0.0 and anchor_can_use(lo=lo, hi=hi, epsilon=part, n=max(int(n), 1))):
        return 0.0
    return share


def split_prior_amounts(epsilon1: Decimal, mean_share: float) -> tuple[Decimal, Decimal | None]:
    """(histogram, mean) charges adding up to ``epsilon1`` exactly; share 0: mean None.

    The mean gets ``mean_share`` of epsilon1 as a short decimal (``shared.epsilon.short_part``),
    the histogram the exact rest. An infinite epsilon1 gives both infinite.
    """
    share = check_mean_share(mean_share)
    if share == 0.0:
        return epsilon1, None
    if epsilon1.is_infinite():
        return epsilon1, epsilon1
    mean = amounts.short_part(share * float(epsilon1), whole=epsilon1)
    if not _parts_are_floats(mean, epsilon1):
        # epsilon1 within a few digits of the smallest float: the old float split.
        mean = amounts.exact(split_epsilon(float(epsilon1), float(epsilon1) * share)[0])
    return amounts.subtract(epsilon1, mean), mean


def split_prior_epsilon(epsilon1: float, mean_share: float) -> tuple[float, float | None]:
    """(epsilon_histogram, epsilon_mean) floats of :func:`split_prior_amounts` of a float.

    Each the largest float not above its charge, so their sum is <= epsilon1 exactly. With
    epsilon1 = inf both are inf.
    """
    eps1 = amounts.exact(
        check_epsilon(epsilon1, name="epsilon1", allow_inf=True), name="epsilon1", allow_inf=True
    )
    hist, mean = split_prior_amounts(eps1, mean_share)
    return amounts.float_at_most(hist), None if mean is None else amounts.float_at_most(mean)


@dataclass(frozen=True, kw_only=True)
class ReleasePlan:
    """Everything one release will do and spend, fixed before any label is read.

    ``epsilon``, ``epsilon1`` (histogram + mean) and ``epsilon2`` (randomizer) are the exact
    decimal charges, ``epsilon1 + epsilon2 == epsilon``. The ``*_float`` fields are what each step
    runs at, never above its charge.
    """

    n: int
    lo: float
    hi: float
    mechanism: str  # the requested mechanism: "auto" or a registered one
    epsilon: Decimal
    epsilon1: Decimal
    epsilon2: Decimal
    histogram_epsilon: Decimal
    label_mean_epsilon: Decimal | None
    epsilon1_float: float  # the largest float <= epsilon1 (each part runs at its own float)
    histogram_float: float
    label_mean_float: float | None
    randomizer_float: float  # the largest float <= epsilon2
    bins: int
    model_dim: int
    options: Mapping[str, Any] = field(default_factory=dict)
    split: str = "default"  # "default" | "mean_first" | "given" ("segmented": a group's)
    explanation: tuple[str, ...] = ()

    @property
    def nonprivate(self) -> bool:
        return self.epsilon.is_infinite()

    @property
    def label_mean_variance(self) -> float | None:
        """The DP mean's noise variance (public): what the features party weighs it by."""
        if self.label_mean_float is None:
            return None
        return private_mean_variance(
            lo=self.lo, hi=self.hi, epsilon=self.label_mean_float, n=self.n
        )

    def public(self) -> dict[str, Any]:
        """The plan as the API shows it (amounts as exact decimal strings)."""

        def show(amount: Decimal | None) -> str | None:
            return None if amount is None else amounts.text(amount)

        return {
            "mechanism": self.mechanism,
            "n": self.n,
            "epsilon": show(self.epsilon),
            "epsilon1": show(self.epsilon1),
            "epsilon2": show(self.epsilon2),
            "histogram_epsilon": show(self.histogram_epsilon),
            "label_mean_epsilon": show(self.label_mean_epsilon),
            "randomizer_epsilon": show(self.epsilon2),
            "split": self.split,
            "bins": self.bins,
            "model_dim": self.model_dim,
            "options": dict(self.options),
            "explanation": list(self.explanation),
        }


def check_options(
    mechanism: str, options: Mapping[str, Any], *, width: float | None = None
) -> dict[str, Any]:
    """The options that apply to ``mechanism``; any other (given, not None) is refused by name.

    With the label range ``width`` (hi - lo), each family the options go to also checks them
    against it (``MechanismFamily.check_options``: RPWithPrior's zeta ratio)."""
    allowed = mechanism_options(check_mechanism(mechanism))
    given = {key: value for key, value in options.items() if value is not None}
    known = frozenset().union(*(f.options for f in registry.families()))
    unknown = sorted(set(given) - known)
    if unknown:
        raise InvalidParameterError(f"unknown mechanism parameter(s): {', '.join(unknown)}")
    for key in sorted(given):
        if key not in allowed:
            applies = sorted(f.name for f in registry.families() if key in f.options)
            raise InvalidParameterError(
                f"params.{key} does not apply to mechanism {mechanism!r} (only to "
                f"{', '.join(applies)})"
            )
    if width is not None:
        for family in registry.families():
            if mechanism in (family.name, AUTO) and (mechanism != AUTO or family.in_auto):
                family.check_options({k: given[k] for k in given if k in family.options}, width)
    return given


def plan_release(
    *,
    n: int,
    lo: float,
    hi: float,
    epsilon: Decimal | str | float | None = None,
    mechanism: str = "auto",
    epsilon1: Decimal | str | float | None = None,
    epsilon2: Decimal | str | float | None = None,
    bins: int | None = None,
    max_bins: int = DEFAULT_BINS,
    model_dim: int | None = None,
    mean_share: float | None = None,
    options: Mapping[str, Any] | None = None,
    allow_nonprivate: bool = False,
) -> ReleasePlan:
    """The one function that decides a release: the split, the mean's share, cells, options.

    Give ``epsilon`` (the total; epsilon1 from :func:`default_split` unless ``epsilon1`` is
    given) or ``epsilon1`` and ``epsilon2`` (then the total is their exact sum). Amounts are
    exact decimals (``shared.epsilon.exact``: a float is its exact binary value, a string or
    Decimal its decimal). ``mean_share`` None: :func:`release_mean_share`. ``bins`` None:
    ``adaptive_bins(n, histogram epsilon, max_bins=max_bins)``. ``options`` must apply to the
    requested mechanism (:func:`mechanism_options`). An infinite amount (no noise: the
    benchmarks' non-private rows) needs ``allow_nonprivate=True``; no service passes it.
    """
    count = check_n(n)
    domain = LabelDomain(lo=lo, hi=hi)
    check_mechanism(mechanism)
    opts = check_options(mechanism, options or {}, width=domain.hi - domain.lo)
    # Mean first asks whether the smallest model (the given d, else 10) could train; the
    # randomizer is chosen for the given d, else the default for n and epsilon2 (below).
    gate_dim = DEFAULT_MODEL_DIM if model_dim is None else check_model_dim(model_dim)
    inf_ok = bool(allow_nonprivate)
    lines: list[str] = []
    if epsilon is not None:
        if epsilon2 is not None:
            raise InvalidParameterError("give epsilon or epsilon2, not both")
        total = amounts.exact(epsilon, allow_inf=inf_ok)
        if not amounts.float_at_most(total) > 0.0:
            raise InvalidParameterError(
                f"epsilon ({amounts.text(total)}) is below the smallest positive float"
            )
        if epsilon1 is None:
            if total.is_infinite():
                raise InvalidParameterError("an infinite epsilon needs epsilon1 and epsilon2")
            first, split, line = _default_first(
                total, n=count, domain=domain, mechanism=mechanism, model_dim=gate_dim,
                mean_share_given=mean_share is not None,
            )  # fmt: skip
            lines.append(line)
        else:
            first = amounts.exact(epsilon1, name="epsilon1", allow_inf=inf_ok)
            split = "given"
            lines.append(f"epsilon1 {_short(first)} as requested")
        if not first < total:
            raise InvalidParameterError(
                f"epsilon1 ({amounts.text(first)}) must be < epsilon ({amounts.text(total)})"
            )
        second = amounts.subtract(total, first) if not total.is_infinite() else total
    else:
        if epsilon1 is None or epsilon2 is None:
            raise InvalidParameterError("give epsilon, or both epsilon1 and epsilon2")
        first = amounts.exact(epsilon1, name="epsilon1", allow_inf=inf_ok)
        second = amounts.exact(epsilon2, name="epsilon2", allow_inf=inf_ok)
        total = (
            amounts.add(first, second)
            if not (first.is_infinite() or second.is_infinite())
            else amounts.INFINITY
        )
        split = "given"
        lines.append(f"epsilon1 {_short(first)} and epsilon2 {_short(second)} as requested")
    f1 = amounts.float_at_most(first)
    f2 = amounts.float_at_most(second)
    if not (f1 > 0.0 and f2 > 0.0):
        raise InvalidParameterError(
            f"epsilon1 ({amounts.text(first)}) and epsilon2 ({amounts.text(second)}) must each "
            "be at least the smallest positive float"
        )
    dim = model_dim_for(model_dim, n=count, epsilon2=f2)
    if split == "mean_first":
        share = MEAN_FIRST_MEAN_SHARE
    elif mean_share is None:
        share = release_mean_share(f1, f2, n=count, lo=domain.lo, hi=domain.hi, mechanism=mechanism)
    else:
        share = check_mean_share(mean_share)
    hist_amount, mean_amount = split_prior_amounts(first, share)
    hist_float = amounts.float_at_most(hist_amount)
    mean_float = None if mean_amount is None else amounts.float_at_most(mean_amount)
    if not (hist_float > 0.0 and (mean_float is None or mean_float > 0.0)):
        raise InvalidParameterError(
            f"epsilon1 ({amounts.text(first)}) is too small to split between the histogram and "
            "the DP label mean: each part must be at least the smallest positive float"
        )
    if mean_amount is not None and not first.is_infinite():
        lines.append(
            f"{share:.0%} of epsilon1 buys the DP label mean the features party anchors on"
        )
    if mean_float is None:
        lines.append("no DP label mean: the histogram gets all of epsilon1")
    cells = (
        adaptive_bins(count, hist_float, max_bins=max_bins) if bins is None else check_bins(bins)
    )
    lines.append(
        f"{cells} histogram cells"
        + (" (adaptive: about n epsilon_h / 4, a power of two)" if bins is None else "")
    )
    lines.append(
        f"epsilon2 {_short(second)} on the randomizer "
        + (
            "(RPWithPrior or RR-on-Bins, whichever the noisy prior predicts trains better for "
            f"a model of dimension {dim}"
            + (
                f", n epsilon2^2 / {SIGNAL_PER_DIM:g} in [{DEFAULT_MODEL_DIM}, "
                f"{MAX_DEFAULT_MODEL_DIM}]"
                if model_dim is None
                else ""
            )
            + ")"
            if mechanism == "auto"
            else f"({mechanism})"
        )
    )
    return ReleasePlan(
        n=count,
        lo=domain.lo,
        hi=domain.hi,
        mechanism=mechanism,
        epsilon=total,
        epsilon1=first,
        epsilon2=second,
        histogram_epsilon=hist_amount,
        label_mean_epsilon=mean_amount,
        epsilon1_float=f1,
        histogram_float=hist_float,
        label_mean_float=mean_float,
        randomizer_float=f2,
        bins=cells,
        model_dim=dim,
        options=MappingProxyType(opts),
        split=split,
        explanation=tuple(lines),
    )


@dataclass(frozen=True, kw_only=True)
class ReleaseRequest:
    """What a release asks for, before n and the label bounds are known (every path's input).

    ``options`` holds only the mechanism options the caller gave; ``bins`` None means
    ``adaptive_bins``. The service builds it from a request body, the Spark job from its flags.
    """

    epsilon: Decimal
    mechanism: str = AUTO
    epsilon_histogram: Decimal | None = None
    bins: int | None = None
    model_dim: int | None = None
    options: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_params(
        cls,
        params: Mapping[str, Any],
        *,
        epsilon: Decimal,
        mechanism: str = AUTO,
        epsilon_histogram: Decimal | None = None,
    ) -> ReleaseRequest:
        """A request whose ``params`` mix ``bins`` and ``model_dim`` with the mechanism options
        (the wire's and the CLI's ``params`` object)."""
        options = {k: v for k, v in params.items() if k not in ("bins", "model_dim")}
        return cls(
            epsilon=epsilon,
            mechanism=mechanism,
            epsilon_histogram=epsilon_histogram,
            bins=params.get("bins"),
            model_dim=params.get("model_dim"),
            options=options,
        )

    def plan(self, *, n: int, lo: float, hi: float) -> ReleasePlan:
        """:func:`plan_release` of this request on ``n`` examples labelled in [lo, hi]."""
        return plan_release(
            n=n,
            lo=lo,
            hi=hi,
            epsilon=self.epsilon,
            epsilon1=self.epsilon_histogram,
            mechanism=self.mechanism,
            bins=self.bins,
            model_dim=self.model_dim,
            options=self.options,
        )

    def public(self) -> dict[str, Any]:
        """The request as the operator's audit trail shows it (exact amounts as text)."""
        share = self.epsilon_histogram
        return {
            "epsilon": amounts.text(self.epsilon),
            "epsilon_histogram": None if share is None else amounts.text(share),
            "mechanism": self.mechanism,
            "bins": self.bins,
            "model_dim": self.model_dim,
            "options": dict(self.options),
        }


def _short(amount: Decimal) -> str:
    """An amount for a human sentence (6 significant digits; the exact value is in the plan)."""
    return "inf" if amount.is_infinite() else f"{float(amount):.6g}"
