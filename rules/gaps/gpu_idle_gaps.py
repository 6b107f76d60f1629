"""gpu-idle-gaps: stretches where a GPU ran nothing (nsys `gpu_gaps`, with a threshold fit for inference)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import numpy as np
import pandas as pd

from nsys_rules.api import counted, plain_number
from nsys_rules.api import Finding, Location, Renamed, Rule, RuleContext, Severity, gpu_op_frames, metric, pct
from nsys_rules.api.analysis import gaps_at_least, merge_intervals, split_flagged
from nsys_rules.rules.gaps.common import GPU_TIME_COLUMNS, per_device, steady_start


@dataclass(frozen=True)
class Options:
    """Options of gpu-idle-gaps."""

    window: str = field(default="full", metadata={"help": "'full' (whole capture, as nsys analyze) or 'steady'"})
    min_gap_ns: int = field(default=100_000, metadata={
        "help": "shortest idle stretch reported, ns (nsys: 500 ms). 100 us is 20x a kernel launch, so launch "
                "gaps (launch-bound's subject) are not counted, and ~2 % of a 5 ms decode step"})
    exclude_profiler_overhead: bool = field(default=True, metadata={
        "help": "drop gaps that overlap a profiler-overhead row of the process (the tracer, not the program)"})
    overhead_pattern: str = field(default="CUPTI|CUDA profiling", metadata={
        "help": "regex on overhead row names that count as tracer overhead; traced dlopen calls are the "
                "program's own loading and do not excuse a gap"})
    report: str = field(default="group", metadata={
        "help": "'all': one finding per gap; 'group': one per process, device and phase (start-up or run); "
                "'auto': per gap while a group has at most max_findings gaps"})
    max_findings: int = field(default=5, metadata={"help": "gaps per group reported one by one in 'auto' mode"})
    warn_share_pct: float = field(default=5.0, metadata={
        "help": "warning when run-phase gaps add up to this percent of the judged time"})
    min_ops: int = field(default=10, metadata={
        "help": "GPU operations a process must run on a device before its run-phase gaps can be a warning: with "
                "fewer there is no running program to stall (loading, tear-down, or a trace that lost its CUDA "
                "activity)"})


def device_gaps(ops: pd.DataFrame | list[pd.DataFrame], min_gap_ns: int) -> pd.DataFrame:
    """Idle gaps of at least ``min_gap_ns`` per process and device: pid, device_id, start, end, duration, ops.

    ``ops``: one frame of GPU operations, or several (kernels, memcpys, memsets) read as one;
    ``ops`` in the result is the number of GPU operations the process ran on the device.
    """
    out = []
    for pid, dev, op_starts, op_ends in per_device(ops):
        starts, lengths = gaps_at_least(op_starts, op_ends, min_gap_ns)
        if len(starts):
            out.append(pd.DataFrame({"pid": pid, "device_id": dev, "start": starts,
                                     "end": starts + lengths, "duration": lengths, "ops": len(op_starts)}))
    if not out:
        return pd.DataFrame(columns=["pid", "device_id", "start", "end", "duration", "ops"])
    return pd.concat(out, ignore_index=True)


def overlaps_any(starts: np.ndarray, ends: np.ndarray, other_starts: np.ndarray, other_ends: np.ndarray) -> np.ndarray:
    """For each [start, end), whether it overlaps any of the other intervals."""
    if not len(other_starts) or not len(starts):
        return np.zeros(len(starts), bool)
    s, e = merge_intervals(other_starts, other_ends)
    pos = np.searchsorted(e, starts, side="right")  # first merged interval ending after start
    ok = pos < len(s)
    hit = np.zeros(len(starts), bool)
    hit[ok] = s[pos[ok]] < ends[ok]
    return hit


class GpuIdleGaps(Rule):
    """GPU idle stretches of at least `min_gap_ns` between GPU operations.

    What it detects: per process and device, the time between the end of all GPU work so far
    (kernels, memcpys, memsets) and the next operation, when it is at least `min_gap_ns`
    (default 100 us; nsys's `gpu_gaps` uses 500 ms). Gaps overlapping profiler overhead are
    dropped, as nsys does. Gaps before the steady state are reported apart as start-up.
    Why it hurts: while the GPU idles the step does not progress; in the run phase a gap of
    100 us or more is a host-side stall (synchronization, allocation, Python work, I/O), not
    launch latency (a few us, see `launch-bound`).
    Evidence: gap count, total and longest gaps with their start times, share of the judged time.
    Idle gaps are a symptom: the report folds this finding into the finding that explains the same
    idle time (sync-stall, launch-bound, alloc-churn, step-outliers; capture-scope for start-up),
    and the saving belongs to that cause. Graph replays traced in graph mode count as GPU work.
    Next optimizations: find what the host did in the longest gap (the launching thread's API
    calls and NVTX ranges at that time); remove the synchronization or move host work off the
    critical path (overlap it with the GPU by launching ahead); start-up gaps belong to loading:
    leave them out of the capture (see `capture-scope`).
    A warning needs run-phase gaps of at least `warn_share_pct` percent of the judged time on a
    device where the process ran at least `min_ops` GPU operations: between a handful of them
    (loading, tear-down, a trace that lost its CUDA activity) no running program is stalled.
    Options: `window`, `min_gap_ns`, `exclude_profiler_overhead`, `overhead_pattern`, `report`, `max_findings`,
    `warn_share_pct`, `min_ops`.
    Requires: at least one of the kernel, memcpy and memset tables.
    False positives: idle time between requests of a server that is simply not loaded; the
    end of a step that waits for the next input.
    """

    name = "gpu-idle-gaps"
    title = "GPU idle gaps"
    default_severity = Severity.INFO
    requires = ()
    optional = ("kernels", "memcpy", "memset", "graph_trace", "overhead", "api", "nvtx")
    columns = {**GPU_TIME_COLUMNS, "overhead": ("start", "end", "pid", "name")}
    window = "full"
    aliases = ("gpu_gaps",)
    Options = Options
    renamed_options = {"warning_share": Renamed("warn_share_pct", 100)}

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        opts = ctx.options
        ops = gpu_op_frames(ctx)
        gaps = device_gaps(ops, opts.min_gap_ns)
        del ops
        if gaps.empty:
            return
        if opts.exclude_profiler_overhead and ctx.trace.has("overhead"):
            overhead = ctx.trace.frame("overhead", ["start", "end", "pid", "name"])
            overhead = overhead[overhead["name"].astype(str).str.contains(opts.overhead_pattern, regex=True)]
            drop = np.zeros(len(gaps), bool)
            for gap_pid, idx in gaps.groupby("pid").groups.items():
                mine = overhead[overhead["pid"] == gap_pid]
                sel = np.asarray(list(idx))
                drop[sel] = overlaps_any(gaps["start"].to_numpy()[sel], gaps["end"].to_numpy()[sel],
                                         mine["start"].to_numpy(), mine["end"].to_numpy())
            gaps = gaps.loc[~drop].reset_index(drop=True)
            if gaps.empty:
                return
        # A gap that opened before the steady state began is loading or warm-up, not the run.
        gaps["phase"] = np.where(gaps["start"].to_numpy() < steady_start(ctx), "start-up", "run")
        lo, hi = ctx.window_bounds()
        judged = max(1, hi - lo)
        for group in split_flagged(gaps, ["pid", "device_id", "phase"], opts.report, opts.max_findings):
            g = group.rows
            pid, dev, phase = group.key
            total = int(g["duration"].sum())
            worst = g.nlargest(3, "duration")
            share = pct(total, judged)
            run_phase = phase == "run"
            # A handful of GPU operations is no running program: their gaps stall nothing (a trace whose
            # CUDA activity was lost keeps a few copies seconds apart).
            running = int(g["ops"].iloc[0]) >= opts.min_ops
            severity = (Severity.WARNING if run_phase and running and total >= opts.warn_share_pct / 100 * judged
                        else Severity.INFO)
            longest = ", ".join(f"{d / 1e6:.3f} ms at {s / 1e9:.6f} s" for s, d in
                                zip(worst["start"].to_numpy(), worst["duration"].to_numpy(), strict=True))
            what = (f"GPU {dev} idled {total / 1e6:.3f} ms starting at {group.start / 1e9:.6f} s" if group.single else
                    f"GPU {dev} idled {counted(len(g), 'time')} for at least {plain_number(opts.min_gap_ns / 1e3, 6)} us, "
                    f"{total / 1e6:.3f} ms "
                    f"in all (longest: {longest})")
            where = "before the steady state (loading or warm-up)" if not run_phase else "while the program ran"
            rec = ("Leave loading and warm-up out of the capture (`-c cudaProfilerApi` around the measured loop, or "
                   "`--delay`), see capture-scope." if not run_phase else
                   "Look at the host thread's API calls and NVTX ranges inside the longest gap: remove the "
                   "synchronization or allocation there, or move the host work off the critical path so the next "
                   "GPU work is queued before the GPU runs dry.")
            yield ctx.finding(
                f"{what} {where}: {share:.2f} % of the judged {judged / 1e6:.1f} ms.",
                rec, severity=severity,
                metrics={"gaps": metric(len(g), "count"), "idle_time": metric(total, "ns"),
                         "longest_gap": metric(int(g["duration"].max()), "ns"),
                         "share_of_judged_time": metric(share, "%")},
                location=Location(pid=int(pid), device=int(dev), start_ns=group.start, end_ns=group.end),
                key=f"{phase}{group.key_suffix}")


RULE = GpuIdleGaps
