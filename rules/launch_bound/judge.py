"""How launch-bound weighs one device: launch-bound at all, what CUDA graphs would save, and how severe that is."""

from __future__ import annotations

from dataclasses import dataclass

from nsys_rules.api import Budget, Severity
from nsys_rules.rules.launch_bound.measure import DeviceLaunches


@dataclass(frozen=True)
class LaunchVerdict:
    """The saving and the severity of one device's launch-bound finding."""

    judged: int  # the steady state's time (the budget's when the device runs the loop) (ns)
    busy_share: float  # of it, the time the GPU was busy (0-1)
    savings: int  # ns
    severity: Severity
    on_loop: bool  # the device runs the loop the step budget describes


def judge(found: DeviceLaunches, budget: Budget | None, max_busy_pct: float, max_median_kernel_ns: int,
          warn_share_pct: float) -> LaunchVerdict | None:
    """The verdict on one device; None when it is busy enough, its kernels long, or it never waited for a launch."""
    prof = found.profile
    loop = budget if budget is not None and budget.device == found.device else None  # the step budget's, on this device
    on_loop = loop is not None
    judged = loop.total_ns if loop is not None else prof.judged_ns
    busy_share = loop.busy_ns / judged if loop is not None and judged else prof.busy_share
    if busy_share >= max_busy_pct / 100 or prof.median_kernel_ns > max_median_kernel_ns:
        return None
    if not prof.starved_gaps:
        return None
    savings = prof.savings_ns
    if loop is not None:
        # The step budget's launch_wait is the host time spread between the loop's launches, gaps of
        # any length short of a block (a block is input-prep's, a compile module-loading's): the time
        # CUDA graphs or a compiled step give back, all of it owned here.
        # A graph replay still leaves graph_gap_ns before each of its kernels (prof.savings_ns already
        # took it off each short launch gap).
        residual = prof.starved_ns - prof.savings_ns
        savings = max(0, loop.ns("launch_wait") - residual)
    severity = Severity.WARNING if savings >= warn_share_pct / 100 * judged else Severity.INFO
    if found.graph_loop:
        severity = Severity.INFO  # what is left between replays is the host's own work, not launches
    return LaunchVerdict(judged, busy_share, savings, severity, on_loop)
