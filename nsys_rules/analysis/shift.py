"""The change of a median between two sets of runs, with an interval that knows the noise.

Each side of a comparison is one or more runs of a program; each run is a series of step values
(time per step, or one part of it). The question is how much the *median step* moved, and how sure
that is. Two sources of noise matter:

- **in-run**: the steps of one run scatter around its median. The steps are resampled with
  replacement within each run (a bootstrap with a fixed seed, so a report is deterministic) and
  each resample's median taken: the spread of those medians is how well one run pins its own
  median down.
- **between runs**: a second run of the same program does not land on the same median (a host
  thread on another core, another clock, the allocator's state). With two or more runs on a side
  this is measured from the runs' medians (their spread around their side's mean, pooled over both
  sides, less what the in-run noise alone explains) and enters every resample as a run-level
  effect drawn from a Student t with the runs' degrees of freedom, so few runs give a wide
  interval. With a single run per side it cannot be measured; the caller states what to assume
  (``assumed_between``), and the interval says so (:attr:`Shift.between_measured`).

A side's estimate is the mean of its runs' medians; the change is NEW's minus BASE's; the
interval is the percentile interval of the resampled changes. The effect size is the change in
units of the steps' in-run spread (a robust standard deviation, 1.4826 x the median absolute
deviation, pooled over the runs). :func:`verdict` turns an interval into ``faster``, ``slower``,
``no change`` or ``inconclusive``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

#: Resamples per comparison: enough for a stable 95 % percentile interval, cheap on 2 cores.
RESAMPLES = 1000
#: The bootstrap's fixed seed: the same inputs give the same interval.
SEED = 20240611
#: Bootstrap draws held at once (resamples x steps), so a run of 100,000 steps costs tens of MB, not GB.
_CHUNK = 2_000_000
#: Runs longer than this resample their median's rank from its normal limit instead of drawing every step.
LONG_RUN = 300
#: Scales a median absolute deviation to a standard deviation for normal noise.
_MAD_SD = 1.4826


@dataclass(frozen=True)
class Shift:
    """How one series' median moved from BASE to NEW, with its interval (all in the series' unit)."""

    base: float
    new: float
    estimate: float
    low: float
    high: float
    #: The estimate in units of the pooled in-run spread (None when the steps do not spread at all).
    effect_size: float | None
    #: In-run spread (robust standard deviation of the steps) of each side, pooled over its runs.
    base_spread: float
    new_spread: float
    #: Standard deviation of a run's median between runs: measured, or the stated assumption.
    between_run: float
    between_measured: bool

    def pct(self, value: float) -> float | None:
        """``value`` as a percent of BASE's median; None when BASE is zero (the work is new)."""
        return 100.0 * value / self.base if self.base else None

    @property
    def estimate_pct(self) -> float | None:
        """The change in percent of BASE."""
        return self.pct(self.estimate)

    @property
    def low_pct(self) -> float | None:
        """The interval's lower end in percent of BASE."""
        return self.pct(self.low)

    @property
    def high_pct(self) -> float | None:
        """The interval's upper end in percent of BASE."""
        return self.pct(self.high)


def robust_spread(values: np.ndarray) -> np.ndarray:
    """Robust standard deviation of each row (1.4826 x MAD); the plain one where half the values are equal."""
    values = np.atleast_2d(np.asarray(values, float))
    if values.shape[1] == 0:
        return np.zeros(values.shape[0])
    mad = _MAD_SD * np.median(np.abs(values - np.median(values, axis=1, keepdims=True)), axis=1)
    return np.where(mad > 0, mad, values.std(axis=1))


def median_shifts(base_runs: Sequence[np.ndarray], new_runs: Sequence[np.ndarray],
                  assumed_between: tuple[np.ndarray, np.ndarray] | None = None, level: float = 0.95,
                  resamples: int = RESAMPLES, seed: int = SEED) -> list[Shift]:
    """The change of the median of each series from BASE's runs to NEW's (see the module docstring).

    Each run is an array of shape (series, steps): row ``i`` of every run is the same quantity
    (time per step, GPU time per step, ...), resampled jointly so the rows stay consistent.
    ``assumed_between``: per side, per series, the standard deviation of a run's median between
    runs to assume when no side has two runs (zeros when None).
    """
    if not base_runs or not new_runs:
        raise ValueError("each side needs at least one run")
    rows = np.atleast_2d(base_runs[0]).shape[0]
    rng = np.random.default_rng(seed)
    sides = [_side([np.atleast_2d(np.asarray(r, float)) for r in runs], rows, resamples, rng)
             for runs in (base_runs, new_runs)]
    (b_med, b_boot, b_var, b_spread), (n_med, n_boot, n_var, n_spread) = sides
    k_b, k_n = len(base_runs), len(new_runs)
    freedom = (k_b - 1) + (k_n - 1)
    if freedom:
        squares = ((b_med - b_med.mean(axis=0)) ** 2).sum(axis=0) + ((n_med - n_med.mean(axis=0)) ** 2).sum(axis=0)
        # What the in-run noise alone makes the runs' medians scatter by is no between-run effect.
        in_run = np.concatenate([v for v, k in ((b_var, k_b), (n_var, k_n)) if k > 1]).mean(axis=0)
        between = np.sqrt(np.maximum(0.0, squares / freedom - in_run))
        draws = rng.standard_t(freedom, resamples)
        effect = np.outer(between * np.sqrt(1 / k_b + 1 / k_n), draws)
        between_b = between_n = between
    else:
        between_b, between_n = (np.zeros(rows), np.zeros(rows)) if assumed_between is None else \
            (np.asarray(assumed_between[0], float), np.asarray(assumed_between[1], float))
        effect = np.outer(np.sqrt(between_b ** 2 + between_n ** 2), rng.standard_normal(resamples))
    changes = n_boot - b_boot + effect
    tail = 100.0 * (1.0 - level) / 2.0
    low, high = np.percentile(changes, [tail, 100.0 - tail], axis=1)
    base, new = b_med.mean(axis=0), n_med.mean(axis=0)
    estimate = new - base
    # The interval holds the estimate: a percentile interval of a skewed median can miss it by a hair.
    low, high = np.minimum(low, estimate), np.maximum(high, estimate)
    # A series that is never negative (a time) cannot drop below zero: the normal run effect would say it could.
    never_negative = np.all([np.all(np.atleast_2d(r) >= 0, axis=1) for r in (*base_runs, *new_runs)], axis=0)
    low = np.where(never_negative, np.maximum(low, -base), low)
    pooled = np.sqrt((b_spread ** 2 + n_spread ** 2) / 2.0)
    out = []
    for i in range(rows):
        size = float(estimate[i] / pooled[i]) if pooled[i] > 0 else None
        out.append(Shift(float(base[i]), float(new[i]), float(estimate[i]), float(low[i]), float(high[i]), size,
                         float(b_spread[i]), float(n_spread[i]),
                         float(max(between_b[i], between_n[i])), bool(freedom)))
    return out


def step_median(values: np.ndarray, axis: int = -1) -> np.ndarray:
    """The median as every report prints the typical step: the lower of the two middle values for an even count,
    so it is a step that ran (``np.median`` would average two steps: decode_eager's 24 steps gave 4.56 ms where the
    check's budget, its table and its JSON said 4.54 ms)."""
    return np.quantile(values, 0.5, axis=axis, method="lower")


def _side(runs: list[np.ndarray], rows: int, resamples: int,
          rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per run medians (runs, series); the side's resampled estimate (series, resamples); each run's
    variance of its resampled median (runs, series); the pooled in-run spread (series,)."""
    medians = np.stack([step_median(r, axis=1) if r.shape[1] else np.zeros(rows) for r in runs])
    boot = np.zeros((rows, resamples))
    variance = np.zeros((len(runs), rows))
    spread = np.zeros(rows)
    for j, run in enumerate(runs):
        if run.shape[0] != rows:
            raise ValueError("every run needs the same series")
        drawn = _resampled_medians(run, resamples, rng)
        boot += drawn
        variance[j] = drawn.var(axis=1)
        spread += robust_spread(run) ** 2
    return medians, boot / len(runs), variance, np.sqrt(spread / len(runs))


def _resampled_medians(run: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """(series, resamples): the median of each series over the same resampled steps.

    Up to :data:`LONG_RUN` steps the steps are drawn; a longer run's resampled median is the sorted
    series at a rank drawn from its normal limit (mean n/2, standard deviation sqrt(n)/2), which costs
    a sort instead of resamples x steps draws.
    """
    rows, steps = run.shape
    out = np.zeros((rows, resamples))
    if steps == 0:
        return out
    if steps > LONG_RUN:
        ranks = np.clip(np.rint((steps - 1) / 2 + rng.standard_normal(resamples) * np.sqrt(steps) / 2), 0, steps - 1)
        return np.sort(run, axis=1)[:, ranks.astype(np.int64)]
    chunk = max(1, _CHUNK // steps)
    for start in range(0, resamples, chunk):
        size = min(chunk, resamples - start)
        idx = rng.integers(0, steps, size=(size, steps))
        for i in range(rows):
            out[i, start:start + size] = step_median(run[i][idx], axis=1)
    return out


def verdict(shift: Shift, margin_pct: float, reference: float | None = None) -> str:
    """``no change`` when the interval lies within +-``margin_pct`` percent of BASE's median, ``slower``/``faster``
    when it excludes zero, else ``inconclusive`` (for series where larger is slower: times).

    ``reference``: the whole a part belongs to (the step). An interval that holds zero and lies within
    +-``margin_pct`` percent of it is ``no change`` too: a part whose few microseconds are uncertain
    by half did not move a step of milliseconds.
    """
    if shift.base <= 0:  # BASE had none of it
        return "slower" if shift.low > 0 else "faster" if shift.high < 0 else "no change"
    margin = margin_pct / 100.0 * shift.base
    if -margin <= shift.low and shift.high <= margin:
        return "no change"
    if shift.low > 0:
        return "slower"
    if shift.high < 0:
        return "faster"
    whole = margin_pct / 100.0 * (reference or 0.0)
    return "no change" if -whole <= shift.low and shift.high <= whole else "inconclusive"
