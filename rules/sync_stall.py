"""sync-stall: the host blocks on the GPU during the steady state, and the GPU idles after each wait."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import numpy as np
import pandas as pd

from nsys_rules.api import (DEVICE_SYNC_APIS, Finding, GRAPH_LAUNCH_APIS, Location, Renamed, Rule, RuleContext, Severity,
                            blocking_calls, busy_within, copy_directions, gpu_launches, gpu_ops, in_set, loop_span,
                            merge_intervals, metric, pct)


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


# -- pure functions --------------------------------------------------------------------------
def idle_after(times: np.ndarray, union: tuple[np.ndarray, np.ndarray], horizon: int) -> np.ndarray:
    """For each time, how long the GPU stays idle from then on (0 when busy at that time).

    The idle stretch ends at the next busy interval, or at ``horizon`` when none follows.
    """
    us, ue = union
    times = np.asarray(times, np.int64)
    if not len(times):
        return np.zeros(0, np.int64)
    if not len(us):
        return np.clip(horizon - times, 0, None)
    pos = np.searchsorted(us, times, side="right") - 1  # last busy interval starting at or before t
    busy = (pos >= 0) & (ue[pos.clip(0)] > times)
    nxt = np.searchsorted(us, times, side="left")
    nxt = np.where((pos >= 0) & (us[pos.clip(0)] == times), pos, nxt)
    next_start = np.where(nxt < len(us), us[nxt.clip(0, len(us) - 1)], horizon)
    gap = np.minimum(next_start, horizon) - times
    return np.where(busy, 0, np.clip(gap, 0, None))


def in_loop(calls: pd.DataFrame, span: tuple[int, int] | None) -> np.ndarray:
    """Which blocking calls start inside the loop's ``span`` (see :func:`nsys_rules.loop.loop_span`).

    Before the loop is set-up; after it (past the last step, or past the last GPU launch when
    no steps are known) is tear-down, the final sync of a run: nothing queued after it can be
    delayed by it. No span (no GPU work launched in the window): nothing follows any sync.
    """
    if span is None:
        return np.zeros(len(calls), bool)
    start = calls["start"].to_numpy(np.int64)
    return (start >= span[0]) & (start <= span[1])


def per_call_stats(durations: np.ndarray) -> tuple[float, int]:
    """Median and maximum of per-call durations (0 for none)."""
    if not len(durations):
        return 0.0, 0
    return float(np.median(durations)), int(durations.max())


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
    device-to-host copy followed at once by a sync (the `.item()` pattern).
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
    Next optimizations: read results back asynchronously (copy into pinned memory with
    `non_blocking=True`/`cudaMemcpyAsync`, record an event, consume the value one step later);
    sample on the GPU and overlap it with the next step; replace device-wide syncs with an event
    wait on the one stream that matters; keep the decode loop inside a CUDA graph.
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
        "sync": ("start", "end", "device_id", "pid", "correlation_id", "sync_type"),
    }
    Options = Options
    renamed_options = {"warn_share": Renamed("warn_share_pct")}

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        opts = ctx.options
        trace = ctx.trace
        api = ctx.frame("api")
        names = ctx.api_base_names()
        memcpy = ctx.frame("memcpy") if trace.has("memcpy") else None
        # No memcpy rows (graph-replayed decode): no copy table as long as the API calls.
        copies = copy_directions(api, memcpy) if memcpy is not None and len(memcpy) else None
        calls = blocking_calls(api, names, copies)
        del copies
        if calls.empty:
            return

        span = loop_span(ctx.window.steps, gpu_launches(ctx))
        keep = in_loop(calls, span)
        dropped = int((~keep).sum())
        calls = calls.loc[keep].reset_index(drop=True)
        if span is None or calls.empty or len(calls) < opts.min_calls:
            return

        # The steady state is the loop: the steps when known, else the first to the last GPU launch
        # of the window. GPU activity counts graph replays: time inside a replay is not idle.
        lo, hi = span
        budget = ctx.budget
        steady_ns = budget.total_ns if budget is not None else max(1, hi - lo)
        ops = gpu_ops(trace)
        if budget is not None:
            ops = ops.take(ops.device == budget.device)
        union = merge_intervals(ops.start, ops.end)
        durations = (calls["end"] - calls["start"]).to_numpy(np.int64)
        blocked = int(durations.sum())
        per_thread = calls.assign(d=durations).groupby(["pid", "tid"], observed=True, dropna=False)["d"].sum()
        (pid, tid), thread_blocked = per_thread.idxmax(), int(per_thread.max())
        share = pct(thread_blocked, steady_ns)
        bubbles = idle_after(calls["end"].to_numpy(np.int64), union, hi)
        # Several syncs can fall in one idle stretch: each call's bubble runs to the same next GPU work,
        # so the stretch counts once (their union), inside the steady state.
        ends = calls["end"].to_numpy(np.int64)
        bubble_union = merge_intervals(np.clip(ends, lo, hi), np.clip(ends + bubbles, lo, hi))
        bubble_total = int((bubble_union[1] - bubble_union[0]).sum())
        gpu_idle = budget.idle_ns if budget is not None else (
            max(0, steady_ns - busy_within(union, lo, hi)) if len(union[0]) else steady_ns)
        # What removing the sync gives back: per call, the GPU's idle stretch after it returned (the
        # bubble), but never more than the host waited in it. Without the wait the host runs its own
        # work back to back: a host that needs longer than the GPU per step (launch-bound) still
        # needs that time, so only its blocked time goes; a GPU-bound loop loses the bubble instead.
        # In total no more than the bubbles' union and the budget's after-sync idle (which also
        # counts the wake-up before the return).
        after_sync = budget.ns("after_sync") if budget is not None else gpu_idle
        recoverable = int(np.minimum(durations, bubbles).sum())
        savings = min(recoverable, bubble_total, after_sync)
        p50, longest = per_call_stats(durations)
        steps = ctx.steps.count if ctx.steps is not None else len(ctx.window.steps)
        by_api = calls.assign(d=durations).groupby("api", observed=True)["d"].agg(["size", "sum"]).sort_values(
            "sum", ascending=False)
        top_api = str(by_api.index[0])
        readback_waits = int(calls["after_readback"].sum())
        sync_readbacks = int((calls["kind"] == "readback").sum())
        confirmed = _confirmed(ctx, calls)

        metrics = {
            "blocking_calls": metric(len(calls), "count"),
            "blocked_time": metric(blocked, "ns"),
            "blocked_share_of_steady_time": metric(share, "%"),
            "per_call_p50": metric(p50, "ns"),
            "per_call_max": metric(longest, "ns"),
            "bubble_time": metric(bubble_total, "ns"),
            "bubble_p50": metric(float(np.median(bubbles)), "ns"),
            "bubble_max": metric(int(bubbles.max()), "ns"),
            "recoverable_time": metric(recoverable, "ns"),
            "after_sync_idle": metric(after_sync, "ns"),
            "gpu_idle_time": metric(gpu_idle, "ns"),
            "steady_time": metric(steady_ns, "ns"),
            "readback_waits": metric(readback_waits + sync_readbacks, "count"),
            "excluded_calls": metric(dropped, "count"),
        }
        per_step_rate = len(calls) / steps if steps else None
        if per_step_rate is not None:
            metrics["calls_per_step"] = metric(per_step_rate, "ratio")
        if confirmed is not None:
            metrics["confirmed_by_sync_table"] = metric(confirmed, "count")
        # Severity follows the GPU time at stake (the bubbles). One exception, said in the message: a
        # round trip every step that parks the launching thread for most of the step puts all host work
        # of the loop (scheduling, sampling, detokenizing) in series with the GPU, however small the
        # captured benchmark's own host work is.
        structural = per_step_rate is not None and per_step_rate >= 0.9 and share >= opts.structural_block_pct
        severity = Severity.WARNING if pct(savings, steady_ns) >= opts.warn_share_pct or structural else Severity.INFO

        apis = ", ".join(f"{int(r['size'])} {api_name} ({r['sum'] / 1e6:.2f} ms)" for api_name, r in by_api.head(4).iterrows())
        rate = f" ({per_step_rate:.2g} per step over {steps} steps)" if per_step_rate is not None else ""
        readback = ""
        if readback_waits or sync_readbacks:
            pattern = " (the `.item()` pattern)" if ctx.llm_like else ""
            readback = (f" {readback_waits + sync_readbacks} of them wait on a device-to-host readback"
                        f"{' queued just before' if readback_waits else ''}{pattern}.")
        check = "" if confirmed is None else f" The SYNCHRONIZATION table confirms {confirmed} of the calls."
        # Say why the saving is below the bubbles when the host's own pace limits it.
        host_bound = (f" Most of each bubble is the host's own work before its next launch, which it needs with or "
                      f"without the sync (it waited only {recoverable / 1e6:.2f} ms in them): the loop is host-bound."
                      if recoverable < min(bubble_total, after_sync) * 0.5 else "")
        why = (f" Although the GPU loses little here, the host is parked in a sync {share:.0f} % of every step: "
               "any host work the loop adds per step lands on the GPU's critical path."
               if structural and pct(savings, steady_ns) < opts.warn_share_pct else "")
        message = (
            f"{len(calls)} blocking calls in the steady state{rate}: {apis}. The host waits {blocked / 1e6:.2f} ms "
            f"in total ({share:.1f} % of the {steady_ns / 1e6:.1f} ms steady state on the busiest thread), "
            f"p50 {p50 / 1e3:.1f} us and max {longest / 1e3:.1f} us per call.{readback} After each sync the GPU idles "
            f"{np.median(bubbles) / 1e3:.1f} us (p50; {bubble_total / 1e6:.2f} ms in total) before new work arrives: "
            f"removing the round trip saves about {savings / 1e6:.2f} ms ({pct(savings, steady_ns):.1f} % of the "
            f"steady state).{host_bound}{why}{check}"
            + (f" {dropped} set-up or final sync call(s) outside the loop were left out." if dropped else ""))
        graph_launch = in_set(names, GRAPH_LAUNCH_APIS)
        if graph_launch.any() and trace.capture.graph_trace_mode == "Node":
            # Node-level graph tracing costs host time per node inside the launch call, and the launch
            # sits between the sync and the GPU's next work: the traced bubble is longer than the real one.
            launch_p50 = float(np.median((api["end"] - api["start"]).to_numpy()[graph_launch]))
            metrics["graph_launch_call_p50"] = metric(launch_p50, "ns")
            message += (f" Each graph launch takes {launch_p50 / 1e3:.0f} us on the host in this node-traced capture, "
                        "inflating the bubble; an untraced run has a shorter one.")
        yield ctx.finding(message, _recommendation(top_api, readback_waits + sync_readbacks, calls, _is_python(trace),
                                                   bool(graph_launch.any()), ctx.llm_like),
                          severity=severity, metrics=metrics, estimated_savings_ns=savings, budget_part="after_sync",
                          savings_range=(savings, after_sync),
                          location=Location(pid=_int(pid), tid=_int(tid), api=top_api, nvtx=(
                              (ctx.window.step_name,) if ctx.window.step_name else None)))


def _is_python(trace) -> bool:
    """True when the profiled program is a Python interpreter (the fix is then shown in PyTorch terms)."""
    command = trace.capture.command[:1]
    return bool(command) and "python" in command[0].rsplit("/", 1)[-1]


def _confirmed(ctx: RuleContext, calls: pd.DataFrame) -> int | None:
    """How many blocking calls have a SYNCHRONIZATION row (same pid + correlationId); None without the table."""
    if not ctx.trace.has("sync"):
        return None
    rows = ctx.trace.frame("sync", SyncStall.columns["sync"])
    if not len(rows):
        return 0
    key = pd.MultiIndex.from_arrays([rows["pid"].to_numpy(), rows["correlation_id"].to_numpy()])
    mine = pd.MultiIndex.from_arrays([calls["pid"].to_numpy(), calls["correlation_id"].to_numpy()])
    return int(mine.isin(key).sum())


def _readback_fix(top_api: str, python: bool, llm: bool = True) -> str:
    """The asynchronous-readback recipe in the API family the program uses."""
    if top_api.startswith("cu") and not top_api.startswith("cuda"):  # driver API
        how = ("`cuMemcpyDtoHAsync` into a pinned `cuMemHostAlloc` buffer, `cuEventRecord` after it, and "
               "`cuEventSynchronize` (or `cuEventQuery`) on that event one step later")
    elif python:
        how = ("`host = torch.empty(n, dtype=..., pin_memory=True)` once, then per step "
               "`host.copy_(t, non_blocking=True); ev = torch.cuda.Event(); ev.record()` and `ev.synchronize()` "
               "one step later, instead of `.item()`/`.cpu()`/`.tolist()`")
    else:
        how = ("`cudaMemcpyAsync` into a pinned `cudaMallocHost` buffer, `cudaEventRecord` after it, and "
               "`cudaEventSynchronize` (or `cudaEventQuery`) on that event one step later")
    tail = ("; better still, sample on the GPU and keep the tokens on the device" if llm else
            "; better still, make the decision on the device (a device-side flag or loop) so no value crosses per step")
    return (f"make the per-step readback asynchronous: {how}, so the host enqueues step N+1 while the GPU runs "
            f"step N{tail}")


def _recommendation(top_api: str, readbacks: int, calls: pd.DataFrame, python: bool = False,
                    graphs: bool = False, llm: bool = True) -> str:
    steps: list[str] = []
    if readbacks:
        steps.append(_readback_fix(top_api, python, llm))
    if top_api in DEVICE_SYNC_APIS:
        steps.append(f"replace the device-wide `{top_api}` with an event recorded on the one stream whose result "
                     "is needed (`cudaEventRecord` + `cudaEventSynchronize`/`cudaStreamWaitEvent`), or drop it")
    elif not readbacks:
        steps.append(f"remove the per-step `{top_api}`, or wait on an event recorded for just the data that is "
                     "needed, one step behind, instead of draining the stream")
    if graphs:
        steps.append("the step already replays as a CUDA graph, so the host round trip between replays is what is "
                     "left: launch replay N+1 before waiting on replay N's result (double-buffer its output), or "
                     "put several steps in one graph")
    else:
        what = "the decode step" if llm else "the loop body"
        steps.append(f"capture {what} in a CUDA graph and keep the loop on the device (one launch per step, "
                     "no host round trip between steps)")
    threads = calls[["pid", "tid"]].drop_duplicates()
    where = "" if len(threads) == 1 else f" ({len(threads)} threads block; start with the busiest)"
    text = "; ".join(steps)
    return text[0].upper() + text[1:] + "." + where



def _int(value: object) -> int | None:
    """An id as int, None when missing (a damaged export can leave thread ids NULL)."""
    try:
        return None if pd.isna(value) else int(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


RULE = SyncStall
