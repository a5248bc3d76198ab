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

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal, Protocol

import numpy as np

from shared.domain import LabelDomain, check_epsilon, check_labels
from shared.errors import InvalidParameterError
from shared.mechanisms.histogram import Prior, check_bins, private_histogram
from shared.mechanisms.private_mean import anchor_can_use, private_mean, private_mean_variance
from shared.rng import Rng
from shared.selection import (
    DEFAULT_MODEL_DIM,
    adaptive_bins,
    check_model_dim,
    choose,
    recommended_transform,
)

MechanismChoice = Literal["rpwithprior", "rr_on_bins", "auto"]
MECHANISMS: tuple[str, ...] = ("rpwithprior", "rr_on_bins", "auto")

# The histogram size the default split of RR-on-Bins / auto assumes, and the pipeline's cap of
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
# k = max(1, 4 eps^2), at most 40% of the total (bench/results/split_study.md: the criterion C
# under the labels' own distribution is best near there on five data sets; measured test MSE in
# bench/results/accuracy_housing.md, RP-auto at epsilon 0.3). The floor above still applies
# below epsilon 0.1 and fades out linearly by 0.3. Known weakness: on heavy-tailed labels so
# cheap a prior can misplace the window in some splits (bench/results/accuracy_nonlinear.md);
# callers with such labels should pass epsilon1 themselves.
RP_SCALE_FLOOR = 1.0
RP_SCALE_PER_EPSILON = 2.0
RP_MAX_HISTOGRAM_SHARE = 0.4
RP_FLOOR_FADE = (0.1, 0.3)
# The share of epsilon1 spent on the DP label mean (the rest buys the histogram), piecewise
# linear in the TOTAL epsilon between these (epsilon, share) knots and constant beyond them.
# Why (bench/results/accuracy_ads.md, _crime.md, _housing.md, the product rows): below epsilon
# ~0.1 the per-label randomizer carries almost nothing and the features party's model is the
# mean, so the mean gets most of epsilon1 (and the product approaches the DP constant); around
# 0.3-1 the histogram's mean is what biases the raw targets on sparse labels (ads: 1.01-1.04x
# the constant without the mean), while the randomizer's epsilon2 is left alone (taking the
# mean out of it made the features party fall back to the constant on Crime at 0.8 and
# Housing at 0.3); from 2 on the histogram shapes RR-on-Bins' outputs (ceding 30% of it cost
# 3-4% on ads at 2-3) and the debiased targets' own mean is precise, so nothing is spent.
MEAN_SHARE_KNOTS: tuple[tuple[float, float], ...] = ((0.1, 0.9), (0.3, 0.3), (1.0, 0.3), (2.0, 0.0))


class LabelMechanism(Protocol):
    """What the pipeline needs from an epsilon2 randomizer."""

    def randomize(self, labels: np.ndarray, rng: Rng) -> np.ndarray: ...

    def public_params(self) -> dict[str, Any]: ...

    def expected_squared_error(self, prior: Prior) -> float: ...


@dataclass(frozen=True)
class _RROnBinsUnderHistogram:
    """RR-on-Bins with its squared error measured under the piecewise-uniform prior.

    Phi is constant on each histogram cell (its cuts are cell edges), so for y uniform in a cell
    E[(y~ - y)^2] = E[(y~ - midpoint)^2] + width^2 / 12: the cross term vanishes because y~
    depends on y only through the cell.
    """

    inner: Any

    def randomize(self, labels: np.ndarray, rng: Rng) -> np.ndarray:
        return self.inner.randomize(labels, rng)

    def public_params(self) -> dict[str, Any]:
        return self.inner.public_params()

    def expected_squared_error(self, prior: Prior) -> float:
        within_cell = float(np.dot(prior.probs, np.diff(prior.edges) ** 2) / 12.0)
        return float(self.inner.expected_loss(prior.midpoints, prior.probs)) + within_cell


@dataclass(frozen=True, kw_only=True)
class Release:
    """Noisy labels plus every public parameter a receiver needs to post-process them."""

    noisy_labels: np.ndarray
    prior: Prior
    mechanism: str
    params: dict[str, Any]
    epsilon1: float
    epsilon2: float
    lo: float
    hi: float
    expected_label_mse: float = field(default=math.nan)
    # "raw" or "debiased": the training target with the lower C = bias^2 + (d/n) Var under the
    # noisy prior (``shared.selection``); public, a function of the prior, n and model_dim.
    recommended_transform: str = "raw"
    # The model dimension d that ``mechanism`` and ``recommended_transform`` were chosen for.
    model_dim: int | None = None
    # The epsilon_mean-DP label mean (part of epsilon1) and its noise variance (public); None
    # when the release spent nothing on it (mean_share 0).
    label_mean: float | None = None
    label_mean_epsilon: float | None = None
    label_mean_variance: float | None = None
    # The part of epsilon1 the histogram got (epsilon1 itself when nothing went to the mean).
    histogram_epsilon: float | None = None

    @property
    def epsilon(self) -> float:
        """Total privacy cost (basic composition of the two steps)."""
        return self.epsilon1 + self.epsilon2

    @property
    def n(self) -> int:
        return int(self.noisy_labels.size)


def check_mechanism(mechanism: str) -> None:
    """Refuse a mechanism name the pipeline does not know."""
    if mechanism not in MECHANISMS:
        raise InvalidParameterError(
            f"mechanism ({mechanism!r}) must be one of {', '.join(MECHANISMS)}"
        )


def default_split(epsilon: float, *, n: int, mechanism: str = "auto") -> tuple[float, float]:
    """Split a total epsilon into (epsilon1, epsilon2) from public quantities only.

    Ghazi et al. 2022, Sec. 3.2's epsilon1 = sqrt(k / n), tuned per mechanism (see the constants
    above). The histogram's part h: ``"rr_on_bins"`` / ``"auto"``: max(min(sqrt(64 / n),
    0.25 eps), min(0.05, 0.9 eps)); ``"rpwithprior"``: max(min(max(1, 2 eps) / sqrt(n),
    0.4 eps), f(eps) min(0.05, 0.9 eps)) with f = 1 up to epsilon 0.1, 0 from 0.3, linear
    between. epsilon1 also pays for the DP label mean (``default_mean_share`` of it,
    ``label_randomizer``). epsilon1 is rounded up to a multiple of ulp(epsilon), so that
    epsilon1 + epsilon2 == epsilon exactly.
    """
    total = check_epsilon(epsilon)
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
        raise InvalidParameterError(f"n ({n!r}) must be an integer >= 1")
    check_mechanism(mechanism)
    floor = min(MIN_HISTOGRAM_EPSILON, MAX_SMALL_BUDGET_SHARE * total)
    if mechanism == "rpwithprior":
        scale = max(RP_SCALE_FLOOR, RP_SCALE_PER_EPSILON * total)
        sqrt_rule = min(scale / math.sqrt(int(n)), RP_MAX_HISTOGRAM_SHARE * total)
        start, end = RP_FLOOR_FADE
        floor *= min(1.0, max(0.0, (end - total) / (end - start)))
    else:
        sqrt_rule = min(math.sqrt(DEFAULT_BINS / int(n)), MAX_HISTOGRAM_SHARE * total)
    # A multiple of ulp(total) makes total - epsilon1 exact: the parts add up to the total.
    step = math.ulp(total)
    return split_epsilon(total, math.ceil(max(sqrt_rule, floor) / step) * step)


def default_mean_share(epsilon: float) -> float:
    """The share of epsilon1 a release spends on the DP label mean at total ``epsilon``.

    Piecewise linear through ``MEAN_SHARE_KNOTS`` (0.9 up to 0.1, 0.3 from 0.3 to 1, 0 from 2):
    public, a function of the total epsilon only.
    """
    total = check_epsilon(epsilon, allow_inf=True)
    xs, ys = zip(*MEAN_SHARE_KNOTS, strict=True)
    return float(np.interp(total, xs, ys)) if math.isfinite(total) else 0.0


def split_epsilon(epsilon: float, epsilon1: float) -> tuple[float, float]:
    """(epsilon1, epsilon2) with epsilon2 > 0 and epsilon1 + epsilon2 <= epsilon EXACTLY.

    ``epsilon - epsilon1`` is rounded to the nearest float, so half the time the two parts
    would add up to half an ulp more than the total asked for (and charged); epsilon2 is
    therefore stepped down to the float below whenever the exact sum exceeds ``epsilon``.
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


def release_mean_share(
    epsilon1: float, epsilon2: float, *, n: int, lo: float, hi: float, mechanism: str = "auto"
) -> float:
    """The share of epsilon1 a default release spends on the DP label mean.

    ``default_mean_share(epsilon1 + epsilon2)``; 0 for ``mechanism="rpwithprior"``, whose
    epsilon1 is kept minimal by design (taking 30% of it for the mean cost RPWithPrior with a
    network's model_dim 1.06-1.23 against Table 5's 0.82-1.05 on Housing at epsilon 0.3,
    bench/results/accuracy_housing.md); 0 where that mean would be too noisy for the features
    party ever to use it (``private_mean.anchor_can_use``: few labels, a small epsilon1), so the
    histogram keeps all of epsilon1 there. Public quantities only.
    """
    if mechanism == "rpwithprior":
        return 0.0
    share = default_mean_share(epsilon1 + epsilon2)
    if share == 0.0 or math.isinf(epsilon1):
        return share
    if not anchor_can_use(lo=lo, hi=hi, epsilon=share * epsilon1, n=max(int(n), 1)):
        return 0.0
    return share


def check_mean_share(mean_share: float) -> float:
    """The share of epsilon1 spent on the DP label mean: a float in [0, 1)."""
    share = float(mean_share)
    if not (math.isfinite(share) and 0.0 <= share < 1.0):
        raise InvalidParameterError(f"mean_share ({mean_share!r}) must be in [0, 1)")
    return share


def split_prior_epsilon(epsilon1: float, mean_share: float) -> tuple[float, float | None]:
    """(epsilon_histogram, epsilon_mean) with epsilon_histogram + epsilon_mean <= epsilon1 EXACTLY.

    ``mean_share`` of epsilon1 goes to the DP label mean, the rest to the histogram; share 0
    spends nothing on the mean (epsilon_mean None). With epsilon1 = inf both are exact (inf).
    """
    share = check_mean_share(mean_share)
    eps1 = check_epsilon(epsilon1, name="epsilon1", allow_inf=True)
    if share == 0.0:
        return eps1, None
    if math.isinf(eps1):
        return eps1, eps1
    eps_mean, eps_hist = split_epsilon(eps1, eps1 * share)
    return eps_hist, eps_mean


def release_prior_epsilons(
    epsilon1: float,
    epsilon2: float,
    *,
    n: int,
    lo: float,
    hi: float,
    mechanism: str = "auto",
    mean_share: float | None = None,
) -> tuple[float, float | None]:
    """(epsilon_histogram, epsilon_mean) of a release's epsilon1: the one rule every caller uses.

    ``mean_share`` of epsilon1 (None: ``release_mean_share``) buys the DP label mean, the rest
    the histogram (:func:`split_prior_epsilon`).
    """
    share = (
        release_mean_share(epsilon1, epsilon2, n=n, lo=lo, hi=hi, mechanism=mechanism)
        if mean_share is None
        else mean_share
    )
    return split_prior_epsilon(epsilon1, share)


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

    ``"rpwithprior"`` with ``n`` and no ``select``: the RPWithPrior candidate of
    ``shared.selection.candidate_mechanisms`` (every zeta of the grid, or only ``zeta``; both
    interval rules) whose raw or debiased targets minimise C = bias^2 + (model_dim / n) Var,
    as ``"auto"`` does restricted to RPWithPrior (the least-label-MSE interval is often a
    narrow one whose projection bias no amount of data removes: bench/results/
    accuracy_housing.md). ``"rpwithprior"`` with ``select="mse"`` / ``"paper"``, or without
    ``n``: ``rp_with_prior.choose_parameters`` with that rule (default "mse", least label MSE).
    ``"rr_on_bins"``: the least-label-MSE optimal bins. ``"auto"`` with ``n``:
    the RPWithPrior or RR-on-Bins candidate (``shared.selection.candidate_mechanisms``) whose
    raw or debiased targets minimise C = bias^2 + (model_dim / n) Var under the prior, a proxy
    for the test MSE of a model fitted on them (model_dim defaults to ``DEFAULT_MODEL_DIM``);
    without ``n``, the lower expected label MSE of the two (Theorem 5 makes that RR-on-Bins
    almost always). Everything read here is public: the choice is post-processing.
    """
    from shared.mechanisms import rp_with_prior, rr_on_bins

    eps = check_epsilon(epsilon, name="epsilon2")
    check_mechanism(mechanism)
    unknown = set(params) - {"select", "zeta", "outside", "loss", "max_bins"}
    if unknown:
        raise InvalidParameterError(f"unknown mechanism parameter(s): {', '.join(sorted(unknown))}")
    dim = DEFAULT_MODEL_DIM if model_dim is None else check_model_dim(model_dim)
    if n is not None and (isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1):
        raise InvalidParameterError(f"n ({n!r}) must be an integer >= 1")

    def rp() -> LabelMechanism:
        return rp_with_prior.choose_parameters(
            prior,
            epsilon=eps,
            select=params.get("select") or "mse",
            zeta=params.get("zeta"),
            outside=params.get("outside", "project"),
        )

    def rr() -> LabelMechanism:
        return _RROnBinsUnderHistogram(
            rr_on_bins.optimal_bins_for_prior(
                prior,
                epsilon=eps,
                loss=params.get("loss", "squared"),
                max_bins=params.get("max_bins"),
            )
        )

    if mechanism == "rpwithprior":
        if n is None or params.get("select") is not None:
            return "rpwithprior", rp()
        return "rpwithprior", choose(
            prior,
            epsilon=eps,
            n=int(n),
            model_dim=dim,
            zeta=params.get("zeta"),
            outside=params.get("outside", "project"),
            families=("rpwithprior",),
        ).mechanism
    if mechanism == "rr_on_bins":
        return "rr_on_bins", rr()
    if n is not None:
        best = choose(
            prior,
            epsilon=eps,
            n=int(n),
            model_dim=dim,
            zeta=params.get("zeta"),
            select=params.get("select"),
            outside=params.get("outside", "project"),
            loss=params.get("loss", "squared"),
            max_bins=params.get("max_bins"),
        )
        if best.name == "rr_on_bins":
            return best.name, _RROnBinsUnderHistogram(best.mechanism)
        return best.name, best.mechanism
    candidates: dict[str, LabelMechanism] = {}
    refusals: list[str] = []
    for name, build in (("rpwithprior", rp), ("rr_on_bins", rr)):
        try:
            candidates[name] = build()
        except InvalidParameterError as exc:
            # A candidate that cannot be realised exactly at this epsilon (e.g. RPWithPrior at
            # epsilon2 ~ 1e-13) is skipped; the refusal depends on the noisy prior only.
            refusals.append(f"{name}: {exc}")
    if not candidates:
        raise InvalidParameterError("no mechanism can be built: " + "; ".join(refusals))
    name = min(candidates, key=lambda key: candidates[key].expected_squared_error(prior))
    return name, candidates[name]


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
    **params: Any,
) -> Release:
    """Release (epsilon1 + epsilon2)-label-DP noisy labels with the chosen two-step mechanism.

    Implements RPWithPrior Algorithm 4 / RR-on-Bins Algorithm 3 (see module docstring).
    epsilon1 buys the histogram and, with ``mean_share`` of it (0 <= share < 1; 0: none; None:
    ``release_mean_share``), a DP label mean
    (:func:`release_prior_epsilons`). ``bins=None`` sizes the histogram by ``adaptive_bins(n,
    epsilon_histogram)`` (public); ``model_dim`` is the receiver's model dimension for
    ``mechanism="auto"`` and the recommended transform (default
    ``shared.selection.DEFAULT_MODEL_DIM``). ``epsilon1 = inf`` uses the exact histogram and
    mean (a known prior, for benchmarks); ``epsilon2 = inf`` releases the clipped labels
    unchanged (the non-private baseline).
    """
    domain = LabelDomain(lo=lo, hi=hi)
    eps1 = check_epsilon(epsilon1, name="epsilon1", allow_inf=True)
    eps2 = check_epsilon(epsilon2, name="epsilon2", allow_inf=True)
    clipped = domain.clip(check_labels(labels))
    n = int(clipped.size)  # public: the receiver gets one noisy label per example
    dim = DEFAULT_MODEL_DIM if model_dim is None else check_model_dim(model_dim)
    eps_hist, eps_mean = release_prior_epsilons(
        eps1, eps2, n=n, lo=domain.lo, hi=domain.hi, mechanism=mechanism, mean_share=mean_share
    )
    cells = adaptive_bins(n, eps_hist, max_bins=DEFAULT_BINS) if bins is None else check_bins(bins)

    prior = private_histogram(
        clipped, lo=domain.lo, hi=domain.hi, bins=cells, epsilon=eps_hist, rng=rng
    )
    anchor: dict[str, float | None] = {"histogram_epsilon": eps_hist}
    if eps_mean is not None:
        anchor |= {
            "label_mean": private_mean(
                clipped, lo=domain.lo, hi=domain.hi, epsilon=eps_mean, rng=rng
            ),
            "label_mean_epsilon": eps_mean,
            "label_mean_variance": private_mean_variance(
                lo=domain.lo, hi=domain.hi, epsilon=eps_mean, n=n
            ),
        }
    if math.isinf(eps2):
        return Release(
            noisy_labels=clipped,
            prior=prior,
            mechanism="none",
            params={},
            epsilon1=eps1,
            epsilon2=eps2,
            lo=domain.lo,
            hi=domain.hi,
            expected_label_mse=0.0,
            **anchor,
        )
    name, randomizer = build_mechanism(
        prior, epsilon=eps2, mechanism=mechanism, n=n, model_dim=dim, **params
    )
    noisy = randomizer.randomize(clipped, rng)
    return Release(
        noisy_labels=noisy,
        prior=prior,
        mechanism=name,
        params=randomizer.public_params(),
        epsilon1=eps1,
        epsilon2=eps2,
        lo=domain.lo,
        hi=domain.hi,
        expected_label_mse=float(randomizer.expected_squared_error(prior)),
        recommended_transform=recommended_transform(randomizer, prior, n=n, model_dim=dim),
        model_dim=dim,
        **anchor,
    )
