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

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from bench.baselines._common import (
    additive_density,
    boundary_atoms,
    check_bool,
    check_domain,
    check_eps,
    clipped_labels,
    exponential_draws,
    signs,
)
from shared.rng import Rng


@dataclass(frozen=True, kw_only=True)
class Laplace:
    """y~ = clip(y) + Lap((hi - lo) / epsilon), optionally clipped to [lo, hi] afterwards.

    ``clip_output=False`` is unbiased for labels inside the bounds (E[y~ | y] = y) and unbounded;
    ``clip_output=True`` (the RR-on-Bins paper's choice) is bounded and biased towards the middle.
    """

    epsilon: float
    lo: float
    hi: float
    clip_output: bool = True

    pure_dp: ClassVar[bool] = True

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

    @property
    def output_range(self) -> tuple[float, float]:
        return (self.lo, self.hi) if self.clip_output else (-math.inf, math.inf)

    def randomize(self, labels: np.ndarray | list[float], rng: Rng) -> np.ndarray:
        """One noisy label per label (inverse-CDF Laplace noise from rng.random)."""
        y = clipped_labels(labels, check_domain(self.lo, self.hi))
        noise = self.scale * exponential_draws(rng, y.size) * signs(rng, y.size)
        out = y + noise
        return np.clip(out, self.lo, self.hi) if self.clip_output else out

    def density(self, y_tilde: np.ndarray | float, y: np.ndarray | float) -> np.ndarray:
        """Density of the continuous part of the output law (0 outside [lo, hi] if clipped)."""
        b = self.scale
        return additive_density(
            lambda x: np.exp(-np.abs(x) / b) / (2.0 * b),
            y_tilde,
            y,
            lo=self.lo,
            hi=self.hi,
            clip_output=self.clip_output,
        )

    def atoms(self, y: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:
        """(atom values, P(y~ = atom | y) with shape (n, atoms)): [lo, hi] if clipped, else none."""
        b = self.scale
        return boundary_atoms(
            lambda s: 0.5 * np.exp(-s / b), y, lo=self.lo, hi=self.hi, clip_output=self.clip_output
        )

    def affine_expectation(self) -> tuple[float, float] | None:
        """(1, 0) without output clipping (for labels inside the bounds); None when clipped."""
        return None if self.clip_output else (1.0, 0.0)

    def public_params(self) -> dict[str, Any]:
        return {
            "mechanism": "laplace",
            "epsilon": self.epsilon,
            "lo": self.lo,
            "hi": self.hi,
            "clip_output": self.clip_output,
            "scale": self.scale,
        }
