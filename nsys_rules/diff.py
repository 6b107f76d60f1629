"""Compare two traces of the same program: what got slower per step, and why.

Both traces are cut to their steady state (:func:`nsys_rules.windows.steady_state_window`) and
normalized per step, so a run with more steps compares fairly with a shorter one. Per kernel
class and per kernel: GPU time per step before and after, and the biggest movers. The verdict
says in which direction the time moved:

- *kernel time changed* (compute or data: the kernels themselves got slower or faster, or
  more work is launched per step), when the GPU time per step moved more than the idle time;
- *only the gaps changed* (the host is on the critical path: launch overhead, syncs, Python),
  when the GPU time per step held still and the idle time between kernels moved;
- *no significant change* when neither moved by more than :data:`SIGNIFICANT` of the step.

The gate: total GPU time per step (the summed duration of kernels, copies and memsets
launched in a step) regressing by more than ``gate_pct`` percent fails (exit 1).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .overview import build_profile
from .trace import Trace
from .windows import SteadyOptions, steady_state_window

#: A change smaller than this fraction of the base step time is noise.
SIGNIFICANT = 0.01
#: Default regression gate, percent of the base GPU time per step.
DEFAULT_GATE_PCT = 5.0


@dataclass(frozen=True)
class Change:
    """One row of the comparison: a kernel class or a kernel, per step before and after (ns)."""

    name: str
    kind: str  # "class" or "kernel"
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
        return out


@dataclass
class DiffResult:
    """The comparison of BASE and NEW."""

    base: dict[str, Any]  # path, window, steps and totals of each side
    new: dict[str, Any]
    classes: list[Change]
    kernels: list[Change]
    gate_pct: float
    notes: list[str] = field(default_factory=list)

    @property
    def gpu_change_pct(self) -> float:
        """Change of total GPU time per step, percent of BASE."""
        b, n = self.base["gpu_time_per_step_ns"], self.new["gpu_time_per_step_ns"]
        return 100.0 * (n - b) / b if b else (0.0 if not n else float("inf"))

    @property
    def regressed(self) -> bool:
        """True when GPU time per step grew by more than the gate."""
        return self.gpu_change_pct > self.gate_pct

    @property
    def movers(self) -> list[Change]:
        """Kernels sorted by the size of their change per step, largest first."""
        return sorted((k for k in self.kernels if k.delta_ns), key=lambda c: (-abs(c.delta_ns), c.name))

    @property
    def verdict(self) -> dict[str, Any]:
        """Direction of the change: kernel time, gaps, or nothing significant."""
        step = self.base["step_time_ns"] or self.base["gpu_time_per_step_ns"] or 1.0
        d_gpu = self.new["gpu_time_per_step_ns"] - self.base["gpu_time_per_step_ns"]
        d_idle = self.new["idle_per_step_ns"] - self.base["idle_per_step_ns"]
        d_step = self.new["step_time_ns"] - self.base["step_time_ns"]
        gpu_moved, idle_moved = abs(d_gpu) >= SIGNIFICANT * step, abs(d_idle) >= SIGNIFICANT * step
        if gpu_moved and abs(d_gpu) >= abs(d_idle):
            word = "slower" if d_gpu > 0 else "faster"
            kind = "kernel-time"
            text = f"kernel time changed (compute/data): GPU time per step {word} by {_ns(abs(d_gpu))}" + (
                f"; gaps {'grew' if d_idle > 0 else 'shrank'} by {_ns(abs(d_idle))} too" if idle_moved else "")
        elif idle_moved:
            kind = "gaps-only" if not gpu_moved else "mostly-gaps"
            lead = "only gaps changed" if not gpu_moved else "mostly gaps changed"
            text = (f"{lead} (host on the critical path): idle per step {'grew' if d_idle > 0 else 'shrank'} by "
                    f"{_ns(abs(d_idle))} while GPU time per step moved {_ns(d_gpu, signed=True)}")
        else:
            kind = "none"
            text = "no significant change per step"
        return {"kind": kind, "text": text, "gpu_delta_per_step_ns": round(d_gpu, 1),
                "idle_delta_per_step_ns": round(d_idle, 1), "step_delta_ns": round(d_step, 1)}

    def to_json(self, top: int = 10) -> dict[str, Any]:
        """The comparison as a JSON object."""
        return {"base": self.base, "new": self.new, "gate_pct": self.gate_pct,
                "gpu_time_change_pct": round(self.gpu_change_pct, 2), "regressed": self.regressed,
                "verdict": self.verdict, "classes": [c.to_json() for c in self.classes],
                "movers": [c.to_json() for c in self.movers[:top]], "kernels": [c.to_json() for c in self.kernels],
                "notes": self.notes}


def side_summary(trace: Trace, steady: SteadyOptions | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(summary, full profile) of one trace's steady state, every kernel kept."""
    window = steady_state_window(trace, steady or SteadyOptions())
    profile = build_profile(trace, window, top=0)
    summary = {"path": trace.label, "window": profile["window"], "steps": profile["steps"],
               "step_range": profile["step_range"], "step_time_ns": round(profile["step_time_ns"], 1),
               "gpu_time_per_step_ns": round(profile["gpu_time_per_step_ns"], 1),
               "busy_per_step_ns": round(profile["busy_per_step_ns"], 1),
               "idle_per_step_ns": round(profile["idle_per_step_ns"], 1),
               "has_kernels": trace.has("kernels") and not any(c["class"] == "cuda-graph" for c in profile["classes"])}
    return summary, profile


def compare(base: tuple[dict[str, Any], dict[str, Any]], new: tuple[dict[str, Any], dict[str, Any]],
            gate_pct: float = DEFAULT_GATE_PCT) -> DiffResult:
    """Compare two :func:`side_summary` results."""
    (bs, bp), (ns_, np_) = base, new
    classes = _rows(bp["classes"], np_["classes"], "class")
    kernels = _rows(bp["kernels"], np_["kernels"], "kernel")
    notes = []
    for label, s in (("BASE", bs), ("NEW", ns_)):
        if not s["has_kernels"]:
            notes.append(f"{label} has no per-kernel rows for its CUDA graphs (graph-level capture): graph replays "
                         "count as one opaque class; re-capture with --cuda-graph-trace=node to compare kernels")
        if not s["steps"]:
            notes.append(f"{label} has no repeating step range: its numbers are for the whole steady window, not per step")
    if bs["step_range"] and ns_["step_range"] and bs["step_range"] != ns_["step_range"]:
        notes.append(f"the step ranges differ ({bs['step_range']!r} vs {ns_['step_range']!r})")
    return DiffResult(bs, ns_, classes, kernels, gate_pct, notes)


def _rows(base: list[dict[str, Any]], new: list[dict[str, Any]], kind: str) -> list[Change]:
    key = "class" if kind == "class" else "name"
    b = {r[key]: r for r in base}
    n = {r[key]: r for r in new}
    out = []
    for name in dict.fromkeys([*b, *n]):
        row = b.get(name) or n[name]
        out.append(Change(str(name), kind, str(row["class"]), float(b[name]["per_step_ns"]) if name in b else 0.0,
                          float(n[name]["per_step_ns"]) if name in n else 0.0))
    out.sort(key=lambda c: (-max(c.base_ns, c.new_ns), c.name))
    return out


def _ns(value: float, signed: bool = False) -> str:
    sign = ("+" if value > 0 else "-" if value < 0 else "") if signed else ""
    v = abs(value)
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if v >= scale:
            return f"{sign}{v / scale:.3g} {unit}"
    return f"{sign}{v:.0f} ns"
