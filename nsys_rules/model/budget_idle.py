"""The budget's idle parts: what the GPU waited for in each idle gap of the steady steps (see :mod:`.budget`).

A gap is judged whole (what the GPU waits for, whether a sync released the host at its start);
a step boundary inside a gap only splits its time between the two steps.
"""

from __future__ import annotations

import numpy as np

from nsys_rules.model.trace import Trace
from nsys_rules.model.activity import GpuOps
from nsys_rules.model.budget_host import HostTimeline, host_timelines
from nsys_rules.analysis.intervals import point_in, search_near

#: Idle gaps judged per batch: a 1M-kernel eager trace has a gap between nearly every two kernels.
#: A batch's per-gap temporaries (8 bytes a gap: 128 KB) stay under malloc's mmap threshold
#: (nsys_rules.malloc_tune), so batches reuse heap memory instead of faulting in fresh pages.
GAP_BATCH = 16384

_IDLE_PARTS = ("launch_wait", "after_sync", "allocation", "module_loading", "graph_internal", "idle_other",
               "_launch_api", "_launch_host")


def idle_parts(trace: Trace, ops: GpuOps, gaps: tuple[np.ndarray, np.ndarray], steps: np.ndarray,
               timelines: dict[tuple[int, int], HostTimeline]) -> dict[str, np.ndarray]:
    """Idle time per step by cause (see :mod:`.budget`).

    ``timelines`` caches the launching threads' timelines (filled here, read by the evidence).
    A gap's cause is judged on the whole gap (what the GPU waits for, whether a sync released the
    host at its start); a step boundary inside a gap only splits its time between the two steps.
    """
    out = {name: np.zeros(len(steps), np.int64) for name in _IDLE_PARTS}
    gaps_s, gaps_e = gaps
    if not len(gaps_s):
        return out
    recurring: dict[tuple[int, int], bool] = {}  # per thread, whether it loads modules in most steps
    context = _IdleContext(trace, ops, steps, timelines, recurring,
                           int(np.searchsorted(ops.start, gaps_e[0], side="left")))
    for first in range(0, len(gaps_s), GAP_BATCH):
        _idle_batch(context, gaps_s[first:first + GAP_BATCH], gaps_e[first:first + GAP_BATCH], out)
    return out


class _IdleContext:
    """What every batch of gaps reads: the operations, the launching calls' ends and threads, the steps."""

    def __init__(self, trace: Trace, ops: GpuOps, steps: np.ndarray, timelines: dict[tuple[int, int], HostTimeline],
                 recurring: dict[tuple[int, int], bool], first_next: int) -> None:
        self.trace, self.ops, self.steps, self.timelines, self.recurring = trace, ops, steps, timelines, recurring
        # The next batch's first next operation, most likely; None once guesses stopped paying.
        self.first_next: int | None = first_next
        self.graphs = bool(ops.by_graph.any())  # without graph launches no gap is inside a replay
        #: The API calls' ends and threads (None without API rows).
        self.api_end_tid: tuple[np.ndarray, np.ndarray] | None = None
        if trace.has("api"):
            api = trace.frame("api", ["start", "end", "tid"])
            if len(api):
                self.api_end_tid = (api["end"].to_numpy(), api["tid"].to_numpy())


def _idle_batch(ctx: _IdleContext, gap_s: np.ndarray, gap_e: np.ndarray, out: dict[str, np.ndarray]) -> None:
    ops, steps = ctx.ops, ctx.steps
    # The operation that ends each gap. Where operations rarely overlap, each busy period is one of
    # them and the gaps' next operations are consecutive rows: checked, not searched.
    if ctx.first_next is not None:
        guess = np.arange(ctx.first_next, ctx.first_next + len(gap_e))
        nxt = search_near(ops.start, gap_e, guess, side="left")
        useful = 4 * int(np.count_nonzero(nxt != guess)) < len(nxt)
        del guess
        ctx.first_next = int(nxt[-1]) + 1 if useful else None
    else:
        nxt = np.searchsorted(ops.start, gap_e, side="left")
    has_next = nxt < len(ops)
    nxt_c = np.minimum(nxt, len(ops) - 1)
    if ctx.graphs:
        prev = np.maximum(nxt_c - 1, 0)
        inside_graph = has_next & (nxt > 0) & ops.by_graph[nxt_c] & ops.by_graph[prev] & (
            ops.corr[nxt_c] == ops.corr[prev]) & (ops.pid[nxt_c] == ops.pid[prev])
        del prev
    else:
        inside_graph = np.zeros(len(gap_s), bool)
    del nxt
    api_row = np.where(has_next, ops.api_row[nxt_c], -1)
    known = api_row >= 0
    if ctx.api_end_tid is not None:
        api_end, api_tid = ctx.api_end_tid
        at = np.maximum(api_row, 0)
        launch_end = np.where(known, api_end[at], -1)
        queued = (launch_end >= 0) & (launch_end <= gap_s)  # the next operation was launched before the gap
        tid = np.where(known, api_tid[0] if api_tid.strides == (0,) else api_tid[at], -1)
        del at, launch_end
    else:
        queued = np.zeros(len(gap_s), bool)
        tid = np.full(len(gap_s), -1, np.int64)
    pids = np.where(has_next, ops.pid[nxt_c], -1)
    # Where the gap's ends fall among the launching thread's calls, most likely: its start after the call
    # that launched the operation before the gap, its end after the call that launched the next one.
    guess_b = api_row.astype(np.int64)
    guess_b += 1
    guess_a = ops.api_row[np.maximum(nxt_c - 1, 0)].astype(np.int64)
    guess_a += 1
    del api_row, nxt_c, known
    host_bound = ~inside_graph & ~queued & (tid >= 0)
    del queued
    # A gap is judged whole, but its time goes to the steps it spans: each gap's first piece (up to
    # the first step boundary inside it) stays aligned with the gaps, in time order, so per-step
    # sums are sums over runs of gaps; the few later pieces of gaps that hold a boundary are apart.
    first_e, more_s, more_e, owner = _cut(gap_s, gap_e, steps[1:, 0])
    runs = _runs(gap_s, steps)
    more_step = np.searchsorted(steps[:, 0], more_s, side="right") - 1
    length = first_e - gap_s
    more_length = more_e - more_s
    for name, mask in (("graph_internal", inside_graph), ("idle_other", ~inside_graph & ~host_bound)):
        if mask.any():
            out[name] += _run_sums(np.where(mask, length, 0), runs)
            _add(out[name], more_step, more_length, mask[owner])
    if not host_bound.any():
        return
    for key, timeline in host_timelines(ctx.trace, pids[host_bound], tid[host_bound], ctx.timelines).items():
        mine = host_bound & (pids == key[0]) & (tid == key[1])
        # The usual trace has one launching thread, whose gaps are nearly all: judged over every gap
        # and masked, with no selected copies; a thread with few of the gaps, on its own gaps only.
        dense = 2 * int(np.count_nonzero(mine)) >= len(mine)
        rows = slice(None) if dense else np.flatnonzero(mine)
        a = gap_s[rows]
        after = timeline.sync_ended_in(a, gap_e[rows])
        if key not in ctx.recurring:  # the same answer for every batch: judged once
            ctx.recurring[key] = _loads_recur(timeline.load_starts, steps)
        compiles = not ctx.recurring[key]
        _credit_host(out, timeline, a, first_e[rows], after, mine if dense else None,
                     runs if dense else _runs(a, steps), steps, compiles=compiles,
                     guesses=(guess_a[rows], guess_b[rows]) if timeline.by_row else None)
        sel = np.flatnonzero(mine[owner])
        if len(sel):
            after_more = np.zeros(len(gap_s), bool)
            after_more[rows] = after
            more_a = more_s[sel]
            _credit_host(out, timeline, more_a, more_e[sel], after_more[owner[sel]], None, _runs(more_a, steps),
                         steps, compiles=compiles)


def _loads_recur(load_starts: np.ndarray, steps: np.ndarray) -> bool:
    """Whether the thread loads modules in most steps: then a load is the loop's own pattern, not compilation."""
    if not len(load_starts):
        return False
    held = point_in(load_starts, steps[:, 0], steps[:, 1])
    return len(np.unique(held[held >= 0])) > len(steps) / 2


def _credit_host(out: dict[str, np.ndarray], timeline: HostTimeline, a: np.ndarray, b: np.ndarray,
                 after: np.ndarray, mine: np.ndarray | None, runs: np.ndarray, steps: np.ndarray, *,
                 compiles: bool, guesses: tuple[np.ndarray, np.ndarray] | None = None) -> None:
    """Add host-bound idle pieces [a, b] (sorted, disjoint; ``runs``: their steps' runs) to the parts by what
    the launching thread was doing; ``mine``: the pieces that count (None: all)."""
    api, own, few, alloc, module = _host_parts(timeline, a, b, after, compiles=compiles, guesses=guesses)
    late = after if mine is None else after & mine
    if late.any():  # a sync opened the gap: all host time is the bubble's
        rows = np.flatnonzero(late)
        _add_at(out["after_sync"], steps, a[rows], api[rows] + own[rows])
    # A sync entered after the GPU already ran dry waits for nothing: its time is host call time.
    counted = ~after if mine is None else ~after & mine
    if not counted.all():
        rows = np.flatnonzero(~counted)
        api[rows] = 0
        own[rows] = 0
    api_sums, own_sums = _run_sums(api, runs), _run_sums(own, runs)
    out["_launch_api"] += api_sums
    out["_launch_host"] += own_sums
    out["launch_wait"] += api_sums + own_sums
    if len(few):
        if mine is not None:
            keep = mine[few]
            few, alloc, module = few[keep], alloc[keep], module[keep]
        _add_at(out["allocation"], steps, a[few], alloc)
        _add_at(out["module_loading"], steps, a[few], module)


def _host_parts(timeline: HostTimeline, a: np.ndarray, b: np.ndarray, after: np.ndarray, *, compiles: bool,
                guesses: tuple[np.ndarray, np.ndarray] | None = None
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Host-bound idle time of sorted, disjoint pieces [a, b] split by what the launching thread was doing
    (``after``: a sync opened the piece's gap).

    Each instant goes to the first of allocation, module loading, a CUDA call, the thread's own
    code. Returns per piece the time in CUDA calls (sync or not: the synchronizations' union is not
    needed) and in its own code, then the few pieces holding allocation or module-loading time
    (row numbers) with those two times. ``compiles``: whether host time before a module load is
    compilation (see below); not when the thread loads a module in most steps (a per-step
    ``cuLibraryLoadData`` of a few microseconds in an eager loop), where the time before it is the
    loop's own host work. ``guesses``: where a and b likely fall among the thread's calls
    (:meth:`Coverage.before`).
    """
    api = timeline.any_call.within(a, b, *guesses) if guesses else timeline.any_call.within(a, b)
    own = b - a
    own -= api
    # The allocation and module-load unions hold a few intervals: only the pieces that overlap
    # their synchronization-wide union (a superset in time) are looked up; the rest hold none.
    near = timeline.alloc_module_sync.touching(a, b)
    alloc = timeline.alloc.within(a[near], b[near])
    with_module = timeline.alloc_module.within(a[near], b[near])
    api[near] -= with_module
    # Host time just before a module load, in the middle of a step, is spent preparing that module
    # (cuDNN building a runtime-fused kernel, NVRTC or Triton compiling): compilation, not the loop's
    # own host work. After a sync the host's work is the bubble's (sampling, the next step's set-up).
    held = np.empty(0, np.int64)
    if compiles and len(timeline.load_starts):
        held = _holding(a, b, timeline.load_starts)  # only a piece holding a load has time before one
        held = held[~after[held]]
    if not len(held):
        return api, own, near, alloc, with_module - alloc
    compiling = timeline.outside_before_load(a[held], b[held])
    own[held] -= compiling
    few = np.union1d(near, held)
    few_alloc = np.zeros(len(few), np.int64)
    few_module = np.zeros(len(few), np.int64)
    at = np.searchsorted(few, near)
    few_alloc[at] = alloc
    few_module[at] = with_module - alloc
    few_module[np.searchsorted(few, held)] += compiling
    return api, own, few, few_alloc, few_module


def _add_at(target: np.ndarray, steps: np.ndarray, starts: np.ndarray, values: np.ndarray) -> None:
    """Add each value to the step holding its piece's start (the last step starting at or before it)."""
    if len(values):
        np.add.at(target, np.searchsorted(steps[:, 0], starts, side="right") - 1, values)


def _holding(a: np.ndarray, b: np.ndarray, times: np.ndarray) -> np.ndarray:
    """Indices of the sorted, disjoint pieces [a, b] that hold one of ``times`` in (a, b] (each once)."""
    at = np.searchsorted(a, times, side="left") - 1  # the last piece starting before the time
    ok = at >= 0
    at = at[ok]
    at = at[times[ok] <= b[at]]
    return np.unique(at)


def _runs(starts: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """Bounds of each step's run of pieces (sorted starts): step k holds pieces [runs[k], runs[k + 1]).

    A piece belongs to the last step starting at or before its start.
    """
    runs = np.empty(len(steps) + 1, np.int64)
    runs[:-1] = np.searchsorted(starts, steps[:, 0], side="left")
    runs[-1] = len(starts)
    return runs


def _run_sums(values: np.ndarray, runs: np.ndarray) -> np.ndarray:
    """Sum of ``values`` over each run (exact integers: the same as float sums below 2**53)."""
    total = np.empty(len(values) + 1, np.int64)
    total[0] = 0
    np.cumsum(values, out=total[1:])
    return total[runs[1:]] - total[runs[:-1]]


def _add(target: np.ndarray, step: np.ndarray, values: np.ndarray, mask: np.ndarray) -> None:
    if mask.any():
        target += np.bincount(step[mask], weights=values[mask], minlength=len(target)).astype(np.int64)


def _cut(starts: np.ndarray, ends: np.ndarray, cuts: np.ndarray
         ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Sorted, disjoint intervals cut at the given sorted instants, so no piece crosses a step boundary.

    Returns each interval's end up to its first cut (its first piece, aligned with the intervals),
    and the later pieces of the intervals that hold a cut, in time order, with the index of the
    interval each came from. Only the cuts strictly inside an interval split it.
    """
    first = int(np.searchsorted(cuts, starts[0], side="right")) if len(starts) else 0
    last = int(np.searchsorted(cuts, ends[-1], side="left")) if len(starts) else 0
    inside = cuts[first:last]  # the cuts in the intervals' span, searched among the intervals
    owner = np.searchsorted(starts, inside, side="left") - 1  # the last interval starting before the cut
    keep = owner >= 0
    keep[keep] = ends[owner[keep]] > inside[keep]
    inside, owner = inside[keep], owner[keep]
    first_e, more_e = ends, inside.astype(np.int64)
    if len(inside):
        lead = np.ones(len(inside), bool)  # the first cut of its interval ends the first piece
        lead[1:] = owner[1:] != owner[:-1]
        first_e = ends.copy()
        first_e[owner[lead]] = inside[lead]
        # A later piece runs to the next cut of its interval, the last one to the interval's end.
        more_e = np.append(np.where(lead[1:], ends[owner[:-1]], inside[1:]), ends[owner[-1]]).astype(np.int64)
    return first_e, inside.astype(np.int64), more_e, owner
