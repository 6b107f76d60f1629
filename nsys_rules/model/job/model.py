"""The job as the rules see it: ranks on one clock, matched collectives, steps, per-step totals.

:func:`build_job` turns the ranks' :class:`~nsys_rules.model.job.extract.RankData` into a
:class:`Job`. Every array is (collectives, ranks) or (steps, ranks), NaN where a rank has no
such collective or step: the rules are numpy over these, never loops over kernels.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from nsys_rules.model.job import clock as clocks
from nsys_rules.model.job.collectives import Rows, behaviour_confirmed, instance_keys, match, times
from nsys_rules.model.framework import Framework
from nsys_rules.model.job.extract import BEHAVIOUR, CATEGORIES, RankData
from nsys_rules.model.job.ranks import Unit, assign_ranks
from nsys_rules.model.job.steps import JobSteps, job_steps

#: Clock corrections beyond this (seconds) suggest traces of different runs, not one job.
FAR_APART_S = 60.0

#: A collective whose ends spread more than this (ns, median, after each rank's own clock offset
#: is taken out) is not one all ranks meet at (point-to-point between some of them, or several
#: communicators under one name): kept for exposed time, left out of arrivals and clocks.
COHERENT_END_NS = 100_000


@dataclass(frozen=True)
class RankInfo:
    """One rank of the job."""

    rank: int
    trace: str
    pid: int | None
    device: int | None
    source: str  # how the rank number was found


@dataclass
class Job:
    """Everything the job rules read."""

    ranks: list[RankInfo]
    data: list[RankData]  # per rank, only confirmed communication instances
    clock: clocks.Clock
    rows: Rows  # matched collectives, in job-time order
    coherent: np.ndarray  # (C,) bool: all ranks meet there (used for arrivals)
    start: np.ndarray  # (C, R) job time
    end: np.ndarray
    duration: np.ndarray
    overlap: np.ndarray  # time compute overlapped each instance
    lead: dict[str, np.ndarray]  # category -> (C, R): what the rank did since its previous instance
    lead_span: np.ndarray  # (C, R) time since the rank's previous communication instance ended
    steps: JobSteps
    families: dict[str, str] = field(default_factory=dict)  # collective key -> family
    notes: list[str] = field(default_factory=list)

    @property
    def size(self) -> int:
        """Number of ranks."""
        return len(self.ranks)

    def framework(self, col: int | None = None) -> Framework:
        """The framework of rank column ``col``'s program, else the first rank's that is known; a CUDA program when none is."""
        if col is not None and self.data[col].framework is not None:
            return self.data[col].framework  # type: ignore[return-value]
        return next((d.framework for d in self.data if d.framework is not None), Framework("cuda"))

    def step_totals(self, category: str) -> np.ndarray:
        """(steps, ranks): a running total's growth over each step on each rank (NaN where unknown)."""
        col = CATEGORIES.index(category)
        at = self._bound_values(lambda d, i: d.cum_end[i, col].astype(float))
        return np.diff(at, axis=0)

    def step_times(self) -> np.ndarray:
        """(steps, ranks): each rank's own step time, end of one step's last collective to the next."""
        at = self._bound_values(lambda d, i: d.end[i].astype(float))
        return np.diff(at, axis=0)

    def step_sums(self, values: np.ndarray) -> np.ndarray:
        """(steps, ranks): ``values`` (C, R) summed over the collectives of each step."""
        step = self.steps.step_of(np.arange(self.rows.count))
        out = np.full((self.steps.count, self.size), np.nan)
        for k in range(self.steps.count):
            sel = values[step == k]
            with np.errstate(invalid="ignore"):
                out[k] = np.where(np.isnan(sel).all(axis=0), np.nan, np.nansum(sel, axis=0)) if len(sel) else np.nan
        return out

    def _bound_values(self, value: Callable[[RankData, np.ndarray], np.ndarray]) -> np.ndarray:
        bounds = self.steps.bounds
        out = np.full((len(bounds), self.size), np.nan)
        for r, d in enumerate(self.data):
            idx = self.rows.index[bounds, r]
            have = idx >= 0
            if have.any():
                out[have, r] = value(d, idx[have])
        return out


def build_job(data: list[RankData]) -> Job:
    """Keep each rank's communication, number the ranks, match collectives, align clocks, cut steps."""
    data, families, notes = keep_communication(data)
    silent = [d for d in data if not d.instances]
    if silent and len(silent) < len(data):
        notes.append(f"{len(silent)} process(es) or trace(s) without communication left out of the job")
        data = [d for d in data if d.instances]
    units = [Unit(d.trace_index, d.pid, d.device, d.hint, d.units_in_trace) for d in data]
    numbers, sources = assign_ranks(units)
    order = sorted(range(len(data)), key=lambda i: numbers[i])
    data = [data[i] for i in order]
    ranks = [RankInfo(numbers[i], data[j].trace, data[j].pid, data[j].device, sources[i]) for j, i in enumerate(order)]
    bases = [d.trace_index for d in data]
    session, session_notes, _ = clocks.session_offsets(bases, [d.session_start_ns for d in data])
    rows = match(data, [instance_keys(d) for d in data], session)

    local_end = times(data, rows, np.zeros(len(data), np.int64))[1]
    coherent = _coherent(rows, local_end, session)
    clock = clocks.align(bases, session, local_end, coherent if coherent.any() else None)
    start, end = times(data, rows, clock.offset)
    order_c = np.argsort(np.nanmedian(end, axis=1), kind="stable")  # every row has at least one rank
    rows = Rows(rows.keys, rows.key[order_c], rows.index[order_c])
    start, end, coherent = start[order_c], end[order_c], coherent[order_c]
    overlap = _per_instance(data, rows, lambda d, i: d.overlap[i])
    lead_span = _per_instance(data, rows, lambda d, i: np.where(i > 0, d.start[i] - d.end[np.maximum(i - 1, 0)], np.nan))
    lead = {c: _per_instance(data, rows, _lead_in(col)) for col, c in enumerate(CATEGORIES)}
    steps = job_steps(rows.key[coherent] if coherent.any() else rows.key)
    if coherent.any() and not coherent.all():
        steps = _steps_over(steps, np.flatnonzero(coherent))
    steps = traced_steps(data, rows, local_end, coherent) or steps
    return Job(ranks, data, clock, rows, coherent, start, end, end - start, overlap, lead, np.maximum(lead_span, 0),
               steps, families, [*notes, *session_notes, *clock.notes, *_far_apart(clock)])


def traced_steps(data: list[RankData], rows: Rows, local_end: np.ndarray, coherent: np.ndarray) -> JobSteps | None:
    """The job's steps where a rank's own trace cuts its steps (one step model per report), or None.

    A job step still ends at a collective (the point all ranks meet): the trace's steps say how
    many collectives one step holds (the median over its steps: two SendRecv per training step)
    and where the last steady step ends, so the job has the trace's step count and boundaries.
    A step holding several collectives is said so, never redefined as one per collective. None
    when no rank carries steps, or its steps hold fewer collectives than steps.
    """
    ranked = [r for r, d in enumerate(data) if len(d.step_bounds)]
    if not ranked:
        return None
    r = ranked[0]
    keep = np.flatnonzero(coherent) if coherent.any() else np.arange(rows.count)
    ends = local_end[keep, r]
    ok = ~np.isnan(ends)
    keep, ends = keep[ok], ends[ok]
    order = np.argsort(ends, kind="stable")
    keep, ends = keep[order], ends[order]
    trace_bounds = data[r].step_bounds
    steps = len(trace_bounds) - 1
    # The last collective ended by each step bound (-1: none yet; the first step then holds the first one).
    last = np.searchsorted(ends, trace_bounds.astype(float), side="right") - 1
    per_step = int(round(float(np.median(np.diff(last))))) if steps else 0
    if per_step < 1 or len(ends) < 2:
        return None
    # Anchored at the last steady step's end (the first step may begin before any collective ended, and
    # a step bound is a collective): every step holds per_step collectives, back from there.
    positions = last[-1] - per_step * np.arange(steps, -1, -1)
    positions = positions[(positions >= 0) & (positions < len(ends))]
    if len(positions) < 2:
        return None
    bounds = keep[positions].astype(np.int64)
    what = "one collective" if per_step == 1 else f"{per_step} collectives"
    return JobSteps(bounds, per_step, f"the trace's steps ({data[r].step_source}), {what} per step")


def keep_communication(data: list[RankData]) -> tuple[list[RankData], dict[str, str], list[str]]:
    """Each rank with only its communication: listed or NVTX-found kernels, and candidates that pass the behaviour test.

    Returns the ranks (same order), each collective key's family, and notes.
    """
    notes: list[str] = []
    bases = [d.trace_index for d in data]
    session, _, session_known = clocks.session_offsets(bases, [d.session_start_ns for d in data])
    keys = [instance_keys(d) for d in data]
    rows = match(data, keys, session)
    confirmed: set[str] = set()
    if len(data) > 1:
        # The behaviour test needs a clock that does not come from the candidates: the session
        # clocks (or one trace), checked and corrected with the named collectives.
        family = {str(k): str(f) for d, ks in zip(data, keys, strict=True) for k, f in zip(
            ks, np.asarray(d.families, dtype=object)[d.code] if d.instances else [], strict=True)}
        named = np.array([family.get(rows.keys[k]) != BEHAVIOUR for k in rows.key], bool)
        local_end = times(data, rows, np.zeros(len(data), np.int64))[1]
        trusted = _coherent(rows, local_end, session) & named
        if session_known or trusted.any():
            first = clocks.align(bases, session, local_end[named], trusted[named] if trusted.any() else None)
            confirmed = behaviour_confirmed(data, rows, keys, first.offset)
        else:
            notes.append("no session clocks and no named collectives: kernels were not tested for collective behaviour")
    families: dict[str, str] = {}
    kept = []
    for d, k in zip(data, keys, strict=True):
        fam = np.asarray(d.families, dtype=object)[d.code] if d.instances else np.empty(0, dtype=object)
        keep = (fam != BEHAVIOUR) | np.isin(k, list(confirmed))
        for key, f in zip(k[keep], fam[keep], strict=True):
            families.setdefault(str(key), str(f))
        kept.append(d.subset(keep))
    return kept, families, notes


def _far_apart(clock: clocks.Clock) -> list[str]:
    """A note when the clocks had to move by more than any job's hosts plausibly disagree."""
    worst = float(np.abs(clock.correction).max(initial=0)) / 1e9
    if worst <= FAR_APART_S:
        return []
    return [f"the collectives moved a trace's clock by {worst:.0f} s: if these traces are not ranks of one run, "
            "check them separately"]


def _coherent(rows: Rows, local_end: np.ndarray, session: np.ndarray) -> np.ndarray:
    """Per collective: does its key end together on every rank that has it (after a rough alignment)?"""
    ok = np.ones(rows.count, bool)
    end = local_end + session[np.newaxis, :].astype(float)
    for k in range(len(rows.keys)):
        sel = rows.key == k
        block = end[sel]
        members = ~np.isnan(block).all(axis=0)
        if members.sum() < 2:
            # Run by one rank of several, it is no point where ranks meet (one rank alone: every collective is).
            ok[sel] = end.shape[1] < 2
            continue
        block = block[:, members]
        with np.errstate(invalid="ignore"):
            block = block - np.nanmedian(block - block[:, :1], axis=0)  # each rank's clock from the ends
            spread = np.nanmax(block, axis=1) - np.nanmin(block, axis=1)
        ok[sel] = not np.isfinite(spread).any() or float(np.nanmedian(spread)) <= COHERENT_END_NS
    return ok


def _lead_in(col: int) -> Callable[[RankData, np.ndarray], np.ndarray]:
    """Per instance, category ``col``'s time since the rank's previous instance ended (NaN for its first)."""
    return lambda d, i: np.where(i > 0, d.cum_start[i, col] - d.cum_end[np.maximum(i - 1, 0), col], np.nan)


def _per_instance(data: list[RankData], rows: Rows, value: Callable[[RankData, np.ndarray], np.ndarray]) -> np.ndarray:
    out = np.full(rows.index.shape, np.nan)
    for r, d in enumerate(data):
        idx = rows.index[:, r]
        have = idx >= 0
        if have.any():
            out[have, r] = value(d, idx[have])
    return out


def _steps_over(steps: JobSteps, positions: np.ndarray) -> JobSteps:
    """Steps cut over a subset of the collectives, mapped back to indices of all of them."""
    return JobSteps(positions[steps.bounds], steps.period, steps.source)
