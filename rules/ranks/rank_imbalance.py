"""rank-imbalance: the ranks do different amounts of GPU work per step, so the lighter ones wait."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import numpy as np

from nsys_rules.api import Finding, Job, JobContext, JobRule, Renamed, Severity, metric, pct, step_list
from nsys_rules.rules.ranks.compare import diff_command, ms, need_job, rank_label, t_statistic, worst_first


@dataclass(frozen=True)
class Options:
    """Options of rank-imbalance."""

    min_excess_pct: float = field(default=5.0, metadata={
        "help": "report when the busiest rank's GPU time (or step time) per step exceeds the other ranks' median by this "
                "percent", "max_pct": None})  # an excess over the median, not a share: it may pass 100 %
    warn_excess_pct: float = field(default=15.0, metadata={"help": "that excess (percent) from which the finding is a warning",
                                                            "max_pct": None})
    significance: float = field(default=3.0, metadata={
        "help": "the per-step excess must be this many standard errors above zero (noise guard)"})
    min_steps: int = field(default=3, metadata={"help": "steps needed before per-step times are compared"})


@dataclass(frozen=True)
class Imbalance:
    """Which measure differs, the busiest and lightest rank, and by how much per step."""

    measure: str  # "GPU busy time" or "step time"
    busiest: int  # column
    lightest: int
    per_rank: np.ndarray  # (R,) mean per step
    reference: float  # the other ranks' median, per step (ns)
    excess: float  # busiest minus that reference, per step (ns)
    balanced_gain: float  # busiest minus the mean of all ranks, per step: what an even split of the work saves
    significance: float


# -- pure functions --------------------------------------------------------------------------
def imbalance(per_step: np.ndarray, measure: str) -> Imbalance | None:
    """The busiest rank of a (steps, ranks) measure against the other ranks; None when it cannot be judged."""
    usable = ~np.isnan(per_step).any(axis=1)
    values = per_step[usable]
    if len(values) < 2 or values.shape[1] < 2:
        return None
    mean = values.mean(axis=0)
    busiest, lightest = int(np.argmax(mean)), int(np.argmin(mean))
    others = np.delete(values, busiest, axis=1)
    reference = float(np.median(others.mean(axis=0)))
    # Per step, the busiest rank against that step's other ranks: a real imbalance repeats step after step.
    excess_per_step = values[:, busiest] - np.median(others, axis=1)
    return Imbalance(measure, busiest, lightest, mean, reference, float(mean[busiest] - reference),
                     float(mean[busiest] - mean.mean()), t_statistic(excess_per_step))


def judged(job: Job) -> list[Imbalance]:
    """GPU busy time and step time per step, each judged across ranks."""
    out = []
    for values, measure in ((job.step_totals("compute"), "GPU compute time"), (job.step_times(), "step time")):
        found = imbalance(values, measure)
        if found is not None:
            out.append(found)
    return out


def kernel_differences(job: Job, busiest: int, limit: int = 3) -> list[tuple[str, float]]:
    """Kernels where the busiest rank spends most more time than the other ranks' median (whole capture), largest first."""
    names = set(job.data[busiest].top_kernels)
    rows = []
    for name in names:
        mine = job.data[busiest].top_kernels.get(name, 0)
        others = [d.top_kernels.get(name, 0) for c, d in enumerate(job.data) if c != busiest]
        rows.append((name, float(mine - np.median(others))))
    rows.sort(key=lambda r: -r[1])
    return [r for r in rows[:limit] if r[1] > 0]


# -- the rule --------------------------------------------------------------------------------
class RankImbalance(JobRule):
    """The ranks of a job do different amounts of GPU work per step.

    What it detects: per step (steps cut at the job's repeating collectives), each rank's GPU
    compute time (kernels other than communication) and its own step time; the busiest rank
    against the others' median (with two ranks, the other one), when its excess is at least
    `min_excess_pct` of it and repeats step after step (`significance` standard errors above zero,
    so jitter does not count).
    Why it hurts: ranks meet at every collective, so each step lasts as long as the busiest
    rank's work; the others idle in their communication kernels for the difference. With N
    ranks, the job pays N times the excess in GPU time per step.
    Evidence: GPU compute time per step of the busiest rank, of the others (median) and of the
    lightest rank, the excess and its share, the step time, the steps judged, the kernels where
    the busiest rank spends more than the others. `estimated_savings_ns` is the busiest rank's
    excess over the mean of all ranks per step, times the steps: what an even split of the same
    work would take off the step time, bounded by the steps' time.
    Next optimizations: balance the work: token-count balanced batches (pack or bucket
    sequences by length), even pipeline stages (layers per stage, the embedding and loss on
    lighter stages), balanced MoE routing (load-balancing loss, expert placement), an even
    split of heads and vocabulary in tensor parallelism; then compare the two ranks' kernels.
    Options: `min_excess_pct`, `warn_excess_pct`, `significance`, `min_steps`.
    Requires: the kernel table of every rank; collectives to cut the steps.
    False positives: work that is uneven by design (the last pipeline stage computes the loss,
    rank 0 does extra bookkeeping) is still reported: the numbers say what it costs. Steps cut
    at collectives end together on every rank, so step times agree across ranks by design;
    the step-time comparison matters for traces whose ranks do not synchronize every step.
    """

    name = "rank-imbalance"
    title = "Ranks do uneven GPU work per step"
    default_severity = Severity.WARNING
    Options = Options
    renamed_options = {"min_excess": Renamed("min_excess_pct", 100), "warn_excess": Renamed("warn_excess_pct", 100)}

    def check(self, ctx: JobContext) -> Iterable[Finding]:
        job, opts = ctx.job, ctx.options
        need_job(job, ranks=2, steps=opts.min_steps)
        for found in judged(job):
            share = found.excess / found.reference if found.reference > 0 else 0.0
            if share < opts.min_excess_pct / 100 or found.significance < opts.significance:
                continue
            yield self._finding(ctx, found, found.reference, share)
            return  # one finding per job: the compute imbalance explains the step time when both differ

    def _finding(self, ctx: JobContext, found: Imbalance, median: float, share: float) -> Finding:
        job, opts = ctx.job, ctx.options
        steps = job.steps.count
        per_step = (job.step_totals("compute") if found.measure == "GPU compute time" else job.step_times())
        col = per_step[:, found.busiest] - np.nanmedian(per_step, axis=1)
        worst = np.sort(worst_first(col, limit=5))
        kernels = kernel_differences(job, found.busiest)
        step_time = ctx.step_time_ns() / max(1, steps)
        metrics = {
            "busiest_rank": metric(job.ranks[found.busiest].rank, "count"),
            "lightest_rank": metric(job.ranks[found.lightest].rank, "count"),
            "busiest_per_step": metric(float(found.per_rank[found.busiest]), "ns"),
            "others_median_per_step": metric(median, "ns"),
            "lightest_per_step": metric(float(found.per_rank[found.lightest]), "ns"),
            "excess_per_step": metric(found.excess, "ns"),
            "excess_share": metric(100.0 * share, "%"),
            "balanced_gain_per_step": metric(found.balanced_gain, "ns"),
            "step_time": metric(step_time, "ns"),
            "steps": metric(steps, "count"),
            "significance": metric(min(found.significance, 1e6), "ratio"),
        }
        kernel_text = ("; the most extra time goes to " + ", ".join(f"{n} (+{ms(v)} over the capture)" for n, v in kernels)
                       if kernels else "")
        message = (
            f"{found.measure.capitalize()} per step differs across the {job.size} ranks: "
            f"{rank_label(job, found.busiest)} takes {ms(found.per_rank[found.busiest])}, the other ranks "
            f"{ms(median)} (median; +{100 * share:.1f} %), {rank_label(job, found.lightest)} "
            f"{ms(found.per_rank[found.lightest])}, over {steps} steps of {ms(step_time)}; the excess repeats step after "
            f"step ({found.significance:.1f} standard errors), most in steps {step_list(worst)}{kernel_text}. The other "
            f"ranks wait about {ms(found.excess)} per step for it ({pct(found.excess, step_time):.1f} % of the step); "
            f"an even split of the work would take {ms(found.balanced_gain)} off each step.")
        diff = diff_command(job, found.busiest, found.lightest)
        recommendation = (
            f"Balance the work of rank {job.ranks[found.busiest].rank}: token-count balanced batches (pack or bucket "
            "sequences by length), even pipeline stages (layers per stage), balanced MoE routing, an even split of "
            "heads and vocabulary under tensor parallelism."
            + (f" See which kernels differ: `{diff}`." if diff else ""))
        severity = Severity.WARNING if share >= opts.warn_excess_pct / 100 else Severity.INFO
        return ctx.finding(message, recommendation, rank=job.ranks[found.busiest].rank, severity=severity,
                           metrics=metrics, estimated_savings_ns=found.balanced_gain * steps)


RULE = RankImbalance
