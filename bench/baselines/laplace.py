"""The Laplace mechanism on clipped labels, with or without clipping its output to the bounds.

Implements Dwork, McSherry, Nissim & Smith 2006 as used by Ghazi et al. 2022 (RR-on-Bins paper),
Appendix D, Definition 23: y~ = clip(y, lo, hi) + Lap((hi - lo) / epsilon); with
``clip_output=True`` the result is clipped to [lo, hi] again (Appendix F, "label clipping").

Privacy: clipped labels differ by at most hi - lo, and the Laplace density with scale
b = (hi - lo) / epsilon changes by at most a factor exp(|y - y'| / b) <= e^epsilon under such a
shift, so the noisy label is epsilon-DP; clipping the output is post-processing (its atoms at lo
and hi are tails of the same density, whose ratio is bounded the same way).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from bench.baselines._common import (
    AdditiveNoise,
    check_bool,
    check_domain,
    check_eps,
    clipped_labels,
    exponential_draws,
    signs,
)
from shared.rng import Rng


@dataclass(frozen=True, kw_only=True)
class Laplace(AdditiveNoise):
    """y~ = clip(y) + Lap((hi - lo) / epsilon), optionally clipped to [lo, hi] afterwards.

    ``clip_output=False`` is unbiased for labels inside the bounds (E[y~ | y] = y) and unbounded;
    ``clip_output=True`` (the RR-on-Bins paper's choice) is bounded and biased towards the middle.
    """

    epsilon: float
    lo: float
    hi: float
    clip_output: bool = True

    pure_dp: ClassVar[bool] = True
    MECHANISM = "laplace"
    PUBLIC = ("epsilon", "lo", "hi", "clip_output", "scale")

    def __post_init__(self) -> None:
        domain = check_domain(self.lo, self.hi)
        object.__setattr__(self, "epsilon", check_eps(self.epsilon))
        object.__setattr__(self, "lo", domain.lo)
        object.__setattr__(self, "hi", domain.hi)
        object.__setattr__(self, "clip_output", check_bool(self.clip_output, name="clip_output"))

    @property
    def scale(self) -> float:
        """Laplace scale b = (hi - lo) / epsilon (sensitivity over epsilon)."""
        return (self.hi - self.lo) / self.epsilon

    def noise_density(self, x: np.ndarray | float) -> np.ndarray:
        b = self.scale
        return np.exp(-np.abs(x) / b) / (2.0 * b)

    def noise_tail(self, s: np.ndarray | float) -> np.ndarray:
        return 0.5 * np.exp(-np.asarray(s, dtype=np.float64) / self.scale)

    def randomize(self, labels: np.ndarray | list[float], rng: Rng) -> np.ndarray:
        """One noisy label per label (inverse-CDF Laplace noise from rng.random)."""
        y = clipped_labels(labels, check_domain(self.lo, self.hi))
        noise = self.scale * exponential_draws(rng, y.size) * signs(rng, y.size)
        out = y + noise
        return np.clip(out, self.lo, self.hi) if self.clip_output else out
