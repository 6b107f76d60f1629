"""alloc-churn: memory allocation and free calls repeated in the hot path."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

import numpy as np
import pandas as pd

from nsys_rules.api import (ALLOC_APIS, Finding, GPU_OP_TABLES, Location, Renamed, Rule, RuleContext, Severity,
                            gpu_launches, in_set, loop_span, metric, pct, spread)

#: Calls that free; ``cudaFree`` before any allocation is the ``cudaFree(0)`` context-creation idiom.
CONTEXT_INIT_FREES = ("cudaFree",)

#: Environment variables that make allocators call the driver for every tensor.
CACHING_OFF = "PYTORCH_NO_CUDA_MEMORY_CACHING"


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


# -- pure functions --------------------------------------------------------------------------
def context_init_rows(names: np.ndarray, pids: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Rows that are ``cudaFree(0)`` context creation: a process's first ``cudaFree`` before any allocation.

    The CUDA idiom ``cudaFree(0)`` frees nothing and only creates the context (115-140 ms on an
    H200); the API table has no arguments, so it is recognised as a free with nothing allocated yet.
    """
    out = np.zeros(len(names), bool)
    if not len(names):
        return out
    series = pd.Series(names, copy=False)
    rows = np.flatnonzero(in_set(series, ALLOC_APIS))  # filter first: millions of rows, few allocs
    if not len(rows):
        return out
    frame = pd.DataFrame({"name": series.iloc[rows].astype(object).to_numpy(), "pid": np.asarray(pids)[rows],
                          "start": np.asarray(starts)[rows], "row": rows})
    first = frame.sort_values(["pid", "start"], kind="stable").drop_duplicates("pid")
    out[first.loc[first["name"].isin(CONTEXT_INIT_FREES), "row"].to_numpy()] = True
    return out


def churn_calls(api: pd.DataFrame, names: pd.Series, exclude: np.ndarray) -> pd.DataFrame:
    """Allocation and free calls of ``api`` (base ``names`` aligned), less the ``exclude`` rows.

    Columns: ``start``, ``end``, ``pid``, ``tid``, ``api``, ``kind`` (device, stream-ordered,
    managed, pinned host, virtual memory), ``duration``.
    """
    # isin on the categorical judges each distinct name once; astype(str) per row cost seconds on 2M rows.
    keep = in_set(names, ALLOC_APIS)  # narrow codes compared per matching name: no int64 copy of every row's code
    keep[exclude] = False
    rows = np.flatnonzero(keep)  # a few calls among millions: gathered by row number, not four scans of the mask
    del keep
    picked = np.asarray(names.iloc[rows].astype(object).to_numpy(), dtype=object)
    out = pd.DataFrame({"start": api["start"].to_numpy(np.int64)[rows], "end": api["end"].to_numpy(np.int64)[rows],
                        "pid": api["pid"].to_numpy()[rows], "tid": api["tid"].to_numpy()[rows], "api": picked})
    out["kind"] = out["api"].map(ALLOC_APIS)
    out["duration"] = out["end"] - out["start"]
    return out


def by_api(calls: pd.DataFrame) -> pd.DataFrame:
    """Per API: calls, total, p50 and max duration, sorted by total time."""
    if calls.empty:
        return pd.DataFrame(columns=["calls", "total", "p50", "max"])
    grouped = calls.groupby("api", observed=True)["duration"]
    table = pd.DataFrame({"calls": grouped.size(), "total": grouped.sum(), "p50": grouped.median(),
                          "max": grouped.max()})
    return table.sort_values("total", ascending=False)


def caching_disabled(environment: Mapping[str, str]) -> bool:
    """True when ``PYTORCH_NO_CUDA_MEMORY_CACHING`` is set to a true value (PyTorch reads any non-zero int)."""
    value = str(environment.get(CACHING_OFF, "")).strip().lower()
    return value not in ("", "0", "false", "no", "off")


def allocated_bytes(usage: pd.DataFrame | None, lo: int, hi: int) -> tuple[int, int] | None:
    """Allocation events and bytes allocated in ``[lo, hi]`` from ``--cuda-memory-usage`` rows; None without them."""
    if usage is None:
        return None
    inside = usage[(usage["start"] >= lo) & (usage["start"] <= hi) & (usage["operation"] == 0)]
    return len(inside), int(inside["bytes"].sum())


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
    and the environment cause: `PYTORCH_NO_CUDA_MEMORY_CACHING=1` in the profiled environment.
    Next optimizations: unset `PYTORCH_NO_CUDA_MEMORY_CACHING`; allocate buffers once before the
    loop and reuse them (workspace, KV cache, pinned staging buffers); for stream-ordered
    allocation keep memory in the pool (`cudaMemPoolAttrReleaseThreshold`).
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
               "memory_usage": ("start", "pid", "bytes", "operation"),
               **{t: ("start", "pid", "correlation_id") for t in GPU_OP_TABLES}}
    Options = Options
    renamed_options = {"min_spread": Renamed("min_spread_pct", 100), "warn_share": Renamed("warn_share_pct")}

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        opts = ctx.options
        trace = ctx.trace
        # cudaFree(0) is judged on the whole capture: "first free before any allocation" needs the history.
        full = trace.frame("api", ["start", "pid"])
        full_names = trace.api_names().array  # categorical: per-name work, not per-row strings
        init = context_init_rows(full_names, full["pid"].to_numpy(), full["start"].to_numpy())
        api = ctx.frame("api")
        calls = churn_calls(api, ctx.api_base_names(), init[ctx.window_rows("api")])
        # Judge the loop only: the steps, or without steps the first to the last GPU launch, so load
        # (weights, workspaces) and tear-down (frees at exit) stay out even in a whole-capture window.
        span = loop_span(ctx.window.steps, gpu_launches(ctx))
        if span is None:
            return
        lo, hi = span
        start = calls["start"].to_numpy(np.int64)
        calls = calls.loc[(start >= lo) & (start <= hi)].reset_index(drop=True)
        steps = ctx.steps.count if ctx.steps is not None else len(ctx.window.steps)
        per_step = len(calls) / steps if steps else None
        if calls.empty:
            return
        budget = ctx.budget
        steady_ns = budget.total_ns if budget is not None else max(1, hi - lo)
        # Few calls can still cost much: a cudaFree every N steps synchronizes the device and may
        # block the host for milliseconds. Judged by the host time the calls block in the loop.
        expensive = pct(int(calls["duration"].sum()), steady_ns) >= opts.warn_share_pct
        if not expensive:
            if len(calls) < opts.min_calls:
                return
            if per_step is not None and per_step < opts.min_calls_per_step:
                return
            if per_step is None and spread(calls["start"].to_numpy(np.int64), lo, hi) < opts.min_spread_pct / 100:
                return
        calls_spread = spread(calls["start"].to_numpy(np.int64), lo, hi)
        total = int(calls["duration"].sum())
        per_thread = calls.groupby(["pid", "tid"], observed=True, dropna=False)["duration"].sum()
        (pid, tid) = per_thread.idxmax()
        share = pct(int(per_thread.max()), steady_ns)
        table = by_api(calls)
        kinds = calls.groupby("kind")["duration"].agg(["size", "sum"]).sort_values("sum", ascending=False)
        top_api, top_kind = str(table.index[0]), str(kinds.index[0])
        no_cache = caching_disabled(trace.capture.environment)
        usage = allocated_bytes(trace.frame("memory_usage", self.columns["memory_usage"]), lo, hi) if trace.has(
            "memory_usage") else None

        metrics = {
            "alloc_calls": metric(len(calls), "count"),
            "alloc_time": metric(total, "ns"),
            "alloc_share_of_steady_time": metric(share, "%"),
            "per_call_p50": metric(float(calls["duration"].median()), "ns"),
            "per_call_max": metric(int(calls["duration"].max()), "ns"),
            "steady_time": metric(steady_ns, "ns"),
        }
        if per_step is not None:
            metrics["calls_per_step"] = metric(per_step, "ratio")
        else:
            metrics["loop_spread"] = metric(calls_spread, "ratio")
        if usage is not None:
            metrics["allocation_events"] = metric(usage[0], "count")
            metrics["bytes_allocated"] = metric(usage[1], "B")
            if steps:
                metrics["bytes_allocated_per_step"] = metric(usage[1] / steps, "B")

        detail = ", ".join(f"{int(r['calls'])} {name} ({r['total'] / 1e6:.2f} ms, p50 {r['p50'] / 1e3:.1f} us, "
                           f"max {r['max'] / 1e3:.1f} us)" for name, r in table.head(4).iterrows())
        rate = f" ({per_step:.1f} per step over {steps} steps)" if per_step is not None else ""
        volume = ""
        if usage is not None and usage[0]:
            volume = f" Memory-usage events show {usage[0]} allocations of {usage[1] / 2**20:.1f} MiB in the window."
        cause = (f" The profiled environment sets {CACHING_OFF}={trace.capture.environment.get(CACHING_OFF)}: "
                 "PyTorch's caching allocator is off, so every tensor is a cudaMalloc and a cudaFree."
                 if no_cache else "")
        message = (f"{len(calls)} allocation/free calls in the steady state{rate}: {detail}. They take "
                   f"{total / 1e6:.2f} ms, {share:.1f} % of the {steady_ns / 1e6:.1f} ms steady state on the busiest "
                   f"thread; mostly {top_kind} memory.{volume}{cause}")
        # What freeing the loop of these calls gives back: the GPU idle while the host allocated.
        savings = min(total, budget.ns("allocation")) if budget is not None else total
        metrics["gpu_idle_in_allocation"] = metric(savings, "ns")
        if budget is not None:
            message += (f" The GPU idles {savings / 1e6:.2f} ms ({pct(savings, steady_ns):.1f} % of the steady state) "
                        "while the launching thread is in these calls.")
        # A debugging switch that turns the allocator off is a configuration mistake with a one-line
        # fix: a warning however much of this trace's time it happens to cost.
        switched_off = no_cache and (per_step is None or per_step >= opts.min_calls_per_step)
        severity = Severity.WARNING if pct(savings, steady_ns) >= opts.warn_share_pct or switched_off else Severity.INFO
        yield ctx.finding(message, _recommendation(no_cache, top_kind, total, steps),
                          severity=severity, metrics=metrics, estimated_savings_ns=savings, budget_part="allocation",
                          savings_range=(savings, total),
                          location=Location(pid=_int(pid), tid=_int(tid), api=top_api))


def _recommendation(no_cache: bool, kind: str, total: int, steps: int) -> str:
    if no_cache:
        return (f"Unset {CACHING_OFF} (or set it to 0) so PyTorch's caching allocator reuses freed blocks; the "
                "steady state then makes no cudaMalloc/cudaFree calls. If it was set to debug memory errors, use "
                "`compute-sanitizer` or `PYTORCH_CUDA_ALLOC_CONF` options instead.")
    per_step = f" ({total / steps / 1e3:.1f} us per step)" if steps else ""
    if kind == "stream-ordered":
        return ("These are stream-ordered pool allocations, cheap while the pool keeps its memory: the time to "
                f"win is {total / 1e6:.2f} ms{per_step}. Allocate the per-step buffers once before the loop and "
                "reuse them, and keep freed memory in the pool (`cudaMemPoolSetAttribute(pool, "
                "cudaMemPoolAttrReleaseThreshold, UINT64_MAX)` / `cuMemPoolSetAttribute`) so no call reaches "
                "the driver.")
    if kind == "pinned host":
        return ("Allocate pinned staging buffers once (`cudaHostAlloc`/`cudaMallocHost` before the loop, or a "
                "pinned-memory pool) and reuse them; pinning and unpinning host pages every step costs "
                f"{total / 1e6:.2f} ms{per_step} here.")
    return ("Take allocation out of the loop: allocate workspaces once and reuse them, or use a caching "
            "allocator / stream-ordered pool (`cudaMallocAsync` with `cudaMemPoolAttrReleaseThreshold` set high); "
            f"`cudaFree` also synchronizes the device. Time to win: {total / 1e6:.2f} ms{per_step}.")



def _int(value: object) -> int | None:
    """An id as int, None when missing (a damaged export can leave thread ids NULL)."""
    try:
        return None if pd.isna(value) else int(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


RULE = AllocChurn
