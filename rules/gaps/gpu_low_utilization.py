"""gpu-low-utilization: time regions where GPU work fills little of the time (nsys `gpu_time_util`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import pandas as pd

from nsys_rules.api import plain_number
from nsys_rules.api import Finding, Location, Renamed, Rule, RuleContext, Severity, gpu_op_frames, metric, pct
from nsys_rules.api.analysis import chunk_utilization, merge_low_chunks, split_flagged
from nsys_rules.rules.gaps.common import GPU_TIME_COLUMNS, UNBOUNDED, per_device, steady_gpu_span


@dataclass(frozen=True)
class Options:
    """Options of gpu-low-utilization."""

    window: str = field(default="full", metadata={"help": "'full' (whole capture, as nsys analyze) or 'steady'"})
    chunks: int = field(default=30, metadata={"help": "equal chunks the GPU's active span is cut into (nsys: 30)"})
    max_in_use_pct: float = field(default=50.0, metadata={
        "help": "chunks whose summed GPU operation time is under this percent of the chunk are low (nsys: 50)"})
    report: str = field(default="auto", metadata={
        "help": "'all': one finding per low region; 'group': one per process and device; "
                "'auto': per region while a device has at most max_findings"})
    max_findings: int = field(default=5, metadata={"help": "regions per device reported one by one in 'auto' mode"})
    warn_share_pct: float = field(default=5.0, metadata={
        "help": "warning when idle time in low regions that reach the steady state is this percent of the span"})


def low_utilization_regions(ops: pd.DataFrame | list[pd.DataFrame], chunks: int, below: float) -> pd.DataFrame:
    """Per process and device: merged runs of low chunks (pid, device_id, start, end, in_use_pct, span).

    ``ops``: one frame of GPU operations, or several (kernels, memcpys, memsets) read as one.
    """
    rows = []
    for pid, dev, s, e in per_device(ops):
        lo, hi = int(s.min()), int(e.max())
        starts, lengths, used = chunk_utilization(s, e, lo, hi, chunks)
        for start, length, in_use in merge_low_chunks(starts, lengths, used, below):
            rows.append((pid, dev, start, start + length, in_use, hi - lo))
    return pd.DataFrame(rows, columns=["pid", "device_id", "start", "end", "in_use_pct", "span"])


class GpuLowUtilization(Rule):
    """Regions of the capture where GPU operations fill under half of the time.

    What it detects: per process and device, the span from the first to the last GPU operation
    is cut into `chunks` equal chunks; chunks whose summed kernel, memcpy and memset time is
    under `max_in_use_pct` percent are low, and consecutive low chunks merge into one region
    with a duration-weighted in-use percent (nsys's `gpu_time_util`; concurrent operations add
    up, so a chunk can pass 100 %).
    Why it hurts: an idle GPU is paid for and does nothing; over a steady state it means the
    host (launches, syncs, Python) or I/O sets the pace.
    Evidence: each region's time range, in-use percent and idle time; whether it reaches the
    steady state.
    Next optimizations: for regions in the steady state see `launch-bound` (small kernels
    launched one by one: CUDA graphs), `sync-stall` and `gpu-idle-gaps`; for regions at
    start-up (loading, warm-up) narrow the capture (`capture-scope`).
    Options: `window`, `chunks`, `max_in_use_pct`, `report`, `max_findings`, `warn_share_pct`.
    Requires: at least one of the kernel, memcpy and memset tables.
    False positives: loading and warm-up are low by nature (they are reported at info); a
    server waiting for requests.
    """

    name = "gpu-low-utilization"
    title = "Low GPU utilization"
    default_severity = Severity.INFO
    requires = ()
    optional = ("kernels", "memcpy", "memset", "graph_trace", "api", "nvtx")
    columns = GPU_TIME_COLUMNS
    window = "full"
    aliases = ("gpu_time_util",)
    Options = Options
    renamed_options = {"warning_share": Renamed("warn_share_pct", 100)}

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        opts = ctx.options
        ops = gpu_op_frames(ctx)
        if not any(len(f) for f in ops):
            return
        regions = low_utilization_regions(ops, opts.chunks, opts.max_in_use_pct)
        del ops
        if regions.empty:
            return
        regions["idle"] = ((regions["end"] - regions["start"]) * (1 - regions["in_use_pct"].clip(upper=100) / 100))
        steady_lo, steady_hi = steady_gpu_span(ctx)
        for group in split_flagged(regions, ["pid", "device_id"], opts.report, opts.max_findings):
            g = group.rows
            pid, dev = group.key
            span = int(g["span"].iloc[0])
            length = int((g["end"] - g["start"]).sum())
            in_use = float((g["in_use_pct"] * (g["end"] - g["start"])).sum() / max(length, 1))
            idle = int(g["idle"].sum())
            # Chunks do not align with the steady state: a start-up region that grazes it is still judged as start-up.
            before, inside, after = _placed(g, steady_lo, steady_hi)
            reaches_steady = bool(inside >= 0.25 * max(1, steady_hi - steady_lo))
            severity = (Severity.WARNING if reaches_steady and idle >= opts.warn_share_pct / 100 * span else Severity.INFO)
            what = (f"GPU {dev} was {in_use:.1f} % in use over {length / 1e6:.1f} ms from {group.start / 1e9:.6f} s"
                    if group.single else
                    f"GPU {dev} was under {plain_number(opts.max_in_use_pct, 6)} % in use in {len(g)} regions, "
                    f"{length / 1e6:.1f} ms "
                    f"in all ({in_use:.1f} % in use on average)")
            known = (steady_lo, steady_hi) != UNBOUNDED
            phase = phase_words(before, inside, after) if known else "in a capture where no steady loop was found"
            if reaches_steady or (known and inside >= before + after):
                rec = ("The steady state leaves the GPU idle: see launch-bound, sync-stall and gpu-idle-gaps for the "
                       "cause (CUDA graphs for a launch-bound loop, removing host syncs, launching ahead).")
            elif opts.window == "steady" or not known:
                rec = ("This is not steady-state time: leave it out of the capture (see capture-scope) or judge a "
                       "window of the steady loop with `--filter-time` or `--filter-nvtx`.")
            else:
                rec = ("This is start-up or shutdown time: leave it out of the capture (see capture-scope) or judge "
                       "with `--set gpu-low-utilization.window=steady`.")
            yield ctx.finding(
                f"{what}, {phase}; {pct(length, span):.0f} % of the {span / 1e6:.1f} ms GPU span, "
                f"{idle / 1e6:.1f} ms idle.",
                rec, severity=severity,
                metrics={"regions": metric(len(g), "count"), "region_time": metric(length, "ns"),
                         "in_use": metric(in_use, "%"), "idle_time": metric(idle, "ns"),
                         "gpu_span": metric(span, "ns")},
                location=Location(pid=int(pid), device=int(dev), start_ns=group.start, end_ns=group.end),
                key=("steady" if reaches_steady else "start-up") + group.key_suffix)


def _placed(regions: pd.DataFrame, lo: int, hi: int) -> tuple[int, int, int]:
    """How much of ``regions``' time lies before ``lo``, between ``lo`` and ``hi``, and after ``hi``."""
    start, end = regions["start"], regions["end"]
    before = int((end.clip(upper=lo) - start).clip(lower=0).sum())
    after = int((end - start.clip(lower=hi)).clip(lower=0).sum())
    return before, int((end - start).sum()) - before - after, after


#: Where a part of a region lies, as a message names it.
PHASES = ("before the steady state (start-up)", "inside the steady state", "after the steady state (shutdown)")


def phase_words(before: int, inside: int, after: int) -> str:
    """Where regions lie relative to the steady state: ``inside the steady state``, or for regions in
    several phases how much is in each (``441.8 ms before the steady state (start-up), 2.3 ms inside it``)."""
    parts = [(name, ns) for name, ns in zip(PHASES, (before, inside, after), strict=True) if ns > 0]
    if len(parts) <= 1:
        return parts[0][0] if parts else PHASES[1]
    words = [f"{ns / 1e6:.1f} ms {name}" for name, ns in parts]
    return ", ".join([words[0]] + [w.replace("the steady state", "it", 1) if "inside" in w else w for w in words[1:]])


RULE = GpuLowUtilization
