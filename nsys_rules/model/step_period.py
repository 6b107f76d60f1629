"""The fourth way a step shows (see :mod:`.step_detectors`): the period of the whole kernel sequence.

When nothing else marks the steps (no step range, graph launch or per-step sync), a loop still
launches the same kernels in the same order every step; the period of that sequence is a step
when something shows where one repetition ends.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from nsys_rules.model.trace import Trace
from nsys_rules.model.activity import KERNEL, GpuOps, kernel_symbols
from nsys_rules.model.step_runs import Bound, Found, periodic_run


def kernel_steps(trace: Trace, ops: GpuOps, bound: Bound) -> Found | str:
    """The repeating kernel sequence, when something marks where one repetition ends.

    The kernel (name and launch configuration) whose evenly spaced launches cover the most of
    the sequence gives the period. A layer repeats as regularly as a step does, so the period is
    accepted only with evidence that it is a whole step: it holds several copies of a shorter
    block (layers), or the host pauses at one point of every period and nowhere else as long
    (the loop's own work between steps).
    """
    mask = (ops.kind == KERNEL) & (ops.launch >= bound.lo) & (ops.launch <= bound.hi)
    if mask.sum() < 2 * (bound.min_repeats + 1):
        return "too few kernels for a repeating pattern"
    pids, counts = np.unique(ops.pid[mask], return_counts=True)
    pid = int(pids[np.argmax(counts)])
    mask &= ops.pid == pid
    launch = ops.launch[mask]
    order = np.argsort(launch, kind="stable")
    launch = launch[order]
    symbols = kernel_symbols(trace)[mask][order]
    run = periodic_run(symbols, bound.min_repeats)
    if run is None:
        return "kernel launches do not repeat in a regular sequence"
    period, first, count = run
    last = first + count * period  # one past the run's last full period
    seq = symbols[first:min(last, len(symbols))]
    if period < 2 or len(seq) <= period or np.mean(seq[period:] == seq[:-period]) < 0.9:
        return "kernel launches do not repeat as a whole sequence"
    shift = _boundary_phase(launch[first:last], period)
    if shift is None and not _has_layers(seq[:period], period):
        return (f"kernels repeat every {period} launches, but nothing marks where a step ends (no step range, "
                "graph launch, per-step sync or host pause): that period may be one layer, not a step")
    cuts = np.arange(first + (shift or 0), min(last, len(symbols)), period)
    if len(cuts) < bound.min_repeats:
        return "too few repetitions of the kernel sequence"
    starts = launch[cuts]
    tail = min(int(cuts[-1]) + period, len(launch) - 1)
    ends = np.append(starts[1:], launch[tail] if tail > cuts[-1] else starts[-1] + int(np.median(np.diff(starts))))
    host = np.stack([starts, ends], axis=1)
    return Found("kernels", f"every {period} kernel launches", host, pid,
                 "" if shift is None else " (cut where the host pauses)")


def _boundary_phase(launch: np.ndarray, period: int) -> int | None:
    """The position in the period after which the host pauses every time, or None.

    The host's time between two launches is longest where the loop does its own work between
    steps (sampling, bookkeeping). Only a pause that stands out - three times the usual spacing,
    three times the next-longest phase, 20 us at least - marks the boundary; launch calls that
    simply cost more for some kernels do not.
    """
    if len(launch) < 3 * period or period < 2:
        return None
    spacing = np.diff(launch)
    phase = np.arange(len(spacing)) % period
    medians = pd.Series(spacing).groupby(phase).median().to_numpy()
    ranked = np.sort(medians)
    top = int(np.argmax(medians))
    overall = float(np.median(spacing))
    if ranked[-1] >= max(3 * overall, 3 * ranked[-2], 20_000):
        return (top + 1) % period
    return None


def _has_layers(period_seq: np.ndarray, period: int) -> bool:
    """Whether one period holds two or more copies of a shorter block (a model's layers)."""
    for lag in range(3, period // 2 + 1):
        same = period_seq[lag:] == period_seq[:-lag]
        # A run of one kernel (an expert loop) matches itself at every lag: a layer has variety.
        if same.mean() >= 0.7 and same.sum() >= lag and len(np.unique(period_seq[lag:][same])) >= 3:
            return True
    return False
