"""Steps of the job, cut at collectives: the seam where the per-trace step model will plug in.

Today a step is one period of the repeating sequence of collectives: every collective is a
point where all ranks meet, and a training or decode step issues the same collectives in the
same order each time. :func:`job_steps` is the only place that decides where steps are; the
rules read :class:`JobSteps` and never cut steps themselves.

The seam: when each rank's trace carries its own step model and time budget (the per-trace
analysis in ``nsys_rules.analysis``), :class:`~nsys_rules.model.job.extract.RankData` will carry those
steps (start/end on the rank's clock, and the budget per step), and :func:`job_steps` will take
them and match them across ranks by order instead of calling :func:`collective_period`. The
rules then see the same :class:`JobSteps`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Share of positions that must repeat for a period to count as the step's pattern.
PERIOD_AGREEMENT = 0.9


@dataclass(frozen=True)
class JobSteps:
    """Steps as ranges of the ordered collectives.

    Step k runs from the end of collective ``bounds[k]`` to the end of collective
    ``bounds[k + 1]`` (indices into the collectives in job-time order), so it holds the
    collectives ``bounds[k] + 1 .. bounds[k + 1]``.
    """

    bounds: np.ndarray
    period: int
    source: str

    @property
    def count(self) -> int:
        """Number of complete steps."""
        return max(0, len(self.bounds) - 1)

    def step_of(self, collective: np.ndarray) -> np.ndarray:
        """Step number of each collective index (-1 before the first step or after the last)."""
        step = np.searchsorted(self.bounds, np.asarray(collective), side="left") - 1
        return np.where((step >= 0) & (step < self.count), step, -1)


def collective_period(sequence: np.ndarray, agreement: float = PERIOD_AGREEMENT) -> int:
    """The shortest period p with ``sequence[i] == sequence[i + p]`` for ``agreement`` of positions.

    1 when every collective is the same one (each is a step), and when nothing repeats (then
    every collective is still a point where all ranks meet).
    """
    n = len(sequence)
    for p in range(1, n // 2 + 1):
        same = sequence[p:] == sequence[:-p]
        if len(same) and float(same.mean()) >= agreement:
            return p
    return 1


def job_steps(key_sequence: np.ndarray) -> JobSteps:
    """Steps of a job from its collectives' keys in job-time order (see the module docstring)."""
    period = collective_period(np.asarray(key_sequence))
    n = len(key_sequence)
    if n < 2:
        return JobSteps(np.zeros(0, np.int64), period, "too few collectives to cut steps")
    # A step ends with the last collective of its period.
    bounds = np.arange(period - 1, n, period, dtype=np.int64)
    what = "every collective" if period == 1 else f"every {period} collectives (the repeating pattern)"
    return JobSteps(bounds, period, f"collectives: a step ends at {what}")
