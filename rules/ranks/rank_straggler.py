"""rank-straggler: one rank arrives last at the collectives and every other rank waits for it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import numpy as np

from nsys_rules.api import (Finding, Job, JobContext, JobRule, Renamed, Severity, metric, pct, pinned_memory_advice,
                            step_list)
from nsys_rules.rules.ranks.compare import (diff_command, full_rows, ms, need_job, others_median, rank_label, signed_rank_z,
                                            worst_first)


#: What a rank can do instead of arriving, in the order they are named.
CAUSES = ("compute", "host stall", "sync", "allocation", "copies")


@dataclass(frozen=True)
class Options:
    """Options of rank-straggler."""

    min_collectives: int = field(default=5, metadata={
        "help": "collectives where every rank meets needed before arrivals are judged"})
    min_held_pct: float = field(default=50.0, metadata={
        "help": "the straggler causes at least this percent of all the waiting at those collectives"})
    significance: float = field(default=2.5, metadata={
        "help": "z score one of two tests must reach: its arrivals against the others' (signed-rank), or its share of "
                "the waiting against a random order of arrival (2.5: about 0.6 % chance each under random jitter)"})
    min_share_pct: float = field(default=1.0, metadata={
        "help": "report when the time it holds the others up is at least this percent of the steps' time"})
    warn_share_pct: float = field(default=5.0, metadata={
        "help": "that percent from which the finding is a warning"})


@dataclass(frozen=True)
class Straggling:
    """The rank that arrives last, and by how much."""

    col: int  # column of the rank in the job's arrays
    last: int  # collectives it arrived last at
    judged: int  # collectives judged (every rank present)
    held: np.ndarray  # (C,) time it held the others up at each collective inside a step (0 elsewhere)
    held_share: float  # its share of all the waiting (0-1)
    arrival_z: float  # its delay behind the others' median arrival, as a signed-rank z score
    held_z: float  # its share of the waiting against a random order of arrival, as a z score
    excess: dict[str, float]  # cause -> time more than the other ranks' median, summed over its late collectives


# -- pure functions --------------------------------------------------------------------------
def arrivals(start: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per collective (rows of ``start``, ranks in columns, none missing): the last rank and its lead over the next-to-last."""
    order = np.argsort(start, axis=1, kind="stable")
    ordered = np.take_along_axis(start, order, axis=1)
    return order[:, -1], ordered[:, -1] - ordered[:, -2]


def held_z(lateness: np.ndarray, last: np.ndarray, col: int, ranks: int) -> float:
    """z score of rank ``col``'s share of the waiting if the last rank were drawn at random at each collective.

    Under that null each collective's lateness L goes to the rank with probability 1/R: the
    expected total is sum(L)/R, the variance sum(L^2)(1/R)(1 - 1/R). Large lateness weighs
    more, so a rank late by milliseconds at a few collectives stands out from microsecond jitter.
    """
    expected = float(lateness.sum()) / ranks
    variance = float((lateness.astype(float) ** 2).sum()) * (1 / ranks) * (1 - 1 / ranks)
    held = float(lateness[last == col].sum())
    if variance <= 0:
        return float("inf") if held > expected else 0.0
    return (held - expected) / float(np.sqrt(variance))


def find_straggler(job: Job, opts: Options) -> Straggling | None:
    """The rank that holds the others up most, when that is beyond noise; else None.

    It arrives last at most collectives (a signed-rank test of its arrivals against the other
    ranks' median) or is late by far more than the jitter at some of them (its share of the
    waiting against a random order of arrival); either test must reach ``significance``.
    """
    rows = full_rows(job)
    if rows.sum() < opts.min_collectives:
        return None
    start = job.start[rows]
    last, lateness = arrivals(start)
    held_by = np.bincount(last, weights=lateness, minlength=job.size)
    counts = np.bincount(last, minlength=job.size)
    col = int(np.lexsort((counts, held_by))[-1])
    share = float(held_by[col] / held_by.sum()) if held_by.sum() > 0 else 0.0
    if share < opts.min_held_pct / 100:
        return None
    arrival_z = signed_rank_z(start[:, col] - others_median(start)[:, col])
    weighted_z = held_z(lateness, last, col, job.size)
    if max(arrival_z, weighted_z) < opts.significance:
        return None
    held = np.zeros(job.rows.count)
    held[np.flatnonzero(rows)[last == col]] = lateness[last == col]
    held[job.steps.step_of(np.arange(job.rows.count)) < 0] = 0  # per step: only collectives inside the steps
    mine = np.zeros(job.rows.count, bool)
    mine[np.flatnonzero(rows)[last == col]] = True
    return Straggling(col, int(counts[col]), int(len(last)), held, share, arrival_z, weighted_z,
                      what_instead(job, mine, col))


def what_instead(job: Job, rows: np.ndarray, col: int) -> dict[str, float]:
    """What rank ``col`` did before the collectives ``rows`` more than the other ranks (median) did.

    The lead-in of a collective is the time since the rank's previous communication ended:
    GPU compute and copies in it, host time blocked in synchronization and in allocation, and
    the GPU's idle time. Idle time not explained by the host's syncs and allocations is a host
    stall (the GPU waited for the host to launch: CPU work, data loading, Python).
    """
    lead = job.lead
    idle = job.lead_span - lead["gpu"]
    series = {"compute": lead["compute"], "copies": lead["copy"], "sync": lead["sync"], "allocation": lead["alloc"],
              "idle": idle}
    out: dict[str, float] = {}
    for name, values in series.items():
        diff = values[rows, col] - others_median(values[rows])[:, col]
        out[name] = float(np.nansum(diff)) if len(diff) else 0.0
    out["host stall"] = max(0.0, out.pop("idle") - max(0.0, out["sync"]) - max(0.0, out["allocation"]))
    return out


def main_cause(excess: dict[str, float]) -> str | None:
    """The cause with the largest positive excess, or None when the rank did nothing more than the others."""
    best = max(CAUSES, key=lambda c: excess.get(c, 0.0))
    return best if excess.get(best, 0.0) > 0 else None


# -- the rule --------------------------------------------------------------------------------
class RankStraggler(JobRule):
    """One rank arrives last at the collectives and holds every other rank up.

    What it detects: in a job of several ranks (one trace per rank, or several processes and
    GPUs in one trace), the rank whose communication kernels start last and so hold the others
    up: at each collective where all ranks meet, the last rank holds the others up by the gap to
    the next-to-last arrival. The straggler causes at least `min_held_pct` percent of all that waiting
    and is beyond noise by one of two tests reaching `significance` (z): it arrives last at most
    collectives (a signed-rank test of its arrivals against the other ranks' median), or it is
    late by far more than the jitter at some of them (its share of the waiting against a random
    order of arrival). Random jitter, where each rank is sometimes last, passes neither.
    Arrivals are compared on one clock: the traces' session start times, corrected from the
    collectives themselves when they disagree.
    Why it hurts: a collective completes only when the last rank arrives; every other rank's
    communication kernel spins on its GPU until then. The straggler's delay is paid by the
    whole job at every such collective, so one slow rank sets the step time of all of them.
    Evidence: how many collectives it arrived last at, how long it held the others up (the gap
    to the next-to-last arrival) in total and per step, the steps where it was latest, and what
    it did instead in the lead-in to those collectives compared with the other ranks (median):
    more GPU compute, a host stall (its GPU idle, waiting for the host), host time blocked in
    synchronization, in allocation, or more copies. `estimated_savings_ns` is the time it held
    the others up: what the job gains if it arrived with the next-to-last rank, bounded by the
    steps' time.
    Next optimizations: the fix follows the cause: balance the work (sequence lengths, batch
    composition, pipeline stage sizes, MoE routing) when it computes more; move rank-specific
    host work (logging, checkpointing, evaluation on rank 0, data loading) off the step or
    give it more loader workers when it stalls; remove its host syncs or allocations when those
    grew. Compare its trace with another rank's with `nsys-rules diff`.
    Options: `min_collectives`, `min_held_pct`, `significance`, `min_share_pct`, `warn_share_pct`.
    Requires: the kernel table of every rank with communication kernels (NCCL, the custom
    all-reduce kernels of vLLM/SGLang/TensorRT-LLM, or any kernel that ends together on every
    rank); the API table for sync and allocation time; `TARGET_INFO_SESSION_START_TIME` to put
    separate traces on one clock (or enough collectives to do it without).
    False positives: a rank with more work by design (the pipeline's last stage computing the
    loss, rank 0 logging) is a straggler by design: the finding still prices it. A straggler by
    network (a slow link) shows no excess in its own lead-in: the message says so. Collectives
    inside CUDA graphs captured without `--cuda-graph-trace=node` are invisible.
    """

    name = "rank-straggler"
    title = "One rank arrives last at collectives and the others wait"
    default_severity = Severity.WARNING
    Options = Options
    renamed_options = {"min_held_share": Renamed("min_held_pct", 100), "min_share": Renamed("min_share_pct", 100),
                       "warn_share": Renamed("warn_share_pct", 100)}

    def check(self, ctx: JobContext) -> Iterable[Finding]:
        job, opts = ctx.job, ctx.options
        need_job(job, ranks=2)
        found = find_straggler(job, opts)
        if found is None:
            return
        total_time = ctx.step_time_ns()
        held_total = float(found.held.sum())
        share = held_total / total_time if total_time else 0.0
        if share < opts.min_share_pct / 100:
            return
        steps = max(1, job.steps.count)
        per_step_held = job.step_sums(_column(found.held, found.col, job.size))[:, found.col] if job.steps.count else None
        worst = _worst_steps(per_step_held)
        cause = main_cause(found.excess)
        label = rank_label(job, found.col)
        per_step = {c: v / steps for c, v in found.excess.items()}
        metrics = {
            "rank": metric(job.ranks[found.col].rank, "count"),
            "collectives_last": metric(found.last, "count"),
            "collectives_judged": metric(found.judged, "count"),
            "last_share": metric(pct(found.last, found.judged), "%"),
            "held_up_total": metric(held_total, "ns"),
            "held_up_per_step": metric(held_total / steps, "ns"),
            "steps": metric(job.steps.count, "count"),
            "step_time": metric(total_time / steps, "ns"),
            "held_share": metric(100.0 * found.held_share, "%"),
            "arrival_z": metric(found.arrival_z, "ratio"),
            "held_z": metric(min(found.held_z, 1e6), "ratio"),
            "residual_clock_skew": metric(job.clock.residual_skew_ns, "ns"),
        }
        for c in CAUSES:
            metrics[f"extra_{c.replace(' ', '_')}_per_step"] = metric(per_step.get(c, 0.0), "ns")
        when = f"; late in steps {step_list(np.sort(worst))} of {job.steps.count}" if len(worst) else ""
        message = (
            f"{label} arrives last at {found.last} of {found.judged} collectives where all {job.size} ranks meet "
            f"({pct(found.last, found.judged):.0f} %) and holds the others up {ms(held_total / steps)} per step "
            f"({pct(held_total, total_time):.1f} % of the {ms(total_time / steps)} step), {ms(held_total)} in total"
            f"{when}. {_instead_text(per_step, cause)} Clocks: {job.clock.source}, residual skew "
            f"{job.clock.residual_skew_ns / 1e3:.1f} us.")
        severity = Severity.WARNING if share >= opts.warn_share_pct / 100 else Severity.INFO
        span = _step_span(job, worst[0]) if len(worst) else None
        yield ctx.finding(message, _recommendation(job, found.col, cause), rank=job.ranks[found.col].rank,
                          severity=severity, metrics=metrics, estimated_savings_ns=held_total, step_span=span)


def _column(values: np.ndarray, col: int, size: int) -> np.ndarray:
    out = np.full((len(values), size), np.nan)
    out[:, col] = values
    return out


def _worst_steps(per_step: np.ndarray | None) -> np.ndarray:
    """Steps where the straggler held the others up (at least half its typical late step), worst first."""
    if per_step is None or not len(per_step):
        return np.zeros(0, np.int64)
    late = np.nan_to_num(per_step)
    positive = late[late > 0]
    if not len(positive):
        return np.zeros(0, np.int64)
    return worst_first(late, late >= 0.5 * float(np.median(positive)))


def _step_span(job: Job, step: int) -> tuple[float, float]:
    ends = np.nanmedian(job.end[job.steps.bounds[step:step + 2]], axis=1)
    return float(ends[0]), float(ends[1])


def _instead_text(per_step: dict[str, float], cause: str | None) -> str:
    parts = [f"{c} {'+' if per_step[c] >= 0 else ''}{ms(per_step[c])}" for c in CAUSES if abs(per_step.get(c, 0.0)) >= 1_000]
    compared = (" Before those collectives, per step, against the other ranks' median: " + ", ".join(parts) + ".") \
        if parts else ""
    if cause is None:
        return ("Its own lead-in to those collectives looks like the others' (no extra compute, host stall, sync or "
                "allocation): the delay comes from earlier, a slower previous collective or a slower link." + compared)
    what = {"compute": "it runs more GPU work before each collective",
            "host stall": "its GPU sits idle waiting for its host (CPU work, data loading, Python) before each collective",
            "sync": "its host blocks in synchronization more before each collective",
            "allocation": "its host spends more time in allocation calls before each collective",
            "copies": "it runs more memory copies before each collective"}[cause]
    return f"Mostly {what}.{compared}"


def _recommendation(job: Job, col: int, cause: str | None) -> str:
    rank = job.ranks[col].rank
    reference = next(c for c in range(job.size) if c != col)
    diff = diff_command(job, col, reference)
    compare = (f" Compare it with another rank: `{diff}`." if diff else
               f" Check rank {rank}'s process and GPU in the trace against another rank's.")
    fw = job.framework(col)
    loader = ("data loading needs more workers (`DataLoader(num_workers=..., pin_memory=True)`)" if fw.is_torch else
              "data loading belongs in a background pipeline that prefetches to the device "
              "(`flax.jax_utils.prefetch_to_device`, grain or tf.data)" if fw.name == "jax" else
              "data loading belongs in a `tf.data` pipeline with `prefetch`" if fw.name == "tensorflow" else
              "input preparation belongs on another thread, ahead of the step")
    syncs = ("`.item()`, `.cpu()`, printing tensor values, `torch.cuda.synchronize()`" if fw.is_torch else
             "`float()`/`jax.device_get` on device arrays, `jax.block_until_ready`" if fw.name == "jax" else
             "`.numpy()` on tensors" if fw.name == "tensorflow" else
             "`cudaStreamSynchronize`, `cudaDeviceSynchronize`, synchronous copies")
    allocs = ("keep PyTorch's caching allocator on (no `PYTORCH_NO_CUDA_MEMORY_CACHING`), no `torch.cuda.empty_cache()` "
              "in the step, try `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`" if fw.is_torch else
              "keep XLA's preallocated pool (no `XLA_PYTHON_CLIENT_ALLOCATOR=platform`)" if fw.name == "jax" else
              "allocate its buffers once before the loop, or from a pool that keeps its memory")
    fix = {
        "compute": (f"Balance the work so that rank {rank} does no more than the others: even out sequence lengths "
                    "and batch composition (bucket or pack by token count), pipeline stage sizes (layers per stage), "
                    "and MoE routing (load-balancing loss, capacity factor)."),
        "host stall": (f"Find what rank {rank}'s host does while its GPU waits: rank-specific work in the step (logging, "
                       "metrics, checkpointing or evaluation on one rank) belongs outside it or in a background thread; "
                       f"{loader}; profile its CPU with `nsys profile --sample=process-tree --cpuctxsw=process-tree`."),
        "sync": (f"Remove rank {rank}'s per-step host synchronization ({syncs}); run sync-stall on its trace for the "
                 "calls."),
        "allocation": f"Stop rank {rank}'s per-step allocations: {allocs}; run alloc-churn on its trace for the calls.",
        "copies": (f"Cut rank {rank}'s extra copies before the collectives: {pinned_memory_advice(fw)}, or keep the data "
                   "on the GPU."),
    }.get(cause or "", (f"Rank {rank}'s own work before the collectives matches the others': check its link "
                        "(`NCCL_DEBUG=INFO` for the transport, `nvidia-smi topo -m`), and the collective before "
                        "the late ones."))
    return fix + compare


RULE = RankStraggler
