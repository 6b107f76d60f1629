"""queue-delay: kernels wait long in the stream queue relative to their run time.

The rule reads as three steps: ``measure`` (each stream's queue and run times and the device's
busy time, as :class:`~nsys_rules.rules.queue_delay.measure.StreamQueue`), ``judge`` (the cause
and its cost) and ``phrase`` (the message and the next optimization).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from nsys_rules.api import Finding, Location, Renamed, Rule, RuleContext, Severity
from nsys_rules.rules.queue_delay.judge import judge, reported
from nsys_rules.rules.queue_delay.measure import stream_queues
from nsys_rules.rules.queue_delay.phrase import message, recommendation


@dataclass(frozen=True)
class Options:
    """Options of queue-delay."""

    min_ratio: float = field(default=1.0, metadata={
        "help": "report a stream when its median queue time is at least this many times its median kernel time"})
    min_queue_ns: int = field(default=10_000, metadata={
        "help": "queue time below this (ns) is launch latency, not queueing; also the median queue must reach it"})
    min_kernels: int = field(default=50, metadata={"help": "fewest kernels of a stream in the window to judge it"})
    gpu_bound_pct: float = field(default=80.0, metadata={
        "help": "percent of the time the GPU is busy at or above which queueing means the GPU is the bottleneck (info)"})
    warn_share_pct: float = field(default=5.0, metadata={
        "help": "warning when the GPU idles (for this process) while kernels wait for this percent of the window"})


# -- the rule --------------------------------------------------------------------------------
class QueueDelay(Rule):
    """Kernels that wait in the stream queue much longer than they run.

    What it detects: per device and stream in the steady state, the queue time of each kernel
    (its start minus the end of the call that launched it, nsys `cuda_kern_exec_sum`'s Q against
    K) when the median queue time is at least `min_ratio` times the median kernel time.
    Why it hurts: queueing itself is how an asynchronous host keeps a GPU busy, so with a busy
    GPU it only says the GPU is the bottleneck (host-side work will not help; faster kernels
    will). When the process's GPU work is *not* busy while kernels wait, the wait is for
    something else: another process or context sharing the GPU, or a dependency on another
    stream, and the latency of every step grows by it.
    Only the first kernel of each launch call counts (a CUDA graph's later nodes wait for the
    nodes before them, not in the queue).
    Evidence: kernels, median and p90 queue time, median kernel time, their ratio, GPU busy
    share, and the time the GPU idled for this process while kernels waited. Kernels that only
    queue behind earlier work of their own stream, on a GPU neither held back nor busy enough to
    be the bottleneck, are not reported: that is asynchronous launching, with nothing to change.
    Next optimizations: GPU-bound: shorten the kernels that dominate (see gemv-dominance,
    kernel-tail) or batch more work per launch. Contention: give the latency-critical process
    the GPU alone (no co-located jobs, MPS limits, or a dedicated GPU), or a higher stream
    priority (`cudaStreamCreateWithPriority`); remove unneeded cross-stream waits.
    Options: `min_ratio`, `min_queue_ns`, `min_kernels`, `gpu_bound_pct`, `warn_share_pct`.
    Requires: the kernel and API tables (`--trace=cuda`).
    False positives: a host that launches a whole step ahead and then synchronizes shows long
    queues by design: that is the GPU-bound (info) case.
    """

    name = "queue-delay"
    title = "Kernels wait long in the stream queue"
    default_severity = Severity.INFO
    requires = ("kernels", "api")
    optional = ("nvtx", "memcpy", "memset")
    columns = {"kernels": ("start", "end", "pid", "correlation_id", "device_id", "stream_id"),
               "memcpy": ("start", "end", "pid", "device_id", "correlation_id"),
               "memset": ("start", "end", "pid", "device_id", "correlation_id"),
               "api": ("start", "end", "correlation_id", "pid", "name"),
               "nvtx": ("start", "end", "name")}
    window = "steady"
    Options = Options
    needs_release_build = True  # tunes measured kernel/host times: a debug build's are not the program's
    renamed_options = {"gpu_bound_share": Renamed("gpu_bound_pct", 100), "warning_share": Renamed("warn_share_pct", 100)}

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        opts = ctx.options
        for queue in stream_queues(ctx, opts.min_kernels, opts.min_queue_ns):
            if not reported(queue, opts.min_ratio, opts.min_queue_ns):
                continue
            verdict = judge(queue, opts.gpu_bound_pct, opts.warn_share_pct)
            if not verdict.held_back and not verdict.gpu_bound:
                # Queued behind earlier work of their own stream (a graph, long kernels launched just
                # before) on a GPU neither held back nor saturated: how asynchronous launching looks,
                # with no action of its own; the idle time, if any, is other rules' to explain.
                continue
            yield ctx.finding(
                message(queue, verdict), recommendation(verdict), severity=verdict.severity, metrics=queue.metrics(),
                location=Location(pid=queue.pid, device=queue.device, stream=queue.stream, start_ns=queue.lo,
                                  end_ns=queue.hi),
                estimated_savings_ns=verdict.savings, budget_part=verdict.budget_part, key=str(queue.stream))


RULE = QueueDelay
