"""What sync-stall measures: the blocking calls of the loop, the GPU's bubble after each, the time at stake.

No judgement here: :class:`SyncEvidence` holds the numbers; ``judge`` weighs them and
``phrase`` says them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from nsys_rules.api import gpu_launches, loop_span, metric, Metric, pct, RuleContext, step_count
from nsys_rules.api.analysis import (blocking_calls, busiest_thread, busy_within, copy_directions, GRAPH_LAUNCH_APIS,
                                     in_set, merge_intervals)

#: Columns of the SYNCHRONIZATION table the cross-check reads.
SYNC_COLUMNS = ("start", "end", "device_id", "pid", "correlation_id", "sync_type")


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


def bubble_time(ends: np.ndarray, bubbles: np.ndarray, lo: int, hi: int) -> int:
    """The GPU's idle time after the calls ending at ``ends``, each stretch counted once, inside ``[lo, hi]``.

    Several syncs can fall in one idle stretch: each call's bubble runs to the same next GPU
    work, so the stretch counts once (their union).
    """
    starts, stops = merge_intervals(np.clip(ends, lo, hi), np.clip(ends + bubbles, lo, hi))
    return int((stops - starts).sum())


def confirmed_calls(calls: pd.DataFrame, sync_rows: pd.DataFrame) -> int:
    """How many blocking calls have a SYNCHRONIZATION row (same pid + correlationId)."""
    if not len(sync_rows):
        return 0
    key = pd.MultiIndex.from_arrays([sync_rows["pid"].to_numpy(), sync_rows["correlation_id"].to_numpy()])
    mine = pd.MultiIndex.from_arrays([calls["pid"].to_numpy(), calls["correlation_id"].to_numpy()])
    return int(mine.isin(key).sum())


def per_api(calls: pd.DataFrame, durations: np.ndarray) -> pd.DataFrame:
    """Calls (``size``) and blocked time (``sum``) per API, most time first."""
    return calls.assign(d=durations).groupby("api", observed=True)["d"].agg(["size", "sum"]).sort_values(
        "sum", ascending=False)


# -- the evidence ----------------------------------------------------------------------------
@dataclass(frozen=True)
class SyncEvidence:
    """The blocking calls of the loop and what they cost (ns), before any judgement."""

    calls: pd.DataFrame  # the blocking calls inside the loop (see nsys_rules.analysis.host.blocking_calls)
    dropped: int  # set-up and final calls outside the loop, left out
    steady_ns: int  # the steps' time on the GPU clock, else the loop's span
    blocked: int  # host time in the calls
    pid: int | None  # the busiest thread
    tid: int | None
    share: float  # the busiest thread's blocked time, percent of the steady state
    p50: float  # per call
    longest: int
    bubbles: np.ndarray  # per call: the GPU's idle stretch after it returned
    bubble_total: int  # their union inside the loop
    recoverable: int  # per call, no more of the bubble than the host waited in the call; summed
    #: Of it, what the host's OS waits on a readback give back (no CUDA sync: the budget's after-sync part lacks it).
    host_wait_recoverable: int
    after_sync: int  # the budget's after-sync idle part (the GPU's idle time without a budget)
    gpu_idle: int
    steps: int
    by_api: pd.DataFrame  # calls and time per API, most time first
    readbacks: int  # calls that wait on a device-to-host readback
    queued_readbacks: int  # of them, syncs after an asynchronous readback queued just before
    confirmed: int | None  # calls the SYNCHRONIZATION table holds; None without the table
    graph_launches: bool  # the loop launches CUDA graphs
    graph_launch_p50: float | None  # host time of a graph launch, in a node-traced capture only

    @property
    def top_api(self) -> str:
        """The API the host blocks in longest."""
        return str(self.by_api.index[0])

    @property
    def per_step(self) -> float | None:
        """Blocking calls per step; None without steps."""
        return len(self.calls) / self.steps if self.steps else None

    @property
    def readback_bytes(self) -> int:
        """The median size of the device-to-host readbacks the calls wait on (0 without readbacks)."""
        waits = self.calls[(self.calls["kind"] == "readback") | self.calls["after_readback"]]
        return int(waits["bytes"].median()) if len(waits) else 0

    def scalar_every_step(self, max_bytes: int = 1024) -> bool:
        """A readback of a few values (at most ``max_bytes``) in (nearly) every step: a loss or a metric read per step."""
        return bool(self.steps) and self.readbacks >= 0.9 * self.steps and 0 < self.readback_bytes <= max_bytes

    def metrics(self) -> dict[str, Metric]:
        """The finding's evidence."""
        out = {
            "blocking_calls": metric(len(self.calls), "count"),
            "blocked_time": metric(self.blocked, "ns"),
            "blocked_share_of_steady_time": metric(self.share, "%"),
            "per_call_p50": metric(self.p50, "ns"),
            "per_call_max": metric(self.longest, "ns"),
            "bubble_time": metric(self.bubble_total, "ns"),
            "bubble_p50": metric(float(np.median(self.bubbles)), "ns"),
            "bubble_max": metric(int(self.bubbles.max()), "ns"),
            "recoverable_time": metric(self.recoverable, "ns"),
            "after_sync_idle": metric(self.after_sync, "ns"),
            "gpu_idle_time": metric(self.gpu_idle, "ns"),
            "steady_time": metric(self.steady_ns, "ns"),
            "readback_waits": metric(self.readbacks, "count"),
            "host_waits_on_readbacks": metric(int(_host_waits(self.calls).sum()), "count"),
            "excluded_calls": metric(self.dropped, "count"),
        }
        if self.per_step is not None:
            out["calls_per_step"] = metric(self.per_step, "ratio")
        if self.confirmed is not None:
            out["confirmed_by_sync_table"] = metric(self.confirmed, "count")
        if self.graph_launch_p50 is not None:
            out["graph_launch_call_p50"] = metric(self.graph_launch_p50, "ns")
        return out


def _host_waits(calls: pd.DataFrame) -> np.ndarray:
    return calls["host_wait"].to_numpy(bool) if "host_wait" in calls else np.zeros(len(calls), bool)


# -- reading the window ----------------------------------------------------------------------
def loop_calls(ctx: RuleContext) -> tuple[pd.DataFrame, tuple[int, int] | None, int]:
    """The window's blocking calls inside the loop, the loop's span, and how many calls fell outside it."""
    api = ctx.frame("api")
    memcpy = ctx.frame("memcpy") if ctx.trace.has("memcpy") else None
    # No memcpy rows (graph-replayed decode): no copy table as long as the API calls.
    copies = copy_directions(api, memcpy) if memcpy is not None and len(memcpy) else None
    calls = blocking_calls(api, ctx.api_base_names(), copies)
    del copies
    if calls.empty and not ctx.trace.has("osrt"):
        return calls, None, 0
    span = loop_span(ctx.window.steps, gpu_launches(ctx))
    keep = in_loop(calls, span)
    calls, dropped = calls.loc[keep].reset_index(drop=True), int((~keep).sum())
    if span is not None:
        calls = with_host_waits(calls, ctx.readback_waits(span[0], span[1], known=int(
            calls["after_readback"].sum() + (calls["kind"] == "readback").sum())))
    return calls, span, dropped


def with_host_waits(calls: pd.DataFrame, waits: pd.DataFrame) -> pd.DataFrame:
    """The blocking calls plus the host's OS waits on a readback (JAX's ``float(loss)``: a futex, no sync call),
    less the waits that overlap a blocking call of their thread (a sync already counted)."""
    if waits.empty:
        return calls
    if not calls.empty:
        keep = np.ones(len(waits), bool)
        for (pid, tid), mine in calls.groupby(["pid", "tid"], sort=False):
            rows = np.flatnonzero((waits["pid"].to_numpy() == pid) & (waits["tid"].to_numpy() == tid))
            if not len(rows):
                continue
            s, e = mine["start"].to_numpy(np.int64), mine["end"].to_numpy(np.int64)
            at = np.searchsorted(s, waits["end"].to_numpy()[rows], side="left") - 1
            overlap = (at >= 0) & (e[np.maximum(at, 0)] > waits["start"].to_numpy()[rows])
            keep[rows[overlap]] = False
        waits = waits.loc[keep]
    if waits.empty:
        return calls
    waits = waits.assign(host_wait=True)
    if calls.empty:
        return waits.reset_index(drop=True)
    both = pd.concat([calls.assign(host_wait=False), waits.astype(calls.dtypes.to_dict())], ignore_index=True)
    return both.sort_values("start", kind="stable").reset_index(drop=True)


def measure(ctx: RuleContext, calls: pd.DataFrame, span: tuple[int, int], dropped: int) -> SyncEvidence:
    """The evidence of the loop's blocking ``calls`` (from :func:`loop_calls`)."""
    # The steady state is the loop: the steps when known, else the first to the last GPU launch
    # of the window. GPU activity counts graph replays: time inside a replay is not idle.
    lo, hi = span
    budget = ctx.budget
    steady_ns = budget.total_ns if budget is not None else max(1, hi - lo)
    ops = ctx.gpu_ops
    if budget is not None:
        ops = ops.take(ops.device == budget.device)
    union = merge_intervals(ops.start, ops.end)
    durations = (calls["end"] - calls["start"]).to_numpy(np.int64)
    pid, tid, thread_blocked = busiest_thread(calls, durations)
    ends = calls["end"].to_numpy(np.int64)
    bubbles = idle_after(ends, union, hi)
    gpu_idle = budget.idle_ns if budget is not None else (
        max(0, steady_ns - busy_within(union, lo, hi)) if len(union[0]) else steady_ns)
    p50, longest = per_call_stats(durations)
    queued_readbacks = int(calls["after_readback"].sum())
    names = ctx.api_base_names()
    graph_launch = in_set(names, GRAPH_LAUNCH_APIS)
    graph_launch_p50 = None
    if graph_launch.any() and ctx.trace.capture.graph_trace_mode == "Node":
        api = ctx.frame("api")
        graph_launch_p50 = float(np.median((api["end"] - api["start"]).to_numpy()[graph_launch]))
    return SyncEvidence(
        calls=calls, dropped=dropped, steady_ns=steady_ns, blocked=int(durations.sum()), pid=pid, tid=tid,
        share=pct(thread_blocked, steady_ns), p50=p50, longest=longest, bubbles=bubbles,
        bubble_total=bubble_time(ends, bubbles, lo, hi),
        recoverable=int(np.minimum(durations, bubbles).sum()),
        host_wait_recoverable=int(np.minimum(durations, bubbles)[_host_waits(calls)].sum()),
        after_sync=budget.ns("after_sync") if budget is not None else gpu_idle, gpu_idle=gpu_idle,
        steps=step_count(ctx), by_api=per_api(calls, durations),
        readbacks=queued_readbacks + int((calls["kind"] == "readback").sum()), queued_readbacks=queued_readbacks,
        confirmed=confirmed_calls(calls, ctx.trace.frame("sync", SYNC_COLUMNS)) if ctx.trace.has("sync") else None,
        graph_launches=bool(graph_launch.any()), graph_launch_p50=graph_launch_p50)
