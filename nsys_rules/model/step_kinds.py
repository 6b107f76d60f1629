"""Steps of different kinds in one loop: structurally different steps that recur, told apart by their kernel count.

A serving loop prefills a new prompt every few steps and decodes otherwise (twice the kernels,
twice the time); a training loop with gradient accumulation runs an optimizer step every few
micro-steps; a loop may interleave evaluation. Such steps are the loop's own design, not
outliers: each kind gets its own count, median and share of the steady state. A kind needs
evidence in the steps' structure: a kernel count well apart from the usual step's, the same
count (within a tenth) in every step of the kind, at least two such steps, and no one-off cost
in them (a module load or a graph capture makes a step a compile, not a kind).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: A step's kernel count differs from the usual step's by this share (or :data:`MIN_KERNELS`) to be of another kind.
KIND_SHARE = 0.25
MIN_KERNELS = 4
#: The steps of one kind agree on their kernel count within this share.
SAME_SHARE = 0.1


@dataclass(frozen=True)
class StepKind:
    """One kind of step: which steady steps (0-based), their kernel count and times."""

    steps: np.ndarray
    kernels: int  # median kernel launches per step
    median_ns: int
    total_ns: int
    period: int = 0  # the regular spacing of its steps, 0 when irregular

    def describe(self, total_ns: int) -> str:
        """``'6 steps of 1300 kernels (every 8 steps), median 31.00 ms, 24.0 % of the steady state'``."""
        every = f" (every {self.period} steps)" if self.period else ""
        share = 100.0 * self.total_ns / total_ns if total_ns else 0.0
        return (f"{len(self.steps)} steps of {self.kernels} kernels{every}, median {self.median_ns / 1e6:.2f} ms, "
                f"{share:.1f} % of the steady state")


def step_kinds(kernels: np.ndarray, durations: np.ndarray, one_off: np.ndarray) -> list[StepKind]:
    """The loop's kinds of step, the usual kind first; empty when the steps are of one kind.

    ``kernels``: kernel launches per step; ``durations``: step times (ns); ``one_off``: steps that
    pay a one-time cost (module loads, graph captures), never a kind of their own.
    """
    n = len(kernels)
    if n < 4 or len(durations) != n or len(one_off) != n:
        return []
    usual = float(np.median(kernels))
    apart = np.abs(kernels - usual) > max(KIND_SHARE * usual, MIN_KERNELS)
    apart &= ~one_off.astype(bool)
    other = np.flatnonzero(apart)
    if len(other) < 2 or 2 * len(other) > n:
        return []
    middle = float(np.median(kernels[other]))
    if np.any(np.abs(kernels[other] - middle) > SAME_SHARE * max(middle, 1)):
        return []  # other steps of several sizes: variation, not a second kind
    main = np.flatnonzero(~apart)
    return [_kind(main, kernels, durations), _kind(other, kernels, durations)]


def _kind(steps: np.ndarray, kernels: np.ndarray, durations: np.ndarray) -> StepKind:
    gaps = np.diff(steps)
    period = int(gaps[0]) if len(gaps) >= 2 and (gaps == gaps[0]).all() and gaps[0] > 1 else 0
    return StepKind(steps, int(np.median(kernels[steps])), int(np.median(durations[steps])),
                    int(durations[steps].sum()), period)
