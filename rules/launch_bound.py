"""launch-bound: the GPU idles between small kernels because the host cannot launch them fast enough."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import numpy as np
import pandas as pd

from nsys_rules.api import (Finding, GRAPH_LAUNCH_APIS, Location, MissingData, Renamed, Rule, RuleContext, Severity,
                            busy_ns, duration_sum, first_of_each_call, in_set, metric, pct)


@dataclass(frozen=True)
class Options:
    """Options of launch-bound."""

    max_busy_pct: float = field(default=70.0, metadata={
        "help": "report only when kernels keep the GPU busy less than this percent of the steady state"})
    max_median_kernel_ns: int = field(default=50_000, metadata={
        "help": "report only when the median kernel is this short (ns): launch cost matters for small kernels"})
    max_launch_gap_ns: int = field(default=100_000, metadata={
        "help": "idle gaps before a kernel up to this long count as launch gaps; longer ones are host stalls "
                "(gpu-idle-gaps, sync-stall)"})
    graph_gap_ns: int = field(default=1_000, metadata={
        "help": "idle time per kernel that remains when the kernels replay from a CUDA graph (ns)"})
    min_kernels: int = field(default=100, metadata={"help": "fewest kernels in the steady state to judge"})
    warn_share_pct: float = field(default=5.0, metadata={
        "help": "warning when the estimated saving reaches this percent of the steady-state time"})


@dataclass(frozen=True)
class LaunchProfile:
    """The numbers launch-bound judges, for one device in the judged window."""

    kernels: int
    judged_ns: int
    busy_ns: int
    median_kernel_ns: float
    launch_calls: int
    launch_api_ns: int
    starved_gaps: int
    starved_ns: int
    savings_ns: int

    @property
    def busy_share(self) -> float:
        """Share of the judged time with at least one kernel running."""
        return self.busy_ns / self.judged_ns if self.judged_ns else 0.0


def launch_profile(kernels: pd.DataFrame, api_end: np.ndarray, lo: int, hi: int, launch_api_ns: int,
                   launch_calls: int, max_launch_gap_ns: int, graph_gap_ns: int) -> LaunchProfile:
    """Busy share, kernel sizes and the idle gaps the host caused (one device).

    A gap before a kernel is a launch gap when the GPU had run dry (every earlier kernel had
    ended) before the call launching this kernel returned, i.e. the GPU waited for the host,
    and the gap is at most ``max_launch_gap_ns``. With a CUDA graph ``graph_gap_ns`` per
    kernel remains, so the saving is the rest of each launch gap.
    """
    s = kernels["start"].to_numpy()
    e = kernels["end"].to_numpy()
    launched = np.asarray(api_end)
    if len(s) > 1 and not bool((s[1:] >= s[:-1]).all()):  # kernels usually come in start order: no sort
        order = np.argsort(s, kind="stable")
        s, e, launched = s[order], e[order], launched[order]
    median = float(np.median(e - s, overwrite_input=True)) if len(s) else 0.0  # partitions its own temporary
    if len(s) > 1:
        # Ends in order need no running max (a view), and the masks are combined in place: no
        # temporary as long as the kernels beyond the ones needed.
        prev_end = (e if len(e) < 2 or bool((e[1:] >= e[:-1]).all()) else np.maximum.accumulate(e))[:-1]
        gap = s[1:] - prev_end
        starved = launched[1:] >= prev_end  # the GPU waited for the launch call
        starved &= launched[1:] >= 0
        starved &= gap > 0
        starved &= gap <= max_launch_gap_ns
        starved &= prev_end >= lo
        starved &= s[1:] <= hi
        del prev_end
        # Sums over the starved gaps in place (``where=``): no gathered copy of them.
        starved_ns = int(np.sum(gap, where=starved))
        gap -= graph_gap_ns
        np.maximum(gap, 0, out=gap)
        savings = int(np.sum(gap, where=starved))
        n_starved = int(np.count_nonzero(starved))
        del gap, starved
    else:
        starved_ns = savings = n_starved = 0
    return LaunchProfile(len(s), max(0, hi - lo), busy_ns(s, e, lo, hi), median,
                         launch_calls, launch_api_ns, n_starved, starved_ns, savings)


class LaunchBound(Rule):
    """The GPU idles between small kernels while the host launches them one by one.

    What it detects: in the steady state, the loop keeps the GPU busy less than `max_busy_pct`
    percent of the time, the median kernel launched one by one is short (<= `max_median_kernel_ns`), and
    the GPU repeatedly runs dry before the next launch call returns: the host's per-kernel launch
    cost (framework overhead plus the launch API) sets the pace, not the GPU. Kernels replayed
    from CUDA graphs are not judged; a loop that already replays graphs is at most information
    (what is left between its replays is host work, not launches). The savings come from the
    budget's launch-wait part, whose split into CUDA-call and host-code time the message gives.
    Why it hurts: every kernel pays the host's launch cost (5-20 us in eager PyTorch) while
    it runs for 1-5 us; at batch-1 decode the GPU is 7-30 % busy and step time is host time.
    Evidence: GPU busy share of the steady state, kernel count and median duration, launch
    calls and launch API time per kernel, the launch gaps (count and time) and the saving.
    Next optimizations: capture the step in a CUDA graph (`torch.cuda.graphs` /
    `torch.compile(mode="reduce-overhead")`, vLLM/SGLang CUDA-graph decode, `cudaStreamBeginCapture`
    + `cudaGraphLaunch`) so one launch replays all kernels; fuse small elementwise kernels
    (torch.compile, custom fused kernels) to cut the kernel count.
    Options: `max_busy_pct`, `max_median_kernel_ns`, `max_launch_gap_ns`, `graph_gap_ns`,
    `min_kernels`, `warn_share_pct`.
    Requires: the kernel and API tables (`--trace=cuda`).
    False positives: a GPU idle because the program waits for input (a server between
    requests) is not launch-bound: the launch gaps, not idle time in general, carry the saving.
    """

    name = "launch-bound"
    title = "Launch-bound: the GPU waits for kernel launches"
    default_severity = Severity.WARNING
    requires = ("kernels", "api")
    optional = ("nvtx",)
    columns = {"kernels": ("start", "end", "pid", "correlation_id", "device_id", "name"),
               "api": ("start", "end", "correlation_id", "pid", "name"),
               "nvtx": ("start", "end", "name")}
    window = "steady"
    Options = Options
    renamed_options = {"max_busy_share": Renamed("max_busy_pct", 100), "warning_share": Renamed("warn_share_pct", 100)}

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        opts = ctx.options
        kernels = ctx.frame("kernels")
        api = ctx.launch_calls("kernels", columns=("api_start", "api_end", "api_name"))
        # Kernels replayed from a CUDA graph are already launched as one: only kernels launched one
        # by one can be launch-bound, and a graph replay loop is never told to use CUDA graphs.
        by_graph = in_set(api["api_name"], GRAPH_LAUNCH_APIS)
        graph_loop = (ctx.steps is not None and ctx.steps.source == "graph") or by_graph.mean() >= 0.5 if len(
            kernels) else False
        if by_graph.any():
            kernels = kernels.loc[~by_graph].reset_index(drop=True)
            api = api.loc[~by_graph].reset_index(drop=True)
        if len(kernels) < opts.min_kernels:
            return
        lo, hi = _judged_bounds(ctx, kernels)
        if hi <= lo:
            raise MissingData("the steady state holds no kernel time", "capture more steps")
        graphs = int(in_set(ctx.api_base_names(), GRAPH_LAUNCH_APIS).sum())
        first_of_call = first_of_each_call(kernels["pid"].to_numpy(), kernels["correlation_id"].to_numpy())
        api_start = api["api_start"].to_numpy()
        first_of_call &= api_start >= 0
        api_end = api["api_end"].to_numpy()
        del api
        budget = ctx.budget
        device = kernels["device_id"].to_numpy()
        if len(device) and device.dtype.kind in "iu" and int(device.min()) == int(device.max()):
            by_device = {int(device[0]): None}  # one device (the usual case): no row index of every kernel
        else:
            by_device = kernels.groupby("device_id", sort=True).groups
        # The launch calls' time per device first: the calls' starts are then freed before the profiles.
        devices = []
        for dev, idx in by_device.items():
            sel = np.asarray(idx) if idx is not None else slice(None)
            if not isinstance(sel, slice) and len(sel) == len(kernels):  # one device: the frame itself, no copies
                sel = slice(None)  # type: ignore[assignment]
            launching = first_of_call[sel]
            devices.append((dev, sel, duration_sum(api_start[sel], api_end[sel], launching), int(launching.sum())))
        del api_start, first_of_call
        for dev, sel, call_ns, calls in devices:
            prof = launch_profile(kernels.iloc[sel], api_end[sel], lo, hi, call_ns, calls, opts.max_launch_gap_ns,
                                  opts.graph_gap_ns)
            on_loop = budget is not None and budget.device == int(dev)
            judged = budget.total_ns if on_loop else prof.judged_ns
            busy_share = budget.busy_ns / judged if on_loop and judged else prof.busy_share
            if busy_share >= opts.max_busy_pct / 100 or prof.median_kernel_ns > opts.max_median_kernel_ns:
                continue
            if not prof.starved_gaps:
                continue
            savings = prof.savings_ns
            if on_loop:
                savings = min(savings, budget.ns("launch_wait"))
            severity = Severity.WARNING if savings >= opts.warn_share_pct / 100 * judged else Severity.INFO
            if graph_loop:
                severity = Severity.INFO  # what is left between replays is the host's own work, not launches
            yield self._finding(ctx, int(dev), prof, judged, busy_share, savings, severity, graphs, graph_loop, lo, hi)

    def _finding(self, ctx: RuleContext, dev: int, prof: LaunchProfile, judged: int, busy_share: float, savings: int,
                 severity: Severity, graphs: int, graph_loop: bool, lo: int, hi: int) -> Finding:
        opts = ctx.options
        per_kernel = prof.launch_api_ns / max(prof.kernels, 1)
        steps = ctx.steps.count if ctx.steps is not None else len(ctx.window.steps)
        per_step = f", {prof.kernels / steps:.0f} kernels per step" if steps else ""
        budget = ctx.budget
        split = ""
        if budget is not None and budget.device == dev:
            detail = budget.part("launch_wait").detail
            split = (f" While the GPU waited, the host was inside CUDA calls {detail.get('launch_api_ns', 0) / 1e6:.1f} "
                     f"ms and in its own code (Python, framework, scheduling) {detail.get('host_ns', 0) / 1e6:.1f} ms.")
            host = budget.evidence.get("host")
            if host:
                split += (f" Per step the launching thread spends {host['outside_cuda_ns_p50'] / 1e3:.0f} us outside "
                          f"any CUDA call ({100 * host['outside_share_p50']:.0f} % of the step, p50).")
        share = pct(savings, judged)
        message = (f"The loop's streams kept GPU {dev} busy {100 * busy_share:.1f} % of the steady state "
                   f"({judged / 1e6:.1f} ms, {ctx.window.source}): {prof.kernels} kernels launched one by one"
                   f"{per_step}, median {prof.median_kernel_ns / 1e3:.1f} us, launch API time {per_kernel / 1e3:.1f} us "
                   f"per kernel. The GPU ran dry before the next launch {prof.starved_gaps} times, idling "
                   f"{prof.starved_ns / 1e6:.1f} ms.{split}")
        if graph_loop:
            message += (f" The loop already replays CUDA graphs ({graphs} launches); these kernels run between the "
                        "replays.")
            recommendation = ("Move the work between replays into the graph (sampling, stopping checks, input "
                              "updates: capture them with the step, or use static input buffers), or keep it on the "
                              f"device; at most {savings / 1e6:.1f} ms ({share:.1f} % of the steady state) is at stake.")
        else:
            recommendation = (
                "Capture the steady-state step in a CUDA graph and replay it (`torch.cuda.CUDAGraph`/"
                "`torch.compile(mode=\"reduce-overhead\")`, or `cudaStreamBeginCapture` + `cudaGraphLaunch`): "
                f"expected gain up to {savings / 1e6:.1f} ms ({share:.1f} % of the steady state) with "
                f"{opts.graph_gap_ns / 1e3:g} us left per kernel; fusing small kernels cuts the count further.")
        return ctx.finding(
            message, recommendation, severity=severity,
            metrics={"gpu_busy_share": metric(100 * busy_share, "%"),
                     "kernels": metric(prof.kernels, "count"),
                     "median_kernel_duration": metric(prof.median_kernel_ns, "ns"),
                     "launch_calls": metric(prof.launch_calls, "count"),
                     "launch_api_time_per_kernel": metric(per_kernel, "ns"),
                     "launch_gaps": metric(prof.starved_gaps, "count"),
                     "launch_gap_time": metric(prof.starved_ns, "ns"),
                     "steady_time": metric(judged, "ns")},
            location=Location(device=dev, start_ns=lo, end_ns=hi),
            estimated_savings_ns=savings, budget_part="launch_wait")


def _judged_bounds(ctx: RuleContext, kernels: pd.DataFrame) -> tuple[int, int]:
    """The steady window, clipped to the kernels launched in it."""
    k_lo, k_hi = int(kernels["start"].min()), int(kernels["end"].max())
    if ctx.window.intervals is None:
        return k_lo, k_hi
    lo = max(int(ctx.window.start), int(kernels["launch_start"].min()))
    return lo, min(max(int(ctx.window.end), k_lo), k_hi)


RULE = LaunchBound
