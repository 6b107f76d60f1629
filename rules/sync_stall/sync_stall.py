"""sync-stall: the host blocks on the GPU during the steady state, and the GPU idles after each wait.

The rule reads as three steps: ``measure`` (the loop's blocking calls and the GPU's bubble after
each, as :class:`~nsys_rules.rules.sync_stall.measure.SyncEvidence`), ``judge`` (the saving and
the severity) and ``phrase`` (the message and the next optimization).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from nsys_rules.api import (Finding, Location, Renamed, Rule, RuleContext, Severity, SourceLine)
from nsys_rules.rules.sync_stall.judge import judge
from nsys_rules.rules.sync_stall.measure import SYNC_COLUMNS, loop_calls, measure
from nsys_rules.rules.sync_stall.phrase import message, recommendation, site_words


@dataclass(frozen=True)
class Options:
    """Options of sync-stall."""

    min_calls: int = field(default=3, metadata={
        "help": "blocking calls needed in the window (after dropping the final sync) before they count as a pattern"})
    warn_share_pct: float = field(default=5.0, metadata={
        "help": "percent of the steady-state time the GPU idles after the syncs (the saving) at or above which the "
                "finding is a warning"})
    structural_block_pct: float = field(default=50.0, metadata={
        "help": "a sync in every step that blocks the host this percent of the steady state or more is a warning "
                "whatever the GPU loses: all host work of the loop then runs in series with the GPU"})


# -- the rule --------------------------------------------------------------------------------
class SyncStall(Rule):
    """Host threads blocked in synchronization during the steady state.

    What it detects: recurring blocking calls in the steady loop (model load, warm-up, set-up
    before the first step and the final sync after the last step are left out; without steps,
    the loop runs from the first to the last GPU launch of the window):
    `cudaStreamSynchronize`, `cudaDeviceSynchronize`, `cudaEventSynchronize` and the driver's
    `cuStreamSynchronize`, `cuCtxSynchronize`, `cuEventSynchronize` (runtime and driver alike,
    `_v<digits>` suffixes removed, which `nsys analyze` misses), and blocking device-to-host
    readbacks: synchronous `cudaMemcpy*`/`cuMemcpyDtoH` copies to the host, and an asynchronous
    device-to-host copy followed at once by a sync (PyTorch's `.item()`, JAX's `float(loss)`), and
    host waits for device data that are no CUDA call: a small device-to-host copy whose completion
    wakes a thread from an OS wait (`futex`, `pthread_cond_wait`; JAX reads a value back through a
    host callback, `cuLaunchHostFunc`), found in the OS runtime calls (`--trace=osrt`) and valued
    like a sync.
    Why it hurts: while blocked, the host cannot enqueue the next step, so host work (sampling,
    scheduling, launching) runs in series with GPU work instead of under it; after each sync the
    GPU sits idle until the host has launched again (the bubble).
    Evidence: calls per step, host time blocked (total, per call p50/max, share of the steady
    state, busiest thread), the bubble after each sync (GPU idle from the sync's end to the next
    GPU activity), steady-state GPU idle time, how many calls the SYNCHRONIZATION table confirms.
    `estimated_savings_ns` is what removing the round trip gives back to the step: per call, the
    GPU's idle stretch after the sync returned (the bubble) but no more than the host waited in
    it (a host-bound loop keeps its own pace without the sync; a GPU-bound one loses the bubble),
    in all no more than the budget's after-sync idle part; the range runs up to that part.
    Severity follows that GPU time (warning at `warn_share_pct` percent of the steady state),
    with one exception said in the message: a sync in every step that
    parks the launching thread for `structural_block_pct` percent of the steady state or more is a
    warning, since all host work of the loop then runs in series with the GPU.
    Next optimizations: in the program's framework, a training loop that reads a scalar back
    every step (the loss: PyTorch `.item()`, JAX `float(loss)` or `jax.device_get`) keeps the
    running value on the device and reads it every N steps; read results back asynchronously
    (PyTorch `non_blocking=True` into pinned memory and an event, JAX `copy_to_host_async()`,
    `cudaMemcpyAsync` and an event in a CUDA program) and consume the value one step later;
    sample on the GPU and overlap it with the next step; replace device-wide syncs with an event
    wait on the one stream that matters; keep the decode loop inside a CUDA graph (JAX: several
    steps in one jitted `lax.scan`).
    When the capture holds nsys's Python backtraces or samples, the message names the program's
    line that makes the calls (and the library line under it), and the finding's location carries it.
    Options: `min_calls`, `warn_share_pct`, `structural_block_pct`.
    Requires: The API table; kernel, memcpy, memset and graph-trace rows for the loop, the
    bubble and the idle time; the SYNCHRONIZATION table (optional) to cross-check.
    False positives: a loop that must hand every result to the host before it can continue (an
    interactive sampler, a stop condition) still pays the bubble, but the fix then is to overlap,
    not to remove the sync. One sync per step in a GPU-bound loop shows large blocked time but a
    small savings estimate: read the savings, not only the severity. The bubble is measured
    against the activity of all GPUs together, so on multi-GPU traces it can read low.
    """

    name = "sync-stall"
    title = "Host blocked in GPU synchronization during the steady state"
    default_severity = Severity.WARNING
    requires = ("api",)
    optional = ("kernels", "memcpy", "memset", "graph_trace", "sync")
    columns = {
        "api": ("start", "end", "name", "pid", "tid", "correlation_id"),
        "kernels": ("start", "end", "device_id", "pid", "correlation_id"),
        "memcpy": ("start", "end", "device_id", "pid", "correlation_id", "copy_kind", "bytes"),
        "memset": ("start", "end", "device_id", "pid", "correlation_id"),
        "graph_trace": ("start", "end", "device_id", "pid", "correlation_id"),
        "sync": SYNC_COLUMNS,
    }
    Options = Options
    renamed_options = {"warn_share": Renamed("warn_share_pct")}

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        opts = ctx.options
        calls, span, dropped = loop_calls(ctx)
        if span is None or calls.empty or len(calls) < opts.min_calls:
            return
        evidence = measure(ctx, calls, span, dropped)
        verdict = judge(evidence, opts.warn_share_pct, opts.structural_block_pct)
        fw = ctx.framework
        training = ctx.looks_like_training
        # The program's line that makes the calls, from nsys's Python backtraces or samples when captured.
        sites = ctx.call_site(evidence.calls, top=2)
        advice = recommendation(evidence, fw, ctx.llm_like, training)
        stacks = ctx.python_stacks
        if (not sites and verdict.severity != Severity.INFO and ctx.trace.capture.runs_python and stacks.fix):
            advice += f" To name the Python line that waits: {stacks.fix}."
        top = sites[0] if sites and sites[0].user_code else None
        yield ctx.finding(message(evidence, verdict, ctx.llm_like, fw, training) + site_words(sites), advice,
                          severity=verdict.severity, metrics=evidence.metrics(), estimated_savings_ns=verdict.savings,
                          budget_part="after_sync+host_prep" if evidence.host_wait_recoverable else "after_sync",
                          savings_range=(verdict.savings, max(evidence.after_sync, verdict.savings)),
                          location=Location(pid=evidence.pid, tid=evidence.tid, api=evidence.top_api, nvtx=(
                              (ctx.window.step_name,) if ctx.window.step_name else None), source=None if top is None
                              else SourceLine(top.frame.file, top.frame.line, top.frame.function)))


RULE = SyncStall
