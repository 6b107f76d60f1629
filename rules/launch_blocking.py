"""launch-blocking: every kernel launch waited for its kernel (`CUDA_LAUNCH_BLOCKING=1`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

import numpy as np
import pandas as pd

from nsys_rules.api import Finding, Location, metric, Renamed, Rule, RuleContext, Severity
from nsys_rules.api.analysis import duration_sum, in_set, KERNEL_LAUNCH_APIS, keys_rising, launch_key

ENV_VAR = "CUDA_LAUNCH_BLOCKING"


@dataclass(frozen=True)
class Options:
    """Options of launch-blocking."""

    blocking_pct: float = field(default=90.0, metadata={
        "help": "launches are blocking when at least this percent of kernel launch calls return after their "
                "kernel ended"})
    min_launches: int = field(default=50, metadata={"help": "fewest kernel launch calls to judge the behaviour"})
    min_long_kernels: int = field(default=10, metadata={
        "help": "when at least this many kernels outlast the median launch call, judge those alone (a short "
                "kernel can end before an asynchronous call returns; a long one cannot)"})


def env_says_blocking(environment: Mapping[str, str]) -> bool:
    """True when the profiled environment sets CUDA_LAUNCH_BLOCKING to a non-zero value."""
    value = environment.get(ENV_VAR)
    return value is not None and value.strip() not in ("", "0")


def blocking_share(kernel_start: np.ndarray, kernel_end: np.ndarray, api_start: np.ndarray, api_end: np.ndarray,
                   min_long_kernels: int) -> tuple[float, int, bool]:
    """Share of launches whose call returned only after the kernel ended.

    Returns (share, launches judged, judged on long kernels only). Long kernels (longer than
    the median launch call) cannot end before an asynchronous launch call returns, so when
    there are enough of them they alone decide.
    """
    if not len(kernel_end):
        return 0.0, 0, False
    waited = api_end >= kernel_end
    # The median first (partitioning its own temporary), then the kernels' lengths: one 8 MB array at a time.
    typical_call = np.median(api_end - api_start, overwrite_input=True)
    long = np.subtract(kernel_end, kernel_start)
    long = long > typical_call
    if long.sum() >= min_long_kernels:
        return float(waited[long].mean()), int(long.sum()), True
    return float(waited.mean()), len(waited), False


def per_launch_call(pid: np.ndarray, corr: np.ndarray, k_start: np.ndarray, k_end: np.ndarray, a_start: np.ndarray,
                    a_end: np.ndarray) -> pd.DataFrame:
    """Kernels merged per launch call (pid + correlationId): first kernel start, last kernel end, the call."""
    # copy=False: no consolidated 2-D copy of the four columns.
    frame = pd.DataFrame({"k_start": k_start, "k_end": k_end, "a_start": a_start, "a_end": a_end}, copy=False)
    if keys_rising(pid, corr):  # rising keys cannot repeat: one kernel per launch call (the usual case)
        return frame
    keys = launch_key(pid, corr)
    key = pd.Series(keys, copy=False)
    shared = key.duplicated(keep=False).to_numpy()
    if not shared.any():
        return frame
    merged = frame[shared].groupby(key[shared].to_numpy(), sort=False).agg(
        k_start=("k_start", "min"), k_end=("k_end", "max"), a_start=("a_start", "first"), a_end=("a_end", "first"))
    return pd.concat([frame[~shared], merged], ignore_index=True)


class LaunchBlocking(Rule):
    """Kernel launches that wait for the kernel: the trace does not show the program's real timing.

    What it detects: `CUDA_LAUNCH_BLOCKING` set to a non-zero value in the profiled environment,
    or kernel launch calls (`cudaLaunchKernel`, `cuLaunchKernel`, ...) that return only after
    their kernel ended, for at least `blocking_pct` percent of the launches.
    Why it hurts: with blocking launches the host never runs ahead of the GPU, so every launch
    pays the whole kernel time plus launch latency, queues are always empty, and the GPU idles
    between kernels. Step times, GPU utilization, queue and launch numbers in this trace do not
    describe the program as it runs in production.
    Evidence: the environment variable and its value, launch calls judged, share that waited
    for their kernel, launch API time against kernel time.
    Next optimizations: re-capture without `CUDA_LAUNCH_BLOCKING` (it is a debugging switch for
    locating the kernel behind an asynchronous error), exact command given.
    Options: `blocking_pct`, `min_launches`, `min_long_kernels`.
    Requires: the capture metadata (environment); the kernel and API tables for the behaviour.
    False positives: none known when the variable is set; without it, a tracer forcing
    serialisation (e.g. `--cuda-flush-interval` extremes) shows the same pattern, and the
    trace is equally unrepresentative.
    """

    name = "launch-blocking"
    title = "Blocking kernel launches (CUDA_LAUNCH_BLOCKING)"
    default_severity = Severity.ERROR
    requires = ()
    optional = ("kernels", "api")
    columns = {"kernels": ("start", "end", "pid", "correlation_id", "device_id"),
               "api": ("start", "end", "correlation_id", "pid", "name")}
    window = "full"
    Options = Options
    renamed_options = {"blocking_share": Renamed("blocking_pct", 100)}

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        opts = ctx.options
        env = ctx.trace.capture.environment
        env_set = env_says_blocking(env)
        share, judged, long_only, kernel_ns, api_ns = 0.0, 0, False, 0, 0
        first_ns = last_ns = None
        if ctx.trace.has("kernels") and ctx.trace.has("api"):
            kernels = ctx.frame("kernels")
            api = ctx.launch_calls("kernels", columns=("api_start", "api_end", "api_name"))
            # One row per launch call: a graph launch or a multi-kernel call is not a single launch.
            one_by_one = in_set(api["api_name"], KERNEL_LAUNCH_APIS)
            # Every kernel launched one by one (the usual eager trace): views, not six gathered copies.
            rows = slice(None) if one_by_one.all() else np.flatnonzero(one_by_one)
            per_call = per_launch_call(kernels["pid"].to_numpy()[rows], kernels["correlation_id"].to_numpy()[rows],
                                       kernels["start"].to_numpy()[rows], kernels["end"].to_numpy()[rows],
                                       api["api_start"].to_numpy()[rows], api["api_end"].to_numpy()[rows])
            if len(per_call) >= opts.min_launches:
                share, judged, long_only = blocking_share(
                    per_call["k_start"].to_numpy(), per_call["k_end"].to_numpy(), per_call["a_start"].to_numpy(),
                    per_call["a_end"].to_numpy(), opts.min_long_kernels)
                kernel_ns = duration_sum(per_call["k_start"].to_numpy(), per_call["k_end"].to_numpy())
                api_ns = duration_sum(per_call["a_start"].to_numpy(), per_call["a_end"].to_numpy())
                first_ns, last_ns = int(per_call["a_start"].min()), int(per_call["k_end"].max())
        behaves = judged > 0 and share >= opts.blocking_pct / 100
        if not env_set and not behaves:
            return
        metrics = {"launches_judged": metric(judged, "count"), "blocking_share": metric(100 * share, "%"),
                   "launch_api_time": metric(api_ns, "ns"), "kernel_time": metric(kernel_ns, "ns")}
        cause = (f"{ENV_VAR}={env.get(ENV_VAR)} is set in the profiled environment" if env_set else
                 f"{ENV_VAR} is not recorded, but the launches behave as if it were set")
        if judged:
            seen = (f"{100 * share:.1f} % of {judged} kernel launch calls{' (long kernels)' if long_only else ''} "
                    f"returned only after their kernel ended (launch API time {api_ns / 1e6:.1f} ms for "
                    f"{kernel_ns / 1e6:.1f} ms of kernels)")
        else:
            seen = "no kernel launches to confirm it"
        contradicts = env_set and judged >= opts.min_launches and share < opts.blocking_pct / 100
        severity = Severity.WARNING if contradicts else Severity.ERROR
        command = ctx.recapture_command("--trace=cuda,nvtx")
        yield ctx.finding(
            f"{cause}: {seen}. Every launch is synchronous, so the host never runs ahead of the GPU and step times, "
            "utilization and launch numbers of this trace are not representative.",
            f"Re-capture without {ENV_VAR} (unset it, or `export {ENV_VAR}=0`): `{command}`; use "
            f"{ENV_VAR}=1 only to locate the kernel behind an asynchronous CUDA error.",
            severity=severity, metrics=metrics, location=Location(api="cudaLaunchKernel", start_ns=first_ns, end_ns=last_ns),
            key="env" if env_set else "behaviour")


RULE = LaunchBlocking
