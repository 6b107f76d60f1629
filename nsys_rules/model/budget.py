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

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nsys_rules.errors import MissingData
from nsys_rules.model.trace import Trace
from nsys_rules.model.activity import BUSY_CLASSES, GpuOps, gpu_ops
from nsys_rules.model.budget_host import HostTimeline
from nsys_rules.model.budget_idle import idle_parts
from nsys_rules.model.budget_parts import BUSY_PRIORITY, CLASS_PART, KINDS, LABELS, PARTS, Part, part_of_class
from nsys_rules.model.budget_shape import move_host_prep
from nsys_rules.analysis.intervals import Coverage, complement, merge_intervals
from nsys_rules.model.evidence import evidence
from nsys_rules.model.metric_levels import BudgetMetrics
from nsys_rules.model.steps import StepModel

__all__ = ["BUSY_PRIORITY", "KINDS", "LABELS", "PARTS", "Budget", "Part", "part_of_class", "require_visible_kernels",
           "step_budget", "typical_step"]

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
    #: What the GPU metrics measured during each part (:class:`~.metric_levels.BudgetMetrics`); None without them.
    metrics: BudgetMetrics | None = None

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
            **({"metrics": self.metrics.to_json()} if self.metrics is not None else {}),
        }


def step_budget(trace: Trace, model: StepModel) -> Budget | None:
    """The budget of ``model``'s steady steps (cached per trace and model); None without steps."""
    # By the model's identity, kept alongside so a recycled id never matches.
    return trace.memo(("budget.step_budget", id(model)), lambda: (model, _budget(trace, model)),
                      lambda hit: hit[0] is model)[1]


#: Steps within this share of the median duration are as long as the median step (see :func:`typical_step`). Zero:
#: only steps exactly as long as the median (ties, as a fixed-rate or synthetic loop makes), so the step the budget
#: shows is the typical step every format prints (issue 42: with 2 %, decode_eager showed and replayed the upper
#: middle step, 4.58 ms, beside a p50 of 4.54 ms).
TYPICAL_SPREAD = 0.0


def typical_step(durations: np.ndarray, per_step: dict[str, np.ndarray]) -> int:
    """The step the budget shows as "the median step": of median length, and made like most steps.

    Among the steps within :data:`TYPICAL_SPREAD` of the median duration, the one whose parts are
    closest (summed absolute difference) to each part's median over all steps. Steps of equal length
    are common (a fixed-rate loop, a synthetic trace); the plain middle of the sorted durations
    could then be the step before a one-off load, whose gap the load owns.
    """
    order = np.argsort(durations, kind="stable")
    middle = int(order[(len(durations) - 1) // 2])
    median = durations[middle]
    near = np.flatnonzero(np.abs(durations - median) <= TYPICAL_SPREAD * median)
    names = [name for name, _label, _kind in PARTS if name in per_step]
    if len(near) <= 1 or not names:
        return middle
    values = np.stack([np.asarray(per_step[name], np.int64) for name in names])
    usual = np.median(values, axis=1)
    distance = np.abs(values[:, near] - usual[:, None]).sum(axis=0)
    return int(near[int(np.argmin(distance))])



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
    idle = idle_parts(trace, sub, gaps, steps, timelines)
    per_step.update(idle)
    # A block of host work between launches is no launch overhead: input preparation, or a compile.
    loads = [tl.load_starts for tl in timelines.values() if len(tl.load_starts)]
    move_host_prep(per_step, gaps, steps, own_busy, np.concatenate(loads) if loads else None)
    durations = b - a
    median_step = typical_step(durations, per_step)
    parts = []
    # The mean per step is over the inner steps, as diff's is (one number per part in both, issue 42): the loop's
    # edges cut the first step (it starts at its first GPU operation) and the last (no next step ends it, so its
    # idle tail is unknown and a mean over every step understates the idle parts).
    inner = slice(1, len(steps) - 1) if len(steps) > 2 else slice(None)
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
        parts.append(Part(name, kind, total, float(values[inner].mean()), int(values[median_step]), detail))
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
    operations are already a disjoint set. Otherwise only the operations that overlap another
    one need the unions of the classes in priority order; each of the rest covers its own time,
    which goes to its class alone.
    """
    parts: dict[str, np.ndarray] = {}
    whole = bool(own.all())
    start, end = (ops.start, ops.end) if whole else (ops.start[own], ops.end[own])
    if _serial(start, end):
        total = np.zeros(len(a), np.int64)
        for cls in BUSY_PRIORITY:
            mine = own & (ops.cls == BUSY_CLASSES.index(cls))
            parts[CLASS_PART[cls]] = Coverage(ops.start[mine], ops.end[mine]).within(a, b) if mine.any() else \
                np.zeros(len(a), np.int64)
            total += parts[CLASS_PART[cls]]
        return parts, total
    classes = ops.cls if whole else ops.cls[own]
    # An operation overlaps no other one when it starts at or after every earlier one's end and ends
    # at or before the next one's start (rows are in start order). With a damaged operation (end
    # before start) everything goes through the unions, whose sums carry its negative length.
    alone = end >= start
    if alone.all():
        reach = np.maximum.accumulate(end)
        alone[1:] &= start[1:] >= reach[:-1]
        del reach
        alone[:-1] &= start[1:] >= end[:-1]
    else:
        alone[:] = False
    crowd = np.flatnonzero(~alone)
    crowd_start, crowd_end, crowd_class = start[crowd], end[crowd], classes[crowd]
    del crowd
    covered_before = np.zeros(len(a), np.int64)
    grown = np.zeros(len(crowd_start), bool)
    total = np.zeros(len(a), np.int64)
    for cls in BUSY_PRIORITY:
        code = BUSY_CLASSES.index(cls)
        mine = alone & (classes == code)
        part = Coverage(start[mine], end[mine]).within(a, b) if mine.any() else np.zeros(len(a), np.int64)
        more = crowd_class == code
        if more.any():  # the crowded operations' union grows: what it adds goes to this class
            grown |= more
            cover = Coverage(*merge_intervals(crowd_start[grown], crowd_end[grown])).within(a, b)
            part += cover
            part -= covered_before
            covered_before = cover
        parts[CLASS_PART[cls]] = part
        total += part
    return parts, total


def _own_work(ops: GpuOps, model: StepModel) -> tuple[np.ndarray, tuple[int, ...]]:
    """Which operations are the loop's own: its process, on the step model's loop streams.

    A side stream that works once every few steps (a background copy) is not the loop: its time
    is contention when the loop waits for it.
    """
    mine = ops.pid == model.pid if model.pid is not None else np.ones(len(ops), bool)
    streams = model.streams or tuple(int(s) for s in np.unique(ops.stream[mine]))
    return mine & ops.on_streams(streams), streams
