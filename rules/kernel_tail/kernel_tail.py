"""kernel-tail: kernels (and host API calls) whose slow invocations cost real time.

The rule reads as three steps: ``measure`` (the window's kernels and API calls as groups with
their tail statistics, from ``tails``), ``judge`` (which groups have a tail, whether it is shape
variation, its kind and cost) and ``phrase`` (the message and the fix for the case).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import islice
from typing import Iterable

import numpy as np
import pandas as pd

from nsys_rules.api import (Finding, Window, Location, part_of_class, Renamed, require_visible_kernels, Rule, RuleContext,
                            Severity)
from nsys_rules.api.analysis import base_name, DEFAULT_TAXONOMY, is_any_launch
from nsys_rules.rules.kernel_tail.judge import has_tail, judge_kernel
from nsys_rules.rules.kernel_tail.measure import api_groups, copy_call_sizes, kernel_groups, slowest
from nsys_rules.rules.kernel_tail.phrase import (API_TITLE, SHAPE_TITLE, advice, api_message, api_metrics, copy_size_words,
                                                 api_recommendation, instance_text, kernel_message, kernel_metrics,
                                                 shape_recommendation)
from nsys_rules.rules.kernel_tail.tails import periodic_tail


@dataclass(frozen=True)
class Options:
    """Options of kernel-tail."""

    outlier_ratio: float = field(default=2.0, metadata={"help": "max/p50 above this: outlier invocations"})
    tail_ratio: float = field(default=1.5, metadata={"help": "p99/p50 above this: a systematic tail"})
    min_share_pct: float = field(default=1.0, metadata={
        "help": "a tail costing less than this percent of steady-state GPU time is not reported"})
    warn_share_pct: float = field(default=5.0, metadata={
        "help": "a tail costing at least this percent of steady-state GPU time is a warning"})
    min_count: int = field(default=10, metadata={"help": "invocations a kernel group needs before its p99 means anything"})
    min_steps: int = field(default=3, metadata={"help": "step instances needed to test for shape variation by position"})
    shape_explained_pct: float = field(default=25.0, metadata={
        "help": "when the tail measured against each step position's own median is at most this percent of the "
                "plain tail, the spread is shape variation, not a tail"})
    max_period: int = field(default=64, metadata={
        "help": "without step ranges, longest launch period (in invocations of the group) tried for shape variation"})
    worst_instances: int = field(default=3, metadata={"help": "slowest invocations listed per finding"})
    max_findings: int = field(default=5, metadata={"help": "kernel groups reported per trace, costliest first"})
    api: bool = field(default=True, metadata={"help": "also judge host API calls (info only)"})
    api_min_share_pct: float = field(default=5.0, metadata={
        "help": "an API tail is reported when it costs at least this percent of the steady-state window"})


class KernelTail(Rule):
    """Kernels whose slow invocations (the tail above the median) cost GPU time.

    What it detects: per kernel grouped by device, name and launch configuration (grid,
    block), in the steady state: p50/p95/p99/max, max/p50 above `outlier_ratio` (outlier
    invocations) or p99/p50 above `tail_ratio` (a systematic tail), with the tail cost (time
    above the p50) and pegainfer's tail score (max_us * log2(count+1) * max(1, max/p50)).
    Each invocation is also compared with the median of its position in the step (NVTX or
    kernel-pattern steps) and, judged out of sample, of its position in a repeating sequence
    of the group's own launches: durations that follow the position are shape variation,
    reported as such (info). Slow invocations that come in one or a few consecutive runs are
    named a phase (other sizes, clock throttling, competing work).
    With `api`, host API calls get the same statistics (info only); a copy call's tail whose slow
    calls move far more bytes at about the same rate is said to be the copy size, not a tail.
    Why it hurts: a tail is time spent above what the kernel usually takes: MoE route
    imbalance (hot experts), rank skew, stream contention, allocator stalls or variable work.
    One name often covers several shapes or template instances, which is why groups are
    split by launch configuration before judging.
    Evidence: the percentiles, ratios, tail cost and its share of steady-state GPU time, the
    positional tail, and the slowest invocations with their time, step and NVTX ranges.
    Next optimizations: open the slowest instances in the timeline and look at what overlaps
    them; for MoE experts balance the routing or use one grouped GEMM over experts; for
    contention move the competing work to a lower-priority stream; for variable work bucket
    the shapes. The recommendation names the case.
    Options: `outlier_ratio`, `tail_ratio`, `min_share_pct`, `warn_share_pct`, `min_count`, `min_steps`,
    `shape_explained_pct`, `max_period`, `worst_instances`, `max_findings`, `api`, `api_min_share_pct`.
    Requires: the kernel table; the API table (launching thread, API tails) and NVTX (steps,
    ranges of the slowest instances) when present.
    False positives: tiny kernels with a noisy max are not reported (tail cost under
    `min_share_pct`); shapes sharing a name and grid are recognized only when they repeat in a
    fixed order (per step, or with a period of at most `max_period` launches); shapes chosen
    by data (variable sequence lengths) read as a tail. Launch calls block when the
    launch queue is full, so a launch-call tail is often the GPU being behind.
    """

    name = "kernel-tail"
    title = "Kernel tail: slow invocations cost GPU time"
    default_severity = Severity.WARNING
    requires = ("kernels",)
    optional = ("api", "nvtx")
    columns = {"kernels": ("start", "end", "name", "device_id", "stream_id", "correlation_id", "pid", "grid_x", "grid_y",
                           "grid_z", "block_x", "block_y", "block_z"),
               "api": ("start", "end", "name", "correlation_id", "pid", "tid"),
               "nvtx": ("start", "end", "name", "pid", "tid")}
    window = "steady"
    Options = Options
    needs_release_build = True  # tunes measured kernel/host times: a debug build's are not the program's
    renamed_options = {"min_share": Renamed("min_share_pct", 100), "warn_share": Renamed("warn_share_pct", 100),
                       "shape_explained": Renamed("shape_explained_pct", 100),
                       "api_min_share": Renamed("api_min_share_pct", 100)}

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        require_visible_kernels(ctx.budget)
        kernels = ctx.frame("kernels")
        if len(kernels):
            yield from self._kernel_findings(ctx, kernels)
        if ctx.options.api and ctx.trace.has("api"):
            yield from self._api_findings(ctx)

    def _kernel_findings(self, ctx: RuleContext, kernels: pd.DataFrame) -> Iterable[Finding]:
        opts = ctx.options
        groups = kernel_groups(kernels)
        chosen = has_tail(groups.table, opts.outlier_ratio, opts.tail_ratio, opts.min_count, opts.min_share_pct)
        table = groups.with_positions(chosen.to_numpy(), ctx.window.steps)
        candidates = table[chosen].sort_values("tail_cost", ascending=False, kind="stable")
        for gid, row in islice(candidates.iterrows(), max(0, opts.max_findings)):
            rows = groups.rows_of(gid)
            yield self._kernel_finding(ctx, kernels, rows, row, groups.durations, len(candidates) - opts.max_findings)

    def _kernel_finding(self, ctx: RuleContext, kernels: pd.DataFrame, rows: np.ndarray, row: pd.Series,
                        durations: np.ndarray, more: int) -> Finding:
        opts = ctx.options
        first = kernels.iloc[rows[0]]
        full_name = str(first["name"])
        grid = (int(first["grid_x"]), int(first["grid_y"]), int(first["grid_z"]))
        block = (int(first["block_x"]), int(first["block_y"]), int(first["block_z"]))
        in_order = durations[rows]  # rows come in launch order
        verdict = judge_kernel(row, in_order, periodic_tail(in_order, opts.max_period), len(ctx.window.steps), opts)
        worst = slowest(ctx, kernels, rows, durations, opts.worst_instances)
        text = kernel_message(f"{base_name(full_name)} grid {grid} block {block}", row, verdict,
                              "; ".join(instance_text(i, len(ctx.window.steps)) for i in worst.instances), more,
                              opts.tail_ratio, _judged_time(ctx.window))
        named = tuple(i.step + 1 for i in worst.instances if i.step >= 0)
        location = Location(device=int(row["device"]), kernel=full_name, stream=worst.stream, start_ns=worst.start,
                            end_ns=worst.end, steps=named or None)
        key = f"grid={grid} block={block}"
        if verdict.shape_variation:
            return ctx.finding(text, shape_recommendation(ctx.framework), severity=Severity.INFO,
                               metrics=kernel_metrics(row, verdict), location=location, title=SHAPE_TITLE, key=key,
                               estimated_savings_ns=0)  # nothing to gain: under the noise floor
        return ctx.finding(text, advice(full_name, verdict.kind, row, verdict.cost, verdict.phase),
                           severity=verdict.severity, metrics=kernel_metrics(row, verdict), location=location,
                           estimated_savings_ns=verdict.cost, key=key,
                           budget_part=part_of_class(DEFAULT_TAXONOMY.classify_one(full_name)))

    def _api_findings(self, ctx: RuleContext) -> Iterable[Finding]:
        opts = ctx.options
        measured = api_groups(ctx, opts.api_min_share_pct, opts.min_count)
        if measured is None:
            return
        table, window_ns = measured
        chosen = has_tail(table, opts.outlier_ratio, opts.tail_ratio, opts.min_count, opts.api_min_share_pct)
        for _, row in table[chosen].sort_values("tail_cost", ascending=False, kind="stable").head(opts.max_findings).iterrows():
            name = row["api"]
            text, fix = api_message(row, window_ns), api_recommendation(name)
            sized = copy_call_sizes(ctx, name)
            by_size = copy_size_words(*sized, opts.tail_ratio) if sized is not None else None
            if by_size:
                text += by_size
                fix = ("Treat the copies by size, not as a tail: the large ones are the cost (see pageable-memcpy and "
                       "step-uploads for them: pinned buffers, fewer or overlapped large copies); the small ones are "
                       "not slow.")
            yield ctx.finding(text, fix, severity=Severity.INFO,
                              metrics=api_metrics(row), title=API_TITLE, location=Location(api=name), key="api",
                              # A launch call waiting on a full queue is the GPU being the bottleneck: nothing to gain here.
                              estimated_savings_ns=0 if is_any_launch(name) else None)



def _judged_time(window: Window) -> str:
    """What the GPU time a tail is a share of is: the steady state's, or a user's window holding no steady step."""
    return "GPU time in the filter window" if window.kind == "filter" and window.cut is None else "steady-state GPU time"


RULE = KernelTail
