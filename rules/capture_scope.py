"""capture-scope: the trace holds model loading and warm-up around the steady state it is about."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd

from nsys_rules.api import (Finding, Location, metric, profiler_range_advice, Renamed, Rule, RuleContext, Severity,
                            shell_word)
from nsys_rules.api.analysis import in_set, PROFILER_START_APIS


HTOD = 1


@dataclass(frozen=True)
class Options:
    """Options of capture-scope."""

    min_outside_pct: float = field(default=50.0, metadata={
        "help": "report when at least this percent of the capture lies outside the steady state"})
    min_outside_ns: int = field(default=1_000_000_000, metadata={
        "help": "or when at least this much time (ns) precedes the steady state"})


@dataclass(frozen=True)
class Scope:
    """Where the steady state sits in the capture, or in the user's --filter-time/--filter-nvtx window
    (ns from the session start, nsys's time 0)."""

    capture_start: int
    capture_end: int
    first_kernel: int | None
    steady_start: int
    steady_end: int
    htod_bytes_before: int
    htod_copies_before: int

    @property
    def before(self) -> int:
        """Time from the start of the capture (or window) to the steady state."""
        return max(0, self.steady_start - self.capture_start)

    @property
    def after(self) -> int:
        """Time from the end of the steady state to the end of the capture."""
        return max(0, self.capture_end - self.steady_end)

    @property
    def outside_share(self) -> float:
        """Share of the capture outside the steady state."""
        span = self.capture_end - self.capture_start
        return (self.before + self.after) / span if span > 0 else 0.0


def has_profiler_range(api_base_names: np.ndarray | pd.Series) -> bool:
    """A cudaProfilerStart/cuProfilerStart call: the capture was already limited (`-c cudaProfilerApi`)."""
    return bool(in_set(api_base_names, PROFILER_START_APIS).any())


def filter_time_bounds(start_ns: int, end_ns: int) -> str:
    """``START/END`` for --filter-time that holds [start_ns, end_ns] whole: microseconds, rounded outward.

    Rounded to the nearest millisecond, a steady state starting at 6181.65 ms began at 6182 ms
    and the filtered run lost its first step (and counted that step's later kernels among the
    others); a microsecond outward keeps every step and adds next to nothing around them.
    """
    return f"{max(0, start_ns) // 1_000}us/{-(-end_ns // 1_000)}us"


class CaptureScope(Rule):
    """The capture holds start-up (loading, warm-up) and not only the steady state it is about.

    What it detects: no `cudaProfilerStart`/`cuProfilerStart` call in the trace (the only sign
    of a `-c cudaProfilerApi` capture: the range is not recorded in the metadata) while at
    least `min_outside_pct` percent of the capture, or `min_outside_ns` before it, lies outside the
    steady state (the repeating step range after warm-up). The evidence adds the first kernel's
    time and the host-to-device bytes copied before the steady state (weights being loaded).
    Why it hurts: whole-capture numbers (`nsys stats`, `nsys analyze`, GPU utilization, gaps)
    then describe loading rather than inference, the file and the time to open it grow, and
    start-up work (random weight fills, autotuning, allocator growth) pollutes kernel statistics.
    Evidence: time before and after the steady state and their share, first kernel time,
    host-to-device bytes before the steady state, the steady window and how it was found.
    Next optimizations: capture only the measured loop: `nsys profile -c cudaProfilerApi` with
    cudaProfilerStart/Stop around it, named in the program's framework (PyTorch
    `torch.cuda.profiler.start()`/`stop()`, vLLM `--profiler-config.profiler cuda`, TensorRT-LLM
    `TLLM_PROFILE_START_STOP`, cuda-python or an NVTX capture range for JAX and TensorFlow,
    `cudaProfilerStart()` in C++); or `--delay`/`--duration` with the numbers given; or keep the
    trace and judge the steady part with `nsys-rules check --filter-time` (the bounds in
    microseconds, rounded outward, so every steady step stays inside). Under `--filter-time` or
    `--filter-nvtx` the times before and after, and their share, are those inside the user's
    window: a filter that keeps the steady state is not told to filter again. On a debug build
    the command is the release build's, without `--delay` or `--filter-time` (the debug build's times).
    Options: `min_outside_pct`, `min_outside_ns`.
    Requires: the API table (to see a profiler range); kernels, NVTX and memcpy sharpen it.
    False positives: a trace meant to study start-up (loading time) itself.
    """

    name = "capture-scope"
    title = "Capture holds loading and warm-up"
    default_severity = Severity.INFO
    requires = ("api",)
    optional = ("kernels", "memcpy", "nvtx")
    columns = {"api": ("start", "end", "name", "correlation_id", "pid"),
               "kernels": ("start", "end", "correlation_id", "pid"),
               "memcpy": ("start", "end", "bytes", "copy_kind", "correlation_id", "pid"),
               "nvtx": ("start", "end", "name")}
    window = "steady"
    Options = Options
    renamed_options = {"min_outside_share": Renamed("min_outside_pct", 100)}

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        opts = ctx.options
        trace = ctx.trace
        if has_profiler_range(trace.api_names()):
            return
        window = ctx.window
        lo, hi = ctx.span()
        capture_time, capture_start = hi, 0
        if window.kind == "filter":
            # The user already cut the capture (perhaps with the command this rule suggested): judge their
            # window, so the suggestion is not made again once taken, and is made again when it was not.
            cut = window.cut or window.bounds  # the user's filter (the window is the steady steps inside it)
            if not window.steps or cut is None:
                return  # no steady steps inside the filter: nothing to say where it should begin
            capture_start, hi = max(lo, int(cut[0])), min(hi, int(cut[1]))
            bounds: tuple[int, int] | None = (int(window.steps[0][0]), int(window.steps[-1][1]))
        else:
            bounds = window.bounds
        if bounds is None:
            return  # no steady state found: nothing to say where the capture should begin
        steady_start, steady_end = max(lo, int(bounds[0])), min(hi, int(bounds[1]))
        gpu_span = ctx.steps.gpu_span if ctx.steps is not None else None
        if gpu_span is not None:
            # On the GPU clock the steps may run long after the host issued them (graph replays, a
            # host running ahead): the steady state lasts as long as its GPU work.
            gpu_lo, gpu_hi = gpu_span
            steady_start, steady_end = min(steady_start, gpu_lo), max(steady_end, min(hi, gpu_hi))
        if steady_end <= steady_start:
            return
        kernels = trace.frame("kernels", ["start"]) if trace.has("kernels") else None
        first_kernel = int(kernels["start"].min()) if kernels is not None and len(kernels) else None
        htod_bytes = htod_copies = 0
        if trace.has("memcpy"):
            copies = trace.frame("memcpy", ["start", "bytes", "copy_kind"])
            early = copies[(copies["copy_kind"] == HTOD) & (copies["start"] < steady_start)]
            htod_bytes, htod_copies = int(early["bytes"].sum()), len(early)
        scope = Scope(capture_start, hi, first_kernel, steady_start, steady_end, htod_bytes, htod_copies)
        if scope.outside_share < opts.min_outside_pct / 100 and scope.before < opts.min_outside_ns:
            return
        delay_s = math.floor(steady_start / 1e9)
        duration_s = max(1, math.ceil((steady_end - delay_s * 1e9) / 1e9))
        first = f"; the first kernel ran at {first_kernel / 1e9:.3f} s" if first_kernel is not None else ""
        size = f"{htod_bytes / 1e6:.1f} MB" if htod_bytes >= 100_000 else f"{htod_bytes} B"
        loads = f"; {size} were copied host-to-device in {htod_copies} copies before it" if htod_bytes else ""
        whole = (f"a {hi / 1e9:.3f} s capture" if window.kind != "filter" else
                 f"the {(hi - capture_start) / 1e9:.3f} s the filter keeps")
        program = ctx.program_command or "<your program>"  # the release build's, for a debug build
        name = shell_word(Path(trace.label).stem or "report")
        capture = ("`nsys profile -c cudaProfilerApi --capture-range-end=stop "
                   f"--cuda-graph-trace=node --export=sqlite -o {name} {program}` with cudaProfilerStart/Stop around "
                   f"the steps ({profiler_range_advice(ctx.framework)})")
        if ctx.debug_build is not None:
            # The delay and the window are the debug build's times: the release build starts and steps at others,
            # and judging this trace's steady part judges the debug build.
            advice = f"When re-capturing the release build (see debug-build), capture only the measured loop: {capture}."
        else:
            advice = (f"Capture only the measured loop: {capture}; or `--delay={delay_s} --duration={duration_s}`; or "
                      "keep this trace and judge the steady part with `nsys-rules check --filter-time "
                      f"{filter_time_bounds(steady_start, steady_end)} {shell_word(trace.label)}`.")
        yield ctx.finding(
            f"The steady state ({window.name}) runs {steady_start / 1e9:.3f}-{steady_end / 1e9:.3f} s, "
            f"{(steady_end - steady_start) / 1e6:.1f} ms of {whole}: {scope.before / 1e9:.3f} s "
            f"before it and {scope.after / 1e9:.3f} s after it ({100 * scope.outside_share:.0f} % of the capture) "
            f"are start-up, warm-up and shutdown{first}{loads}. No cudaProfilerStart/cuProfilerStart call limits "
            "the capture.",
            advice,
            metrics={"time_before_steady_state": metric(scope.before, "ns"),
                     "time_after_steady_state": metric(scope.after, "ns"),
                     "outside_share": metric(100 * scope.outside_share, "%"),
                     "steady_state_time": metric(steady_end - steady_start, "ns"),
                     "capture_time": metric(capture_time, "ns"),
                     "first_kernel_at": metric(first_kernel if first_kernel is not None else -1, "ns"),
                     "htod_bytes_before_steady_state": metric(htod_bytes, "B")},
            severity=Severity.INFO,
            location=Location(start_ns=steady_start, end_ns=steady_end),
            key="outside-steady")


RULE = CaptureScope
