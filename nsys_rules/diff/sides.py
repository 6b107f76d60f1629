"""One run of one side of a diff: its summary (as ``diff`` has always shown it) and its per-step series.

The series are what the interval of :mod:`nsys_rules.analysis.shift` resamples, one value per
steady step of the step model (:mod:`nsys_rules.model.steps`), the inner steps only (the loop's
edges cut the first and the last step: see :func:`run_of`):

- ``step``: the step's wall time on the loop's GPU (the budget's step);
- ``gpu``: the loop's own GPU busy time in the step (kernels, copies, graph replays);
- ``idle``: the rest of the step (``step - gpu``): the host on the critical path, dependencies;
- ``host``: the part of the idle time the host thread caused (host work, launches, syncs,
  allocation, module loading): what moves between runs of a host-bound loop;
- ``part:NAME``: each budget part (:mod:`nsys_rules.model.budget`);
- ``class:NAME`` and ``kernel:NAME``: GPU time of each kernel class and kernel launched in the step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nsys_rules.analysis.names import is_library_range
from nsys_rules.diff.promises import run_promises
from nsys_rules.model.budget import step_budget
from nsys_rules.model.replay_what_if import step_replay
from nsys_rules.model.overview import gpu_activity, step_index
from nsys_rules.model.trace import Trace
from nsys_rules.model.windows import SteadyOptions, Window, steady_state_window

#: Idle parts of the budget that the host thread causes: their run-to-run variation is the host's.
HOST_PARTS = ("host_prep", "launch_wait", "after_sync", "allocation", "module_loading")
#: Kernels kept per run for the per-kernel intervals (by GPU time per step); the rest are too small to move a step.
TOP_KERNELS = 40


@dataclass
class Run:
    """One trace of a side: the summary ``diff`` reports, its kernel profile, its per-step series."""

    summary: dict[str, Any]
    profile: dict[str, Any]
    series: dict[str, np.ndarray] = field(default_factory=dict)
    command: tuple[str, ...] = ()
    #: Opaque CUDA graph replays (graph-level capture) hold part of its GPU time.
    graph_replays: bool = False
    #: What the run's replay promises per cause (:func:`~nsys_rules.diff.promises.run_promises`).
    promises: dict[str, Any] = field(default_factory=dict)
    #: The loader's damage notes of the trace (``check``'s ``traces[].damage``), as the steps were read.
    damage: list[str] = field(default_factory=list)
    #: What identifies the capture (:func:`~nsys_rules.diff.inputs.capture_key`); empty: computed from ``series``.
    capture: str = ""


def side_summary(trace: Trace, steady: SteadyOptions | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(summary, kernel profile) of one trace's steady steps; ``summary["steps"]`` is 0 (with the reason) without."""
    run = run_of(trace, steady)
    return run.summary, run.profile


def run_of(trace: Trace, steady: SteadyOptions | None = None) -> Run:
    """The :class:`Run` of one trace (``summary["steps"]`` is 0, with the reason, when it has no steps)."""
    window = steady_state_window(trace, steady or SteadyOptions())
    model = window.model
    summary: dict[str, Any] = {"path": trace.label, "window": window.source, "steps": 0, "step_range": None,
                               "step_source": model.source if model is not None else "none"}
    command = tuple(trace.capture.command)
    budget = step_budget(trace, model) if model is not None and model.count else None
    if model is None or not model.count:
        summary["reason"] = model.reason if model is not None and model.reason else "no step model fits the trace"
        return Run(summary, {}, command=command)
    if model.source == "nvtx" and model.name and is_library_range(model.name):
        summary["reason"] = f"its steps are a library's NVTX range {model.name!r}, not the program's loop"
        return Run(summary, {}, command=command)
    if budget is None:
        summary["reason"] = "the steady steps ran no GPU work"
        return Run(summary, {}, command=command)
    profile, by_step = _gpu_rows(trace, window)
    # Means over the inner steps: the loop's edges cut the first step (it starts at its first GPU operation,
    # the others where the host began them) and the last (no next step ends it: its idle tail is unknown), so
    # runs of different lengths would differ in gaps that no step has.
    full = slice(1, budget.steps - 1) if budget.steps > 2 else slice(None)
    per_part = {p.name: float(budget.per_step[p.name][full].mean()) for p in budget.parts if p.name in budget.per_step}
    kinds = {p.name: p.kind for p in budget.parts}
    graph_replays = any(c["class"] == "cuda-graph" for c in profile["classes"]) or per_part.get("graph_replay", 0) > 0
    summary.update({
        "steps": budget.steps, "step_range": model.name, "device": budget.device,
        "step_time_ns": round(float(budget.step_ns[full].mean()), 1), "step_p50_ns": budget.quantile(0.5),
        "busy_per_step_ns": round(sum(v for k, v in per_part.items() if kinds[k] == "busy" and k != "contention"), 1),
        "idle_per_step_ns": round(sum(v for k, v in per_part.items() if kinds[k] == "idle"), 1),
        "contention_per_step_ns": round(per_part.get("contention", 0.0), 1),
        "gpu_time_per_step_ns": round(profile["gpu_time_per_step_ns"], 1),
        "parts": {k: round(v, 1) for k, v in per_part.items()},
        "part_labels": {p.name: p.label for p in budget.parts},
        "has_kernels": trace.has("kernels") and not any(c["class"] == "cuda-graph" for c in profile["classes"])})
    series: dict[str, np.ndarray] = {}
    step = budget.step_ns.astype(float)
    gpu = sum((budget.per_step[p.name].astype(float) for p in budget.parts
               if p.kind == "busy" and p.name != "contention" and p.name in budget.per_step), np.zeros(len(step)))
    series["step"], series["gpu"], series["idle"] = step[full], gpu[full], (step - gpu)[full]
    series["host"] = sum((budget.per_step[name].astype(float) for name in HOST_PARTS if name in budget.per_step),
                         np.zeros(len(step)))[full]
    for p in budget.parts:
        if p.name in budget.per_step:
            series[f"part:{p.name}"] = budget.per_step[p.name].astype(float)[full]
    if len(window.steps) == budget.steps:
        series.update({name: values[full] for name, values in by_step.items()})
    promises = run_promises(step_replay(trace, model, budget))
    return Run(summary, profile, series, command, graph_replays, promises, damage=list(dict.fromkeys(trace.damage)))


def _gpu_rows(trace: Trace, window: Window) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """GPU time of each kernel class and kernel launched in the window's steps: per step on average (the
    profile's rows, as :func:`~nsys_rules.model.overview.build_profile` counts them) and step by step (the
    classes, and the :data:`TOP_KERNELS` biggest kernels)."""
    steps = tuple(window.steps)
    n = len(steps)
    gpu = gpu_activity(trace, window)
    profile: dict[str, Any] = {"classes": [], "kernels": [], "gpu_time_per_step_ns": 0.0}
    if not len(gpu) or not n:
        return profile, {}
    idx = step_index(gpu["launch"].to_numpy(np.int64), steps)
    keep = idx >= 0
    dur = (gpu["end"].to_numpy(np.int64) - gpu["start"].to_numpy(np.int64))[keep].astype(float)
    idx = idx[keep]
    profile["gpu_time_per_step_ns"] = float(dur.sum()) / n
    series: dict[str, np.ndarray] = {}
    name_codes = gpu["name"].cat.codes.to_numpy()[keep].astype(np.int64)
    class_codes = gpu["cls"].cat.codes.to_numpy()[keep].astype(np.int64)
    for column, codes, prefix, limit in (("cls", class_codes, "class", None), ("name", name_codes, "kernel", TOP_KERNELS)):
        names = gpu[column].cat.categories
        totals = np.bincount(codes, weights=dur, minlength=len(names))
        order = [int(c) for c in np.argsort(-totals, kind="stable") if totals[c] > 0]
        if prefix == "class":
            profile["classes"] = [{"class": str(names[c]), "per_step_ns": float(totals[c]) / n} for c in order]
        else:
            # A kernel's class: that of its first operation (one name is one class).
            first = np.full(len(names), -1, np.int64)
            first[codes[::-1]] = class_codes[::-1]
            classes = gpu["cls"].cat.categories
            profile["kernels"] = [{"name": str(names[c]), "class": str(classes[first[c]]),
                                   "per_step_ns": float(totals[c]) / n} for c in order]
        for code in order[:limit] if limit else order:
            mine = codes == code
            series[f"{prefix}:{names[code]}"] = np.bincount(idx[mine], weights=dur[mine], minlength=n).astype(float)
    return profile, series
