"""How kernel-tail says what it found: the statistics, the slowest invocations, the case and its fix."""

from __future__ import annotations

import numpy as np
import pandas as pd

from nsys_rules.api import plain_number
from nsys_rules.api import Framework, Metric, metric, nvtx_range_advice, pct
from nsys_rules.api.analysis import is_any_launch
from nsys_rules.rules.kernel_tail.judge import KernelVerdict
from nsys_rules.rules.kernel_tail.measure import Instance
from nsys_rules.rules.kernel_tail.tails import clean_range_name

SHAPE_TITLE = "Kernel duration spread is shape variation, not a tail"
#: Slow copy calls that move this many times the bytes of the others, at no less than RATE_KEPT of their rate per
#: byte, are explained by their size.
SIZE_RATIO = 2.0
RATE_KEPT = 0.67
API_TITLE = "Host API tail"


# -- kernels ---------------------------------------------------------------------------------
def kernel_metrics(row: pd.Series, verdict: KernelVerdict) -> dict[str, Metric]:
    """The group's percentiles, ratios and tail cost (and the positional tail cost when a position test applied)."""
    plain_cost, gpu_time = float(row["tail_cost"]), float(row["gpu_time"])
    out = {
        "count": metric(int(row["count"]), "count"), "total_time": metric(float(row["total"]), "ns"),
        "p50": metric(float(row["p50"]), "ns"), "p95": metric(float(row["p95"]), "ns"),
        "p99": metric(float(row["p99"]), "ns"), "max": metric(float(row["max"]), "ns"),
        "max_over_p50": metric(float(row["max_p50"]), "ratio"), "p99_over_p50": metric(float(row["p99_p50"]), "ratio"),
        "tail_cost": metric(plain_cost, "ns"), "tail_share_of_gpu_time": metric(100 * plain_cost / gpu_time, "%"),
        "tail_score": metric(float(row["tail_score"]), "ratio")}
    if verdict.testable:
        out["positional_tail_cost"] = metric(verdict.positional_cost, "ns")
    return out


def instance_text(instance: Instance, n_steps: int) -> str:
    """``12.3 us at 456.789 ms in step 3/10, NVTX a > b > c`` (the innermost three ranges)."""
    where = f" in step {instance.step + 1}/{n_steps}" if instance.step >= 0 else ""
    shown = [clean_range_name(p) for p in instance.nvtx[-3:]]  # innermost three: enough to place it
    ranges = f", NVTX {' > '.join(shown)}" if instance.nvtx else ""
    return f"{instance.duration / 1e3:.1f} us at {instance.start / 1e6:.3f} ms{where}{ranges}"


def kernel_message(label: str, row: pd.Series, verdict: KernelVerdict, slowest: str, more: int, tail_ratio: float,
                   judged: str = "steady-state GPU time") -> str:
    """The statistics, then either why the spread is shape variation or what kind of tail it is.

    ``slowest``: the slowest invocations as text; ``more``: reportable groups left out; ``judged``: what
    the GPU time the tail is a share of is (the window's words).
    """
    plain_cost, gpu_time, positional = float(row["tail_cost"]), float(row["gpu_time"]), verdict.positional_cost
    stats = (f"{label}: {int(row['count'])} invocations, p50 {row['p50'] / 1e3:.1f} us, p95 {row['p95'] / 1e3:.1f} us, "
             f"p99 {row['p99'] / 1e3:.1f} us, max {row['max'] / 1e3:.1f} us (max/p50 {row['max_p50']:.2f}, "
             f"p99/p50 {row['p99_p50']:.2f}, tail score {row['tail_score']:.0f}); time above p50 "
             f"{plain_cost / 1e6:.2f} ms = {pct(plain_cost, gpu_time):.1f} % of {judged} "
             f"({gpu_time / 1e6:.1f} ms).")
    explained_by = (f"each position in a repeating sequence of {verdict.period} launches" if verdict.period else
                    f"each position in the step ({int(row['steps_seen'])} steps)")
    if verdict.shape_variation:
        return (stats + f" Measured against the median of {explained_by}, the tail is only "
                f"{positional / 1e6:.3f} ms ({pct(positional, gpu_time):.2f} %): durations follow the "
                "position in the sequence, so this is shape variation (different matrices "
                f"sharing one kernel and launch configuration), not a tail. Slowest: {slowest}.")
    slow_count = verdict.slow_count
    what = (f"A systematic tail: {slow_count} invocations ({pct(slow_count, row['count']):.1f} %) run over "
            f"{plain_number(tail_ratio, 6)}x the median" if verdict.systematic else
            f"Outlier invocations: {slow_count} of {int(row['count'])} run over {plain_number(tail_ratio, 6)}x the median")
    text = stats + f" {what}. Slowest: {slowest}."
    if verdict.phase:
        text += (f" The slow invocations are {'consecutive' if verdict.runs == 1 else f'in {verdict.runs} consecutive runs'}: "
                 "a phase of the run (other input sizes, clock throttling, or competing work during that "
                 "period), not scattered noise.")
    if verdict.testable:
        text += (f" Judged against the median of {explained_by}, the tail stays at "
                 f"{positional / 1e6:.2f} ms, so it is not shape variation.")
    if more > 0:
        text += f" ({more} more kernel group(s) with smaller tails not listed.)"
    return text


def shape_recommendation(fw: Framework) -> str:
    """The action for shape variation: judge each shape on its own (it is no tail to remove)."""
    return (f"Judge each shape on its own: give the call sites their own NVTX ranges ({nvtx_range_advice(fw, 'o_proj')} "
            "around one projection, another name around the next) or launch configurations, then compare each "
            "shape's time with what its bytes or FLOPs need (gemv-dominance's bandwidth numbers for GEMVs).")


def advice(name: str, kind: str, row: pd.Series, cost: float, phase: bool = False) -> str:
    """The fix for the case: a slow phase, MoE routing, a collective, a systematic tail or rare outliers."""
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


# -- host API calls --------------------------------------------------------------------------
def api_metrics(row: pd.Series) -> dict[str, Metric]:
    """The API's percentiles, ratios and tail cost."""
    return {"count": metric(int(row["count"]), "count"), "p50": metric(float(row["p50"]), "ns"),
            "p99": metric(float(row["p99"]), "ns"), "max": metric(float(row["max"]), "ns"),
            "max_over_p50": metric(float(row["max_p50"]), "ratio"), "p99_over_p50": metric(float(row["p99_p50"]), "ratio"),
            "tail_cost": metric(float(row["tail_cost"]), "ns"),
            "tail_share_of_window": metric(100 * float(row["share"]), "%"),
            "tail_score": metric(float(row["tail_score"]), "ratio")}


def api_message(row: pd.Series, window_ns: float) -> str:
    """The API's statistics; for a launch call, why its tail is the GPU being behind."""
    text = (f"Host API {row['api']}: {int(row['count'])} calls, p50 {row['p50'] / 1e3:.1f} us, p99 "
            f"{row['p99'] / 1e3:.1f} us, max {row['max'] / 1e3:.1f} us (max/p50 {row['max_p50']:.1f}, p99/p50 "
            f"{row['p99_p50']:.1f}); time above p50 {row['tail_cost'] / 1e6:.2f} ms = "
            f"{100 * row['share']:.1f} % of the steady-state window ({window_ns / 1e6:.1f} ms).")
    if is_any_launch(row["api"]):
        text += (" Launch calls block when the device's launch queue is full, so this tail usually means "
                 "the GPU is behind the host (GPU-bound), not a slow host.")
    return text


def api_recommendation(name: str) -> str:
    """Treat a launch-call tail as a symptom; look for the allocator or host contention behind any other."""
    if is_any_launch(name):
        return ("Treat it as a symptom: the GPU work is the bottleneck; fix the kernel-side findings "
                "(kernel tails, GEMV bandwidth) first. If the GPU is idle while these calls block, "
                "look for lazy module loading (`CUDA_MODULE_LOADING=EAGER`) or a host lock.")
    return ("Check the slow calls in the timeline: a tail in allocation/free calls points to "
            "the allocator (use a caching or stream-ordered pool allocator, `cudaMallocAsync`), "
            "one in other calls to host contention (locks, another thread, page faults).")


def copy_size_words(durations: np.ndarray, nbytes: np.ndarray, ratio: float) -> str | None:
    """When the slow copy calls (over ``ratio`` x the median) move far more bytes than the median call, say so:
    their time follows the copy size, no allocator or host contention (None when the sizes do not explain it)."""
    p50 = float(np.median(durations))
    slow = durations > ratio * p50
    if not slow.any() or slow.all():
        return None
    slow_bytes, usual_bytes = float(np.median(nbytes[slow])), float(np.median(nbytes[~slow]))
    rate = nbytes / np.maximum(durations, 1)
    # Larger copies, moved at least about as fast per byte as the others: the size is the whole story.
    if slow_bytes < SIZE_RATIO * max(usual_bytes, 1.0) or np.median(rate[slow]) < RATE_KEPT * np.median(rate[~slow]):
        return None
    return (f" The slow calls move {_bytes(slow_bytes)} per call (median) against {_bytes(usual_bytes)} for the "
            f"others: their time follows the copy size (large copies among small ones), not allocator or host "
            "contention.")


def _bytes(n: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"
