"""The step budget: where each steady step's time goes on the GPU that runs the loop.

Every instant of every steady step (on the GPU clock, see :mod:`.steps`) belongs to exactly one
part, so the parts add up to the step time exactly:

- busy parts, one per kind of work the loop's own streams run (GEMV, GEMM, attention, norm,
  elementwise, reduce, kernel copies, communication, other kernels, copy-engine copies, opaque
  graph replays); where the loop's streams overlap themselves, the instant goes to the first
  class in :data:`BUSY_PRIORITY` (communication last: overlapped communication is hidden);
- ``contention``: the loop's streams are idle while other streams or processes use the GPU;
- idle parts, by what the host thread that launches the next operation was doing: allocating
  or freeing memory, loading modules, waiting for (or just back from) a synchronization,
  launching (inside a CUDA call) or running its own code (outside any CUDA call); idle between
  the kernels of one graph replay; and ``idle_other`` when the next operation was already queued
  (a dependency, an event wait).

Savings are drawn from these parts (see :mod:`nsys_rules.savings`), so findings never promise
more than the step holds.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import MissingData
from ..trace import Trace
from .activity import BUSY_CLASSES, GpuOps, gpu_ops
from .budget_host import HostTimeline, host_timelines
from .intervals import Coverage, complement, merge_intervals, point_in, search_near
from .evidence import evidence
from .steps import StepModel

#: Busy classes in the order that wins an instant where the loop's own operations overlap.
BUSY_PRIORITY = ("gemm", "gemv", "attention", "norm", "elementwise", "reduce", "memory", "other", "graph replay",
                 "copy", "communication")

#: Budget part ids, in reporting order, with a label for people and whether the GPU is busy.
PARTS: tuple[tuple[str, str, str], ...] = (
    ("gemv", "GEMV kernels", "busy"), ("gemm", "GEMM kernels", "busy"), ("attention", "attention kernels", "busy"),
    ("norm", "norm kernels", "busy"), ("elementwise", "elementwise kernels", "busy"),
    ("reduce", "reduction kernels", "busy"), ("memory", "copy/fill kernels", "busy"),
    ("communication", "communication kernels", "busy"), ("other", "other kernels", "busy"),
    ("copy", "memcpy/memset", "busy"), ("graph_replay", "graph replays (kernels hidden)", "busy"),
    ("contention", "other streams/processes (loop idle)", "busy"),
    ("launch_wait", "idle: waiting for launches", "idle"), ("after_sync", "idle: after a synchronization", "idle"),
    ("allocation", "idle: allocation/free", "idle"), ("module_loading", "idle: module loading/compiling", "idle"),
    ("graph_internal", "idle: inside graph replays", "idle"), ("idle_other", "idle: other (dependencies)", "idle"),
)
LABELS = {pid: label for pid, label, _ in PARTS}
KINDS = {pid: kind for pid, _, kind in PARTS}
_CLASS_PART = {cls: cls.replace(" ", "_") for cls in BUSY_CLASSES}


def part_of_class(kernel_class: str) -> str:
    """The budget part of a kernel class (``gemv`` -> ``gemv``, ``graph replay`` -> ``graph_replay``)."""
    return _CLASS_PART.get(kernel_class, "other")


def require_visible_kernels(budget: "Budget | None", share: float = 0.5) -> None:
    """Raise :class:`MissingData` when opaque graph replays hold most of the steady steps' GPU work.

    Per-kernel judgements (tails, GEMV share) would otherwise judge the few kernels launched
    outside the graphs as if they were the workload.
    """
    if budget is None:
        return
    busy = budget.busy_ns
    if busy and budget.ns("graph_replay") >= share * busy:
        raise MissingData(
            f"{100 * budget.ns('graph_replay') / busy:.0f} % of the steady steps' GPU work runs inside CUDA graph "
            "replays whose kernels this capture hides (graph trace mode)",
            "re-capture with `nsys profile --cuda-graph-trace=node` to see the kernels inside the graphs")


@dataclass(frozen=True)
class Part:
    """One part of the budget: total over the steady steps, mean per step, and in the median step."""

    name: str
    kind: str
    ns: int
    per_step_ns: float
    median_step_ns: int
    detail: dict[str, int] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """How people read the part's name."""
        return LABELS.get(self.name, self.name)


@dataclass(frozen=True, eq=False)
class Budget:
    """The steady steps' time on the loop's GPU, split into parts that add up."""

    steps: int
    total_ns: int
    step_ns: np.ndarray
    parts: tuple[Part, ...]
    per_step: dict[str, np.ndarray]
    device: int | None
    pid: int | None
    loop_streams: tuple[int, ...]
    median_step: int
    evidence: dict[str, Any] = field(default_factory=dict)

    def part(self, name: str) -> Part:
        """The part called ``name`` (a zero part when the budget has none)."""
        for p in self.parts:
            if p.name == name:
                return p
        return Part(name, KINDS.get(name, "idle"), 0, 0.0, 0)

    def ns(self, *names: str) -> int:
        """Summed time of the named parts."""
        return sum(self.part(n).ns for n in names)

    @property
    def busy_ns(self) -> int:
        """Time the loop's own streams kept the GPU busy."""
        return sum(p.ns for p in self.parts if p.kind == "busy" and p.name != "contention")

    @property
    def idle_ns(self) -> int:
        """Time nothing ran on the loop's GPU."""
        return sum(p.ns for p in self.parts if p.kind == "idle")

    def quantile(self, q: float) -> int:
        """A quantile of the step time: a step's own time (the lower of two middles, so p50 is the median step's)."""
        return int(np.quantile(self.step_ns, q, method="lower")) if len(self.step_ns) else 0

    def to_json(self) -> dict[str, Any]:
        """``traces[i].budget`` of the JSON envelope."""
        return {
            "steps": self.steps, "total_ns": self.total_ns, "device": self.device,
            "step_ns": {"p50": self.quantile(0.5), "p90": self.quantile(0.9), "max": int(self.step_ns.max())},
            "median_step": self.median_step,
            "parts": [{"name": p.name, "label": p.label, "kind": p.kind, "ns": p.ns,
                       "per_step_ns": round(p.per_step_ns, 1), "median_step_ns": p.median_step_ns,
                       **({"detail": p.detail} if p.detail else {})} for p in self.parts],
            "evidence": self.evidence,
        }


def step_budget(trace: Trace, model: StepModel) -> Budget | None:
    """The budget of ``model``'s steady steps (cached per trace and model); None without steps."""
    cache = _CACHE.setdefault(trace, {})
    key = id(model)
    if key not in cache or cache[key][0] is not model:
        cache[key] = (model, _budget(trace, model))
    return cache[key][1]


_CACHE: "weakref.WeakKeyDictionary[Trace, dict[int, tuple[StepModel, Budget | None]]]" = weakref.WeakKeyDictionary()


def _budget(trace: Trace, model: StepModel) -> Budget | None:
    if not model.count or model.device is None:
        return None
    steps = model.gpu
    lo, hi = int(steps[0, 0]), int(steps[-1, 1])
    if hi <= lo:
        return None
    sub = gpu_ops(trace).near(lo, hi, model.device)
    own, streams = _own_work(sub, model)
    a, b = steps[:, 0], steps[:, 1]
    per_step, own_busy = _busy_parts(sub, own, a, b)
    if own.all():  # the loop alone on its GPU (the usual trace): its union is everything's
        everything = merge_intervals(sub.start, sub.end) if not _serial(sub.start, sub.end) else (sub.start, sub.end)
        busy_all = own_busy
    else:
        everything = merge_intervals(sub.start, sub.end)
        busy_all = Coverage(*everything).within(a, b)
    per_step["contention"] = busy_all - own_busy
    gaps = complement(everything[0], everything[1], lo, hi)
    del everything  # the union is not needed past its gaps: freed before the gaps are judged
    # The launching threads' timelines, kept for the evidence's host overhead (the same unions).
    timelines: dict[tuple[int, int], HostTimeline] = {}
    idle = _idle_parts(trace, sub, gaps, steps, timelines)
    per_step.update(idle)
    durations = b - a
    median_step = int(np.argsort(durations, kind="stable")[(len(durations) - 1) // 2])
    parts = []
    for name, _label, kind in PARTS:
        values = per_step.get(name)
        if values is None:
            continue
        total = int(values.sum())
        detail = {}
        if name == "launch_wait":
            # The median step's own split too: reports show the median step, and a proportion of the
            # totals would be a guess where steps differ.
            detail = {"launch_api_ns": int(idle["_launch_api"].sum()), "host_ns": int(idle["_launch_host"].sum()),
                      "median_step_launch_api_ns": int(idle["_launch_api"][median_step]),
                      "median_step_host_ns": int(idle["_launch_host"][median_step])}
        parts.append(Part(name, kind, total, total / len(steps), int(values[median_step]), detail))
    per_step = {k: v for k, v in per_step.items() if not k.startswith("_")}
    kept = tuple(p for p in parts if p.ns or p.kind == "idle")
    busy = sum(p.ns for p in kept if p.kind == "busy" and p.name != "contention")
    facts = evidence(trace, model, {p.name: p.ns for p in kept}, busy, timelines)
    return Budget(len(steps), int(durations.sum()), durations, kept, per_step, model.device, model.pid, streams,
                  median_step, facts)


def _serial(starts: np.ndarray, ends: np.ndarray) -> bool:
    """Whether the intervals (in start order) never overlap: each ends before the next starts."""
    return len(starts) < 2 or bool((ends[:-1] <= starts[1:]).all())


def _busy_parts(ops: GpuOps, own: np.ndarray, a: np.ndarray, b: np.ndarray) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Per step, the loop's busy time by class (an overlapped instant goes to the first class of
    :data:`BUSY_PRIORITY`), and the loop's busy time in all.

    Work that never overlaps itself (one stream, the usual loop) needs no unions: each class's
    operations are already a disjoint set.
    """
    parts: dict[str, np.ndarray] = {}
    if own.all() and _serial(ops.start, ops.end) or _serial(ops.start[own], ops.end[own]):
        total = np.zeros(len(a), np.int64)
        for cls in BUSY_PRIORITY:
            mine = own & (ops.cls == BUSY_CLASSES.index(cls))
            parts[_CLASS_PART[cls]] = Coverage(ops.start[mine], ops.end[mine]).within(a, b) if mine.any() else \
                np.zeros(len(a), np.int64)
            total += parts[_CLASS_PART[cls]]
        return parts, total
    covered_before = np.zeros(len(a), np.int64)
    grown = np.zeros(len(ops), bool)
    for cls in BUSY_PRIORITY:
        mine = own & (ops.cls == BUSY_CLASSES.index(cls))
        if not mine.any():  # nothing added: the union, and so what it covers, stays as it was
            parts[_CLASS_PART[cls]] = np.zeros(len(a), np.int64)
            continue
        grown |= mine
        cover = Coverage(*merge_intervals(ops.start[grown], ops.end[grown])).within(a, b)
        parts[_CLASS_PART[cls]] = cover - covered_before
        covered_before = cover
    return parts, covered_before


def _own_work(ops: GpuOps, model: StepModel) -> tuple[np.ndarray, tuple[int, ...]]:
    """Which operations are the loop's own: its process, on the step model's loop streams.

    A side stream that works once every few steps (a background copy) is not the loop: its time
    is contention when the loop waits for it.
    """
    mine = ops.pid == model.pid if model.pid is not None else np.ones(len(ops), bool)
    streams = model.streams or tuple(int(s) for s in np.unique(ops.stream[mine]))
    on_streams = ops.stream == streams[0] if len(streams) == 1 else np.isin(ops.stream, streams)
    return mine & on_streams, streams


#: Idle gaps judged per batch: a 1M-kernel eager trace has a gap between nearly every two kernels.
#: A batch's per-gap temporaries (8 bytes a gap: 128 KB) stay under malloc's mmap threshold
#: (nsys_rules.malloc_tune), so batches reuse heap memory instead of faulting in fresh pages.
GAP_BATCH = 16384

_IDLE_PARTS = ("launch_wait", "after_sync", "allocation", "module_loading", "graph_internal", "idle_other",
               "_launch_api", "_launch_host")


def _idle_parts(trace: Trace, ops: GpuOps, gaps: tuple[np.ndarray, np.ndarray], steps: np.ndarray,
                timelines: dict[tuple[int, int], HostTimeline]) -> dict[str, np.ndarray]:
    """Idle time per step by cause (see the module docstring).

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
        self.api_end = self.api_tid = None
        if trace.has("api"):
            api = trace.frame("api", ["start", "end", "tid"])
            if len(api):
                self.api_end, self.api_tid = api["end"].to_numpy(), api["tid"].to_numpy()


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
    if ctx.api_end is not None:
        at = np.maximum(api_row, 0)
        queued = known & (ctx.api_end[at] <= gap_s)  # the next operation was launched before the gap
        tid = np.where(known, ctx.api_tid[0] if ctx.api_tid.strides == (0,) else ctx.api_tid[at], -1)
        del at
    else:
        queued = known
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
