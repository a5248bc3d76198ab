"""The product's estimator families, registered in ``shared.estimators.registry`` when the
package is imported (``shared/estimators/__init__.py``), in this order.

* ``ols``: label-DP OLS (``ols.label_dp_ols``, pure epsilon, exact L1 sensitivity) and ePTR-OLS
  (Algorithm 4); an intercept column (default on) goes in after the features' projection. Its
  constants r_x, r_theta, c0 are chosen by the product when the request omits them
  (``constants``: a fixed share of epsilon per constant, ePTR on the rest). Its "no reply" is
  zero slopes with the middle of [lo, hi] as intercept (``ols.ols_no_reply``).
* ``nw``: label-DP Nadaraya-Watson and ePTR-NW (Algorithm 5) at public query points. ePTR-NW
  clips the labels to the dataset's public [label_min, label_max] (alpha proportional to
  label_max - label_min) unless the request gives ``r_f``, which keeps its meaning [-r_f, r_f]
  (``_nw_label_interval``); its bandwidth and c0, when omitted, are chosen by the product
  (``nw_constants``: a public rule, and a DP estimate inside the same charge; with a public
  ``reference``, c0 per query point by a public rule, ``nw_constants.reference_c0``).
* ``bayes``: ePTR-Bayes (Algorithm 3), eptr only; a label's class is its nearest integer,
  clipped into 0..n_classes - 1 (a public rule). Its constants r_x, c0 are chosen by the
  product when the request omits them (``bayes.eptr_bayes_chosen``: r_x by ePTR-OLS's DP norm
  quantile, c0 from a DP smallest class count, each at a fixed share of epsilon).

Every check in ``design`` reads only the public features and parameters; only ``fit`` reads
labels (privacy: the estimators' own docstrings).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import numpy as np

from shared import epsilon as amounts
from shared.errors import IntegrityError, InvalidParameterError
from shared.estimators import bayes, constants, eptr, kernel, nw_constants, ols
from shared.estimators._checks import full_column_rank
from shared.estimators.registry import (
    Design,
    DesignError,
    EstimatorFamily,
    FitArgs,
    Fitted,
    register,
)


def _ols_design(
    privacy: str, params: Mapping[str, Any], features: np.ndarray, columns: list[str]
) -> Design:
    intercept = bool(params.get("intercept", True))
    x = np.column_stack([features, np.ones(features.shape[0])]) if intercept else features
    try:
        full_column_rank(x, name="X")
    except InvalidParameterError as exc:
        raise DesignError("public_features", str(exc)) from None
    if intercept and privacy == "eptr" and "r_x" in params and not float(params["r_x"]) > 1.0:
        # The intercept column (norm 1) goes in after the features' projection onto the ball of
        # radius sqrt(r_x^2 - 1) (``ols.eptr_ols``).
        raise DesignError("params.r_x", "must be > 1 with an intercept")
    return Design(x=x, intercept=intercept)


def _ols_fit(design: Design, labels: np.ndarray, args: FitArgs) -> Fitted:
    if args.privacy == "label":
        out = ols.label_dp_ols(
            design.x, labels, lo=args.lo, hi=args.hi, epsilon=args.epsilon, rng=args.rng
        )
        return Fitted(
            body={"coef": out.coef.tolist()}, released=True, noise="discrete_laplace",
            noise_scale=out.noise_scale, sensitivity=out.sensitivity,
        )  # fmt: skip
    assert args.delta is not None
    p = args.params
    x = design.x[:, :-1] if design.intercept else design.x
    bottom = ols.ols_no_reply(x.shape[1], intercept=design.intercept, lo=args.lo, hi=args.hi)
    if args.split is not None:  # the product chooses the constants the request omits
        given = {name: p[name] for name in constants.OLS_CONSTANTS if name in p}
        chosen = constants.eptr_ols_chosen(
            x, labels, split=args.split, lo=args.lo, hi=args.hi, rng=args.rng, given=given,
            intercept=design.intercept, no_reply=bottom,
        )  # fmt: skip
        return Fitted(
            body={"coef": chosen.fit.coef.tolist()}, released=chosen.fit.released,
            noise="gaussian", noise_scale=chosen.fit.noise_scale, params=chosen.header_params(),
        )  # fmt: skip
    e = ols.eptr_ols(
        x, labels, epsilon=args.epsilon, delta=args.delta, r_x=p["r_x"], r_theta=p["r_theta"],
        c0=p["c0"], rng=args.rng, intercept=design.intercept, no_reply=bottom,
    )  # fmt: skip
    return Fitted(
        body={"coef": e.coef.tolist()}, released=e.released, noise="gaussian",
        noise_scale=e.noise_scale,
    )  # fmt: skip


def _ols_alpha(
    privacy: str, params: Mapping[str, Any], design: Design, lo: float, hi: float, split: Any
) -> float | None:
    """ePTR-OLS's alpha when the request gives r_x, r_theta and c0 (``ols.ols_alpha``)."""
    if privacy != "eptr" or any(name not in params for name in constants.OLS_CONSTANTS):
        return None
    return ols.ols_alpha(
        r_x=float(params["r_x"]), r_theta=float(params["r_theta"]), c0=float(params["c0"]),
        n=design.x.shape[0],
    )  # fmt: skip


def _omitted_split(
    rule: Callable[..., constants.ConstantsSplit],
    names: tuple[str, ...],
    privacy: str,
    params: Mapping[str, Any],
    epsilon: Decimal,
    delta: Decimal | None,
) -> constants.ConstantsSplit | None:
    """The split of an ePTR request that omits some of ``names`` (the constants the product can
    choose): ``rule(epsilon=, delta=, chosen=)`` on the omitted ones, each at its fixed share of
    epsilon; None when all are given or the release is not ePTR (the estimator gets it all). A
    refusal names epsilon. Public: reads the request only."""
    chosen = [name for name in names if name not in params]
    if privacy != "eptr" or not chosen or delta is None:
        return None
    try:
        return rule(epsilon=epsilon, delta=delta, chosen=chosen)
    except InvalidParameterError as exc:
        raise DesignError("epsilon", str(exc)) from None


def _ols_split(
    privacy: str, params: Mapping[str, Any], epsilon: Decimal, delta: Decimal | None
) -> constants.ConstantsSplit | None:
    """ePTR-OLS without some of r_x, r_theta, c0: the product chooses them, each at its fixed
    share of epsilon (``constants.ols_split``); None when all are given (ePTR gets it all)."""
    return _omitted_split(
        constants.ols_split, constants.OLS_CONSTANTS, privacy, params, epsilon, delta
    )


def _ols_body(header: Any, body: Any) -> None:
    if body.coef is None or len(body.coef) != len(header.columns) + int(header.intercept):
        raise IntegrityError("ols model: coef must have one value per column")


def _ols_predict(header: Any, body: Any, x: np.ndarray) -> np.ndarray:
    coef = np.asarray(body.coef, dtype=np.float64)
    p = len(header.columns)
    return x @ coef[:p] + (coef[p] if header.intercept else 0.0)


def _nw_design(
    privacy: str, params: Mapping[str, Any], features: np.ndarray, columns: list[str]
) -> Design:
    p = features.shape[1]
    try:
        queries = np.asarray(params["queries"], dtype=np.float64)
    except ValueError:  # ragged: points of different lengths
        queries = np.empty(0)
    if queries.ndim != 2 or queries.shape[1] != p:
        raise DesignError("params.queries", f"must be a list of points with {p} values ({columns})")
    sigma = params.get("bandwidth")
    if sigma is not None and not (0.0 < float(sigma) * float(sigma) < math.inf):
        # The kernel divides by sigma^2: it must be a positive double (1.5e-154 .. 1.3e154).
        raise DesignError(
            "params.bandwidth",
            f"bandwidth ({sigma!r}) must lie in [1.5e-154, 1.3e154] (the kernel divides by "
            "sigma^2)",
        )
    if privacy == "label":
        try:
            kernel.nw_map(features, queries, bandwidth=params["bandwidth"], name="params.queries")
        except InvalidParameterError as exc:
            where = "params.queries" if "params.queries" in str(exc) else "public_features"
            raise DesignError(where, str(exc)) from None
    else:
        if "bandwidth" not in params:  # the product's public rule (``nw_constants``)
            try:
                bandwidth = nw_constants.rule_bandwidth(queries, n=features.shape[0])
            except InvalidParameterError as exc:
                raise DesignError("params.bandwidth", str(exc)) from None
            params = {**params, "bandwidth": bandwidth}
        _nw_eptr_public_checks(params, p)
    if "reference" in params:
        nw_reference(privacy, params, p, columns)
    return Design(x=features, queries=queries)


def _nw_eptr_public_checks(params: Mapping[str, Any], dim: int) -> None:
    """ePTR-NW's public refusals, before any label is read: a kernel bound K_max = sigma^-d
    (2 pi)^(-d/2) that is a positive double (a bandwidth too small or too large for d
    overflows or underflows it, and alpha with it), and an ``r_f`` whose range 2 r_f is finite.
    Functions of the request and the public dimension only."""
    try:
        k_max = kernel.kernel_bound(dim, float(params["bandwidth"]))
    except OverflowError:  # Python's float power raises where numpy's would give inf
        k_max = math.inf
    if not (math.isfinite(k_max) and k_max > 0.0):
        raise DesignError(
            "params.bandwidth",
            f"bandwidth ({params['bandwidth']!r}) makes the kernel's maximum sigma^-d (2 pi)^"
            f"(-d/2) {k_max!r} in dimension {dim}: not a positive finite number",
        )
    r_f = params.get("r_f")
    if r_f is not None and not (math.isfinite(float(r_f)) and math.isfinite(2.0 * float(r_f))):
        raise DesignError("params.r_f", f"r_f ({r_f!r}) must be finite with 2 r_f finite")


def _nw_label_interval(params: Mapping[str, Any], lo: float, hi: float) -> dict[str, float]:
    """The public label interval ePTR-NW clips to, as ``kernel.eptr_nw``'s keywords.

    Without ``r_f``: the dataset's public bounds [label_min, label_max] (``lo``,
    ``hi``), so alpha = (hi - lo) K_max sqrt(min(m, 2 G)) / (c0 n) (Algorithm 5 with the
    span of (19) tightened, ``kernel.eptr_nw``). With ``r_f`` (the paper's Pi_{R_f}, as the
    API always documented it): [-r_f, r_f], alpha with span 2 r_f, exactly as before. Either
    interval is fixed before any label is read (the request and the dataset's operator-set
    bounds), so the privacy proof of ``eptr_nw`` holds for it as given; labels outside it are
    clipped (a fixed public map). For r_f >= max(|lo|, |hi|) the bounds' span is never larger:
    hi - lo <= 2 max(|lo|, |hi|) <= 2 r_f.
    """
    r_f = params.get("r_f")
    if r_f is not None:
        return {"r_f": float(r_f)}
    return {"lo": float(lo), "hi": float(hi)}


def _nw_fit(design: Design, labels: np.ndarray, args: FitArgs) -> Fitted:
    assert design.queries is not None
    body = {"queries": design.queries.tolist()}
    p = args.params
    if args.privacy == "label":
        nw = kernel.label_dp_nw(
            design.x, labels, design.queries, lo=args.lo, hi=args.hi, epsilon=args.epsilon,
            bandwidth=p["bandwidth"], rng=args.rng,
        )  # fmt: skip
        return Fitted(
            body={**body, "values": nw.values.tolist()}, released=True,
            noise="discrete_laplace", noise_scale=nw.noise_scale, sensitivity=nw.sensitivity,
        )  # fmt: skip
    assert args.delta is not None
    if isinstance(args.split, NWProductSplit):  # c0 per query by the public rule (issue 22)
        return _nw_fit_product(design, labels, args, args.split)
    if args.split is not None:  # the product chooses the bandwidth the request omits
        given = {name: p[name] for name in nw_constants.NW_CONSTANTS if name in p}
        chosen = nw_constants.eptr_nw_chosen(
            design.x, labels, design.queries, split=args.split, rng=args.rng, given=given,
            **_nw_label_interval(p, args.lo, args.hi),
        )  # fmt: skip
        return Fitted(
            body={**body, "values": chosen.fit.values.tolist()}, released=chosen.fit.released,
            noise="gaussian", noise_scale=chosen.fit.noise_scale, params=chosen.header_params(),
        )  # fmt: skip
    k = kernel.eptr_nw(
        design.x, labels, design.queries, epsilon=args.epsilon, delta=args.delta,
        bandwidth=p["bandwidth"], c0=p["c0"], rng=args.rng,
        **_nw_label_interval(p, args.lo, args.hi),
    )  # fmt: skip
    return Fitted(
        body={**body, "values": k.values.tolist()}, released=k.released, noise="gaussian",
        noise_scale=k.noise_scale,
    )  # fmt: skip


def _nw_alpha(
    privacy: str, params: Mapping[str, Any], design: Design, lo: float, hi: float, split: Any
) -> float | None:
    """ePTR-NW's alpha (``kernel.eptr_nw_alpha``) when the request gives the bandwidth and c0
    (one c0 for every query: no noise factors), or when c0 is chosen per query from its public
    reference (:class:`NWProductSplit`: every constant public, :func:`_nw_product_constants`)."""
    if privacy != "eptr" or design.queries is None:
        return None
    low, high = kernel.label_interval(**_nw_label_interval(params, lo, hi))
    n = design.x.shape[0]
    if split is None and "bandwidth" in params and "c0" in params:
        c = kernel.nw_thresholds(params["c0"], design.queries.shape[0])
        return kernel.eptr_nw_alpha(
            design.queries, n=n, bandwidth=float(params["bandwidth"]), c0=c, low=low, high=high,
            tau=np.ones_like(c),
        )  # fmt: skip
    if isinstance(split, NWProductSplit) and not split.chosen:
        public = _nw_product_constants(design, params, split)
        tau = kernel.nw_noise_factors(public.c0, power=NW_NOISE_POWER)
        return kernel.eptr_nw_alpha(
            design.queries, n=n, bandwidth=public.bandwidth, c0=public.c0, low=low, high=high,
            tau=tau,
        )  # fmt: skip
    return None


def _nw_split(
    privacy: str, params: Mapping[str, Any], epsilon: Decimal, delta: Decimal | None
) -> nw_constants.NWConstantsSplit | None:
    """ePTR-NW without its bandwidth and/or c0: the product chooses them (the bandwidth by a
    public rule, free; c0 at its fixed share of epsilon, ``nw_constants.nw_split``, or, when the
    request gives a public ``reference``, per query by ``nw_constants.reference_c0`` with the
    interpolation by :func:`nw_interpolation`, free: an :class:`NWProductSplit`, ePTR-NW on all
    of epsilon and delta); None when both are given (ePTR-NW gets it all). ``r_f`` omitted is
    not a choice that costs anything (``_nw_label_interval``) and makes no split. Public: reads
    the request only."""
    omitted = tuple(name for name in nw_constants.NW_CONSTANTS if name not in params)
    if privacy != "eptr" or not omitted or delta is None:
        return None
    by_reference = "c0" in omitted and "reference" in params
    try:
        split = nw_constants.nw_split(
            epsilon=epsilon, delta=delta, omitted=omitted, c0_by_rule=by_reference
        )
        if not by_reference:  # no reference (or c0 given): exactly as before
            return split
        eps = split.eptr_float
        # The release test's threshold and the reference rule's margin need a usable epsilon.
        if not math.isfinite(eptr.eptr_threshold(epsilon=eps, delta=split.delta_float)):
            raise InvalidParameterError(
                f"epsilon ({amounts.text(epsilon)}) is too small for the product to choose "
                "c0: give it"
            )
    except (InvalidParameterError, OverflowError, ZeroDivisionError) as exc:
        raise DesignError("epsilon", str(exc)) from None
    fields_of = {field.name: getattr(split, field.name) for field in dataclasses.fields(split)}
    return NWProductSplit(**fields_of, interpolation=nw_interpolation(eps))


def _nw_body(header: Any, body: Any) -> None:
    if body.queries is None or body.values is None or len(body.queries) != len(body.values):
        raise IntegrityError("nw model: queries and values must have the same length")
    if not body.queries or any(len(point) != len(header.columns) for point in body.queries):
        raise IntegrityError("nw model: every query point must have one value per column")
    _nw_interpolation_of(header.params)
    if "c0_per_query" in header.params:
        _nw_c0_per_query(header.params["c0_per_query"], len(body.queries))
    if "reference" in header.params:
        _nw_reference_record(header.params)
    power = header.params.get("noise_power", NW_NOISE_POWER)
    if not (_number(power) and 0.0 <= power <= 1.0):
        raise IntegrityError(f"nw model: params.noise_power ({power!r}) must be in [0, 1]")


def _nw_predict(header: Any, body: Any, x: np.ndarray) -> np.ndarray:
    """The released values interpolated at ``x`` by the header's public ``interpolation``
    (post-processing of the release): ``"smooth"`` is ``kernel.smooth_interpolate`` at
    ``smooth_bandwidth``; ``"inverse_distance"``, or no ``interpolation`` (label-DP NW, an
    ePTR-NW with a given c0, every model released before the parameter existed), is
    ``kernel.interpolate``. Both parties predict through this function."""
    queries, values = np.asarray(body.queries), np.asarray(body.values)
    how, smooth = _nw_interpolation_of(header.params)
    if how == "smooth":
        assert smooth is not None
        return kernel.smooth_interpolate(queries, values, x, bandwidth=smooth)
    return kernel.interpolate(queries, values, x)


# ---- ePTR-NW with c0 chosen per query from a public reference (issue 22, item 4) -------------
# When a request omits c0 and gives ``reference`` (rows of features the caller will predict at:
# public, the caller names them, like the query points), the product releases the per-query design
# measured in bench/results/estimators.md ("per-query c0", bench.estimators_nw's PER_QUERY;
# California Housing, the test features as the reference): one public c_q per query point
# (``nw_constants.reference_c0`` on the reference, never below its REFERENCE_FLOOR effective
# neighbours), query q's noise scaled by (c_min / c_q)^NW_NOISE_POWER, and predictions by a Gaussian
# smoother of the released values at NW_SMOOTH_FACTOR x the bandwidth from epsilon
# NW_SMOOTH_FROM_EPSILON, by inverse distance below: the smoother was better at epsilon >= 2 (0.858
# vs 0.860 median MSE at 2, 0.787 vs 0.829 at 4) and worse below (0.913 vs 0.906 at 1.5, 1.129 vs
# 1.001 at 1), where the released values' noise is larger than what averaging it over a few queries
# removes compared with the bias the averaging adds at dense queries (re-measured through this
# family, docs/estimators.md). Without ``reference`` an omitted c0 is the DP estimate of
# ``nw_constants`` (one c0, inverse distance): the request's own query points as the reference made
# the release worse (their density, from m points rescaled to n rows, has a margin that pushed every
# c_q to its floor).
NW_NOISE_POWER = 0.5
NW_SMOOTH_FACTOR = 0.5
NW_SMOOTH_FROM_EPSILON = 2.0
NW_INTERPOLATIONS = ("inverse_distance", "smooth")
NW_REFERENCE_MAX_ROWS = 20_000  # the request's ``reference``: at most this many rows


@dataclass(frozen=True)
class NWProductConstants:
    """An :class:`NWProductSplit` release's public constants on one design: the bandwidth,
    c0 per query (in the queries' order) and the header's record of the reference."""

    bandwidth: float
    c0: np.ndarray
    reference: str  # :func:`reference_digest`
    reference_rows: int


@dataclass(frozen=True, kw_only=True)
class NWProductSplit(nw_constants.NWConstantsSplit):
    """The split of an ePTR-NW request whose c0 the product chooses per query (a public rule,
    epsilon 0, like the bandwidth), with the interpolation the released model will use
    (:func:`nw_interpolation`, a function of epsilon only), which the preview explains."""

    interpolation: str = "inverse_distance"
    # The public constants the design fixes (:func:`_nw_bind`), computed once for the service's
    # alpha check and the fit; None until bound (the fit then computes them itself).
    constants: NWProductConstants | None = dataclasses.field(
        default=None, compare=False, repr=False
    )

    def explanation(self) -> list[str]:
        """The split's sentences, the interpolation's before ePTR-NW's charge."""
        lines = super().explanation()
        if self.interpolation == "smooth":
            how = (
                f"a Gaussian smoother of the released values at {NW_SMOOTH_FACTOR:g} x the "
                f"bandwidth (epsilon >= {NW_SMOOTH_FROM_EPSILON:g})"
            )
        else:
            how = f"inverse distance of the released values (epsilon < {NW_SMOOTH_FROM_EPSILON:g})"
        return [*lines[:-1], f"interpolation: {how}; post-processing, epsilon 0", lines[-1]]


def nw_interpolation(epsilon: float) -> str:
    """The public interpolation rule of a product-chosen ePTR-NW: ``"smooth"`` from epsilon
    NW_SMOOTH_FROM_EPSILON, ``"inverse_distance"`` below (as measured, comment above). Reads the
    request's epsilon only; either is post-processing of the release."""
    return "smooth" if epsilon >= NW_SMOOTH_FROM_EPSILON else "inverse_distance"


def nw_reference(
    privacy: str, params: Mapping[str, Any], dim: int, columns: list[str] | None = None
) -> np.ndarray:
    """The request's ``reference`` as an (r, dim) float array, or a DesignError naming
    ``params.reference``: ePTR-NW with c0 omitted only (it is what chooses c0), 1 to
    NW_REFERENCE_MAX_ROWS rows of ``dim`` finite values. Public: reads the request only."""
    field = "params.reference"
    if privacy != "eptr":
        raise DesignError(field, "reference is for ePTR-NW only (it chooses an omitted c0)")
    if "c0" in params:
        raise DesignError(field, "reference chooses c0 per query: give reference or c0, not both")
    raw = params["reference"]
    rows = len(raw) if isinstance(raw, list | tuple) else 0
    if not 1 <= rows <= NW_REFERENCE_MAX_ROWS:
        raise DesignError(
            field, f"reference must be 1 to {NW_REFERENCE_MAX_ROWS} points (got {rows})"
        )
    try:
        points = np.asarray(raw, dtype=np.float64)
    except (TypeError, ValueError):
        points = np.empty((0, 0))
    names = f" ({columns})" if columns is not None else ""
    if points.ndim != 2 or points.shape[1] != dim or not np.all(np.isfinite(points)):
        raise DesignError(
            field, f"reference must be a list of points with {dim} finite values{names}"
        )
    return points


def reference_digest(reference: np.ndarray) -> str:
    """The header's record of the reference: "sha256:" and the hex SHA-256 of its float64
    little-endian bytes, row-major (the rows themselves stay out of the message)."""
    data = np.ascontiguousarray(reference, dtype="<f8").tobytes()
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _nw_product_constants(
    design: Design, params: Mapping[str, Any], split: NWProductSplit
) -> NWProductConstants:
    """The public constants of an :class:`NWProductSplit` release: the bandwidth (given, or by
    ``nw_constants.rule_bandwidth``) and c0 per query (``nw_constants.reference_c0`` from the
    request's reference), checked as ePTR-NW will check them (a refusal names the reference);
    the split's own when :func:`_nw_bind` has bound them."""
    if split.constants is not None:
        return split.constants
    assert design.queries is not None
    n = design.x.shape[0]
    if "bandwidth" in split.by_rule:
        bandwidth = nw_constants.rule_bandwidth(design.queries, n=n)
    else:
        bandwidth = float(params["bandwidth"])
    reference = nw_reference("eptr", params, design.x.shape[1])
    c0 = nw_constants.reference_c0(
        design.queries, reference, n=n, bandwidth=bandwidth, epsilon=split.eptr_float,
        delta=split.delta_float,
    )  # fmt: skip
    try:
        c = kernel.nw_thresholds(c0, design.queries.shape[0])
    except InvalidParameterError as exc:
        raise DesignError("params.reference", f"the per-query c0 it gives: {exc}") from None
    return NWProductConstants(
        bandwidth=bandwidth, c0=c, reference=reference_digest(reference),
        reference_rows=int(reference.shape[0]),
    )  # fmt: skip


def _nw_bind(split: Any, params: Mapping[str, Any], design: Design) -> Any:
    """An :class:`NWProductSplit` with its public constants computed on ``design``
    (:func:`_nw_product_constants`, once: the service's alpha check and the fit read them);
    any other split unchanged. Public: reads the request and the public design only."""
    if not isinstance(split, NWProductSplit) or split.chosen or design.queries is None:
        return split
    return dataclasses.replace(split, constants=_nw_product_constants(design, params, split))


def _nw_fit_product(
    design: Design, labels: np.ndarray, args: FitArgs, split: NWProductSplit
) -> Fitted:
    """ePTR-NW with c0 chosen per query by ``nw_constants.reference_c0`` from the request's
    ``reference``, the bandwidth given or by ``nw_constants.rule_bandwidth``: every constant is
    public, ePTR-NW runs on the whole (epsilon, delta) (``split.eptr_float`` = the request's
    epsilon). The header carries the chosen public values (``c0_per_query``: one c_q per query,
    in the body's order, as shortest round-trip decimals; the bandwidth when chosen; the noise
    power; the interpolation) and, instead of the reference's rows, ``reference`` =
    :func:`reference_digest` and ``reference_rows``."""
    assert design.queries is not None
    p, queries = args.params, design.queries
    eps, dlt = split.eptr_float, split.delta_float
    public = _nw_product_constants(design, p, split)
    bandwidth, c0 = public.bandwidth, public.c0
    k = kernel.eptr_nw(
        design.x, labels, queries, epsilon=eps, delta=dlt, bandwidth=bandwidth, c0=c0,
        rng=args.rng, noise_power=NW_NOISE_POWER, **_nw_label_interval(p, args.lo, args.hi),
    )  # fmt: skip
    chosen = (*split.by_rule, *split.chosen)
    params: dict[str, Any] = {
        **({"bandwidth": bandwidth} if "bandwidth" in chosen else {}),
        "c0_per_query": ",".join(repr(float(value)) for value in c0),
        "noise_power": NW_NOISE_POWER,
        "interpolation": split.interpolation,
        **(
            {"smooth_bandwidth": NW_SMOOTH_FACTOR * bandwidth}
            if split.interpolation == "smooth"
            else {}
        ),
        "reference": public.reference,
        "reference_rows": public.reference_rows,
        "constants_chosen": ",".join(chosen),
        "constants_epsilon": amounts.text(split.constants_epsilon),
        "eptr_epsilon": amounts.text(split.eptr_epsilon),
    }
    return Fitted(
        body={"queries": queries.tolist(), "values": k.values.tolist()}, released=k.released,
        noise="gaussian", noise_scale=k.noise_scale, params=params,
    )  # fmt: skip


def _number(value: Any) -> bool:
    """A finite int or float that is not a bool."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _nw_interpolation_of(params: Mapping[str, Any]) -> tuple[str, float | None]:
    """The header's interpolation and smoother bandwidth, refused (IntegrityError naming the
    parameter) when malformed: ``interpolation`` one of NW_INTERPOLATIONS (absent: inverse
    distance), ``smooth_bandwidth`` a finite positive number with "smooth" and only then."""
    how = params.get("interpolation", "inverse_distance")
    if how not in NW_INTERPOLATIONS:
        raise IntegrityError(
            f"nw model: params.interpolation ({how!r}) must be one of {NW_INTERPOLATIONS}"
        )
    smooth = params.get("smooth_bandwidth")
    if how != "smooth":
        if "smooth_bandwidth" in params:
            raise IntegrityError(
                "nw model: params.smooth_bandwidth is only for params.interpolation 'smooth'"
            )
        return how, None
    if not (_number(smooth) and smooth > 0.0):
        raise IntegrityError(
            f"nw model: params.smooth_bandwidth ({smooth!r}) must be a finite number > 0"
        )
    return how, float(smooth)


def _nw_reference_record(params: Mapping[str, Any]) -> None:
    """The header's ``reference`` (:func:`reference_digest`) with ``reference_rows`` (an int in
    [1, NW_REFERENCE_MAX_ROWS]) and ``c0_per_query`` (what the reference chose), else an
    IntegrityError naming it."""
    digest, rows = params["reference"], params.get("reference_rows")
    if not (isinstance(digest, str) and re.fullmatch(r"sha256:[0-9a-f]{64}", digest)):
        raise IntegrityError("nw model: params.reference must be 'sha256:' and 64 hex digits")
    if not (isinstance(rows, int) and not isinstance(rows, bool)) or not (
        1 <= rows <= NW_REFERENCE_MAX_ROWS
    ):
        raise IntegrityError(
            f"nw model: params.reference_rows ({rows!r}) must be an integer in [1, "
            f"{NW_REFERENCE_MAX_ROWS}]"
        )
    if "c0_per_query" not in params:
        raise IntegrityError("nw model: params.reference without params.c0_per_query")


def _nw_c0_per_query(text: Any, m: int) -> np.ndarray:
    """The header's ``c0_per_query``: m finite positive decimals separated by commas, else an
    IntegrityError naming it."""
    try:
        values = np.array([float(part) for part in str(text).split(",")]) if text else None
    except ValueError:
        values = None
    if (
        not isinstance(text, str)
        or values is None
        or values.shape != (m,)
        or not np.all(np.isfinite(values) & (values > 0.0))
    ):
        raise IntegrityError(
            f"nw model: params.c0_per_query must be {m} finite positive numbers separated by "
            "commas (one per query point)"
        )
    return values


def _bayes_design(
    privacy: str, params: Mapping[str, Any], features: np.ndarray, columns: list[str]
) -> Design:
    k = int(params["n_classes"])
    if features.shape[0] < 2 * k:
        raise DesignError("public_features", "fewer rows than 2 x n_classes")
    if "c0" in params and not float(params["c0"]) * k < 1.0:
        # Step 5 floors every prior at c0: c0 K < 1 or the priors are no probability vector.
        raise DesignError("params.c0", f"c0 ({params['c0']!r}) must be < 1 / n_classes ({k})")
    return Design(x=features)


def _bayes_fit(design: Design, labels: np.ndarray, args: FitArgs) -> Fitted:
    assert args.delta is not None
    n_classes = int(args.params["n_classes"])
    # Public rule: a label's class is the nearest integer, clipped into 0..n_classes-1.
    classes = np.clip(np.rint(labels), 0, n_classes - 1).astype(np.int64)
    if args.split is not None:  # the product chooses the r_x and/or c0 the request omits
        given = {name: args.params[name] for name in bayes.BAYES_CONSTANTS if name in args.params}
        chosen = bayes.eptr_bayes_chosen(
            design.x, classes, n_classes=n_classes, split=args.split, rng=args.rng, given=given
        )
        return Fitted(
            body={"priors": chosen.fit.priors.tolist(), "means": chosen.fit.means.tolist()},
            released=chosen.fit.released, noise="gaussian", noise_scale=chosen.fit.noise_scale,
            params=chosen.header_params(),
        )  # fmt: skip
    b = bayes.eptr_bayes(
        design.x, classes, n_classes=n_classes, epsilon=args.epsilon, delta=args.delta,
        r_x=args.params["r_x"], c0=args.params["c0"], rng=args.rng,
    )  # fmt: skip
    return Fitted(
        body={"priors": b.priors.tolist(), "means": b.means.tolist()}, released=b.released,
        noise="gaussian", noise_scale=b.noise_scale,
    )  # fmt: skip


def _bayes_alpha(
    privacy: str, params: Mapping[str, Any], design: Design, lo: float, hi: float, split: Any
) -> float | None:
    """ePTR-Bayes' alpha when the request gives r_x and c0 (``bayes.bayes_alpha``)."""
    if privacy != "eptr" or any(name not in params for name in bayes.BAYES_CONSTANTS):
        return None
    return bayes.bayes_alpha(r_x=float(params["r_x"]), c0=float(params["c0"]), n=design.x.shape[0])


def _bayes_split(
    privacy: str, params: Mapping[str, Any], epsilon: Decimal, delta: Decimal | None
) -> constants.ConstantsSplit | None:
    """ePTR-Bayes without r_x and/or c0: the product chooses them, each at its fixed share of
    epsilon (``bayes.bayes_split``); None when both are given (ePTR-Bayes gets it all)."""
    return _omitted_split(bayes.bayes_split, bayes.BAYES_CONSTANTS, privacy, params, epsilon, delta)


def _bayes_body(header: Any, body: Any) -> None:
    if body.priors is None or body.means is None or len(body.priors) != len(body.means):
        raise IntegrityError("bayes model: priors and means must have one entry per class")
    if any(len(mean) != len(header.columns) for mean in body.means):
        raise IntegrityError("bayes model: every class mean must have one value per column")


def _bayes_predict(header: Any, body: Any, x: np.ndarray) -> np.ndarray:
    means = np.asarray(body.means, dtype=np.float64)
    sq = ((x[:, None, :] - means[None, :, :]) ** 2).sum(axis=2)
    # Algorithm 3 step 6: argmax_k log mu_k - ||x - m_k||^2 / 2.
    return np.argmax(np.log(np.asarray(body.priors))[None, :] - 0.5 * sq, axis=1).astype(float)


BUILTIN: tuple[EstimatorFamily, ...] = (
    EstimatorFamily(
        name="ols",
        privacies={"label": (), "eptr": ()},
        optional=("intercept",),
        chosen={"eptr": constants.OLS_CONSTANTS},
        split=_ols_split,
        public_alpha=_ols_alpha,
        design=_ols_design,
        fit=_ols_fit,
        check_body=_ols_body,
        predict=_ols_predict,
        description="least squares: label-DP OLS or ePTR-OLS (Algorithm 4)",
    ),
    EstimatorFamily(
        name="nw",
        privacies={
            "label": ("bandwidth", "queries"),
            "eptr": ("queries",),
        },
        # reference: public points the caller will predict at; with c0 omitted, c0 per query
        optional=("reference",),
        # r_f omitted: the labels' interval is the dataset's public [label_min, label_max];
        # bandwidth, c0 omitted: chosen by the product (``nw_constants``, ``_nw_split``)
        chosen={"eptr": ("r_f", *nw_constants.NW_CONSTANTS)},
        split=_nw_split,
        public_alpha=_nw_alpha,
        bind=_nw_bind,
        design=_nw_design,
        fit=_nw_fit,
        check_body=_nw_body,
        predict=_nw_predict,
        description="Nadaraya-Watson at public query points: label-DP or ePTR-NW (Algorithm 5)",
    ),
    EstimatorFamily(
        name="bayes",
        privacies={"eptr": ("n_classes",)},
        # r_x, c0 omitted: chosen by the product (``bayes.eptr_bayes_chosen``, ``_bayes_split``)
        chosen={"eptr": bayes.BAYES_CONSTANTS},
        split=_bayes_split,
        public_alpha=_bayes_alpha,
        design=_bayes_design,
        fit=_bayes_fit,
        check_body=_bayes_body,
        predict=_bayes_predict,
        description="Gaussian naive Bayes classes: ePTR-Bayes (Algorithm 3)",
    ),
)
for _family in BUILTIN:
    register(_family)
