"""fusion-candidate: steps that spend a real share of their GPU time in elementwise and reduction kernels."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np

from nsys_rules.api import (LABELS, Finding, Location, MissingData, Renamed, Rule, RuleContext, Severity, fusion_advice,
                            metric, pct)
from nsys_rules.api.analysis import CLASSES, category_classes


@dataclass(frozen=True)
class Options:
    """Options of fusion-candidate."""

    min_share_pct: float = field(default=15.0, metadata={
        "help": "percent of the steps' busy GPU time in elementwise and reduction kernels that makes them a fusion "
                "candidate (the budget's evidence uses the same threshold)"})
    min_kernels_per_step: float = field(default=2.0, metadata={
        "help": "elementwise and reduction kernel launches per step needed for a chain to fuse (one kernel a step "
                "fuses with nothing)"})
    gpu_bound_pct: float = field(default=50.0, metadata={
        "help": "percent of the steady steps the GPU must be busy for the fused time to shorten them; below it the "
                "steps are host-bound and no saving is claimed"})
    kept_pct: float = field(default=50.0, metadata={
        "help": "percent of that time fusion removes when the kernel rows are not there to measure the chains (the "
                "point estimate; the range runs from half to one and a half times it)"})


#: Share of the elementwise and reduction time in kernels a fuser generated from which they are fused already.
GENERATED_SHARE = 0.8
_GENERATED = re.compile(r"triton_|nvfuser|^kernel\d+$|_fused_|fused_|CudaCodeGen", re.IGNORECASE)
_SMALL = ("elementwise", "reduce")


@dataclass(frozen=True)
class SmallKernels:
    """The window's elementwise and reduction kernels on the loop's GPU, and what fusing their chains removes."""

    launches: int
    generated_share: float  # of their time, in kernels a fuser generated (Triton, nvFuser)
    time_ns: int
    #: Their time beyond the longest kernel of each chain: a chain of adjacent elementwise and reduction kernels
    #: on one stream fused into one kernel reads its inputs and writes its output once, so it costs about its
    #: longest member (memory-bound kernels take time by the bytes they move); the rest is what fusion removes.
    fusible_ns: int
    chains: int


def small_kernels(ctx: RuleContext, device: int | None) -> SmallKernels | None:
    """The window's elementwise and reduction kernels on ``device`` (None: every GPU), or None without a kernel
    table.

    Works on the frame's own columns (views) and on arrays as long as the small kernels only: a copy of the
    kernel rows was the 1M-kernel check's memory peak."""
    if not ctx.trace.has("kernels"):
        return None
    kernels = ctx.frame("kernels", ["start", "end", "name", "device_id", "stream_id"])
    if kernels.empty:
        return None
    names = kernels["name"]
    classes = category_classes(names.cat.categories)
    small = np.isin(np.asarray(CLASSES, dtype=object)[classes], _SMALL)  # per category, + trailing "other"
    codes = names.cat.codes.to_numpy()
    rows = small[codes]
    devices, streams = kernels["device_id"].to_numpy(), kernels["stream_id"].to_numpy()
    if device is not None:
        rows &= devices == device
    if not rows.any():
        return SmallKernels(0, 0.0, 0, 0, 0)
    at = np.flatnonzero(rows)
    starts = kernels["start"].to_numpy()[at]
    durations = kernels["end"].to_numpy()[at] - starts
    used, small_codes = np.unique(codes[at], return_inverse=True)
    time_by = np.bincount(small_codes, weights=durations)
    generated = np.array([bool(_GENERATED.search(str(names.cat.categories[c]))) for c in used])
    # A chain never spans two steps: fusion joins the kernels of one iteration, not the last of one and the first
    # of the next (on a stream that runs nothing else they are adjacent).
    step_starts = ctx.steps.gpu[:, 0] if ctx.steps is not None and len(ctx.steps.gpu) else np.zeros(0, np.int64)
    step_of = np.searchsorted(np.maximum.accumulate(step_starts) if len(step_starts) else step_starts, starts,
                              side="right")
    fusible, chains = _chain_excess(at, durations, devices, streams, step_of)
    return SmallKernels(len(at), float(time_by[generated].sum()) / (float(time_by.sum()) or 1.0),
                        int(durations.sum()), fusible, chains)


def _chain_excess(at: np.ndarray, durations: np.ndarray, devices: np.ndarray, streams: np.ndarray,
                  step_of: np.ndarray) -> tuple[int, int]:
    """Over runs of at least two adjacent small kernels on one stream: the time beyond each run's longest kernel,
    and the number of runs. ``at``: the small kernels' rows (in the frame's start order), ``durations`` and
    ``step_of`` (the step each starts in) theirs.

    Kernels of one stream are adjacent when no other kernel of that stream runs between them; where every kernel
    runs on one stream of one GPU that is adjacency in the frame, else rows are renumbered per stream first.
    """
    position = at
    if len(streams) and (np.any(streams != streams[0]) or np.any(devices != devices[0])):
        # Each row's place among its own stream's kernels (a stable sort keeps the start order inside a stream).
        key = devices.astype(np.int64) * (1 << 32) + streams.astype(np.int64)
        order = np.argsort(key, kind="stable")
        place = np.empty(len(order), np.int64)
        place[order] = np.arange(len(order))
        position, key = place[at], key[at]
        by_place = np.argsort(position)
        at_sorted, durations, key = position[by_place], durations[by_place], key[by_place]
        step_of = step_of[by_place]
        new_run = np.ones(len(at_sorted), bool)
        new_run[1:] = (np.diff(at_sorted) != 1) | (key[1:] != key[:-1])
    else:
        new_run = np.ones(len(position), bool)
        new_run[1:] = np.diff(position) != 1
    new_run[1:] |= step_of[1:] != step_of[:-1]
    starts = np.flatnonzero(new_run)
    counts = np.diff(np.append(starts, len(new_run)))
    sums = np.add.reduceat(durations, starts)
    longest = np.maximum.reduceat(durations, starts)
    multi = counts >= 2
    return int((sums[multi] - longest[multi]).sum()), int(multi.sum())


class FusionCandidate(Rule):
    """Steps whose elementwise and reduction kernels could be fused away.

    What it detects: steady steps where elementwise and reduction kernels (activations, residual
    adds, casts, softmax, norms' reductions) take at least `min_share_pct` percent of the busy GPU
    time, whatever part is largest (GEMM in prefill, training and batched inference, GEMV in
    decode, or the elementwise kernels themselves in an eager training loop).
    Why it hurts: each of these kernels reads and writes whole activations from memory; fused into
    the GEMM's epilogue or into one generated kernel, the round trips disappear.
    Evidence: the share and time of elementwise and reduction kernels against the steps' busy time, and
    their chains: runs of adjacent such kernels on one stream. The saving is what fusing each chain
    into one kernel removes, with the fused kernel costing about the chain's longest member (these
    kernels are memory-bound: a fused one reads and writes once); `kept_pct` is used only when the
    kernel rows are not there to measure it.
    Next optimizations: in the program's framework, PyTorch `torch.compile` (Inductor fuses
    pointwise chains and GEMM epilogues; already compiled: its graph breaks); vLLM, SGLang and
    TensorRT-LLM their own fusion options; JAX one `jax.jit` over the whole step (XLA fuses inside
    it) and Pallas for what remains; TensorFlow `jit_compile=True`; a CUDA program GEMM epilogues
    (cuBLASLt, CUTLASS) and fused kernels for the common pairs (bias + activation, residual + norm).
    Not reported where there is no chain to fuse: fewer than `min_kernels_per_step` such launches
    per step, or kernels a fuser already generated (Triton, nvFuser) outside
    torch.compile and XLA.
    Where the GPU is busy less than `gpu_bound_pct` percent of the steps (a host-bound, launch-bound
    loop) the finding claims no saving: the GPU time it removes is not on the critical path yet.
    Options: `min_share_pct`, `min_kernels_per_step`, `gpu_bound_pct`, `kept_pct`.
    Requires: a step model with its budget (steady steps).
    False positives: elementwise work that is the algorithm itself (sampling, a scan) fuses little;
    the range of the saving says how uncertain the estimate is.
    """

    name = "fusion-candidate"
    title = "Elementwise and reduction kernels are a real share of GPU time: a fusion candidate"
    default_severity = Severity.INFO
    requires = ()
    optional = ("kernels",)
    columns = {"kernels": ("start", "end", "name")}
    window = "steady"
    Options = Options
    needs_release_build = True  # tunes measured kernel/host times: a debug build's are not the program's
    renamed_options = {"min_share": Renamed("min_share_pct"), "kept_fraction": Renamed("kept_pct", 100)}

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        opts = ctx.options
        budget = ctx.budget
        if budget is None:
            raise MissingData("no steady steps to judge", "mark the loop's steps with an NVTX range")
        kernels = {p.name: p.ns for p in budget.parts if p.kind == "busy" and p.name not in ("contention", "copy")}
        if not kernels:
            return
        # Whatever part is largest (GEMM in prefill and training, GEMV in decode, attention): elementwise and
        # reduction kernels that are a real share of the GPU's time are memory round trips fusion removes.
        small = budget.ns("elementwise", "reduce")
        busy = budget.busy_ns
        share = pct(small, busy)
        if share < opts.min_share_pct:
            return
        largest = max(kernels, key=kernels.__getitem__)
        fw = ctx.framework
        chain = small_kernels(ctx, budget.device)
        fusible_share = opts.kept_pct / 100  # without the kernel rows, the typical share a fuser removes
        chain_words = ""
        if chain is not None:
            # One elementwise kernel a step (a softmax benchmark) is no chain to fuse; kernels a fuser already
            # generated (Triton, nvFuser) outside XLA or torch.compile's own (judged by its advice) are fused already.
            if chain.launches < opts.min_kernels_per_step * budget.steps:
                return
            if chain.generated_share >= GENERATED_SHARE and fw.name not in ("jax", "tensorflow") and not fw.compiled:
                return
            if not chain.fusible_ns:
                return  # no two of them run back to back: nothing to fuse into one kernel
            # The measured chains, not a typical share: what fusing each chain into its longest member removes.
            fusible_share = chain.fusible_ns / max(chain.time_ns, 1)
            chain_words = (f" {chain.chains} chain{'s' if chain.chains != 1 else ''} of adjacent elementwise and "
                           f"reduction kernels run in the window; fused, each costs about its longest kernel, "
                           f"which removes {100 * fusible_share:.0f} % of their time.")
        saving = fusible_share * small
        advice = fusion_advice(fw)
        lead = ("they are the largest part of the steady steps' GPU time" if largest in ("elementwise", "reduce")
                else f"beside {LABELS.get(largest, largest)} ({pct(kernels[largest], busy):.0f} %), the largest part")
        busy_share = pct(busy, budget.total_ns)
        host_bound = ""
        if busy_share < opts.gpu_bound_pct:
            # The host sets the pace: GPU time saved by fusion does not shorten the step until the launch overhead
            # is gone, so nothing is claimed now (the fewer launches are launch-bound's to count).
            saving = 0.0
            host_bound = (f" The steps are host-bound (the GPU is busy {busy_share:.0f} % of them): fused kernels "
                          "shorten GPU time off the critical path until the launch overhead is gone (launch-bound), "
                          "though fusing also removes launches.")
        yield ctx.finding(
            f"Elementwise and reduction kernels take {small / 1e6:.2f} ms of the steady steps' GPU time "
            f"({share:.1f} % of the {busy / 1e6:.1f} ms busy time, "
            f"{small / budget.steps / 1e3:.0f} us per step; {lead}): memory round trips a fused kernel would not "
            f"make.{chain_words}{host_bound} Program: {fw.label}.",
            f"Fuse them: {advice}.",
            severity=Severity.INFO, budget_part="elementwise+reduce", estimated_savings_ns=saving,
            savings_range=(0.5 * saving, min(1.5 * saving, small)) if saving else None,
            metrics={"elementwise_reduce_time": metric(small, "ns"), "share_of_busy_time": metric(share, "%"),
                     "busy_time": metric(busy, "ns"), "gpu_busy_share_of_steps": metric(busy_share, "%"),
                     "fusible_share": metric(100 * fusible_share, "%"),
                     "chains": metric(chain.chains if chain is not None else 0, "count")},
            location=Location(device=budget.device))


RULE = FusionCandidate
