"""exposed-comm: communication that runs with no compute beside it on its GPU, step after step."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np

from nsys_rules.api import Finding, Framework, Job, JobContext, JobRule, Renamed, Severity, metric, pct, step_list
from nsys_rules.rules.ranks.compare import full_rows, ms, need_job, rank_label, worst_first


@dataclass(frozen=True)
class Options:
    """Options of exposed-comm."""

    min_share_pct: float = field(default=2.0, metadata={
        "help": "report when exposed data movement is at least this percent of the step time (median rank)"})
    warn_share_pct: float = field(default=10.0, metadata={"help": "that percent from which the finding is a warning"})


@dataclass(frozen=True)
class Exposure:
    """(steps, ranks) totals of communication time and its parts."""

    comm: np.ndarray  # communication kernel time
    exposed: np.ndarray  # of it, with no compute kernel running on the same GPU
    waiting: np.ndarray  # of the exposed time, waiting for later ranks to arrive
    moving: np.ndarray  # of the exposed time, moving data (exposed - waiting)
    hideable: np.ndarray  # moving time that compute of the same step could hide: min(moving, compute)
    step_time: np.ndarray


# -- pure functions --------------------------------------------------------------------------
def wait_times(job: Job) -> np.ndarray:
    """(C, R): time each rank's kernel waited for the last rank to arrive (0 where unknown)."""
    wait = np.zeros(job.start.shape)
    rows = full_rows(job)
    if job.size > 1 and rows.any():
        start = job.start[rows]
        wait[rows] = start.max(axis=1, keepdims=True) - start
    return np.minimum(wait, np.nan_to_num(job.duration))


def exposure(job: Job) -> Exposure:
    """Per step and rank: communication, exposed, waiting, moving and hideable time.

    A kernel's exposed time is its duration minus the time compute kernels ran on the same GPU
    meanwhile. While it waits for later ranks it moves nothing, so the data movement left
    exposed is at most its duration minus that wait, minus the overlap (the overlap is taken
    from the moving part: the conservative reading).
    """
    duration = job.duration
    wait = wait_times(job)
    exposed = duration - job.overlap
    moving = np.maximum(duration - wait - job.overlap, 0)
    moving = np.where(np.isnan(duration), np.nan, moving)
    waiting = np.where(np.isnan(duration), np.nan, np.maximum(exposed - moving, 0))
    compute = job.step_totals("compute")
    moving_step = job.step_sums(moving)
    hideable = np.minimum(moving_step, compute)
    return Exposure(job.step_sums(duration), job.step_sums(exposed), job.step_sums(waiting), moving_step, hideable,
                    job.step_times())


def per_rank(values: np.ndarray) -> np.ndarray:
    """(R,): mean per step of each rank (NaN steps ignored)."""
    with np.errstate(all="ignore"):
        return np.nanmean(values, axis=0)


# -- the rule --------------------------------------------------------------------------------
class ExposedComm(JobRule):
    """Communication kernels that run with no compute beside them on their GPU.

    What it detects: per step (steps cut at the job's repeating collectives), the time each
    rank's communication kernels (NCCL, custom all-reduce, or kernels found by behaviour) run
    while no compute kernel runs on the same GPU. That exposed time splits in two: waiting for
    later ranks to arrive (the kernel spins until the last rank starts it; rank-straggler
    prices that) and moving data. The data movement left exposed is what overlap could hide.
    Works on a single rank's trace too (all its exposed time then counts as moving data).
    Why it hurts: exposed communication adds to the step time one for one: the GPU's compute
    units idle while bytes move over NVLink or the network. Training frameworks overlap
    gradient all-reduce with the backward pass and prefetch FSDP all-gathers; tensor-parallel
    inference puts an all-reduce after every attention and MLP block, on the critical path
    unless it is fused with the next kernels or overlapped by micro-batches.
    Evidence: per step (median rank): communication time, exposed time, of which waiting and
    moving data, the step time; the rank with the most exposed data movement and its worst
    steps; the communication kernels by family. `estimated_savings_ns` is the exposed data
    movement that the same step's compute could hide, min(moving, compute) per step, for the
    median rank, bounded by the steps' time.
    Next optimizations: overlap the collective with independent compute (DDP buckets, FSDP
    prefetch, async tensor parallelism), fuse the all-reduce with its neighbours (TensorRT-LLM
    / FlashInfer all-reduce fusion), or cut its size (gradient compression, lower precision).
    Options: `min_share_pct`, `warn_share_pct`.
    Requires: the kernel table of every rank with communication kernels; several steps.
    False positives: overlap is judged per GPU from kernel times: a communication kernel that
    shares the GPU with compute still slows it (both compete for SMs and memory), so exposed
    time is a lower bound of the communication cost, and overlap cannot hide more than the
    compute there is. A collective that must finish before the next layer can start (tensor
    parallelism without micro-batching) can only be fused or shrunk, not overlapped.
    """

    name = "exposed-comm"
    title = "Communication not overlapped by compute"
    default_severity = Severity.WARNING
    Options = Options
    renamed_options = {"min_share": Renamed("min_share_pct", 100), "warn_share": Renamed("warn_share_pct", 100)}

    def check(self, ctx: JobContext) -> Iterable[Finding]:
        job, opts = ctx.job, ctx.options
        need_job(job, steps=1)
        ex = exposure(job)
        step = float(np.nanmedian(per_rank(ex.step_time)))
        if not np.isfinite(step) or step <= 0:
            return
        moving = per_rank(ex.moving)
        worst_col = int(np.nanargmax(np.nan_to_num(moving, nan=-1)))
        median_moving = float(np.nanmedian(moving))
        if median_moving / step < opts.min_share_pct / 100:
            return
        comm = float(np.nanmedian(per_rank(ex.comm)))
        exposed = float(np.nanmedian(per_rank(ex.exposed)))
        waiting = float(np.nanmedian(per_rank(ex.waiting)))
        hideable = float(np.nanmedian(np.nansum(ex.hideable, axis=0)))
        worst_steps = _worst_steps(ex.moving[:, worst_col])
        kernels = _kernel_names(job)
        metrics = {
            "ranks": metric(job.size, "count"),
            "steps": metric(job.steps.count, "count"),
            "step_time": metric(step, "ns"),
            "comm_per_step": metric(comm, "ns"),
            "exposed_per_step": metric(exposed, "ns"),
            "exposed_waiting_per_step": metric(waiting, "ns"),
            "exposed_moving_per_step": metric(median_moving, "ns"),
            "exposed_moving_share": metric(pct(median_moving, step), "%"),
            "overlapped_share": metric(pct(comm - exposed, comm), "%"),
            "worst_rank_moving_per_step": metric(float(moving[worst_col]), "ns"),
            "hideable_total": metric(hideable, "ns"),
        }
        who = "" if job.size == 1 else (
            f" {_upper_first(rank_label(job, worst_col))} leaves the most exposed: {ms(float(moving[worst_col]))} per step"
            + (f", worst in steps {step_list(worst_steps)}" if len(worst_steps) else "") + ".")
        wait_text = "" if job.size == 1 else (f" {ms(waiting)} of it waits for later ranks to arrive (see rank-straggler) "
                                              f"and {ms(median_moving)} moves data.")
        message = (
            f"Communication ({kernels}) takes {ms(comm)} per step (median of {job.size} rank(s), {job.steps.count} "
            f"steps of {ms(step)}); {ms(exposed)} of it ({pct(exposed, comm):.0f} %) runs with no compute kernel on the "
            f"same GPU.{wait_text} Exposed data movement is {pct(median_moving, step):.1f} % of the step.{who} "
            f"Overlapping it with the step's compute would save up to {ms(hideable)} over the {job.steps.count} steps "
            "(no more than the compute there is to hide it under).")
        severity = Severity.WARNING if median_moving / step >= opts.warn_share_pct / 100 else Severity.INFO
        yield ctx.finding(message, _recommendation(job), rank=job.ranks[worst_col].rank,
                          severity=severity, metrics=metrics, estimated_savings_ns=hideable, key="job")


def _upper_first(text: str) -> str:
    return text[:1].upper() + text[1:]


def _worst_steps(values: np.ndarray, limit: int = 5) -> np.ndarray:
    """The ``limit`` worst steps well above the rank's typical one (a quarter more than its median), in step order."""
    vals = np.nan_to_num(values)
    return np.sort(worst_first(vals, vals > 1.25 * float(np.median(vals)), limit))


def _kernel_names(job: Job, limit: int = 3) -> str:
    counts: dict[str, int] = {}
    for d in job.data:
        for code in d.code:
            counts[d.names[code]] = counts.get(d.names[code], 0) + 1
    names = sorted(counts, key=lambda n: -counts[n])
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


_PATTERNS = (
    ("allgather", re.compile(r"all_?gather|reduce_?scatter", re.IGNORECASE)),
    ("p2p", re.compile(r"SendRecv|Send|Recv", re.IGNORECASE)),
    ("alltoall", re.compile(r"all_?to_?all|dispatch|combine", re.IGNORECASE)),
    ("allreduce", re.compile(r"all_?reduce|cross_device_reduce|quickreduce", re.IGNORECASE)),
)


def _recommendation(job: Job) -> str:
    names = " ".join(n for d in job.data for n in d.names)
    kinds = [kind for kind, pattern in _PATTERNS if pattern.search(names)]
    tips = _tips(job.framework())
    chosen = [tips[k] for k in kinds] or [tips["allreduce"]]
    return ("Overlap the exposed communication with compute: " + "; ".join(chosen) +
            ". Run communication on its own stream so that it can overlap, and check the gain by re-capturing.")


def _tips(fw: Framework) -> dict[str, str]:
    """Per kind of collective, how the program's framework overlaps it with compute."""
    alltoall = ("all-to-all (MoE dispatch/combine): overlap it with the shared expert or the other micro-batch "
                "(two-batch overlap), and keep tokens per rank balanced")
    if fw.name in ("vllm", "sglang", "tensorrt-llm"):
        engine = {"vllm": "vLLM's custom all-reduce (no `--disable-custom-all-reduce`) and its all-reduce fusion passes",
                  "sglang": "SGLang's custom all-reduce (no `--disable-custom-all-reduce`)",
                  "tensorrt-llm": "TensorRT-LLM's all-reduce fusion with the residual add and norm"}[fw.name]
        return {"allreduce": (f"all-reduce: use {engine}, or overlap it with the other micro-batch"),
                "allgather": "all-gather/reduce-scatter: overlap them with the other micro-batch's compute",
                "p2p": "send/receive: more micro-batches in flight so the pipeline stages overlap the transfers",
                "alltoall": alltoall}
    if fw.is_torch:
        return {
            "allreduce": ("all-reduce: in training, let DDP overlap it with the backward pass (smaller `bucket_cap_mb` so "
                          "the first buckets start earlier, `gradient_as_bucket_view=True`, no `no_sync` on every step); "
                          "in tensor-parallel inference, fuse it with the residual add and norm or overlap it with the "
                          "other micro-batch"),
            "allgather": ("all-gather/reduce-scatter: with FSDP, prefetch the next unit's parameters "
                          "(`backward_prefetch=BackwardPrefetch.BACKWARD_PRE`, `forward_prefetch=True`; FSDP2 "
                          "`set_modules_to_forward_prefetch`), and with tensor parallelism try async TP "
                          "(`torch._inductor.config._micro_pipeline_tp = True`)"),
            "p2p": ("send/receive: in pipeline parallelism use an interleaved 1F1B schedule and overlap the transfers "
                    "with compute (Megatron `--overlap-p2p-communication`), or more micro-batches to fill the pipeline"),
            "alltoall": alltoall}
    if fw.name == "jax":
        overlap = ("let XLA schedule the collectives under compute (`--xla_gpu_enable_latency_hiding_scheduler=true` "
                   "in `XLA_FLAGS`)")
        return {"allreduce": f"all-reduce: {overlap}, and combine small ones "
                             "(`--xla_gpu_all_reduce_combine_threshold_bytes`)",
                "allgather": f"all-gather/reduce-scatter: {overlap}",
                "p2p": "send/receive: more micro-batches in the pipeline so its stages overlap the transfers",
                "alltoall": alltoall}
    return {
        "allreduce": ("all-reduce: start each gradient bucket's `ncclAllReduce` on a communication stream as soon as "
                      "the bucket is ready, so it runs under the remaining backward kernels; in tensor-parallel "
                      "inference fuse it with the residual add and norm, or overlap it with the other micro-batch"),
        "allgather": ("all-gather/reduce-scatter: issue the next layer's `ncclAllGather` on the communication stream "
                      "while this layer computes (prefetch), with an event the compute stream waits on"),
        "p2p": ("send/receive: an interleaved pipeline schedule with `ncclSend`/`ncclRecv` on their own stream, "
                "or more micro-batches to fill the pipeline"),
        "alltoall": alltoall}


RULE = ExposedComm
