"""What each finding's fix gives back: the median step replayed with the fix's edit (issue 36).

:class:`StepReplay` holds the median step's template (:mod:`.replay_step`), its unchanged
replay (which must give back the measured step) and the GPU's own critical work, and replays
the edit that stands for each rule's recommended fix (:data:`EDITS`). A saving is the replayed
step's change, per step, with a range where the edit is uncertain; :meth:`StepReplay.together`
replays every named fix at once. Memoized per trace and step model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from nsys_rules.analysis import replay_edits as edits
from nsys_rules.analysis.replay import CALL_LAUNCH, OP_KERNEL, StepTemplate, busy_by_class, critical_gpu_ns, replay
from nsys_rules.model.activity import BUSY_CLASSES, gpu_ops
from nsys_rules.analysis.taxonomy import CLASSES
from nsys_rules.model.budget import LABELS, Budget, part_of_class
from nsys_rules.model.replay_step import MeasuredStep, measured_step
from nsys_rules.model.steps import StepModel
from nsys_rules.model.trace import Trace

#: A graph launch's host cost when the trace has none to measure: a base and a share per node (``cudaGraphLaunch`` of
#: a 241-node decode graph takes 46 us on H200).
GRAPH_LAUNCH_NS = 3_000
GRAPH_NODE_NS = 180
#: The GPU's gap between two kernels of one graph, fewest and most seen (node-mode decode graphs on H200).
GRAPH_GAP_NS = (400, 1_000)
#: Host gaps between launches up to this long are launching (a framework's per-op dispatch); longer ones are kept.
LAUNCHING_GAP_NS = 200_000
#: A block of host work a worker can take: at least this long (input-prep's block, nsys_rules.model.budget_shape).
BLOCK_NS = 1_000_000
#: Pinned host copies on PCIe 4/5 (bytes/s): the low and high ends of what ``pin_memory`` copies reach.
PINNED_BPS = (12e9, 25e9)
#: TF32 / bf16 GEMMs take this share of an FP32 GEMM's time (low saving, high saving).
FASTER_GEMM_RATIO = (0.5, 0.25)


@dataclass(frozen=True)
class Saving:
    """A fix's replayed saving per median step: the estimate and the range, with what sets each end."""

    rule: str
    step_ns: int
    after_ns: int
    low_ns: int
    high_ns: int
    assumption: str

    @property
    def per_step_ns(self) -> int:
        """The step's change with the fix."""
        return max(0, self.step_ns - self.after_ns)

    def to_json(self) -> dict[str, object]:
        """``findings[i].savings_replay`` of the JSON envelope."""
        return {"step_ns": self.step_ns, "replayed_step_ns": self.after_ns, "per_step_ns": self.per_step_ns,
                "per_step_range_ns": [self.low_ns, self.high_ns], "assumption": self.assumption}


Edit = Callable[[StepTemplate, "StepReplay", int], tuple[StepTemplate, int]]


class StepReplay:
    """The median step's replay and its what-ifs."""

    def __init__(self, measured: MeasuredStep, steps: int, graph_launch_ns: int,
                 fp32_gemm: np.ndarray | None = None, total_ns: int | None = None) -> None:
        self.measured = measured
        #: The steady steps' time in all (the budget's total): savings over the steps are shares of it.
        self.total_ns = total_ns if total_ns is not None else measured.measured_ns * steps
        #: The step's operations that are FP32 GEMMs on CUDA cores (what TF32/bf16 speeds up).
        self.fp32_gemm = fp32_gemm if fp32_gemm is not None else np.zeros(measured.template.ops, bool)
        self.steps = steps
        self.graph_launch_ns = graph_launch_ns
        self.baseline_ns = replay(measured.template).period_ns
        self.critical_ns = min(critical_gpu_ns(measured.template), self.baseline_ns)
        self._memo: dict[tuple[str, ...], int] = {}

    @property
    def measured_ns(self) -> int:
        """The median step as measured on the GPU clock."""
        return self.measured.measured_ns

    def over_steps(self, per_step_ns: float) -> int:
        """A median step's saving over the steady steps: as much in each step, and never more than the same share of
        each (shorter steps than the median have less to give back; longer ones hold other causes: a recompile)."""
        if not self.measured_ns:
            return 0
        return int(round(min(per_step_ns * self.steps, per_step_ns * self.total_ns / self.measured_ns)))

    @property
    def error(self) -> float:
        """The unchanged replay's error against the measured step (a share)."""
        return (self.baseline_ns - self.measured_ns) / self.measured_ns if self.measured_ns else 0.0

    def after(self, rules: tuple[str, ...], end: int = 1) -> int:
        """The step replayed with the fixes of ``rules`` together (``end`` 0: each edit's low-saving assumption, 1: the
        estimate, 2: its high-saving one)."""
        key = (*sorted(rules), str(end))
        if key not in self._memo:
            t, worker = self.edited(rules, end)
            self._memo[key] = edits.floor_ns(worker, replay(t).period_ns)
        return self._memo[key]

    def edited(self, rules: tuple[str, ...], end: int = 1) -> tuple[StepTemplate, int]:
        """The step's template with the fixes of ``rules``, and the host time a worker takes over per step."""
        t, worker = self.measured.template, 0
        for rule in sorted(rules):
            edit = EDITS.get(rule)
            if edit is not None:
                t, moved = edit[0](t, self, end)
                worker = max(worker, moved)
        return t, worker

    def touches(self, rule: str) -> bool:
        """Whether the fix ``rule`` changes anything in the median step (its cause is there: not only in other steps)."""
        if rule not in EDITS:
            return False
        before = self.measured.template
        after, moved = self.edited((rule,))
        return bool(moved) or after.tail_ns != before.tail_ns or any(
            not np.array_equal(getattr(after, name), getattr(before, name))
            for name in ("call_gap", "call_dur", "call_wait", "call_offset", "op_call", "op_dur", "op_lat", "op_gap"))

    def saving(self, rule: str) -> Saving | None:
        """What the fix ``rule`` recommends gives back in the median step (None: no edit for it)."""
        if rule not in EDITS:
            return None
        after = self.after((rule,))
        low = max(0, self.baseline_ns - self.after((rule,), 0))
        high = max(0, self.baseline_ns - self.after((rule,), 2))
        mid = max(0, self.baseline_ns - after)
        return Saving(rule, self.baseline_ns, after, min(low, mid), max(high, mid), EDITS[rule][1])

    def together(self, rules: tuple[str, ...]) -> int:
        """The median step's change with every fix of ``rules``: never more than the step minus the GPU's own critical
        work (the fixed step's: a fix may take GPU work out, copies gone or kernels faster)."""
        known = tuple(r for r in rules if r in EDITS)
        if not known:
            return 0
        critical = critical_gpu_ns(self.edited(known)[0])
        return max(0, min(self.baseline_ns - self.after(known), self.baseline_ns - critical))

    def what_if(self, rules: tuple[str, ...]) -> dict[str, object]:
        """``--what-if``: the median step's budget replayed as measured and with the fixes of ``rules`` together."""
        known = tuple(r for r in rules if r in EDITS)
        t = self.edited(known)[0]
        after = self.after(known) if known else self.baseline_ns
        before_parts, after_parts = _parts(self.measured.template, self.baseline_ns), _parts(t, after)
        names = [*before_parts, *(n for n in after_parts if n not in before_parts)]
        names = [n for n in names if n != "idle"] + ["idle"]
        return {"rules": list(known), "step_ns": self.baseline_ns, "replayed_step_ns": after,
                "saving_per_step_ns": max(0, self.baseline_ns - after),
                "parts": [{"name": n, "label": LABELS.get(n, "idle (GPU waits)"),
                           "before_ns": before_parts.get(n, 0), "after_ns": after_parts.get(n, 0)} for n in names]}

    def to_json(self, shown: tuple[str, ...] = ()) -> dict[str, object]:
        """``traces[i].budget.replay`` of the JSON envelope."""
        return {"step_index": self.measured.index, "measured_step_ns": self.measured_ns,
                "replayed_step_ns": self.baseline_ns, "error_pct": round(100 * self.error, 2),
                "critical_gpu_ns": self.critical_ns, "calls": self.measured.template.calls,
                "ops": self.measured.template.ops, "all_fixes_rules": sorted(r for r in shown if r in EDITS),
                "all_fixes_saving_per_step_ns": self.together(shown),
                "all_fixes_saving_ns": self.over_steps(self.together(shown))}


def _parts(t: StepTemplate, period_ns: int) -> dict[str, int]:
    """A replayed step's budget: busy time by budget part, and the idle rest (ns)."""
    classes, idle = busy_by_class(t, period_ns)
    out: dict[str, int] = {}
    for code, ns in sorted(classes.items()):
        name = part_of_class(BUSY_CLASSES[code]) if 0 <= code < len(BUSY_CLASSES) else "other"
        out[name] = out.get(name, 0) + int(ns)
    out["idle"] = int(idle)
    return out


def _graphs(t: StepTemplate, r: StepReplay, end: int) -> tuple[StepTemplate, int]:
    gap = (GRAPH_GAP_NS[1], GRAPH_GAP_NS[0], GRAPH_GAP_NS[0])[end]
    launch, node = r.graph_launch_ns, (GRAPH_NODE_NS if r.graph_launch_ns == GRAPH_LAUNCH_NS else 0)
    factor = 2 if end == 0 else 1
    return edits.as_graphs(t, launch * factor, gap, LAUNCHING_GAP_NS if end else LAUNCHING_GAP_NS // 10,
                           node * factor), 0


def _syncs(t: StepTemplate, r: StepReplay, end: int) -> tuple[StepTemplate, int]:
    return edits.without_syncs(t), 0


def _prep(t: StepTemplate, r: StepReplay, end: int) -> tuple[StepTemplate, int]:
    block = max(BLOCK_NS, r.measured_ns // 10)
    moved_t, moved = edits.prep_to_worker(t, block)
    return moved_t, (moved * (3 if end == 0 else 2 if end == 1 else 1)) // 2


def _alloc(t: StepTemplate, r: StepReplay, end: int) -> tuple[StepTemplate, int]:
    return edits.cached_allocations(t, (5_000, 2_000, 1_000)[end]), 0


def _pinned(t: StepTemplate, r: StepReplay, end: int) -> tuple[StepTemplate, int]:
    bps = (PINNED_BPS[0], (PINNED_BPS[0] + PINNED_BPS[1]) / 2, PINNED_BPS[1])[end]
    return edits.pinned_copies(t, bps, _launch_ns(t)), 0


def _fp32(t: StepTemplate, r: StepReplay, end: int) -> tuple[StepTemplate, int]:
    ratio = (FASTER_GEMM_RATIO[0], sum(FASTER_GEMM_RATIO) / 2, FASTER_GEMM_RATIO[1])[end]
    return edits.scaled_kernels(t, np.arange(len(CLASSES)), ratio, only=r.fp32_gemm), 0


def _resident(t: StepTemplate, r: StepReplay, end: int) -> tuple[StepTemplate, int]:
    return edits.resident_copies(t, _launch_ns(t)), 0


def _launch_ns(t: StepTemplate) -> int:
    """A launch call's usual host time in the step (an async call's)."""
    launches = t.call_dur[t.call_kind == CALL_LAUNCH]
    return int(np.median(launches)) if len(launches) else 5_000


#: Each rule's fix as an edit of the replay (low/estimate/high by ``end``), with the assumption that sets the range.
EDITS: dict[str, tuple[Edit, str]] = {
    "launch-bound": (_graphs, f"CUDA graphs: one launch per stretch between syncs at the measured graph-launch cost "
                              f"(low end: twice it, gaps of {GRAPH_GAP_NS[1]} ns between graph kernels and only host "
                              f"gaps under {LAUNCHING_GAP_NS // 10_000} us gone; high end: {GRAPH_GAP_NS[0]} ns gaps)"),
    "sync-stall": (_syncs, "the step's synchronizations removed or deferred past the step; host work kept"),
    "input-prep": (_prep, "blocks of host work of 1 ms or more moved to a worker, the step no shorter than the worker's "
                          "share (low end: the worker 1.5x slower, high end: 0.5x as it overlaps)"),
    "alloc-churn": (_alloc, "allocations from a cache: 5 us (low) to 1 us (high) each, never a synchronization"),
    "pageable-memcpy": (_pinned, "pinned async copies at 12 (low) to 25 (high) GB/s"),
    "fp32-gemm": (_fp32, "GEMMs in TF32/bf16 at 0.5x (low) to 0.25x (high) of their FP32 time"),
    "step-uploads": (_resident, "the per-step host-to-device copies gone (data kept on the GPU)"),
}


def step_replay(trace: Trace, model: StepModel | None, budget: Budget | None) -> StepReplay | None:
    """The median step's replay (None without steps, API calls or GPU work in it); once per trace and model."""
    if model is None or budget is None or not model.count:
        return None
    return trace.memo(("replay_what_if.step_replay", id(model)), lambda: (model, _replay(trace, model, budget)),
                      lambda hit: hit[0] is model)[1]


def _replay(trace: Trace, model: StepModel, budget: Budget) -> StepReplay | None:
    measured = measured_step(trace, model, budget.median_step)
    if measured is None:
        return None
    return StepReplay(measured, budget.steps, _graph_launch_ns(trace), _fp32_gemms(trace, measured), budget.total_ns)


#: Kernel names of FP32 GEMMs on CUDA cores (cuBLAS SIMT kernels), FP32 cuDNN convolutions (a convolution word and
#: a float operand), and tensor-core or FP64 ones that never are (the names fp32-gemm judges by).
FP32_GEMM_NAMES = ("sgemm", "gemm_f32f32_f32f32_f32", "cgemm")
CONV_NAMES = ("fprop", "dgrad", "wgrad", "convolve", "winograd", "fft2d_", "conv2d", "convolution")
FLOAT_NAMES = ("<float", "f32f32", "cf32")
TENSOR_CORE_NAMES = ("tf32", "tensorop", "hmma", "s1688", "s16816", "bf16", "f16", "half", "dgemm", "double", "f64")


def _fp32_gemms(trace: Trace, measured: MeasuredStep) -> np.ndarray:
    """Which of the step's operations are FP32 GEMM kernels on CUDA cores (by their names)."""
    out = np.zeros(measured.template.ops, bool)
    kernels = np.flatnonzero(measured.template.op_kind == OP_KERNEL)
    if not len(kernels) or not trace.has("kernels"):
        return out
    names = trace.frame("kernels", ["name"])["name"]
    rows = np.asarray(gpu_ops(trace).table_row[measured.op_rows[kernels]], np.int64)
    for k, row in zip(kernels.tolist(), rows.tolist(), strict=True):
        name = str(names.iat[row]).lower()
        fp32 = any(m in name for m in FP32_GEMM_NAMES) or (any(m in name for m in CONV_NAMES)
                                                           and any(m in name for m in FLOAT_NAMES))
        out[k] = fp32 and not any(m in name for m in TENSOR_CORE_NAMES)
    return out


def _graph_launch_ns(trace: Trace) -> int:
    """The trace's own graph launch cost (median ``cudaGraphLaunch``), else :data:`GRAPH_LAUNCH_NS`.

    A node-mode capture times each node of the launch (a launch 6x slower): its own cost is no
    launch's of a capture without the profiler's per-node tracing.
    """
    if not trace.has("api") or (trace.capture.graph_trace_mode or "").lower() == "node":
        return GRAPH_LAUNCH_NS
    names = trace.api_names()
    mask = np.asarray(names.isin(["cudaGraphLaunch", "cuGraphLaunch"]))
    if not mask.any():
        return GRAPH_LAUNCH_NS
    api = trace.frame("api", ["start", "end"])
    return int(np.median(api["end"].to_numpy()[mask] - api["start"].to_numpy()[mask]))
