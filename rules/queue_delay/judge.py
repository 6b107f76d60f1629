"""How queue-delay weighs one stream's queue: held back by others, GPU-bound, or queued behind its own work."""

from __future__ import annotations

from dataclasses import dataclass

from nsys_rules.api import Severity
from nsys_rules.rules.queue_delay.measure import StreamQueue


@dataclass(frozen=True)
class QueueVerdict:
    """Why one stream's kernels queue, and what removing the cause gives back."""

    held_back: bool  # the GPU idled for this process while its kernels waited: something outside held them
    gpu_bound: bool  # the GPU was busy: queueing is the host running ahead
    severity: Severity
    savings: int  # ns
    budget_part: str | None


def reported(queue: StreamQueue, min_ratio: float, min_queue_ns: int) -> bool:
    """Whether the stream's kernels wait long enough, against their run time, to report."""
    prof = queue.profile
    return not (prof.median_queue < min_queue_ns or prof.ratio < min_ratio)  # NaN (a damaged export) is not below


def judge(queue: StreamQueue, gpu_bound_pct: float, warn_share_pct: float) -> QueueVerdict:
    """The cause of the stream's queueing and its cost under the rule's options."""
    idle = queue.profile.idle_while_queued
    held_back = idle >= warn_share_pct / 100 * queue.span
    # Queueing on a busy GPU or behind the stream's own work is how async launching looks:
    # nothing to gain (0 puts it under the noise floor). Held back: the idle time while kernels
    # waited is what others' work took.
    return QueueVerdict(held_back=held_back, gpu_bound=queue.busy_share >= gpu_bound_pct / 100 and not held_back,
                        severity=Severity.WARNING if held_back else Severity.INFO,
                        savings=idle if held_back else 0, budget_part="idle_other" if held_back else None)
