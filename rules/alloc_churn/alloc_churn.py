"""alloc-churn: memory allocation and free calls repeated in the hot path.

The rule reads as three steps: ``measure`` (the loop's allocation and free calls, as
:class:`~nsys_rules.rules.alloc_churn.measure.ChurnEvidence`), ``judge`` (churn or a handful,
and the severity) and ``phrase`` (the message and the fix for the kind of memory).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from nsys_rules.api import Finding, Location, Renamed, Rule, RuleContext, Severity, step_count
from nsys_rules.api.analysis import GPU_OP_TABLES
from nsys_rules.rules.alloc_churn.judge import is_churn, severity
from nsys_rules.rules.alloc_churn.measure import USAGE_COLUMNS, loop_calls, measure, steady_time
from nsys_rules.rules.alloc_churn.phrase import message, recommendation

@dataclass(frozen=True)
class Options:
    """Options of alloc-churn."""

    min_calls: int = field(default=10, metadata={
        "help": "allocation and free calls needed in the window before it is churn rather than a handful"})
    min_calls_per_step: float = field(default=1.0, metadata={
        "help": "average allocation and free calls per step needed when steps are known (one-time allocation "
                "falls below this)"})
    min_spread_pct: float = field(default=50.0, metadata={
        "help": "when no steps are known: percent of the loop's ten equal parts that must hold calls (a burst at "
                "load fills one or two)"})
    warn_share_pct: float = field(default=5.0, metadata={
        "help": "percent of the steady-state time the GPU idles in allocation calls at or above which the finding "
                "is a warning; calls that block the host this long are reported at any rate"})


# -- the rule --------------------------------------------------------------------------------
class AllocChurn(Rule):
    """Allocation and free calls repeated in the steady state.

    What it detects: `cudaMalloc`/`cudaFree`, `cudaMallocAsync`/`cudaFreeAsync`, `cuMemAlloc*`,
    `cuMemFree*`, pinned host allocations (`cudaMallocHost`, `cudaHostAlloc`, `cuMemHostAlloc`,
    host registration), managed and virtual-memory calls, at a steady rate in the steady loop:
    on average at least `min_calls_per_step` per step when steps are known; without steps, inside
    the span from the first to the last GPU launch and spread over at least `min_spread_pct` percent of it.
    The start-up `cudaFree(0)` (a free before anything was allocated: context creation, 115-140
    ms) and one-time allocation at load are not churn: the steady window and the loop span leave
    load out, and a handful of calls falls below the rate.
    Why it hurts: `cudaMalloc` and `cudaFree` go to the driver, and `cudaFree` synchronizes the
    device; pinning host memory costs milliseconds. A caching allocator or pool makes the steady
    state allocation-free. Stream-ordered pool calls are cheap while the pool keeps its memory,
    so their cost is judged by their measured time like any other.
    Evidence: calls per step, time in the calls and its share of the steady state, per-API count,
    total, p50 and max, the kind of memory, bytes allocated (with `--cuda-memory-usage=true`),
    and the known cause by name: `PYTORCH_NO_CUDA_MEMORY_CACHING=1` in the profiled environment
    (PyTorch's caching allocator off); JAX's `XLA_PYTHON_CLIENT_ALLOCATOR=platform`; in PyTorch
    with caching on, `cudaFree` bursts in two steps or more (the caching allocator frees only when
    emptied: `torch.cuda.empty_cache()` in the loop, or a failed allocation's retry), or
    `cudaMalloc` without frees (the pool growing: new sizes, fragmentation).
    Next optimizations: by cause: unset `PYTORCH_NO_CUDA_MEMORY_CACHING` (or
    `XLA_PYTHON_CLIENT_ALLOCATOR`); stop calling `torch.cuda.empty_cache()` in the loop;
    `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` for a growing, fragmented pool; otherwise
    allocate buffers once before the loop and reuse them (workspace, KV cache, pinned staging
    buffers); for stream-ordered allocation keep memory in the pool
    (`cudaMemPoolAttrReleaseThreshold`).
    Options: `min_calls`, `min_calls_per_step`, `min_spread_pct`, `warn_share_pct`.
    Requires: The API table; GPU rows (kernels, copies, memsets, graph replays) to find the loop
    when no steps are known; memory-usage events (optional) for bytes.
    False positives: a program that really resizes its buffers every step (growing sequence
    length) allocates legitimately, though a pool still removes the cost.
    """

    name = "alloc-churn"
    title = "Memory allocation churn in the hot path"
    default_severity = Severity.WARNING
    requires = ("api",)
    optional = ("memory_usage", *GPU_OP_TABLES)
    # correlation_id: the GPU rows' launch times (the loop span) look their API call up by it.
    columns = {"api": ("start", "end", "name", "pid", "tid", "correlation_id"),
               "memory_usage": USAGE_COLUMNS,
               **{t: ("start", "pid", "correlation_id") for t in GPU_OP_TABLES}}
    Options = Options
    renamed_options = {"min_spread": Renamed("min_spread_pct", 100), "warn_share": Renamed("warn_share_pct")}

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        opts = ctx.options
        calls, span = loop_calls(ctx)
        if span is None or calls.empty:
            return
        if not is_churn(calls, step_count(ctx), steady_time(ctx.budget, span), span, opts.min_calls,
                        opts.min_calls_per_step, opts.min_spread_pct, opts.warn_share_pct):
            return
        ev = measure(ctx, calls, span)
        yield ctx.finding(message(ev), recommendation(ev), severity=severity(ev, opts.min_calls_per_step, opts.warn_share_pct),
                          metrics=ev.metrics(), estimated_savings_ns=ev.gpu_idle, budget_part="allocation",
                          savings_range=(ev.gpu_idle, ev.total), location=Location(pid=ev.pid, tid=ev.tid, api=ev.top_api))


RULE = AllocChurn
