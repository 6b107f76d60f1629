"""Compare two traces of the same program per step: did the step get slower, and why.

The user feels the step: its wall time on the GPU that runs the loop. Both traces are cut to
the steps of their step model (:mod:`nsys_rules.model.steps`) and measured with the step
budget (:mod:`nsys_rules.model.budget`), so a run with more steps compares fairly with a
shorter one (the means leave out the first and the last step, which the loop's edges cut). The
gate is on the time per step; the explanation is the budget's split of it:

- *kernels*: the loop's GPU busy time per step moved (the kernels got slower or faster, or
  more work is launched per step);
- *gaps*: the idle time per step moved (the host is on the critical path: launches, syncs,
  allocations, Python);
- *step count*: the runs have a different number of steps (the totals differ, the per-step
  numbers compare as they are).

Per kernel class and per kernel, the GPU time per step before and after (the biggest movers)
says which kernels moved. A trace without steps, or whose "steps" are a library's NVTX ranges
(NCCL, cuDNN...), has nothing per step to compare: :func:`compare` refuses it (exit 2).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nsys_rules.model.budget import step_budget
from nsys_rules.analysis.names import is_library_range
from nsys_rules.errors import UsageError
from nsys_rules.model.overview import build_profile
from nsys_rules.model.trace import Trace
from nsys_rules.model.windows import SteadyOptions, steady_state_window
from nsys_rules.units import human_ns

#: A change smaller than this fraction of the base step time is noise.
SIGNIFICANT = 0.01
#: Default regression gate, percent of the base time per step.
DEFAULT_GATE_PCT = 5.0


@dataclass(frozen=True)
class Change:
    """One row of the comparison: a budget part, kernel class or kernel, per step before and after (ns)."""

    name: str
    kind: str  # "part", "class" or "kernel"
    kernel_class: str
    base_ns: float
    new_ns: float

    @property
    def delta_ns(self) -> float:
        """After minus before."""
        return self.new_ns - self.base_ns

    @property
    def pct(self) -> float | None:
        """Relative change in percent, None for work that is new."""
        return 100.0 * self.delta_ns / self.base_ns if self.base_ns else None

    def to_json(self) -> dict[str, Any]:
        """The row as JSON."""
        out: dict[str, Any] = {"name": self.name, "class": self.kernel_class, "base_per_step_ns": round(self.base_ns, 1),
                               "new_per_step_ns": round(self.new_ns, 1), "delta_per_step_ns": round(self.delta_ns, 1),
                               "change_pct": None if self.pct is None else round(self.pct, 2)}
        if self.kind == "class":
            del out["class"]
        elif self.kind == "part":
            out["label"] = out.pop("class")
        return out


@dataclass
class DiffResult:
    """The comparison of BASE and NEW."""

    base: dict[str, Any]  # path, window, steps and per-step totals of each side
    new: dict[str, Any]
    parts: list[Change]
    classes: list[Change]
    kernels: list[Change]
    gate_pct: float
    notes: list[str] = field(default_factory=list)

    @property
    def step_change_pct(self) -> float:
        """Change of the time per step, percent of BASE."""
        return _pct(self.base["step_time_ns"], self.new["step_time_ns"])

    @property
    def gpu_change_pct(self) -> float:
        """Change of the loop's GPU busy (kernel) time per step, percent of BASE."""
        return _pct(self.base["busy_per_step_ns"], self.new["busy_per_step_ns"])

    @property
    def regressed(self) -> bool:
        """True when the time per step grew by more than the gate."""
        return self.step_change_pct > self.gate_pct

    @property
    def movers(self) -> list[Change]:
        """Kernels sorted by the size of their change per step, largest first."""
        return sorted((k for k in self.kernels if k.delta_ns), key=lambda c: (-abs(c.delta_ns), c.name))

    @property
    def verdict(self) -> dict[str, Any]:
        """What changed (kernels, gaps, the step count) and which of them moved the step most."""
        b, n = self.base, self.new
        step = b["step_time_ns"] or 1.0
        d_step = n["step_time_ns"] - b["step_time_ns"]
        d_busy = n["busy_per_step_ns"] - b["busy_per_step_ns"]
        d_idle = n["idle_per_step_ns"] - b["idle_per_step_ns"]
        kernels, gaps = abs(d_busy) >= SIGNIFICANT * step, abs(d_idle) >= SIGNIFICANT * step
        changed = [name for name, moved in (("kernels", kernels), ("gaps", gaps),
                                            ("step count", b["steps"] != n["steps"])) if moved]
        kind = "kernel-time" if kernels and abs(d_busy) >= abs(d_idle) else "gaps" if gaps else "none"
        causes: list[tuple[float, str]] = []  # (size, sentence): the larger cause first
        if kernels:
            causes.append((abs(d_busy), f"GPU kernel time per step {_moved(d_busy)} by {human_ns(abs(d_busy))} "
                                      f"({human_ns(b['busy_per_step_ns'])} -> {human_ns(n['busy_per_step_ns'])})"))
        if gaps:
            causes.append((abs(d_idle), f"idle time (gaps) per step {_moved(d_idle)} by {human_ns(abs(d_idle))} "
                                      f"({human_ns(b['idle_per_step_ns'])} -> {human_ns(n['idle_per_step_ns'])})"))
        said = [text for _, text in sorted(causes, key=lambda x: -x[0])]
        if b["steps"] != n["steps"]:
            said.append(f"the step count changed ({b['steps']} -> {n['steps']} steps: totals differ, the per-step "
                        "numbers compare as they are)")
        head = (f"step time {self.step_change_pct:+.1f} % ({human_ns(b['step_time_ns'])} -> {human_ns(n['step_time_ns'])} "
                f"per step)")
        text = head + (": " + "; ".join(said) if said else ": no significant change in kernels or gaps")
        return {"kind": kind, "changed": changed, "text": text, "step_delta_ns": round(d_step, 1),
                "gpu_delta_per_step_ns": round(d_busy, 1), "idle_delta_per_step_ns": round(d_idle, 1)}

    def to_json(self, top: int = 10) -> dict[str, Any]:
        """The comparison as a JSON object."""
        return {"base": self.base, "new": self.new, "gate_pct": self.gate_pct,
                "step_time_change_pct": round(self.step_change_pct, 2),
                "gpu_time_change_pct": round(self.gpu_change_pct, 2), "regressed": self.regressed,
                "verdict": self.verdict, "parts": [c.to_json() for c in self.parts],
                "classes": [c.to_json() for c in self.classes],
                "movers": [c.to_json() for c in self.movers[:top]], "kernels": [c.to_json() for c in self.kernels],
                "notes": self.notes}


def side_summary(trace: Trace, steady: SteadyOptions | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(summary, kernel profile) of one trace's steady steps; ``summary["steps"]`` is 0 (with the reason) without."""
    window = steady_state_window(trace, steady or SteadyOptions())
    model = window.model
    summary: dict[str, Any] = {"path": trace.label, "window": window.source, "steps": 0, "step_range": None,
                               "step_source": model.source if model is not None else "none"}
    budget = step_budget(trace, model) if model is not None and model.count else None
    if model is None or not model.count:
        summary["reason"] = model.reason if model is not None and model.reason else "no step model fits the trace"
        return summary, {}
    if model.source == "nvtx" and model.name and is_library_range(model.name):
        summary["reason"] = f"its steps are a library's NVTX range {model.name!r}, not the program's loop"
        return summary, {}
    if budget is None:
        summary["reason"] = "the steady steps ran no GPU work"
        return summary, {}
    profile = build_profile(trace, window, top=0)
    # Means over the inner steps: the loop's edges cut the first step (it starts at its first GPU operation,
    # the others where the host began them) and the last (no next step ends it: its idle tail is unknown), so
    # runs of different lengths would differ in gaps that no step has.
    full = slice(1, budget.steps - 1) if budget.steps > 2 else slice(None)
    per_part = {p.name: float(budget.per_step[p.name][full].mean()) for p in budget.parts if p.name in budget.per_step}
    kinds = {p.name: p.kind for p in budget.parts}
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
    return summary, profile


def compare(base: tuple[dict[str, Any], dict[str, Any]], new: tuple[dict[str, Any], dict[str, Any]],
            gate_pct: float = DEFAULT_GATE_PCT) -> DiffResult:
    """Compare two :func:`side_summary` results; :class:`UsageError` when either side has no steps."""
    (bs, bp), (ns_, np_) = base, new
    for label, s in (("BASE", bs), ("NEW", ns_)):
        if not s["steps"]:
            raise UsageError(f"diff compares time per step, and {label} {s['path']} has no steps to compare: "
                             f"{s['reason']}; mark the loop's steps with an NVTX range (or see `nsys-rules check` "
                             "on it for the step model)")
    parts = _rows([{"name": k, "class": bs["part_labels"].get(k) or ns_["part_labels"].get(k), "per_step_ns": v}
                   for k, v in bs["parts"].items()],
                  [{"name": k, "class": ns_["part_labels"].get(k) or bs["part_labels"].get(k), "per_step_ns": v}
                   for k, v in ns_["parts"].items()], "part")
    classes = _rows(bp["classes"], np_["classes"], "class")
    kernels = _rows(bp["kernels"], np_["kernels"], "kernel")
    notes = []
    for label, s in (("BASE", bs), ("NEW", ns_)):
        if not s["has_kernels"]:
            notes.append(f"{label} has no per-kernel rows for its CUDA graphs (graph-level capture): graph replays "
                         "count as one opaque class; re-capture with --cuda-graph-trace=node to compare kernels")
    if (bs["step_source"], bs["step_range"]) != (ns_["step_source"], ns_["step_range"]):
        notes.append(f"the steps were found differently (BASE: {bs['window']}; NEW: {ns_['window']}): check that a "
                     "step means the same work on both sides")
    return DiffResult(bs, ns_, parts, classes, kernels, gate_pct, notes)


def _rows(base: list[dict[str, Any]], new: list[dict[str, Any]], kind: str) -> list[Change]:
    key = "class" if kind == "class" else "name"
    b = {r[key]: r for r in base}
    n = {r[key]: r for r in new}
    out = []
    for name in dict.fromkeys([*b, *n]):
        row = b.get(name) or n[name]
        out.append(Change(str(name), kind, str(row["class"]), float(b[name]["per_step_ns"]) if name in b else 0.0,
                          float(n[name]["per_step_ns"]) if name in n else 0.0))
    if kind != "part":  # budget parts keep the budget's order (busy classes, then idle causes)
        out.sort(key=lambda c: (-max(c.base_ns, c.new_ns), c.name))
    return out


def _pct(before: float, after: float) -> float:
    return 100.0 * (after - before) / before if before else (0.0 if not after else float("inf"))


def _moved(delta: float) -> str:
    return "grew" if delta > 0 else "shrank"


