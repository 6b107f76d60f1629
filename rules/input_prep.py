"""input-prep: the GPU waits while the host prepares the next step's input, one block of host work per step."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import numpy as np

from nsys_rules.api import (Finding, Framework, Location, PythonSite, Rule, RuleContext, Severity,
                            SourceLine, StepModel, metric, pct)
from nsys_rules.api.analysis import LOADER_FRAME, BlockEvidence, merge_intervals

HTOD = 1  # CUPTI copyKind of a host-to-device copy
#: What the budget calls a block of host work (nsys_rules.model.budget_shape): its share of the median step, and ns.
BLOCK_SHARE = 0.1
BLOCK_NS = 1_000_000
PAGEABLE = 0  # CUPTI memory kind of pageable host memory
#: A copy after the blocks of at least this size is a batch, not a scalar (a learning rate, a step counter).
MIN_BATCH_BYTES = 1024
#: Share of the blocks' Python samples in loader-like code that names an input pipeline.
LOADER_FRAMES_SHARE = 0.3
#: Share of the blocks during which other threads do file I/O that names a loader reading data.
FILE_IO_SHARE = 0.2
#: What the launching thread did is said for the activities of at least this percent of the blocks.
DOING_MIN_PCT = 5.0


@dataclass(frozen=True)
class Options:
    """Options of input-prep."""

    min_share_pct: float = field(default=5.0, metadata={
        "help": "percent of the median step the host's blocks of work must take to be reported"})
    warn_share_pct: float = field(default=10.0, metadata={
        "help": "percent of the median step for a warning"})
    alloc_share_pct: float = field(default=50.0, metadata={
        "help": "percent of the blocks the launching thread spends in allocation calls from which they are "
                "allocation (alloc-churn's finding), not host work"})


@dataclass(frozen=True)
class Uploads:
    """Host-to-device copies of the steady steps: what a prepared batch costs to move."""

    bytes_per_step: float
    copies_per_step: float
    pageable_share: float  # of the bytes


class InputPrep(Rule):
    """The GPU waits while the host works between steps: the next step's input, when the trace shows it.

    What it detects: the step budget's `host_prep` part: blocks of host work (at least a tenth of
    the median step) that the loop's GPU waits through, usually between two steps. The cause is
    named only from what the trace shows the host doing in the blocks
    (`nsys_rules.model.host_evidence`): input preparation (the next batch tokenized, augmented,
    collated or built in numpy, then copied to the GPU) needs input-shaped evidence: the batch's
    host-to-device copy right after the blocks, another thread staging copies in them (a loader),
    Python samples in loader code, or other threads reading files. Without it the finding says
    "host work between steps", names the Python function the samples saw when captured, says what
    the launching thread did (its own code, waiting on another thread, file I/O, CUDA calls) and
    which capture flags would show the cause (`--trace=cuda,nvtx,osrt`, `--python-sampling=true`,
    `--sample=process-tree`). Blocks spent in allocation calls (`cudaFree` after `empty_cache()`)
    are alloc-churn's, not reported here. Time a synchronization (or an OS wait on a readback,
    JAX's `float(loss)`) released into the block that the step's GPU work could hide stays
    sync-stall's.
    Why it hurts: nothing runs on the GPU while the block lasts, and neither CUDA graphs nor
    torch.compile touch it: it is on the critical path.
    Evidence: the block per step and its share of the step, the blocks and how many end in a
    host-to-device copy, loader threads, the share of the Python samples in loader code, how many
    kinds of input evidence were found (`input_evidence`), the launching thread's share in its own
    code and waiting on other threads, the host-to-device copies per step (bytes, pageable or
    pinned), the program's framework.
    Next optimizations: for input preparation, move it off the step's thread and ahead of it, in
    the program's framework: PyTorch `DataLoader(num_workers=..., pin_memory=True,
    persistent_workers=True)` with `.to(device, non_blocking=True)`, preprocessing on the GPU;
    JAX: a background data pipeline and `flax.jax_utils.prefetch_to_device`; TensorFlow
    `tf.data` with `prefetch`; a CUDA program: prepare step N+1 on another thread into pinned
    buffers while step N runs. For host work of no named cause: capture again with the flags
    named, then move that work off the step's thread or run it every N steps.
    Options: `min_share_pct`, `warn_share_pct`, `alloc_share_pct`.
    Requires: a step model and its budget; OS runtime calls and Python samples when captured.
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
        blocks = _blocks(ctx, model, median_step)
        evidence = ctx.block_evidence(blocks, model.pid, model.device)
        if evidence.block_ns and evidence.cuda_ns.get("alloc", 0) >= ctx.options.alloc_share_pct / 100 * evidence.block_ns:
            return  # a cudaFree/cudaMalloc burst (empty_cache() every step): alloc-churn counts that time, once
        uploads = _uploads(ctx, model.count)
        fw = ctx.framework
        synced = budget.part("after_sync").ns > 0 or 2 * evidence.readback_before >= max(evidence.blocks, 1)
        sites = _sites(ctx, blocks)
        proof = input_proof(evidence, uploads)
        head = (f"The host works {part.median_step_ns / 1e6:.2f} ms in blocks the GPU waits through in the median "
                f"step ({share:.1f} % of its {median_step / 1e6:.2f} ms; {part.ns / 1e6:.1f} ms over "
                f"{model.count} steps)")
        doing = doing_words(evidence)
        if proof:
            message = (f"{head}: the next step's input prepared on the step's own thread, before its first launch "
                       f"(evidence: {'; '.join(proof)}).{doing}{_upload_words(uploads)}{_site_words(sites)} "
                       f"Program: {fw.label}.")
            advice = _advice(fw, uploads, synced)
            title = None
        else:
            named = _named_site(evidence)
            if named is not None:
                why = (f", between steps, running `{named.frame.function}` ({named.frame.short_where}: "
                       f"{100 * named.share:.0f} % of the Python samples in them), not loader code.")
            else:
                why = (", between steps; its cause is not in this capture: no batch's host-to-device copy follows the "
                       "blocks, and no loader thread or loader code runs in them.")
            message = f"{head}{why}{doing}{_site_words(sites)} Program: {fw.label}."
            advice = _unknown_advice(ctx, fw, evidence, synced, bool(sites))
            title = "Host work between steps keeps the GPU waiting"
        stacks = ctx.python_stacks
        if not sites and ctx.trace.capture.runs_python and stacks.fix and proof:
            advice += f" To name the Python function and line of the block: {stacks.fix}."
        own_share = pct(evidence.own_code_ns, evidence.block_ns) if evidence.block_ns else 0.0
        wait_share = pct(evidence.osrt_ns.get("thread_wait", 0), evidence.block_ns) if evidence.block_ns else 0.0
        # A readback the host waited on in an OS call (JAX's float(loss): no CUDA sync the budget sees) released it
        # into the block: what the step's GPU work could hide of that wait is sync-stall's, as for a CUDA sync.
        hidden = _hidden_by_readbacks(ctx, model, budget.busy_ns / max(budget.steps, 1)) if synced else 0
        yield ctx.finding(
            message, advice, title=title,
            severity=Severity.WARNING if share >= ctx.options.warn_share_pct else Severity.INFO,
            estimated_savings_ns=max(part.ns - hidden, 0), budget_part="host_prep",
            metrics={"host_block_per_step": metric(part.median_step_ns, "ns"), "host_block_total": metric(part.ns, "ns"),
                     "step_share": metric(share, "%"), "median_step": metric(median_step, "ns"),
                     "htod_bytes_per_step": metric(int(uploads.bytes_per_step), "B"),
                     "htod_pageable_share": metric(100 * uploads.pageable_share, "%"),
                     "blocks": metric(evidence.blocks, "count"),
                     "blocks_ending_in_htod_copy": metric(evidence.htod_after, "count"),
                     "loader_threads": metric(evidence.loader_threads, "count"),
                     "loader_frames_share": metric(100 * evidence.loader_frames_share, "%"),
                     "input_evidence": metric(len(proof), "count"),
                     "launch_thread_own_code_share": metric(own_share, "%"),
                     "launch_thread_waiting_share": metric(wait_share, "%")},
            location=Location(pid=model.pid, source=None if not sites or not sites[0].user_code else SourceLine(
                sites[0].frame.file, sites[0].frame.line, sites[0].frame.function)),
            key=fw.name if proof else f"{fw.name}:unknown")


def input_proof(evidence: BlockEvidence, uploads: Uploads) -> list[str]:
    """The input-shaped evidence of the blocks, one phrase each (empty: none).

    A block is input preparation only when the trace shows an input: the batch's host-to-device
    copy right after it (in at least half the blocks, and more than a scalar's bytes), another
    thread of the process staging a copy in it (a loader), Python samples in loader code, or other
    threads reading files through it.
    """
    out = []
    if evidence.blocks and 2 * evidence.htod_after >= evidence.blocks and evidence.htod_bytes_after >= MIN_BATCH_BYTES:
        out.append(f"a host-to-device copy of {_size(evidence.htod_bytes_after)} ends {evidence.htod_after} of "
                   f"the {evidence.blocks} blocks")
    if evidence.loader_threads:
        many = evidence.loader_threads > 1
        out.append(f"{evidence.loader_threads} other thread{'s' if many else ''} launch{'' if many else 'es'} "
                   "host-to-device copies during them")
    if evidence.loader_frames_share >= LOADER_FRAMES_SHARE:
        out.append(f"{100 * evidence.loader_frames_share:.0f} % of the Python samples in them are in loader code")
    if evidence.block_ns and evidence.other_file_io_ns >= FILE_IO_SHARE * evidence.block_ns:
        out.append(f"other threads read or write files for {evidence.other_file_io_ns / 1e6:.1f} ms of them")
    del uploads  # the per-step copies say how much moves, not that it follows the blocks
    if out and evidence.loader_frames_share < LOADER_FRAMES_SHARE and _named_site(evidence) is not None:
        return []  # the Python samples name other code as the block's work: the copy after it is not what it waits for
    return out


def _named_site(evidence: BlockEvidence) -> PythonSite | None:
    """The Python function outside any loader that holds most of the blocks' samples, if one does."""
    for site in evidence.python_sites:
        if not LOADER_FRAME.search(f"{site.frame.function} {site.frame.file}"):
            return site if site.share >= 0.5 else None
    return None


def _size(nbytes: int) -> str:
    return f"{nbytes / 1e6:.2f} MB" if nbytes >= 100_000 else f"{nbytes / 1e3:.1f} KB"


def doing_words(evidence: BlockEvidence) -> str:
    """What the launching thread did during the blocks, from the calls the trace holds."""
    total = evidence.block_ns
    if not total or evidence.launch_tid is None:
        return ""
    parts = [(evidence.cuda_ns.get("alloc", 0), "allocating (cudaMalloc/cudaFree)"),
             (evidence.cuda_ns.get("module_load", 0), "loading GPU code"),
             (evidence.cuda_ns.get("sync", 0), "in CUDA synchronization"),
             (evidence.cuda_ns.get("other", 0), "in other CUDA calls"),
             (evidence.osrt_ns.get("thread_wait", 0), "waiting on another thread (futex, pthread_cond_wait)"),
             (evidence.osrt_ns.get("socket_wait", 0), "waiting on a socket or event (poll)"),
             (evidence.osrt_ns.get("file_io", 0), "in file I/O"),
             (evidence.osrt_ns.get("sleep", 0), "sleeping"),
             (evidence.osrt_ns.get("other", 0), "in other OS calls")]
    own = "in its own code (no CUDA" + (" or OS" if evidence.osrt_traced else "") + " call)"
    parts.append((evidence.own_code_ns, own))
    shown = [f"{pct(ns, total):.0f} % {what}" for ns, what in sorted(parts, key=lambda p: -p[0])
             if pct(ns, total) >= DOING_MIN_PCT]
    return f" In the blocks the launching thread was {', '.join(shown)}." if shown else ""


def _unknown_advice(ctx: RuleContext, fw: Framework, evidence: BlockEvidence, synced: bool, named: bool) -> str:
    """What to do about host work between steps whose cause the capture does not show."""
    flags = []
    if not evidence.osrt_traced:
        flags.append("`--trace=cuda,nvtx,osrt` (waits on other threads, files and sockets)")
    if ctx.trace.capture.runs_python and not evidence.python_sampled:
        flags.append("`--python-sampling=true` (the Python function and line)")
    if not ctx.native_samples:
        flags.append("`--sample=process-tree` (the native call stacks)")
    if named:
        text = ("The Python samples name the code the host runs between steps: move it off the step's thread or run "
                "it every N steps.")
    elif flags:
        text = f"Find what the host does between steps before changing the input path: capture again with {', '.join(flags)}."
    else:
        text = "The capture's OS calls and samples show no input pipeline: look at the host's own code between steps."
    if evidence.osrt_ns.get("thread_wait", 0) >= 0.3 * max(evidence.block_ns, 1):
        text += " The launching thread waits on another thread there: that thread's work (a queue, a callback) sets the pace."
    if synced:
        if fw.name == "jax":
            text += (" A readback every step (`float(loss)`, `jax.device_get`) makes the host wait for the step before "
                     "it dispatches the next: keep the loss on the device and read it every N steps.")
        elif fw.is_torch:
            text += (" A per-step readback (`.item()`, `.cpu()`) makes the host wait for the step first: log every N "
                     "steps, or copy with `non_blocking=True` and read it one step later.")
    return text


def _hidden_by_readbacks(ctx: RuleContext, model: StepModel, busy_per_step: float) -> int:
    """The host's OS waits on readbacks in the loop, each up to a step's GPU time: sync-stall's share of the blocks."""
    if model.gpu_span is None:
        return 0
    waits = ctx.readback_waits(*model.gpu_span)
    if waits.empty:
        return 0
    return int(np.minimum((waits["end"] - waits["start"]).to_numpy(np.int64), int(busy_per_step)).sum())


def _blocks(ctx: RuleContext, model: StepModel, median_step: int) -> tuple[np.ndarray, np.ndarray]:
    """The loop GPU's idle stretches long enough to be blocks of host work (as the budget's ``host_prep``)."""
    empty = (np.zeros(0, np.int64), np.zeros(0, np.int64))
    if model.device is None or model.gpu_span is None:
        return empty
    lo, hi = model.gpu_span
    ops = ctx.gpu_ops.near(lo, hi, model.device)
    busy_s, busy_e = merge_intervals(ops.start, ops.end)
    gap_s, gap_e = busy_e[:-1], busy_s[1:]
    block = (gap_e - gap_s >= max(BLOCK_SHARE * median_step, BLOCK_NS)) & (gap_s >= lo) & (gap_e <= hi)
    return gap_s[block], gap_e[block]


def _sites(ctx: RuleContext, blocks: tuple[np.ndarray, np.ndarray]) -> list[PythonSite]:
    """Where the Python code spends the blocks (nsys's Python samples), when the trace holds them."""
    if ctx.python_stacks.samples is None or not len(blocks[0]):
        return []
    return ctx.host_sites(blocks, top=2, by="function")


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
