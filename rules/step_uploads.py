"""step-uploads: the same host data copied to the GPU in every step, where keeping it there saves the copies."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import numpy as np
import pandas as pd

from nsys_rules.api import plain_number
from nsys_rules.api import (Finding, Framework, Location, metric, MissingData, pct, pinned_memory_advice,
                            resident_data_advice, Rule, RuleContext, Severity)
from nsys_rules.api.analysis import point_in

HTOD = 1  # CUPTI copyKind of a host-to-device copy
PAGEABLE = 0  # CUPTI memory kind of pageable host memory


@dataclass(frozen=True)
class Options:
    """Options of step-uploads."""

    min_share_pct: float = field(default=2.0, metadata={
        "help": "percent of the steady state the steps' GPU spends copying (the budget's copy part) to report"})
    warn_share_pct: float = field(default=5.0, metadata={
        "help": "percent of the steady state spent copying at or above which the finding is a warning"})
    min_steps_pct: float = field(default=90.0, metadata={
        "help": "percent of the steady steps that must copy the same bytes (within 5 %) for the upload to repeat"})
    min_copies: int = field(default=4, metadata={
        "help": "host-to-device copies per step that make the upload a set of tensors (weights, tables) rather than "
                "the step's input batch"})
    min_bytes: int = field(default=256 * 2**20, metadata={
        "help": "or bytes per step from which one large copy counts as resident data too (an offloaded buffer)"})
    fit_pct: float = field(default=50.0, metadata={
        "help": "percent of the GPU's memory the bytes of one step may take to count as fitting there (the rest "
                "holds activations and what else the program keeps on the GPU)"})

    def __post_init__(self) -> None:
        for name in ("min_share_pct", "warn_share_pct", "min_steps_pct", "fit_pct"):
            value = getattr(self, name)
            if not 0 <= value <= 100:
                raise ValueError(f"{name} must be a percent (0-100), not {value!r}")


@dataclass(frozen=True)
class Uploads:
    """The host-to-device copies of the steady steps, per step."""

    steps: int
    bytes_per_step: int  # median over the steps
    copies_per_step: int  # median
    repeating_steps: int  # steps whose bytes are within 5 % of the median
    pageable_share: float  # of the bytes (0-1)
    gpu_ns: int  # the copies' own time on the GPU, all steps


def step_uploads(copies: pd.DataFrame, steps: tuple[tuple[int, int], ...]) -> Uploads:
    """Host-to-device copies per step: ``copies`` has ``launch_start``, ``start``, ``end``, ``bytes``,
    ``copy_kind``, ``src_kind``; ``steps`` the steps' host intervals (a copy belongs to the step its call
    was made in)."""
    htod = copies[copies["copy_kind"].to_numpy() == HTOD]
    if htod.empty or not steps:
        return Uploads(len(steps), 0, 0, 0, 0.0, 0)
    lo = np.array([a for a, _ in steps], np.int64)
    hi = np.array([b for _, b in steps], np.int64)
    step = point_in(htod["launch_start"].to_numpy(np.int64), lo, hi)
    inside = step >= 0
    nbytes = htod["bytes"].to_numpy(np.int64)
    per_step = np.bincount(step[inside], weights=nbytes[inside], minlength=len(steps))
    counts = np.bincount(step[inside], minlength=len(steps))
    median = float(np.median(per_step))
    repeating = int((np.abs(per_step - median) <= 0.05 * median).sum()) if median > 0 else 0
    total = int(nbytes[inside].sum())
    pageable = int(nbytes[inside & (htod["src_kind"].to_numpy() == PAGEABLE)].sum())
    gpu = int((htod["end"].to_numpy(np.int64) - htod["start"].to_numpy(np.int64))[inside].sum())
    return Uploads(len(steps), int(median), int(np.median(counts)), repeating, pageable / total if total else 0.0, gpu)


class StepUploads(Rule):
    """The same host data copied to the GPU in every step: weights or tables that could stay there.

    What it detects: host-to-device copies in the steady steps that repeat (at least
    `min_steps_pct` percent of the steps copy the same number of bytes, within 5 %), that are a set
    of tensors (`min_copies` or more copies per step) or large (`min_bytes` per step), while the
    steps' GPU spends at least `min_share_pct` percent of the steady state copying (the budget's
    `copy` part): layer weights offloaded to host memory and copied back before use, a lookup
    table or constant inputs uploaded again every step. Whether the bytes of one step fit in the
    GPU's memory (`TARGET_INFO_GPU`, at most `fit_pct` percent of it) decides the fix.
    Why it hurts: the copy engine moves at most ~50 GB/s from pinned memory (less from pageable),
    the GPU's own memory 4.8 TB/s; the step waits for bytes it already had the step before.
    Evidence: bytes and copies per step, the steps that repeat them, the share from pageable
    memory, the time the steps' GPU spends copying and its share of the steady state, the GPU's
    memory.
    Next optimizations: when they fit, keep them resident, in the program's framework (PyTorch:
    move the module or tensors to the GPU once; offloading libraries and serving engines: turn
    offload off or raise the GPU memory budget; JAX `jax.device_put` once; a CUDA program device
    buffers filled once). When they do not fit, prefetch the next layer's bytes on a side stream
    while this layer computes, from pinned memory, into reused device buffers. Saving: the copy part
    of the budget.
    Options: `min_share_pct`, `warn_share_pct`, `min_steps_pct`, `min_copies`, `min_bytes`, `fit_pct`.
    Requires: a step model with its budget; the memcpy table (a trace without one copied nothing).
    False positives: inputs that really change every step in a fixed size (a batch split into many
    tensors) repeat their byte count too: the message says what repeats, read it before moving data.
    """

    name = "step-uploads"
    title = "The same host data copied to the GPU every step"
    default_severity = Severity.WARNING
    requires = ()
    optional = ("memcpy",)  # no memcpy table: nothing was copied, so nothing is uploaded every step
    columns = {"memcpy": ("start", "end", "device_id", "pid", "correlation_id", "bytes", "copy_kind", "src_kind")}
    window = "steady"
    Options = Options

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        opts = ctx.options
        if not ctx.trace.has("memcpy"):
            return
        model, budget = ctx.steps, ctx.budget
        if model is None or budget is None:
            raise MissingData("no steady steps to judge", "mark the loop's steps with an NVTX range")
        copying = budget.ns("copy")
        share = pct(copying, budget.total_ns)
        if share < opts.min_share_pct:
            return
        copies = ctx.frame("memcpy")
        if budget.device is not None:
            copies = copies[copies["device_id"].to_numpy() == budget.device]
        up = step_uploads(copies, tuple(ctx.window.steps))
        if (not up.bytes_per_step or up.repeating_steps < opts.min_steps_pct / 100 * up.steps
                or (up.copies_per_step < opts.min_copies and up.bytes_per_step < opts.min_bytes)):
            return
        gpu = ctx.trace.gpu(budget.device) if budget.device is not None else None
        memory = gpu.total_memory if gpu is not None else None
        fits = memory is None or up.bytes_per_step <= opts.fit_pct / 100 * memory
        fw = ctx.framework
        where = (f" on a GPU of {memory / 1e9:.0f} GB, so they fit" if memory and fits else
                 f", more than {plain_number(opts.fit_pct, 6)} % of the GPU's {memory / 1e9:.0f} GB" if memory else "")
        source = "pageable" if up.pageable_share >= 0.5 else "pinned"
        message = (f"Every step copies {up.bytes_per_step / 1e9:.3f} GB host-to-device in {up.copies_per_step} copies "
                   f"({up.repeating_steps} of {up.steps} steady steps copy the same bytes, mostly from {source} "
                   f"memory){where}. The steps' GPU spends {copying / 1e6:.2f} ms copying, {share:.1f} % of the "
                   f"{budget.total_ns / 1e6:.1f} ms steady state ({copying / budget.steps / 1e6:.2f} ms per step): "
                   f"the same data uploaded again each step (offloaded weights, a table). Program: {fw.label}.")
        yield ctx.finding(
            message, _advice(fw, fits, source == "pageable", up),
            severity=Severity.WARNING if share >= opts.warn_share_pct else Severity.INFO,
            estimated_savings_ns=copying, budget_part="copy",
            metrics={"htod_bytes_per_step": metric(up.bytes_per_step, "B"),
                     "htod_copies_per_step": metric(up.copies_per_step, "count"),
                     "repeating_steps": metric(up.repeating_steps, "count"),
                     "pageable_share": metric(100 * up.pageable_share, "%"),
                     "copy_time": metric(copying, "ns"), "copy_share": metric(share, "%"),
                     "copy_gpu_time": metric(up.gpu_ns, "ns"),
                     "gpu_memory": metric(memory or 0, "B")},
            location=Location(pid=model.pid, device=budget.device), key="fits" if fits else "too-large")


def _advice(fw: Framework, fits: bool, pageable: bool, up: Uploads) -> str:
    if fits:
        text = (f"Keep them resident: {resident_data_advice(fw)}. The copy part of the step "
                "then disappears.")
        if pageable:
            text += f" Until then, at least {pinned_memory_advice(fw)}: pinned copies run several times faster."
        return text
    stream = ("a side `torch.cuda.Stream`" if fw.is_torch else "a second stream (`cudaMemcpyAsync` on its own stream "
              "and an event the compute stream waits on)" if fw.name == "cuda" else "a side stream")
    return (f"They do not fit beside the rest: prefetch layer N+1's {up.bytes_per_step / max(up.copies_per_step, 1) / 1e6:.0f} "
            f"MB on {stream} while layer N computes, into device buffers reused across layers, from pinned "
            f"memory ({pinned_memory_advice(fw)}); or shrink what must move (quantized weights take a half or a quarter "
            "of the bytes).")


RULE = StepUploads
