"""kernel-tail: kernels (and host API calls) whose slow invocations cost real time."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import numpy as np
import pandas as pd

from nsys_rules.api import (DEFAULT_TAXONOMY, Finding, Location, Renamed, Rule, RuleContext, Severity, base_name,
                            category_codes, code_durations, column_codes, first_rows, group_ids, is_any_launch,
                            is_waiting_call, launching_rows, masked_durations, metric, part_of_class, pct,
                            require_visible_kernels, rows_with_codes)
from nsys_rules.rules.kernel_tail.tails import (clean_range_name, nvtx_path, periodic_tail, positional_tail, slow_runs,
                                                step_index, tail_table)

#: A kernel group: one device, name and launch configuration (a name often covers several shapes).
KERNEL_KEYS = ("device_id", "name", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")


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
    With `api`, host API calls get the same statistics (info only).
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

    # -- kernels ---------------------------------------------------------------------------
    def _kernel_findings(self, ctx: RuleContext, kernels: pd.DataFrame) -> Iterable[Finding]:
        opts = ctx.options
        group = group_ids([column_codes(kernels[c]) for c in KERNEL_KEYS])
        if len(group) and int(group.max()) < 2**31:
            group = group.astype(np.int32)  # 4 bytes per kernel: held, and gathered, for the whole rule
        end, start = kernels["end"].to_numpy(), kernels["start"].to_numpy()
        # Whole ns as int64 (the loader's times): the quantiles and sums come out as from float64
        # (exact below 2**53 ns), without the float copy the sort needed.
        durations = np.subtract(end, start) if end.dtype.kind in "iu" and start.dtype.kind in "iu" else \
            np.subtract(end, start, dtype=np.float64)
        launch = kernels["launch_start"].to_numpy()
        # Launch order, GPU start breaking ties: the kernels of one graph replay share their
        # launch call (cudaGraphLaunch), so its time alone does not order them.
        start = kernels["start"].to_numpy()
        in_order = len(launch) < 2 or bool(((launch[1:] > launch[:-1]) |
                                            ((launch[1:] == launch[:-1]) & (start[1:] >= start[:-1]))).all())
        sequence = None  # rows already in launch order (eager launches, one stream): no sort, no ranks
        if not in_order:
            sequence = np.empty(len(launch), np.int64)
            sequence[np.lexsort((start, launch))] = np.arange(len(launch))
        table = tail_table(group, durations)
        steps = ctx.window.steps
        device = kernels["device_id"].to_numpy()
        if device.dtype.kind in "iu" and device.min() == device.max():  # one GPU: a sum, not a 1M-row group-by
            device_time = pd.Series([durations.sum()], index=pd.Index(device[:1]))
        else:
            device_time = pd.Series(durations).groupby(device).sum()
        # One GPU (a one-value column): its id for every group, without a scan for the groups' first rows.
        table["device"] = np.full(len(table), device[0]) if device.strides == (0,) and len(device) else \
            device[first_rows(group)]
        table["gpu_time"] = device_time.reindex(table["device"]).to_numpy()
        table["share"] = table["tail_cost"] / table["gpu_time"]
        gated = ((table["max_p50"] > opts.outlier_ratio) | (table["p99_p50"] > opts.tail_ratio)) & \
            (table["count"] >= opts.min_count) & (table["share"] >= opts.min_share_pct / 100)
        # The position tests judge only the groups that can be reported: each group's numbers come
        # from its own invocations, so the others' rows are left out of the sort.
        chosen = np.zeros(len(table) + 1, bool)
        chosen[np.flatnonzero(gated.to_numpy())] = True
        rows = np.flatnonzero(chosen[group]) if gated.any() else np.zeros(0, np.int64)
        pos = positional_tail(group[rows], step_index(launch[rows], steps), None if sequence is None else sequence[rows],
                              durations[rows], table["p50"].to_numpy())
        table = table.join(pos)
        candidates = table[gated].sort_values("tail_cost", ascending=False, kind="stable")
        reported = 0
        for gid, row in candidates.iterrows():
            if reported >= opts.max_findings:
                break
            reported += 1
            rows = np.flatnonzero(group == gid)
            if sequence is not None:
                rows = rows[np.argsort(sequence[rows], kind="stable")]  # launch order
            yield self._kernel_finding(ctx, kernels, rows, row, durations, len(steps), len(candidates))

    def _kernel_finding(self, ctx: RuleContext, kernels: pd.DataFrame, rows: np.ndarray, row: pd.Series,
                        durations: np.ndarray, n_steps: int, n_candidates: int) -> Finding:
        opts = ctx.options
        first = kernels.iloc[rows[0]]
        full_name = str(first["name"])
        grid = (int(first["grid_x"]), int(first["grid_y"]), int(first["grid_z"]))
        block = (int(first["block_x"]), int(first["block_y"]), int(first["block_z"]))
        label = f"{base_name(full_name)} grid {grid} block {block}"
        gpu_time = float(row["gpu_time"])
        plain_cost = float(row["tail_cost"])
        # Two position tests, the better explanation wins: the rank within each step (needs
        # steps with several invocations of the group), and a period in the group's own launch
        # sequence (works without step ranges, and when each step holds one invocation).
        testable = n_steps >= opts.min_steps and row["steps_seen"] >= opts.min_steps and \
            row["in_steps"] >= 0.8 * row["count"] and row["in_steps"] > row["steps_seen"]
        positional_cost = float(row["positional"]) + max(0.0, plain_cost - float(row["plain_in_steps"]))
        explained_by = f"each position in the step ({int(row['steps_seen'])} steps)"
        plain_tested, positional_tested = float(row["plain_in_steps"]), float(row["positional"])
        in_order = durations[rows]  # rows come in launch order
        cost_p, period, held_out = periodic_tail(in_order, opts.max_period)
        if period and held_out <= opts.shape_explained_pct / 100 and (not testable or cost_p < positional_cost):
            testable, positional_cost, plain_tested, positional_tested = True, cost_p, plain_cost, cost_p
            explained_by = f"each position in a repeating sequence of {period} launches"
        shape_variation = testable and (positional_tested <= opts.shape_explained_pct / 100 * plain_tested
                                        or positional_cost < opts.min_share_pct / 100 * gpu_time)
        cost = min(plain_cost, positional_cost) if testable else plain_cost
        share = cost / gpu_time if gpu_time else 0.0
        metrics = {
            "count": metric(int(row["count"]), "count"), "total_time": metric(float(row["total"]), "ns"),
            "p50": metric(float(row["p50"]), "ns"), "p95": metric(float(row["p95"]), "ns"),
            "p99": metric(float(row["p99"]), "ns"), "max": metric(float(row["max"]), "ns"),
            "max_over_p50": metric(float(row["max_p50"]), "ratio"), "p99_over_p50": metric(float(row["p99_p50"]), "ratio"),
            "tail_cost": metric(plain_cost, "ns"), "tail_share_of_gpu_time": metric(100 * plain_cost / gpu_time, "%"),
            "tail_score": metric(float(row["tail_score"]), "ratio")}
        if testable:
            metrics["positional_tail_cost"] = metric(positional_cost, "ns")
        worst = self._worst(ctx, kernels, rows, durations)
        stats = (f"{label}: {int(row['count'])} invocations, p50 {row['p50'] / 1e3:.1f} us, p95 {row['p95'] / 1e3:.1f} us, "
                 f"p99 {row['p99'] / 1e3:.1f} us, max {row['max'] / 1e3:.1f} us (max/p50 {row['max_p50']:.2f}, "
                 f"p99/p50 {row['p99_p50']:.2f}, tail score {row['tail_score']:.0f}); time above p50 "
                 f"{plain_cost / 1e6:.2f} ms = {pct(plain_cost, gpu_time):.1f} % of steady-state GPU time "
                 f"({gpu_time / 1e6:.1f} ms).")
        slowest = "; ".join(worst["text"])
        location = Location(device=int(row["device"]), kernel=full_name, stream=worst["stream"],
                            start_ns=worst["start"], end_ns=worst["end"])
        key = f"grid={grid} block={block}"
        if shape_variation:
            message = (stats + f" Measured against the median of {explained_by}, the tail is only "
                       f"{positional_cost / 1e6:.3f} ms ({pct(positional_cost, gpu_time):.2f} %): durations follow the "
                       "position in the sequence, so this is shape variation (different matrices "
                       f"sharing one kernel and launch configuration), not a tail. Slowest: {slowest}.")
            recommendation = ("Nothing to fix as a tail. To see each shape separately, give the call sites their own "
                              "NVTX ranges (e.g. `nvtx.range('o_proj')` / `nvtxRangePush(\"down_proj\")`) or launch "
                              "configurations; judge each shape's speed with gemv-dominance's bandwidth numbers.")
            return ctx.finding(message, recommendation, severity=Severity.INFO, metrics=metrics, location=location,
                               title="Kernel duration spread is shape variation, not a tail", key=key,
                               estimated_savings_ns=0)  # nothing to gain: under the noise floor
        severity = Severity.WARNING if share >= opts.warn_share_pct / 100 else Severity.INFO
        group_d = durations[rows]
        slow = group_d > opts.tail_ratio * row["p50"]
        slow_count = int(slow.sum())
        # The playbook's labels: p99/p50 over tail_ratio is a systematic tail, max/p50 over
        # outlier_ratio alone means outliers. With few invocations p99 is the second-largest
        # value, so a "systematic" tail needs at least 3 slow invocations and 1 % of them.
        systematic = row["p99_p50"] > opts.tail_ratio and slow_count >= max(3, 0.01 * row["count"])
        kind = "systematic tail" if systematic else "outlier invocations"
        runs = slow_runs(slow)
        what = (f"A systematic tail: {slow_count} invocations ({pct(slow_count, row['count']):.1f} %) run over "
                f"{opts.tail_ratio:g}x the median" if systematic else
                f"Outlier invocations: {slow_count} of {int(row['count'])} run over {opts.tail_ratio:g}x the median")
        message = stats + f" {what}. Slowest: {slowest}."
        phase = systematic and runs <= 3 and slow_count >= 10
        if phase:
            message += (f" The slow invocations are {'consecutive' if runs == 1 else f'in {runs} consecutive runs'}: "
                        "a phase of the run (other input sizes, clock throttling, or competing work during that "
                        "period), not scattered noise.")
        if testable:
            message += (f" Judged against the median of {explained_by}, the tail stays at "
                        f"{positional_cost / 1e6:.2f} ms, so it is not shape variation.")
        more = n_candidates - opts.max_findings
        if more > 0:
            message += f" ({more} more kernel group(s) with smaller tails not listed.)"
        return ctx.finding(message, self._advice(full_name, kind, row, cost, phase), severity=severity, metrics=metrics,
                           location=location, estimated_savings_ns=cost, key=key,
                           budget_part=part_of_class(DEFAULT_TAXONOMY.classify_one(full_name)))

    @staticmethod
    def _advice(name: str, kind: str, row: pd.Series, cost: float, phase: bool = False) -> str:
        lower = name.lower()
        gain = f"Removing the tail saves up to {cost / 1e6:.2f} ms of GPU time over the window."
        if phase and not ("moe" in lower or "expert" in lower):
            return ("Open the trace at the start of the slow phase (first listed timestamps) and compare it with the "
                    "fast part: a change of problem size or arguments, GPU clocks dropping (check with "
                    "`nsys profile --gpu-metrics-devices=all` or `nvidia-smi -q -d CLOCK`), or another process/stream "
                    "competing from then on. " + gain)
        if "moe" in lower or "expert" in lower:
            return ("MoE route imbalance: a few hot experts get most tokens, and their launches run "
                    f"{row['p99'] / max(row['p50'], 1):.0f}x the median. Balance the routing (capacity factor / "
                    "auxiliary load-balancing loss, or expert-parallel replication of hot experts) and replace the "
                    "per-expert launches with one grouped GEMM over all experts sized by the per-expert token counts, "
                    "so one hot expert no longer serializes the step. " + gain)
        if "nccl" in lower or "allreduce" in lower or "all_reduce" in lower:
            return ("Collective tail: the slow invocations wait for the slowest rank (rank skew). Compare the ranks' "
                    "traces at the listed timestamps and balance the work before the collective. " + gain)
        if kind == "systematic tail":
            return ("A steady fraction of invocations run slow: variable work per call (input sizes, sequence "
                    "lengths) or another stream competing for SMs or memory bandwidth. Check what overlaps the listed "
                    "instances in the timeline; if it is another stream, give this stream higher priority "
                    "(`cudaStreamCreateWithPriority`) or serialize the competing work; if the work varies, bucket "
                    "the shapes. " + gain)
        return ("Rare outlier invocations: check what overlaps the listed instances in the timeline (a concurrent "
                "kernel or memcpy on another stream, an allocation or host sync, clock throttling); move one-off work "
                "(allocations, copies) out of the steady loop. " + gain)

    @staticmethod
    def _worst(ctx: RuleContext, kernels: pd.DataFrame, rows: np.ndarray, durations: np.ndarray) -> dict:
        count = max(1, ctx.options.worst_instances)
        pick = rows[np.argsort(-durations[rows], kind="stable")[:count]]
        steps = ctx.window.steps
        step_of = step_index(kernels["launch_start"].to_numpy()[pick], steps)
        threads = _launch_threads(ctx, kernels.iloc[pick])
        nvtx = ctx.trace.frame("nvtx", ["start", "end", "name", "pid", "tid"]) if ctx.trace.has("nvtx") else None
        if nvtx is not None:
            nvtx = nvtx[nvtx["end"].notna()]
        text = []
        for i, r in enumerate(pick):
            k = kernels.iloc[r]
            pid, tid = threads[i]
            path = nvtx_path(nvtx, pid, tid, int(k["launch_start"]))
            where = f" in step {int(step_of[i]) + 1}/{len(steps)}" if step_of[i] >= 0 else ""
            shown = [clean_range_name(p) for p in path[-3:]]  # innermost three: enough to place it
            ranges = f", NVTX {' > '.join(shown)}" if path else ""
            text.append(f"{durations[r] / 1e3:.1f} us at {int(k['start']) / 1e6:.3f} ms{where}{ranges}")
        top = kernels.iloc[pick[0]]
        return {"text": text, "start": int(top["start"]), "end": int(top["end"]), "stream": int(top["stream_id"])}

    # -- host API calls --------------------------------------------------------------------
    def _api_findings(self, ctx: RuleContext) -> Iterable[Finding]:
        opts = ctx.options
        api = ctx.frame("api")
        if api.empty:
            return
        # Judge each distinct name once, then map by category code: never a regex per call.
        names = ctx.api_base_names()
        codes = category_codes(names)  # a view: ``.cat.codes`` copies 2.2M codes
        uniques = names.cat.categories
        waiting = np.array([is_waiting_call(str(n)) for n in uniques] + [True], bool)  # last: NULL
        lo, hi = ctx.window_bounds()
        window_ns = float(max(hi - lo, 1))
        start, end = api["start"].to_numpy(), api["end"].to_numpy()
        # Names whose calls add up to less than the share a tail must reach (a tail is at most the
        # calls' whole time), or too few calls, cannot be reported: left out before the sort.
        count, total = code_durations(codes, start, end, len(uniques))
        reportable = ~waiting[:-1] & (total / window_ns >= opts.api_min_share_pct / 100) & (count >= opts.min_count)
        if not reportable.any():
            return
        # Only the reportable calls, as int64 ns (exact; tail_table's sums and quantiles come out the
        # same as from float64) and their name codes: the smallest arrays that hold them.
        sub = rows_with_codes(codes, np.flatnonzero(reportable), np.append(reportable, False))
        durations = masked_durations(start, end, sub)
        if int(np.count_nonzero(reportable)) == 1 and len(durations):  # one name (usual): one group, no factorize
            group, first = np.zeros(len(durations), np.int32), np.flatnonzero(reportable)
        else:
            picked = codes[sub]
            group, first = pd.factorize(picked)  # first: the name code of each group
            group = group.astype(np.int32)
            del picked
        del sub
        table = tail_table(group, durations)
        del group, durations
        table["api"] = [str(uniques[c]) for c in first]
        table["share"] = table["tail_cost"] / window_ns
        gated = ((table["max_p50"] > opts.outlier_ratio) | (table["p99_p50"] > opts.tail_ratio)) & \
            (table["count"] >= opts.min_count) & (table["share"] >= opts.api_min_share_pct / 100)
        for _, row in table[gated].sort_values("tail_cost", ascending=False, kind="stable").head(opts.max_findings).iterrows():
            name = row["api"]
            blocked = is_any_launch(name)
            message = (f"Host API {name}: {int(row['count'])} calls, p50 {row['p50'] / 1e3:.1f} us, p99 "
                       f"{row['p99'] / 1e3:.1f} us, max {row['max'] / 1e3:.1f} us (max/p50 {row['max_p50']:.1f}, p99/p50 "
                       f"{row['p99_p50']:.1f}); time above p50 {row['tail_cost'] / 1e6:.2f} ms = "
                       f"{100 * row['share']:.1f} % of the steady-state window ({window_ns / 1e6:.1f} ms).")
            if blocked:
                message += (" Launch calls block when the device's launch queue is full, so this tail usually means "
                            "the GPU is behind the host (GPU-bound), not a slow host.")
                recommendation = ("Treat it as a symptom: the GPU work is the bottleneck; fix the kernel-side findings "
                                  "(kernel tails, GEMV bandwidth) first. If the GPU is idle while these calls block, "
                                  "look for lazy module loading (`CUDA_MODULE_LOADING=EAGER`) or a host lock.")
            else:
                recommendation = ("Check the slow calls in the timeline: a tail in allocation/free calls points to "
                                  "the allocator (use a caching or stream-ordered pool allocator, `cudaMallocAsync`), "
                                  "one in other calls to host contention (locks, another thread, page faults).")
            yield ctx.finding(message, recommendation, severity=Severity.INFO, metrics={
                "count": metric(int(row["count"]), "count"), "p50": metric(float(row["p50"]), "ns"),
                "p99": metric(float(row["p99"]), "ns"), "max": metric(float(row["max"]), "ns"),
                "max_over_p50": metric(float(row["max_p50"]), "ratio"), "p99_over_p50": metric(float(row["p99_p50"]), "ratio"),
                "tail_cost": metric(float(row["tail_cost"]), "ns"),
                "tail_share_of_window": metric(100 * float(row["share"]), "%"),
                "tail_score": metric(float(row["tail_score"]), "ratio")},
                title="Host API tail", location=Location(api=name), key="api",
                # A launch call waiting on a full queue is the GPU being the bottleneck: nothing to gain here.
                estimated_savings_ns=0 if blocked else None)


def _launch_threads(ctx: RuleContext, gpu_rows: pd.DataFrame) -> list[tuple[int | None, int | None]]:
    """(pid, tid) of the API call that launched each GPU row (same pid + correlationId), None when unknown."""
    if not ctx.trace.has("api"):
        return [(None, None)] * len(gpu_rows)
    api = ctx.trace.frame("api", ["start", "correlation_id", "pid", "tid"])
    rows, found = launching_rows(ctx.trace, gpu_rows["pid"].to_numpy(), gpu_rows["correlation_id"].to_numpy())
    pid, tid = api["pid"].to_numpy()[rows], api["tid"].to_numpy()[rows]
    return [(int(p), int(t)) if ok else (None, None) for p, t, ok in zip(pid, tid, found, strict=True)]


RULE = KernelTail
