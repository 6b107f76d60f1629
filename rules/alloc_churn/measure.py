"""What alloc-churn measures: the loop's allocation and free calls, their time, and the environment's cause.

No judgement here: :class:`ChurnEvidence` holds the numbers; ``judge`` weighs them and
``phrase`` says them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np
import pandas as pd

from nsys_rules.api import (Budget, Framework, gpu_launches, loop_span, metric, Metric, pct, RuleContext, spread,
                            step_count)
from nsys_rules.api.analysis import ALLOC_APIS, busiest_thread, in_set, point_in

#: Calls that free; ``cudaFree`` before any allocation is the ``cudaFree(0)`` context-creation idiom.
CONTEXT_INIT_FREES = ("cudaFree",)

#: Environment variables that make allocators call the driver for every tensor.
CACHING_OFF = "PYTORCH_NO_CUDA_MEMORY_CACHING"
#: JAX/XLA: the "platform" allocator allocates and frees every buffer on demand (a debugging setting).
XLA_ALLOCATOR = "XLA_PYTHON_CLIENT_ALLOCATOR"
#: PyTorch's allocator settings (expandable_segments, backend, ...).
ALLOC_CONF = "PYTORCH_CUDA_ALLOC_CONF"

#: Device-memory frees and allocations that go to the driver (a caching allocator's misses and releases).
DEVICE_FREES = frozenset({"cudaFree", "cuMemFree"})
DEVICE_MALLOCS = frozenset({"cudaMalloc", "cuMemAlloc", "cudaMallocPitch", "cuMemAllocPitch"})

#: Columns of the memory-usage table the byte counts read.
USAGE_COLUMNS = ("start", "pid", "bytes", "operation")


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


def steps_holding(starts: np.ndarray, steps: list[tuple[int, int]]) -> int:
    """How many of the ``steps`` (host intervals) hold at least one of the calls starting at ``starts``."""
    if not len(starts) or not steps:
        return 0
    lo = np.array([a for a, _ in steps], np.int64)
    hi = np.array([b for _, b in steps], np.int64)
    index = point_in(np.asarray(starts, np.int64), lo, hi)
    return int(len(np.unique(index[index >= 0])))


def known_cause(fw: Framework, environment: Mapping[str, str], frees: int, mallocs: int, free_steps: int,
                steps: int) -> str:
    """The allocation pattern's known cause, by its name (empty when none is known).

    - ``caching-off``: ``PYTORCH_NO_CUDA_MEMORY_CACHING`` set (PyTorch allocates every tensor from the driver);
    - ``xla-platform``: JAX's ``XLA_PYTHON_CLIENT_ALLOCATOR=platform`` (the same for XLA's buffers);
    - ``empty-cache``: PyTorch with its caching allocator on, returning device memory to the driver in
      recurring bursts (``cudaFree`` in two steps or more; without steps, two calls or more): the
      allocator frees only when emptied, so ``torch.cuda.empty_cache()`` runs in the loop (or an
      allocation failed and it released its cache to retry);
    - ``growth``: PyTorch with caching on, ``cudaMalloc`` in the loop and no ``cudaFree``: the pool
      keeps growing (new sizes, fragmentation).
    """
    if caching_disabled(environment):
        return "caching-off"
    if fw.name == "jax" and str(environment.get(XLA_ALLOCATOR, "")).strip().lower() == "platform":
        return "xla-platform"
    if not fw.is_torch:
        return ""
    if frees >= 2 and (free_steps >= 2 or not steps):
        return "empty-cache"
    if mallocs and not frees:
        return "growth"
    return ""


def allocated_bytes(usage: pd.DataFrame | None, lo: int, hi: int) -> tuple[int, int] | None:
    """Allocation events and bytes allocated in ``[lo, hi]`` from ``--cuda-memory-usage`` rows; None without them."""
    if usage is None:
        return None
    inside = usage[(usage["start"] >= lo) & (usage["start"] <= hi) & (usage["operation"] == 0)]
    return len(inside), int(inside["bytes"].sum())


def steady_time(budget: Budget | None, span: tuple[int, int]) -> int:
    """The steady state's length: the steps' time on the GPU clock, else the loop's ``span``."""
    return budget.total_ns if budget is not None else max(1, span[1] - span[0])


# -- the evidence ----------------------------------------------------------------------------
@dataclass(frozen=True)
class ChurnEvidence:
    """The loop's allocation and free calls and what they cost (ns), before any judgement."""

    calls: pd.DataFrame  # see churn_calls
    steps: int
    steady_ns: int
    loop_spread: float  # share of the loop's ten equal parts that hold calls (0-1)
    total: int  # host time in the calls
    pid: int | None  # the busiest thread
    tid: int | None
    share: float  # the busiest thread's time in the calls, percent of the steady state
    table: pd.DataFrame  # per API (see by_api)
    top_kind: str  # the kind of memory the calls spend most time on
    no_cache: bool  # the profiled environment turns PyTorch's caching allocator off
    caching_setting: object  # the environment's PYTORCH_NO_CUDA_MEMORY_CACHING value (None when unset)
    usage: tuple[int, int] | None  # allocation events and bytes from memory-usage rows
    gpu_idle: int  # the GPU's idle time while the host allocated (the calls' time without a budget)
    has_budget: bool
    framework: Framework = Framework("cuda")  # the program's framework: the fix in its terms
    cause: str = ""  # the known cause (see known_cause)
    device_frees: int = 0  # cudaFree/cuMemFree calls in the loop
    device_mallocs: int = 0  # cudaMalloc/cuMemAlloc calls in the loop
    free_steps: int = 0  # steps holding a device free
    alloc_conf: str = ""  # the profiled environment's PYTORCH_CUDA_ALLOC_CONF

    @property
    def per_step(self) -> float | None:
        """Calls per step; None without steps."""
        return len(self.calls) / self.steps if self.steps else None

    @property
    def top_api(self) -> str:
        """The API that takes the most time."""
        return str(self.table.index[0])

    def metrics(self) -> dict[str, Metric]:
        """The finding's evidence."""
        out = {
            "alloc_calls": metric(len(self.calls), "count"),
            "alloc_time": metric(self.total, "ns"),
            "alloc_share_of_steady_time": metric(self.share, "%"),
            "per_call_p50": metric(float(self.calls["duration"].median()), "ns"),
            "per_call_max": metric(int(self.calls["duration"].max()), "ns"),
            "steady_time": metric(self.steady_ns, "ns"),
        }
        if self.per_step is not None:
            out["calls_per_step"] = metric(self.per_step, "ratio")
        else:
            out["loop_spread"] = metric(self.loop_spread, "ratio")
        if self.usage is not None:
            out["allocation_events"] = metric(self.usage[0], "count")
            out["bytes_allocated"] = metric(self.usage[1], "B")
            if self.steps:
                out["bytes_allocated_per_step"] = metric(self.usage[1] / self.steps, "B")
        out["gpu_idle_in_allocation"] = metric(self.gpu_idle, "ns")
        return out


# -- reading the window ----------------------------------------------------------------------
def loop_calls(ctx: RuleContext) -> tuple[pd.DataFrame, tuple[int, int] | None]:
    """The window's allocation and free calls inside the loop (``cudaFree(0)`` left out), and the loop's span."""
    trace = ctx.trace
    # cudaFree(0) is judged on the whole capture: "first free before any allocation" needs the history.
    full = trace.frame("api", ["start", "pid"])
    full_names = trace.api_names().array  # categorical: per-name work, not per-row strings
    init = context_init_rows(full_names, full["pid"].to_numpy(), full["start"].to_numpy())
    calls = churn_calls(ctx.frame("api"), ctx.api_base_names(), init[ctx.window_rows("api")])
    # Judge the loop only: the steps, or without steps the first to the last GPU launch, so load
    # (weights, workspaces) and tear-down (frees at exit) stay out even in a whole-capture window.
    span = loop_span(ctx.window.steps, gpu_launches(ctx))
    if span is None:
        return calls, None
    start = calls["start"].to_numpy(np.int64)
    return calls.loc[(start >= span[0]) & (start <= span[1])].reset_index(drop=True), span


def measure(ctx: RuleContext, calls: pd.DataFrame, span: tuple[int, int]) -> ChurnEvidence:
    """The evidence of the loop's allocation and free ``calls`` (from :func:`loop_calls`)."""
    trace, budget = ctx.trace, ctx.budget
    lo, hi = span
    steady_ns = steady_time(budget, span)
    total = int(calls["duration"].sum())
    pid, tid, thread_total = busiest_thread(calls, calls["duration"])
    kinds = calls.groupby("kind")["duration"].agg(["size", "sum"]).sort_values("sum", ascending=False)
    environment = trace.capture.environment
    usage = allocated_bytes(trace.frame("memory_usage", USAGE_COLUMNS), lo, hi) if trace.has("memory_usage") else None
    names = calls["api"].astype(str)
    is_free, is_malloc = names.isin(DEVICE_FREES).to_numpy(), names.isin(DEVICE_MALLOCS).to_numpy()
    frees, mallocs = int(is_free.sum()), int(is_malloc.sum())
    steps = list(ctx.window.steps or [])
    free_steps = steps_holding(calls["start"].to_numpy(np.int64)[is_free], steps)
    fw = ctx.framework
    return ChurnEvidence(
        calls=calls, steps=step_count(ctx), steady_ns=steady_ns, loop_spread=spread(calls["start"].to_numpy(np.int64), lo, hi),
        total=total, pid=pid, tid=tid, share=pct(thread_total, steady_ns), table=by_api(calls),
        top_kind=str(kinds.index[0]),
        no_cache=caching_disabled(environment), caching_setting=environment.get(CACHING_OFF), usage=usage,
        # What freeing the loop of these calls gives back: the GPU idle while the host allocated.
        gpu_idle=min(total, budget.ns("allocation")) if budget is not None else total, has_budget=budget is not None,
        framework=fw, cause=known_cause(fw, environment, frees, mallocs, free_steps, len(steps)), device_frees=frees,
        device_mallocs=mallocs, free_steps=free_steps, alloc_conf=str(environment.get(ALLOC_CONF, "")))
