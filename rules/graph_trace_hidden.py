"""graph-trace-hidden: CUDA graphs replayed while nsys traced graphs as one opaque launch."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import numpy as np
import pandas as pd

from nsys_rules.api import Finding, Location, metric, pct, Rule, RuleContext, Severity
from nsys_rules.api.analysis import GRAPH_LAUNCH_APIS, in_set, PROFILER_START_APIS


@dataclass(frozen=True)
class Options:
    """Options of graph-trace-hidden."""

    min_launches: int = field(default=1, metadata={"help": "graph launches needed before the capture mode matters"})


def graph_activity(base_names: np.ndarray | pd.Series, graph_rows: int) -> int:
    """Graph replays seen: launch API calls, or graph-trace rows when the API was not traced."""
    launches = int(in_set(base_names, GRAPH_LAUNCH_APIS).sum())
    return max(launches, graph_rows)


def launch_api(base_names: np.ndarray | pd.Series) -> str:
    """The graph launch API the program called most (runtime or driver); ``cudaGraphLaunch`` when none."""
    launches = np.asarray(base_names[in_set(base_names, GRAPH_LAUNCH_APIS)], dtype=object)
    if not len(launches):
        return "cudaGraphLaunch"
    names, counts = np.unique(launches.astype(str), return_counts=True)
    return str(names[np.argmax(counts)])


def launch_call_p50(base_names: np.ndarray | pd.Series, starts: np.ndarray, ends: np.ndarray) -> float:
    """Median host time of one graph launch call (0 when none): node tracing makes it grow with the node count."""
    mask = in_set(base_names, GRAPH_LAUNCH_APIS)
    return float(np.median(ends[mask] - starts[mask])) if mask.any() else 0.0


class GraphTraceHidden(Rule):
    """CUDA graph replays whose kernels nsys did not record one by one.

    What it detects: CUDA graphs were launched (`cudaGraphLaunch`/`cuGraphLaunch`, or rows in
    `CUPTI_ACTIVITY_KIND_GRAPH_TRACE`) while the capture traced graphs as a whole
    (`CUDA_GRAPH_TRACE_OPTIONS:MODE` = `Graph`, the nsys default). In node mode it adds an
    info note instead.
    Why it hurts: in graph mode a replay is one opaque range: the kernels inside are
    invisible, so every kernel-level number (GEMV bandwidth, tails, kernel time) is missing or
    wrong. In node mode each node costs host time in the tracer, which inflates absolute step
    times when traces are compared.
    Evidence: graph launches, graph-trace rows and the GPU time they cover, the recorded mode.
    Next optimizations: re-capture with `--cuda-graph-trace=node` (exact command given); when
    comparing step times, compare node-mode traces with node-mode traces only.
    Options: `min_launches`.
    Requires: the API table (launch calls) or the graph-trace table; the capture metadata.
    False positives: none known for graph mode; a capture in graph mode that launched no graph
    is not reported.
    """

    name = "graph-trace-hidden"
    title = "CUDA graph kernels hidden by graph-level tracing"
    default_severity = Severity.ERROR
    requires = ()
    optional = ("api", "graph_trace", "kernels")
    columns = {"api": ("start", "end", "name", "correlation_id", "pid"),
               "graph_trace": ("start", "end", "correlation_id", "pid", "device_id"),
               "kernels": ("start", "end", "graph_node_id", "correlation_id", "pid")}
    window = "full"
    Options = Options

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        trace = ctx.trace
        names = ctx.api_base_names() if trace.has("api") else np.empty(0, object)
        graph = ctx.frame("graph_trace") if trace.has("graph_trace") else None
        graph_rows = 0 if graph is None else len(graph)
        launches = graph_activity(names, graph_rows)
        if launches < ctx.options.min_launches:
            return
        mode = trace.capture.graph_trace_mode
        kernels = ctx.frame("kernels") if trace.has("kernels") else None
        graph_kernels = 0 if kernels is None else int((kernels["graph_node_id"] > 0).sum())
        hidden_ns = 0 if graph is None else int((graph["end"] - graph["start"]).sum())
        kernel_ns = 0 if kernels is None else int((kernels["end"] - kernels["start"]).sum())
        metrics = {"graph_launches": metric(launches, "count"), "graph_trace_rows": metric(graph_rows, "count"),
                   "graph_node_kernels": metric(graph_kernels, "count"),
                   "hidden_graph_time": metric(hidden_ns, "ns")}
        api_name = launch_api(names)
        hidden = mode == "Graph" or (mode is None and graph_rows > 0 and graph_kernels == 0)
        if hidden:
            share = pct(hidden_ns, hidden_ns + kernel_ns)
            metrics["hidden_share_of_gpu_time"] = metric(share, "%")
            yield ctx.finding(
                f"{launches} CUDA graph launches were traced in graph mode (mode={mode or 'unrecorded'}): "
                f"{hidden_ns / 1e6:.2f} ms of GPU work ({share:.0f} % of traced GPU time) ran as opaque graph "
                f"replays with no per-kernel rows, so kernel-level numbers of this trace are incomplete.",
                f"Re-capture with node-level graph tracing: `{ctx.recapture_command(_flags(names))}`.",
                metrics=metrics, severity=Severity.ERROR, location=Location(api=api_name))
        elif mode == "Node":
            call_p50 = 0.0
            if trace.has("api"):
                api = ctx.frame("api")
                call_p50 = launch_call_p50(names, api["start"].to_numpy(), api["end"].to_numpy())
            metrics["launch_call_p50"] = metric(call_p50, "ns")
            per_launch = graph_kernels / launches if launches else 0.0
            yield ctx.finding(
                f"{launches} CUDA graph launches traced in node mode ({graph_kernels} graph kernels visible, "
                f"{per_launch:.0f} per launch; one {api_name} call takes {call_p50 / 1e3:.1f} us p50 on the host). "
                "Node tracing adds host time per graph node, so absolute step times run longer than untraced.",
                "Compare step times only against other node-mode captures; for absolute latency, time the "
                "program without nsys or with `--cuda-graph-trace=graph` and use this trace for kernel detail.",
                metrics=metrics, severity=Severity.INFO, title="CUDA graphs traced per node (host-time inflation)",
                location=Location(api=api_name), key="node-mode",
                estimated_savings_ns=0)  # a caveat about the capture, nothing to gain: under the noise floor


def _flags(base_names: np.ndarray | pd.Series) -> str:
    """Recapture flags: node tracing, and the profiler-API capture range when the trace was captured with one."""
    flags = "--cuda-graph-trace=node"
    if in_set(base_names, PROFILER_START_APIS).any():
        flags += " --capture-range=cudaProfilerApi --capture-range-end=stop"
    return flags


RULE = GraphTraceHidden
