"""RR-on-Bins: randomized response over the outputs of a monotone binning of the labels.

Implements Ghazi et al., "Regression with Label Differential Privacy": Algorithm 1 (the
mechanism), Algorithm 2 with Appendix B (optimal bins, O(1) amortised cost per bin) and
Theorem 5 (for squared, absolute and Poisson loss this is the optimal epsilon-DP mechanism for
the given prior, among ALL mechanisms).

Privacy: ``Phi`` is a fixed public step function of the label (thresholds chosen from the public
or already-private prior only, never from the labels). The sampler is exact, on integers: one
uniform draw v in [0, D) per label keeps Phi(y) if v < K and otherwise picks another output from
(v - K) // O, so every label gives its own output probability K / D and each other output O / D,
with integers O <= K <= e^eps O (:func:`response_weights`). Hence for any labels y, y' and output
o, P(o | y) / P(o | y') lies in [e^-eps, e^eps] exactly, for every epsilon > 0; the ideal
probabilities e^eps / (e^eps + d - 1) and 1 / (e^eps + d - 1) are met to within 1 / D ~ d 2^-62.

Finding the bins. The paper's dynamic program ``A[i][j]`` (first i values, j bins) costs
O(k^2 d) for up to d bins, and the optimum can need many bins at large epsilon (squared loss,
smooth priors: roughly e^{eps/3}, about 15 bins at eps = 8, over 200 at eps = 16; absolute loss
needs several times more). We therefore minimise the loss
``sum of bin costs / (1 + (d - 1) e^-eps)`` over ALL interval partitions with Dinkelbach's method:
for a trial loss lambda, one O(k^2) pass of the recursion without the bin-count index
minimises ``sum (bin cost - lambda e^-eps)``; lambda is then set to the loss of that partition.
When the loss stops decreasing, every partition P has cost(P) - lambda denom(P) >= 0, i.e. loss
>= lambda: the incumbent is exactly optimal. The loss decreases strictly over finitely many
partitions, so the loop ends, in practice after 3-5 passes. Hence ``max_bins`` defaults to None
(no cap): the exact optimum is cheaper than Algorithm 2 with a cap of a few dozen, and a cap
costs accuracy at large epsilon. A cap, when given and binding, runs Algorithm 2 as written.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from shared.domain import check_epsilon, check_labels, check_probabilities
from shared.errors import InvalidParameterError
from shared.mechanisms import _bins_kernels as kernels
from shared.mechanisms import registry
from shared.mechanisms.histogram import MAX_BINS, Prior
from shared.rng import Rng, SystemRandom

LOSSES: dict[str, int] = {
    "squared": kernels.SQUARED,
    "absolute": kernels.ABSOLUTE,
    "poisson": kernels.POISSON,
}
MECHANISM_NAME = "rr_on_bins"


def check_loss(loss: str) -> str:
    """One of ``LOSSES``."""
    if not isinstance(loss, str) or loss not in LOSSES:
        raise InvalidParameterError(f"loss ({loss!r}) must be one of {sorted(LOSSES)}")
    return loss


def check_max_bins(max_bins: int | None) -> int | None:
    """``None`` (no cap) or an integer >= 1."""
    if max_bins is None:
        return None
    if isinstance(max_bins, bool) or not isinstance(max_bins, int | np.integer) or max_bins < 1:
        raise InvalidParameterError(f"max_bins ({max_bins!r}) must be None or an integer >= 1")
    return int(max_bins)


def check_discrete_prior(
    values: np.ndarray, probs: np.ndarray, *, sorted_values: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """Values (finite; strictly increasing if asked) and probs (>= 0, summing to 1), as float64."""
    try:
        v = np.asarray(values, dtype=np.float64)
        p = np.asarray(probs, dtype=np.float64)
    except (TypeError, ValueError):
        raise InvalidParameterError("values and probs must be arrays of numbers") from None
    if v.ndim != 1 or p.ndim != 1:
        raise InvalidParameterError(
            f"values and probs must be one-dimensional, got shapes {v.shape} and {p.shape}"
        )
    if v.size == 0:
        raise InvalidParameterError("values must not be empty")
    if v.size != p.size:
        raise InvalidParameterError(f"got {v.size} values but {p.size} probs")
    if not np.all(np.isfinite(v)):
        raise InvalidParameterError("values must be finite (no NaN or inf)")
    if sorted_values and v.size > 1 and not np.all(np.diff(v) > 0):
        raise InvalidParameterError("values must be strictly increasing (sorted, no duplicates)")
    return v, check_probabilities(p)


def pointwise_loss(loss: str, outputs: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """``loss(output, label)``, broadcast: squared ``(o - y)^2``, absolute ``|o - y|``, Poisson
    ``o - y log o`` (the paper's Section 2 losses, without the squared loss's factor 1/2, so that
    expected squared loss is the MSE; the factor does not change any minimiser).

    Poisson uses ``0 log 0 = 0``; an output <= 0 for a label > 0 costs inf.
    """
    o = np.asarray(outputs, dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64)
    name = check_loss(loss)
    if name == "squared":
        with np.errstate(over="ignore"):  # beyond 1e154 the square is honestly inf
            return (o - y) ** 2
    if name == "absolute":
        return np.abs(o - y)
    o, y = np.broadcast_arrays(o, y)
    positive = o > 0.0
    value = o - y * np.log(np.where(positive, o, 1.0))
    return np.where(positive, value, np.where(y == 0.0, o, np.inf))


# One draw per label from [0, D), D = d * floor(2^62 / d) < 2^63: exact with numpy's
# ``Generator.integers`` and with ``SystemRandom.integers`` (64-bit words).
RESPONSE_BITS = 62
# Relative float error bound of the computed ideal weight (a few ulps); rounding O* up by this
# much more keeps K / O <= e^eps whatever the rounding of exp and the arithmetic.
_SAFETY = 1e-13


def response_weights(d: int, epsilon: float) -> tuple[int, int, int]:
    """Exact integer weights ``(K, O, D)`` of randomized response over ``d`` outputs.

    The label's own output has probability K / D, each of the d - 1 others O / D, with
    K + (d - 1) O = D = d M, M = floor(2^62 / d). K / O = D / O - (d - 1) decreases in O and
    equals e^eps at O* = M d / (e^eps + d - 1) = M d e^-eps / (1 + (d - 1) e^-eps); O is O*
    rounded UP (with a margin for float error), at least 1 and at most M. So
    1 <= K / O <= e^eps exactly, for every epsilon > 0: at tiny epsilon O = M and the outputs
    are uniform; at huge epsilon O = 1, every output stays reachable. ``d = 1`` gives (1, 0, 1).
    """
    if isinstance(d, bool) or not isinstance(d, int | np.integer) or d < 1:
        raise InvalidParameterError(f"d ({d!r}) must be an integer >= 1")
    d = int(d)
    eps = check_epsilon(epsilon)
    if d == 1:
        return 1, 0, 1
    m = (1 << RESPONSE_BITS) // d
    if m < 1:
        raise InvalidParameterError(f"d ({d}) is too large for {RESPONSE_BITS}-bit draws")
    q = math.exp(-eps)
    # O*, a few ulps off. Where e^-eps is subnormal (eps > 708) O* is below 1e-290, so O = 1.
    ideal = float(m) * d * q / (1.0 + (d - 1) * q)
    other = min(max(math.ceil(ideal * (1.0 + _SAFETY)), 1), m)
    return d * m - (d - 1) * other, other, d * m


# Words per ``os.urandom`` call of the CSPRNG path: 256 KiB, so each chunk is still in cache
# when the kernel reads it (measured: chunking does not slow ``os.urandom`` down).
WORDS_PER_DRAW = 1 << 15


def _respond_from_csprng(
    mechanism: RROnBins, labels: np.ndarray, rng: SystemRandom, weights: tuple[int, int, int]
) -> np.ndarray:
    """Algorithm 1 on finite ``labels`` from the OS CSPRNG, exactly as
    ``SystemRandom.integers(0, D)`` draws: 64-bit words, each kept iff below the largest
    multiple of D under 2^64, as word % D. Words are drawn in chunks and each chunk is consumed
    whole (``kernels.respond_words``), so the bytes drawn are exactly the words the rejection
    sampler reads: n words, plus one per rejected word (a word is rejected with probability
    (2^64 mod D) / 2^64 < d 2^-62; never with d a power of two, where D = 2^62).

    Privacy: each label's draw is a fresh uniform v on [0, D) (rejection sampling is exact), so
    each output has probability K / D or O / D exactly, as :func:`response_weights` states.
    """
    keep, other, total = weights
    # The kernel reduces a kept word (< 2^64 - 2^64 mod D) mod D by at most two subtractions,
    # which needs 2^64 / D < 5; D = d floor(2^62 / d) lies in (2^62 - d, 2^62] for every d here.
    if not 2**64 // 5 < total <= 2**62:
        raise InvalidParameterError(f"D ({total}) must be in (2^64 / 5, 2^62] for 64-bit words")
    limit = (2**64 // total) * total
    args = (
        np.uint64(0 if limit == 2**64 else limit),
        np.uint64(total),
        np.uint64(keep),
        np.uint64(other),
    )
    out = np.empty(labels.size, dtype=np.float64)
    filled = 0
    while filled < labels.size:
        words = rng.words(min(labels.size - filled, WORDS_PER_DRAW))
        filled = kernels.respond_words(
            labels, mechanism.thresholds, mechanism.output_values, words, *args, out, filled
        )
    return out


def switch_probability(d: int, epsilon: float) -> float:
    """P(output != Phi(y)) = (d - 1) O / D of the realised sampler (:func:`response_weights`)."""
    keep, other, total = response_weights(d, epsilon)
    return (d - 1) * other / total


@dataclass(frozen=True, kw_only=True, eq=False)
class RROnBins:
    """RR-on-Bins (Algorithm 1) with the monotone map ``Phi`` given by label-space thresholds.

    ``Phi(y) = searchsorted(thresholds, y, side="right")``: bin j is
    ``[thresholds[j-1], thresholds[j])``, the first and last bins extend to -inf and +inf, so
    every finite label (in or outside the prior's range) has a bin. Bin j outputs
    ``output_values[j]``. Privacy: Phi is a public function and the output is epsilon-randomized
    response over the d outputs, so P(o | y) / P(o | y') is in {e^-eps, 1, e^eps}.
    """

    thresholds: np.ndarray
    output_values: np.ndarray
    epsilon: float

    def __post_init__(self) -> None:
        try:
            thresholds = np.array(self.thresholds, dtype=np.float64).reshape(-1)
            outputs = np.array(self.output_values, dtype=np.float64).reshape(-1)
        except (TypeError, ValueError):
            raise InvalidParameterError("thresholds and output_values must be numbers") from None
        if outputs.size < 1:
            raise InvalidParameterError("output_values must hold at least one value")
        if thresholds.size != outputs.size - 1:
            raise InvalidParameterError(
                f"{outputs.size} output_values need {outputs.size - 1} thresholds, "
                f"got {thresholds.size}"
            )
        for name, array in (("thresholds", thresholds), ("output_values", outputs)):
            if not np.all(np.isfinite(array)):
                raise InvalidParameterError(f"{name} must be finite")
            if array.size > 1 and not np.all(np.diff(array) > 0):
                raise InvalidParameterError(f"{name} must be strictly increasing")
        thresholds.setflags(write=False)
        outputs.setflags(write=False)
        object.__setattr__(self, "thresholds", thresholds)
        object.__setattr__(self, "output_values", outputs)
        object.__setattr__(self, "epsilon", check_epsilon(self.epsilon))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RROnBins):
            return NotImplemented
        return (
            self.epsilon == other.epsilon
            and np.array_equal(self.thresholds, other.thresholds)
            and np.array_equal(self.output_values, other.output_values)
        )

    def __hash__(self) -> int:
        return hash((self.epsilon, self.thresholds.tobytes(), self.output_values.tobytes()))

    @property
    def d(self) -> int:
        """Number of bins (= number of distinct outputs)."""
        return int(self.output_values.size)

    @property
    def keep_probability(self) -> float:
        """P(output = output_values[Phi(y)]) = K / D ~ e^eps / (e^eps + d - 1), as realised."""
        keep, _, total = response_weights(self.d, self.epsilon)
        return keep / total

    @property
    def other_probability(self) -> float:
        """P(output = o) for each of the d - 1 outputs o other than Phi(y) (0 when d = 1)."""
        _, other, total = response_weights(self.d, self.epsilon)
        return other / total

    def phi(self, labels: np.ndarray | float) -> np.ndarray:
        """Bin index of each label (the public map Phi); labels must be finite."""
        y = np.asarray(labels, dtype=np.float64)
        if not np.all(np.isfinite(y)):
            raise InvalidParameterError("labels must be finite (no NaN or inf)")
        flat = np.ascontiguousarray(y.reshape(-1))
        return kernels.bin_index(flat, self.thresholds).reshape(y.shape)

    def randomize(self, labels: np.ndarray, rng: Rng) -> np.ndarray:
        """One epsilon-DP output per label (Algorithm 1), each among ``output_values``.

        One exactly uniform integer v in [0, D) per label: keep Phi(y) if v < K, else take the
        ((v - K) // O)-th of the other d - 1 outputs (see :func:`response_weights`). No float is
        compared, so no rounding can shift the odds. A numpy Generator (tests) gives the draws
        through ``rng.integers(0, D)``; the OS CSPRNG through :func:`_respond_from_csprng`, which
        fuses the bin lookup, the rejection sampling of the words and the response in one pass
        and draws exactly the words it uses. Both realise the same distribution, and from the
        same words the CSPRNG path gives what ``SystemRandom.integers`` then
        :func:`shared.mechanisms._bins_kernels.respond_draws` would, output for output.
        """
        if not isinstance(rng, np.random.Generator | SystemRandom):
            raise InvalidParameterError(
                f"rng must be a numpy Generator or shared.rng.SystemRandom, got {rng!r}"
            )
        y = np.ascontiguousarray(check_labels(labels))
        if self.d == 1:
            return np.full(y.size, self.output_values[0])
        keep, other, total = response_weights(self.d, self.epsilon)
        if isinstance(rng, SystemRandom):
            return _respond_from_csprng(self, y, rng, (keep, other, total))
        draws = np.ascontiguousarray(rng.integers(0, total, size=y.size), dtype=np.int64)
        return kernels.respond_draws(
            y, self.thresholds, self.output_values, draws, np.uint64(keep), np.uint64(other)
        )

    def output_probabilities(self, y: np.ndarray | float) -> np.ndarray:
        """P(output = output_values[j] | label y): shape (d,) for a scalar, (n, d) for n labels."""
        labels = np.asarray(y, dtype=np.float64)
        if labels.ndim > 1:
            raise InvalidParameterError(f"y must be a scalar or 1-D, got shape {labels.shape}")
        index = self.phi(labels)
        probs = np.full((*labels.shape, self.d), self.other_probability)
        np.put_along_axis(probs, index[..., None], self.keep_probability, axis=-1)
        return probs

    def expected_loss(self, values: np.ndarray, probs: np.ndarray, loss: str = "squared") -> float:
        """E loss(output, y) for y drawn from the discrete prior (values, probs), exactly."""
        v, p = check_discrete_prior(values, probs, sorted_values=False)
        v, p = v[p > 0], p[p > 0]  # a massless label adds nothing, even where its loss is inf
        matrix = self.output_probabilities(v)
        losses = pointwise_loss(loss, self.output_values[None, :], v[:, None])
        with np.errstate(invalid="ignore"):  # 0 * inf: an impossible output costs nothing
            terms = np.where(matrix > 0.0, matrix * losses, 0.0)
        return float(np.dot(p, terms.sum(axis=1)))

    def output_probability(self, outputs: np.ndarray, y: np.ndarray) -> np.ndarray:
        """P(output = v | label y) for output values v (0 for a value it never outputs)."""
        values = np.asarray(outputs, dtype=np.float64)
        slot = np.clip(np.searchsorted(self.output_values, values), 0, self.d - 1)
        valid = self.output_values[slot] == values
        kept = slot == self.phi(y)
        return np.where(valid, np.where(kept, self.keep_probability, self.other_probability), 0.0)

    def conditional_moments(self, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """E[output | y] and Var(output | y): output v_Phi(y) with probability keep, each other
        output with probability other, so the mean is other sum(v) + (keep - other) v_Phi(y)
        and the second moment other sum(v^2) + (keep - other) v_Phi(y)^2."""
        v = self.output_values
        keep, other = self.keep_probability, self.other_probability
        chosen = v[self.phi(np.asarray(y, dtype=np.float64))]
        mean = other * v.sum() + (keep - other) * chosen
        second = other * float(np.dot(v, v)) + (keep - other) * chosen**2
        return mean, np.maximum(second - mean**2, 0.0)

    def breakpoints(self) -> np.ndarray:
        """The moments are constant between thresholds."""
        return np.asarray(self.thresholds, dtype=np.float64)

    def expected_squared_error(self, prior: Prior) -> float:
        """E[(output - y)^2] for y uniform within each cell of the histogram ``prior``.

        For bins cut at the prior's cell edges (``optimal_bins_for_prior``) Phi is constant on
        each cell, so E[(o - y)^2] = E[(o - midpoint)^2] + width^2 / 12: the cross term vanishes
        because o depends on y only through the cell.
        """
        within_cell = float(np.dot(prior.probs, np.diff(prior.edges) ** 2) / 12.0)
        return float(self.expected_loss(prior.midpoints, prior.probs)) + within_cell

    def affine_expectation(self) -> tuple[float, float]:
        """(a, b) with E[output | y] = a * output_values[Phi(y)] + b, for debiasing."""
        keep, other = self.keep_probability, self.other_probability
        return keep - other, other * float(self.output_values.sum())

    def public_params(self) -> dict[str, Any]:
        """Everything a receiver needs to interpret the outputs (JSON-safe)."""
        return {
            "mechanism": MECHANISM_NAME,
            "epsilon": float(self.epsilon),
            "thresholds": [float(t) for t in self.thresholds],
            "output_values": [float(o) for o in self.output_values],
        }

    @classmethod
    def from_params(cls, d: dict[str, Any]) -> RROnBins:
        """Inverse of :meth:`public_params` (validates like the constructor)."""
        if not isinstance(d, dict):
            raise InvalidParameterError(f"RR-on-Bins params must be a dict, got {type(d).__name__}")
        expected = {"epsilon", "thresholds", "output_values"}
        keys = set(d) - {"mechanism"}
        if keys != expected:
            raise InvalidParameterError(
                f"RR-on-Bins params need exactly {sorted(expected)} (and optionally 'mechanism'), "
                f"got {sorted(d)}"
            )
        if d.get("mechanism", MECHANISM_NAME) != MECHANISM_NAME:
            raise InvalidParameterError(f"mechanism ({d['mechanism']!r}) is not {MECHANISM_NAME!r}")
        return cls(
            thresholds=d["thresholds"], output_values=d["output_values"], epsilon=d["epsilon"]
        )


@dataclass(frozen=True, kw_only=True)
class _Support:
    """The prior restricted to its positive-mass values, with the kernels' prefix sums."""

    index: np.ndarray  # positions of the support in the full value array
    x: np.ndarray  # support values as value * 2^-exponent - shift
    exponent: int  # power-of-two scaling: exact, and |value * 2^-exponent| < 1
    shift: float
    prefix: tuple[np.ndarray, np.ndarray, np.ndarray]  # P0, P1, P2
    q: float  # e^-eps
    omq: float  # 1 - e^-eps, without cancellation
    code: int

    @property
    def k(self) -> int:
        return int(self.x.size)

    def to_label(self, x: float) -> float:
        """Inverse of the value transform."""
        return float(np.ldexp(x + self.shift, self.exponent))

    def args(self) -> kernels.Support:
        return (self.x, *self.prefix, self.q, self.omq, self.code)


def _support(values: np.ndarray, probs: np.ndarray, *, epsilon: float, loss: str) -> _Support:
    index = np.flatnonzero(probs > 0)
    p = probs[index]
    p = p / p.sum()
    v = values[index]
    # Squared and absolute loss are translation invariant: centring the values keeps the
    # prefix sums of p x and p x^2 small, so bin costs lose fewer digits to cancellation; and
    # scaling by a power of two keeps x^2 finite for huge labels. Every loss here is scale
    # equivariant (Poisson up to a term in y alone, which no choice of bins changes), so the
    # optimal bins are the same and the outputs scale back exactly.
    exponent = math.frexp(float(np.abs(v).max()))[1]
    scaled = np.ldexp(v, -exponent)
    shift = float(np.dot(p, scaled)) if loss != "poisson" else 0.0
    x = np.ascontiguousarray(scaled - shift)
    prefix = tuple(np.concatenate(([0.0], np.cumsum(p * x**power))) for power in (0, 1, 2))
    return _Support(
        index=index,
        x=x,
        exponent=exponent,
        shift=shift,
        prefix=prefix,
        q=math.exp(-epsilon),
        omq=-math.expm1(-epsilon),
        code=LOSSES[loss],
    )


def _backtrack(start: np.ndarray) -> np.ndarray:
    """Bin starts (increasing, first 0) from the last-bin starts of every prefix."""
    starts = []
    i = start.size - 1
    while i > 0:
        i = int(start[i])
        starts.append(i)
    return np.array(starts[::-1], dtype=np.int64)


def _partition_loss(s: _Support, starts: np.ndarray) -> float:
    ends = np.append(starts[1:], s.k) - 1
    cost = sum(
        kernels.bin_cost(int(a), int(b), s.args())[0] for a, b in zip(starts, ends, strict=True)
    )
    return cost / (1.0 + (starts.size - 1) * s.q)


def _dinkelbach(s: _Support) -> np.ndarray:
    """Bin starts of the loss-minimising partition over any number of bins (exact)."""
    starts = np.zeros(1, dtype=np.int64)
    best = _partition_loss(s, starts)
    for _ in range(s.k + 1):  # the bin counts strictly decrease, so this bound is never hit
        start, total, count = kernels.penalised_partition(s.args(), best * s.q)
        loss = float(total[-1]) / (1.0 + (int(count[-1]) - 1) * s.q)
        if not loss < best:
            break
        best = loss
        starts = _backtrack(start)
    return starts


def _capped(s: _Support, max_bins: int) -> np.ndarray:
    """Bin starts of the best partition into at most ``max_bins`` bins (Algorithm 2)."""
    n_layers = min(max_bins, s.k)
    total, start = kernels.layered_partition(s.args(), n_layers)
    counts = np.arange(1, n_layers + 1)
    losses = total[-1, 1:] / (1.0 + (counts - 1) * s.q)
    d = int(np.argmin(losses)) + 1  # first minimum: fewest bins among ties
    starts = []
    i = s.k
    for j in range(d, 0, -1):
        i = int(start[i, j])
        starts.append(i)
    return np.array(starts[::-1], dtype=np.int64)


def _outputs(s: _Support, starts: np.ndarray, values: np.ndarray) -> np.ndarray:
    ends = np.append(starts[1:], s.k) - 1
    outputs = np.empty(starts.size)
    # A weighted mean lies between the extreme support values; rounding must not push it out.
    lowest, highest = values[s.index[0]], values[s.index[-1]]
    for j, (a, b) in enumerate(zip(starts, ends, strict=True)):
        _, center, median = kernels.bin_cost(int(a), int(b), s.args())
        # An absolute-loss output is a prior value: return it exactly, not mapped back.
        mean = min(max(s.to_label(center), lowest), highest)
        outputs[j] = values[s.index[median]] if median >= 0 else mean
    return outputs


def _merge_ties(s: _Support, starts: np.ndarray, values: np.ndarray) -> tuple:
    """Merge adjacent bins whose outputs do not increase (possible only in exact ties).

    In an optimal partition every positive-mass label is mapped to a nearest output, which for
    these losses forces strictly increasing outputs, except when merging two bins with equal
    outputs c loses nothing (then the merge costs q V(c) less and removes q from the
    denominator, where V(c) >= the optimal loss): so merging keeps the optimum.
    """
    outputs = _outputs(s, starts, values)
    while outputs.size > 1 and np.any(np.diff(outputs) <= 0):
        j = int(np.flatnonzero(np.diff(outputs) <= 0)[0]) + 1
        starts = np.delete(starts, j)
        outputs = _outputs(s, starts, values)
    return starts, outputs


def _cut_positions(
    s: _Support, starts: np.ndarray, outputs: np.ndarray, values: np.ndarray, loss: str
) -> np.ndarray:
    """Positions t in the full value array where bin j + 1 begins (j = 0 .. d-2).

    Zero-mass values between two bins' support cost nothing wherever they go, so each goes to the
    bin whose output has the lower loss for it (ties to the lower bin): labels there, which the
    prior says are rare but may exist, get the better output. For these losses
    loss(c_j, v) - loss(c_{j+1}, v) increases with v, so this is a single cut.
    """
    cuts = np.empty(starts.size - 1, dtype=np.int64)
    for j in range(starts.size - 1):
        lo = int(s.index[starts[j + 1] - 1]) + 1  # just after the last support value of bin j
        hi = int(s.index[starts[j + 1]])  # the first support value of bin j + 1
        gap = values[lo:hi]
        if loss == "poisson":
            prefers_next = pointwise_loss(loss, outputs[j + 1], gap) < pointwise_loss(
                loss, outputs[j], gap
            )
        else:  # both losses increase with the distance, which cannot overflow like its square
            prefers_next = np.abs(outputs[j + 1] - gap) < np.abs(gap - outputs[j])
        cuts[j] = lo + int(np.argmax(prefers_next)) if prefers_next.any() else hi
    return cuts


def _midpoint_thresholds(values: np.ndarray, cuts: np.ndarray) -> np.ndarray:
    below, above = values[cuts - 1], values[cuts]
    middle = below / 2.0 + above / 2.0  # no overflow for huge values
    # For adjacent floats the midpoint can round down onto `below`; `above` still separates.
    return np.where(middle > below, middle, above)


def _optimal(
    values: np.ndarray,
    probs: np.ndarray,
    *,
    epsilon: float,
    loss: str,
    max_bins: int | None,
    edges: np.ndarray | None = None,
) -> RROnBins:
    v, p = check_discrete_prior(values, probs)
    eps = check_epsilon(epsilon)
    name = check_loss(loss)
    cap = check_max_bins(max_bins)
    if name == "poisson" and v[0] < 0:
        raise InvalidParameterError(f"poisson loss needs values >= 0, got min {v[0]!r}")
    s = _support(v, p, epsilon=eps, loss=name)
    starts = _dinkelbach(s)
    if cap is not None and starts.size > cap:
        starts = _capped(s, cap)
    starts, outputs = _merge_ties(s, starts, v)
    cuts = _cut_positions(s, starts, outputs, v, name)
    thresholds = edges[cuts] if edges is not None else _midpoint_thresholds(v, cuts)
    return RROnBins(thresholds=thresholds, output_values=outputs, epsilon=eps)


def optimal_bins(
    values: np.ndarray,
    probs: np.ndarray,
    *,
    epsilon: float,
    loss: str = "squared",
    max_bins: int | None = None,
) -> RROnBins:
    """The RR-on-Bins mechanism with the least expected ``loss`` under the prior (values, probs).

    Implements Ghazi et al. Algorithm 2 with Appendix B's amortised O(1) bin costs, solved over
    every bin count at once by Dinkelbach's method (module docstring); by Theorem 5 the result
    is optimal among all epsilon-DP mechanisms for this prior. ``values`` are the k possible
    labels (strictly increasing), ``probs`` their masses; ``max_bins`` (default None, no cap)
    limits the number of outputs. Thresholds cut halfway between the last value of a bin and
    the first of the next. Choosing the bins is post-processing of the prior: no privacy cost.
    """
    return _optimal(values, probs, epsilon=epsilon, loss=loss, max_bins=max_bins)


def optimal_bins_for_prior(
    prior: Prior, *, epsilon: float, loss: str = "squared", max_bins: int | None = None
) -> RROnBins:
    """:func:`optimal_bins` on a histogram prior: values are cell midpoints, cuts are cell edges."""
    if not isinstance(prior, Prior):
        raise InvalidParameterError(f"prior must be a Prior, got {type(prior).__name__}")
    return _optimal(
        prior.midpoints,
        prior.probs,
        epsilon=epsilon,
        loss=loss,
        max_bins=max_bins,
        edges=prior.edges,
    )


# --------------------------------------------------------------------- the family
# RR-on-Bins candidates of ``mechanism="auto"``: optimal bins capped at these counts (None: the
# uncapped optimum).
RR_CAPS: tuple[int | None, ...] = (None, 1, 2, 4, 8, 16, 32)


def _caps(max_bins: int | None) -> tuple[int | None, ...]:
    if max_bins is None:
        return RR_CAPS
    return tuple(sorted({c for c in RR_CAPS if c is not None and c < max_bins} | {max_bins}))


def candidates(
    prior: Prior, *, epsilon: float, loss: str = "squared", max_bins: int | None = None
) -> list[RROnBins]:
    """What ``mechanism="auto"`` compares: the optimal bins for ``loss`` capped at each of
    ``RR_CAPS`` (or at most ``max_bins``), without duplicates; a candidate not realisable at this
    epsilon is skipped (that depends on the prior only)."""
    check_loss(loss)
    attempts = (
        partial(optimal_bins_for_prior, prior, epsilon=epsilon, loss=loss, max_bins=cap)
        for cap in _caps(check_max_bins(max_bins))
    )
    return registry.realisable(
        attempts, key=lambda m: (m.thresholds.tobytes(), m.output_values.tobytes())
    )


registry.register(
    registry.MechanismFamily(
        name=MECHANISM_NAME,
        mechanism_type=RROnBins,
        options=frozenset({"loss", "max_bins"}),
        build=optimal_bins_for_prior,  # the least-label-loss optimal bins (Theorem 5)
        candidates=candidates,
        from_params=RROnBins.from_params,
        option_specs={
            "loss": registry.OptionSpec(
                kind="string", choices=("squared", "absolute", "poisson"), description="RR-on-Bins"
            ),
            "max_bins": registry.OptionSpec(
                kind="integer", ge=1, le=MAX_BINS, description="RR-on-Bins cap"
            ),
        },
    )
)
