"""launch-bound: the GPU idles between small kernels because the host cannot launch them fast enough.

The rule reads as three steps: ``measure`` (per device, the busy share and the gaps where the
GPU waited for a launch, as :class:`~nsys_rules.rules.launch_bound.measure.DeviceLaunches`),
``judge`` (launch-bound or not, the saving and the severity) and ``phrase`` (the message and
the fix).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from nsys_rules.api import Finding, Location, Renamed, Rule, RuleContext, Severity, step_count
from nsys_rules.rules.launch_bound.judge import judge
from nsys_rules.rules.launch_bound.measure import device_launches
from nsys_rules.rules.launch_bound.phrase import message, metrics, recommendation


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


# -- the rule --------------------------------------------------------------------------------
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
    Next optimizations: replay the step from a CUDA graph so one launch runs all its kernels, in
    the program's framework (PyTorch `torch.cuda.CUDAGraph` / `torch.compile(mode="reduce-overhead")`,
    vLLM/SGLang/TensorRT-LLM CUDA-graph decode, JAX one `jax.jit` over the step, whose command
    buffers XLA replays, TensorFlow `jit_compile=True`, a CUDA program `cudaStreamBeginCapture` +
    `cudaGraphLaunch`); fuse small elementwise kernels to cut the kernel count.
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
    needs_release_build = True  # tunes measured kernel/host times: a debug build's are not the program's
    renamed_options = {"max_busy_share": Renamed("max_busy_pct", 100), "warning_share": Renamed("warn_share_pct", 100)}

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        opts = ctx.options
        fw = ctx.framework
        for found in device_launches(ctx, opts.min_kernels, opts.max_launch_gap_ns, opts.graph_gap_ns):
            verdict = judge(found, ctx.budget, opts.max_busy_pct, opts.max_median_kernel_ns, opts.warn_share_pct)
            if verdict is None:
                continue
            yield ctx.finding(
                message(found, verdict, step_count(ctx), ctx.window.name, ctx.budget if verdict.on_loop else None, fw),
                recommendation(found, verdict, opts.graph_gap_ns, fw), severity=verdict.severity,
                metrics=metrics(found, verdict), location=Location(device=found.device, start_ns=found.lo, end_ns=found.hi),
                estimated_savings_ns=verdict.savings, budget_part="launch_wait")


RULE = LaunchBound
