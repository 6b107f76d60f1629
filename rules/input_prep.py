"""input-prep: the GPU waits while the host prepares the next step's input, one block of host work per step."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import numpy as np

from nsys_rules.api import (Finding, Framework, Location, metric, pct, PythonSite, Rule, RuleContext, Severity,
                            SourceLine, StepModel)
from nsys_rules.api.analysis import merge_intervals

HTOD = 1  # CUPTI copyKind of a host-to-device copy
#: What the budget calls a block of host work (nsys_rules.model.budget_shape): its share of the median step, and ns.
BLOCK_SHARE = 0.1
BLOCK_NS = 1_000_000
PAGEABLE = 0  # CUPTI memory kind of pageable host memory


@dataclass(frozen=True)
class Options:
    """Options of input-prep."""

    min_share_pct: float = field(default=5.0, metadata={
        "help": "percent of the median step the host's blocks of work must take to be reported"})
    warn_share_pct: float = field(default=10.0, metadata={
        "help": "percent of the median step for a warning"})


@dataclass(frozen=True)
class Uploads:
    """Host-to-device copies of the steady steps: what a prepared batch costs to move."""

    bytes_per_step: float
    copies_per_step: float
    pageable_share: float  # of the bytes


class InputPrep(Rule):
    """The GPU waits while the host prepares the next step's input in one block of work.

    What it detects: the step budget's `host_prep` part: blocks of host work (at least a tenth of
    the median step) that the loop's GPU waits through, usually between two steps: the next
    batch tokenized, augmented, collated or built in numpy on the training thread, then copied
    to the GPU. Time a synchronization released into the block that the step's GPU work could
    hide stays sync-stall's.
    Why it hurts: nothing runs on the GPU while the block lasts, and neither CUDA graphs nor
    torch.compile touch it: it is the input pipeline, on the critical path.
    Evidence: the block per step and its share of the step, the host-to-device copies per step
    (bytes, pageable or pinned), the program's framework.
    Next optimizations: move the preparation off the step's thread and ahead of it, in the
    program's framework: PyTorch `DataLoader(num_workers=..., pin_memory=True,
    persistent_workers=True)` with `.to(device, non_blocking=True)`, preprocessing on the GPU;
    JAX: a background data pipeline and `flax.jax_utils.prefetch_to_device`; TensorFlow
    `tf.data` with `prefetch`; a CUDA program: prepare step N+1 on another thread into pinned
    buffers while step N runs.
    Options: `min_share_pct`, `warn_share_pct`.
    Requires: a step model and its budget.
    False positives: work the step really needs first (a request that arrives only then): the
    block is then the arrival rate, not a pipeline to overlap.
    """

    name = "input-prep"
    title = "The GPU waits while the host prepares the next input"
    default_severity = Severity.WARNING
    requires = ("api",)
    optional = ("memcpy",)
    columns = {"memcpy": ("start", "end", "copy_kind", "bytes", "src_kind", "pid"),
               "api": ("start", "end", "pid", "tid", "name")}  # not return_value: 17 MB on 2M calls, never read
    window = "steady"
    Options = Options
    needs_release_build = True  # tunes measured kernel/host times: a debug build's are not the program's

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        model, budget = ctx.steps, ctx.budget
        if model is None or budget is None:
            return
        part = budget.part("host_prep")
        median_step = int(budget.quantile(0.5))
        share = pct(part.median_step_ns, median_step)
        if not part.ns or share < ctx.options.min_share_pct:
            return
        uploads = _uploads(ctx, model.count)
        fw = ctx.framework
        synced = budget.part("after_sync").ns > 0
        sites = _sites(ctx, model, median_step)
        message = (f"The host works {part.median_step_ns / 1e6:.2f} ms in blocks the GPU waits through in the median "
                   f"step ({share:.1f} % of its {median_step / 1e6:.2f} ms; {part.ns / 1e6:.1f} ms over "
                   f"{model.count} steps): the next step's input prepared on the step's own thread, before its "
                   f"first launch.{_upload_words(uploads)}{_site_words(sites)} Program: {fw.label}.")
        advice = _advice(fw, uploads, synced)
        stacks = ctx.python_stacks
        if not sites and ctx.trace.capture.runs_python and stacks.fix:
            advice += f" To name the Python function and line of the block: {stacks.fix}."
        yield ctx.finding(
            message, advice,
            severity=Severity.WARNING if share >= ctx.options.warn_share_pct else Severity.INFO,
            estimated_savings_ns=part.ns, budget_part="host_prep",
            metrics={"host_block_per_step": metric(part.median_step_ns, "ns"), "host_block_total": metric(part.ns, "ns"),
                     "step_share": metric(share, "%"), "median_step": metric(median_step, "ns"),
                     "htod_bytes_per_step": metric(int(uploads.bytes_per_step), "B"),
                     "htod_pageable_share": metric(100 * uploads.pageable_share, "%")},
            location=Location(pid=model.pid, source=None if not sites or not sites[0].user_code else SourceLine(
                sites[0].frame.file, sites[0].frame.line, sites[0].frame.function)), key=fw.name)


def _sites(ctx: RuleContext, model: StepModel, median_step: int) -> list[PythonSite]:
    """Where the Python code spends the blocks (nsys's Python samples), when the trace holds them."""
    if ctx.python_stacks.samples is None or model.device is None:
        return []
    lo, hi = model.gpu_span  # type: ignore[misc]
    ops = ctx.gpu_ops.near(lo, hi, model.device)
    busy_s, busy_e = merge_intervals(ops.start, ops.end)
    gap_s, gap_e = busy_e[:-1], busy_s[1:]
    block = (gap_e - gap_s >= max(BLOCK_SHARE * median_step, BLOCK_NS)) & (gap_s >= lo) & (gap_e <= hi)
    if not block.any():
        return []
    return ctx.host_sites((gap_s[block], gap_e[block]), top=2, by="function")


def _site_words(sites: list[PythonSite]) -> str:
    if not sites:
        return ""
    first = sites[0]
    words = (f" Python: `{first.frame.function}` ({first.frame.short_where}) holds {100 * first.share:.0f} % of the "
             "samples in them")
    if len(sites) > 1:
        words += f", then `{sites[1].frame.function}` ({sites[1].frame.short_where}) {100 * sites[1].share:.0f} %"
    return words + "."


def _uploads(ctx: RuleContext, steps: int) -> Uploads:
    """Host-to-device copies launched in the steady steps, per step."""
    if not ctx.trace.has("memcpy") or not steps:
        return Uploads(0.0, 0.0, 0.0)
    copies = ctx.frame("memcpy", ["copy_kind", "bytes", "src_kind"])
    htod = copies["copy_kind"].to_numpy() == HTOD
    nbytes = copies["bytes"].to_numpy(np.int64)[htod]
    pageable = copies["src_kind"].to_numpy()[htod] == PAGEABLE
    total = int(nbytes.sum())
    return Uploads(total / steps, int(htod.sum()) / steps, float(nbytes[pageable].sum() / total) if total else 0.0)


def _upload_words(uploads: Uploads) -> str:
    if not uploads.bytes_per_step:
        return ""
    where = "pageable" if uploads.pageable_share >= 0.5 else "pinned"
    copies = f"{uploads.copies_per_step:.0f} cop{'y' if round(uploads.copies_per_step) == 1 else 'ies'}"
    return f" Each step then copies {uploads.bytes_per_step / 1e6:.2f} MB to the GPU ({copies}, mostly from {where} memory)."


def _advice(fw: Framework, uploads: Uploads, synced: bool) -> str:
    pageable = uploads.bytes_per_step and uploads.pageable_share >= 0.5
    if fw.name == "jax":
        text = ("Prepare the next batch while the current step runs: build batches in a background thread or a data "
                "pipeline (grain, tf.data with prefetch) and put them on the device ahead of the step "
                "(`flax.jax_utils.prefetch_to_device`, or `jax.device_put` from a prefetch queue), so the jitted step "
                "never waits for numpy.")
        if synced:
            text += (" Reading the loss every step (`float(loss)`) makes the host wait for the step before it starts "
                     "preparing: log every N steps, or keep the running loss on the device.")
        return text
    if fw.name == "tensorflow":
        return ("Move the preparation into the input pipeline: `tf.data` with `map(..., num_parallel_calls=tf.data.AUTOTUNE)` "
                "and `.prefetch(tf.data.AUTOTUNE)`, so batches are ready before the step asks.")
    if fw.is_torch:
        text = ("Prepare batches off the training thread: a `torch.utils.data.DataLoader` with `num_workers>0`, "
                "`persistent_workers=True` and `pin_memory=True`, then `.to('cuda', non_blocking=True)`; move "
                "augmentation or tokenization to the GPU (torchvision.transforms.v2 on CUDA tensors, DALI) or do it once "
                "ahead of training.")
        if pageable:
            text += " The copies come from pageable memory: pinned batches let them overlap with compute."
        if synced:
            text += (" A per-step `.item()` makes the host wait for the step before preparing the next one: log the "
                     "loss every N steps instead.")
        return text
    return ("Prepare step N+1's input on another thread while step N runs: double-buffered pinned host buffers, "
            "`cudaMemcpyAsync` on a copy stream and an event the compute stream waits on, so the launch thread never "
            "stops to build inputs.")


RULE = InputPrep
