"""Compare the runs of BASE and NEW per step: did the step get slower, how sure is that, and why.

The user feels the step: its wall time on the GPU that runs the loop. Every trace is cut to the
steps of its step model (:mod:`nsys_rules.model.steps`) and measured with the step budget
(:mod:`nsys_rules.model.budget`); :mod:`.sides` turns each into per-step series. The verdict is on
the **median step**: its change from BASE to NEW, with a 95 % interval from
:func:`nsys_rules.analysis.shift.median_shifts` (steps resampled within each run, a between-run
effect measured from the runs' medians when a side has 2+ runs, else assumed: see
:func:`.pooled.assumed_between`). Verdicts: ``slower``, ``faster`` (the interval excludes zero),
``no change`` (the interval lies within +-:data:`NO_CHANGE_PCT` %, or the gate when smaller),
``inconclusive``. The gate fails only when the whole interval lies above it.

The same is done, apart, for the step's GPU work (the loop's busy time: stable between runs)
and its idle rest (the host on the critical path: noisy between runs of a host-bound loop), for
every budget part, kernel class and (the biggest) kernels, each with its own interval, ranked by
the size of its change. The means of the inner steps (``step_time_ns``, ``busy_per_step_ns``,
``step_time_change_pct``...) stay in the JSON as before.

Traces that are not runs of one program and step (:mod:`.same`) are refused (exit 2) unless
``force``; a trace without steps, or whose "steps" are a library's NVTX ranges, too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence


from nsys_rules.analysis.shift import Shift, verdict
from nsys_rules.diff.pooled import LEVEL, TOTAL_SERIES, mean_rows, merged, merged_labels, shifts
from nsys_rules.diff.inputs import damage_notes, distinct_runs
from nsys_rules.diff.same import facts, mismatches
from nsys_rules.diff.promises import promises_kept
from nsys_rules.diff.sides import Run
from nsys_rules.errors import UsageError
from nsys_rules.units import human_ns, plain_number

#: A change smaller than this fraction of the base step time is noise (the mean-based ``changed`` list).
SIGNIFICANT = 0.01
#: Default regression gate, percent of the base time per step.
DEFAULT_GATE_PCT = 5.0
#: An interval within this percent of BASE either way is ``no change`` (the gate when it is smaller).
NO_CHANGE_PCT = 1.0
#: Run-to-run spread of a host-bound loop's host time per step assumed when no side has 2+ runs
#: (percent of that time): two runs of one eager decode loop on an idle H200 host differed by 19 %.
DEFAULT_HOST_SPREAD_PCT = 15.0
#: Share of BASE's step that is idle from which a loop is host-bound.
HOST_BOUND = 0.5
#: Runs per side we recommend where one run cannot decide.
RECOMMENDED_RUNS = 3
METHOD = ("bootstrap of the median step: steps resampled within each run (1000 resamples, fixed seed; past 300 "
          "steps the median's rank drawn from its normal limit), a between-run effect from the runs' medians "
          "(Student t) when a side has 2+ runs, else assumed; 95 % percentile interval")


@dataclass(frozen=True)
class Change:
    """One row: a budget part, kernel class or kernel; mean per step before and after (ns), and the median's shift."""

    name: str
    kind: str  # "part", "class" or "kernel"
    kernel_class: str
    base_ns: float
    new_ns: float
    shift: Shift | None = None
    verdict: str = ""

    @property
    def delta_ns(self) -> float:
        """After minus before (means)."""
        return self.new_ns - self.base_ns

    @property
    def pct(self) -> float | None:
        """Relative change of the means in percent, None for work that is new."""
        return 100.0 * self.delta_ns / self.base_ns if self.base_ns else None

    @property
    def effect_ns(self) -> float:
        """The size of the change that ranks the row: the median's shift, else the means' delta."""
        return self.shift.estimate if self.shift is not None else self.delta_ns

    def to_json(self) -> dict[str, Any]:
        """The row as JSON."""
        out: dict[str, Any] = {"name": self.name, "class": self.kernel_class, "base_per_step_ns": round(self.base_ns, 1),
                               "new_per_step_ns": round(self.new_ns, 1), "delta_per_step_ns": round(self.delta_ns, 1),
                               "change_pct": None if self.pct is None else round(self.pct, 2)}
        if self.kind == "class":
            del out["class"]
        elif self.kind == "part":
            out["label"] = out.pop("class")
        if self.shift is not None:
            out["median"] = shift_json(self.shift, self.verdict)
        return out


def shift_json(shift: Shift, said: str) -> dict[str, Any]:
    """A median's shift as JSON: estimate, interval (ns and percent of BASE), verdict, noise."""
    def pct(value: float | None) -> float | None:
        return None if value is None else round(value, 3)

    return {"base_median_ns": round(shift.base, 1), "new_median_ns": round(shift.new, 1),
            "estimate_ns": round(shift.estimate, 1), "low_ns": round(shift.low, 1), "high_ns": round(shift.high, 1),
            "estimate_pct": pct(shift.estimate_pct), "low_pct": pct(shift.low_pct), "high_pct": pct(shift.high_pct),
            "level": LEVEL, "verdict": said,
            "effect_size": None if shift.effect_size is None else round(shift.effect_size, 2),
            "noise": {"base_in_run_sd_ns": round(shift.base_spread, 1), "new_in_run_sd_ns": round(shift.new_spread, 1),
                      "between_run_sd_ns": round(shift.between_run, 1),
                      "between_run": "measured" if shift.between_measured else "assumed"}}


@dataclass
class DiffResult:
    """The comparison of BASE and NEW."""

    base: dict[str, Any]  # path(s), window, steps and per-step means of each side (runs averaged)
    new: dict[str, Any]
    parts: list[Change]
    classes: list[Change]
    kernels: list[Change]
    gate_pct: float
    notes: list[str] = field(default_factory=list)
    totals: dict[str, Shift] = field(default_factory=dict)
    runs: tuple[int, int] = (1, 1)
    host_spread_pct: float = DEFAULT_HOST_SPREAD_PCT
    graph_replays: bool = False
    forced: list[str] = field(default_factory=list)
    #: BASE's promised savings for the causes NEW no longer has, against the measured change (:mod:`.promises`).
    promises: list[dict[str, Any]] = field(default_factory=list)
    #: A run lost measured rows (damage, compared under --force): every verdict is ``inconclusive``, no gate fails.
    void: bool = False

    @property
    def margin_pct(self) -> float:
        """An interval within +- this percent of BASE is ``no change``."""
        return min(NO_CHANGE_PCT, self.gate_pct)

    @property
    def step_change_pct(self) -> float:
        """Change of the mean time per step, percent of BASE."""
        return _pct(self.base["step_time_ns"], self.new["step_time_ns"])

    @property
    def gpu_change_pct(self) -> float:
        """Change of the loop's mean GPU busy (kernel) time per step, percent of BASE."""
        return _pct(self.base["busy_per_step_ns"], self.new["busy_per_step_ns"])

    def said(self, name: str) -> str:
        """The verdict on one of the totals (``step``, ``gpu``, ``idle``, ``host``)."""
        return "inconclusive" if self.void else verdict(self.totals[name], self.margin_pct)

    @property
    def step_verdict(self) -> str:
        """``slower``, ``faster``, ``no change`` or ``inconclusive``: the median step's change."""
        return self.said("step")

    @property
    def regressed(self) -> bool:
        """True only for a confident regression past the gate: the median step's whole interval lies above it."""
        low = self.totals["step"].low_pct
        return not self.void and low is not None and low > self.gate_pct

    @property
    def gpu_label(self) -> str:
        """What the GPU series is: kernel time, or kernel and graph-replay time where a capture hides graph kernels."""
        return "GPU kernel + graph-replay time per step" if self.graph_replays else "GPU kernel time per step"

    @property
    def movers(self) -> list[Change]:
        """Kernels sorted by the size of their change per step, largest first."""
        return sorted((k for k in self.kernels if k.effect_ns or k.delta_ns),
                      key=lambda c: (-abs(c.effect_ns), -abs(c.delta_ns), c.name))

    @property
    def line(self) -> str:
        """The verdict in one line a bot can act on."""
        s = self.totals["step"]
        gate = "FAIL" if self.regressed else "pass"
        return (f"{self.step_verdict}: time per step {_signed(s.estimate_pct)} (95 % interval {_signed(s.low_pct)} to "
                f"{_signed(s.high_pct)}; median {human_ns(s.base)} -> {human_ns(s.new)}; runs {self.runs[0]} vs "
                f"{self.runs[1]}); gate {plain_number(self.gate_pct)} %: {gate}")

    def explanation(self) -> list[str]:
        """Sentences: what moved (GPU work, host/idle time), how noisy, what to do to decide."""
        step, gpu, idle = self.totals["step"], self.totals["gpu"], self.totals["idle"]
        out = [f"{self.gpu_label} {_moved_by(gpu, self.said('gpu'))}",
               f"host/idle time per step {_moved_by(idle, self.said('idle'))}"]
        if self.graph_replays:
            out.append("the GPU time includes whole CUDA graph replays (graph-level capture): a replay's span holds its "
                       "kernels and the gaps between them, so its change is graph-replay time, not kernel growth; "
                       "re-capture with --cuda-graph-trace=node to compare kernels")
        host_bound = self.base.get("step_time_ns") and idle.base >= HOST_BOUND * step.base
        if self.said("gpu") == "no change" and self.step_verdict != "no change" and host_bound:
            moved = abs(step.estimate_pct or 0.0) > self.margin_pct
            out.append(f"the GPU work did not change: {'the step moved by' if moved else 'the step is uncertain by'} "
                       f"host/idle time on a host-bound loop ({100 * idle.base / step.base:.0f} % of BASE's median "
                       "step is idle), and the run-to-run variation of host-bound loops can exceed the in-run spread")
        out += [f"promise {p['line']}" for p in self.promises]
        if not step.between_measured:
            out.append(f"one run per side: the between-run variation is not measured; assumed as the in-run spread "
                       f"of the step, or {plain_number(self.host_spread_pct)} % of its host-caused idle time when larger")
        if self.step_verdict == "inconclusive" and min(self.runs) < RECOMMENDED_RUNS:
            out.append(f"one verdict needs more runs: capture {RECOMMENDED_RUNS}+ runs per side and pass them all "
                       f"(`nsys-rules diff BASE1 BASE2 BASE3 --new NEW1 NEW2 NEW3`)")
        return out

    @property
    def verdict(self) -> dict[str, Any]:
        """What changed (kernels, gaps, the step count) and the verdict on the median step, with its sentences."""
        b, n = self.base, self.new
        step = b["step_time_ns"] or 1.0
        d_step = n["step_time_ns"] - b["step_time_ns"]
        d_busy = n["busy_per_step_ns"] - b["busy_per_step_ns"]
        d_idle = n["idle_per_step_ns"] - b["idle_per_step_ns"]
        kernels, gaps = abs(d_busy) >= SIGNIFICANT * step, abs(d_idle) >= SIGNIFICANT * step
        b_steps, n_steps = _steps_per_run(b), _steps_per_run(n)
        changed = [name for name, moved in (("kernels", kernels), ("gaps", gaps),
                                            ("step count", b_steps != n_steps)) if moved]
        kind = "kernel-time" if kernels and abs(d_busy) >= abs(d_idle) else "gaps" if gaps else "none"
        said = self.explanation()
        if b_steps != n_steps:
            each = " per run" if self.runs != (1, 1) else ""
            said.append(f"the step count differs ({_count(b_steps)} -> {_count(n_steps)} steps{each}: totals differ, "
                        "the per-step numbers compare as they are)")
        return {"verdict": self.step_verdict, "line": self.line, "reasons": said, "kind": kind, "changed": changed,
                "text": self.line + ": " + "; ".join(said), "step_delta_ns": round(d_step, 1),
                "gpu_delta_per_step_ns": round(d_busy, 1), "idle_delta_per_step_ns": round(d_idle, 1)}

    def to_json(self, top: int = 10) -> dict[str, Any]:
        """The comparison as a JSON object (``nsys-rules schema --diff`` is its schema)."""
        totals = {name: {"label": self.gpu_label if name == "gpu" else label,
                         **shift_json(self.totals[name], self.said(name))} for name, label in TOTAL_SERIES}
        return {"schema_version": DIFF_SCHEMA_VERSION,
                "decision": {"verdict": self.step_verdict, "gate": "fail" if self.regressed else "pass",
                             "exit_code": 1 if self.regressed else 0, "line": self.line},
                "method": METHOD, "runs": {"base": self.runs[0], "new": self.runs[1]},
                "change": totals, "base": self.base, "new": self.new, "gate_pct": self.gate_pct,
                "step_time_change_pct": _finite(self.step_change_pct),
                "gpu_time_change_pct": _finite(self.gpu_change_pct), "regressed": self.regressed,
                "verdict": self.verdict, "parts": [c.to_json() for c in self.parts],
                "classes": [c.to_json() for c in self.classes],
                "movers": [c.to_json() for c in self.movers[:top]], "kernels": [c.to_json() for c in self.kernels],
                "forced": self.forced, "notes": self.notes, "promises": self.promises}


#: Version of the diff JSON (``nsys_rules/schema/diff.schema.json``).
DIFF_SCHEMA_VERSION = "1.0"


def compare(base: Run | Sequence[Run], new: Run | Sequence[Run], gate_pct: float = DEFAULT_GATE_PCT, *,
            force: bool = False, host_spread_pct: float = DEFAULT_HOST_SPREAD_PCT) -> DiffResult:
    """Compare the runs of BASE and NEW (:func:`.sides.run_of`).

    :class:`UsageError` when a run has no steps, or (without ``force``) when the runs are not of one
    program and step.
    """
    base_runs = [base] if isinstance(base, Run) else list(base)
    new_runs = [new] if isinstance(new, Run) else list(new)
    for label, runs in (("BASE", base_runs), ("NEW", new_runs)):
        for run in runs:
            s = run.summary
            if not s["steps"]:
                raise UsageError(f"diff compares time per step, and {label} {s['path']} has no steps to compare: "
                                 f"{s['reason']}; mark the loop's steps with an NVTX range (or see `nsys-rules check` "
                                 "on it for the step model)")
    base_runs, new_runs, repeats = distinct_runs(base_runs, new_runs)  # one capture given twice counts once
    damaged, void = damage_notes(base_runs, new_runs, force)  # damage a check reports voids the verdict
    forced = _sameness(base_runs, new_runs, force)
    bs, ns_ = merged(base_runs), merged(new_runs)
    totals, rows = shifts(base_runs, new_runs, host_spread_pct)
    result = DiffResult(bs, ns_, [], [], [], gate_pct, totals=totals, runs=(len(base_runs), len(new_runs)),
                        host_spread_pct=host_spread_pct,
                        graph_replays=any(r.graph_replays for r in (*base_runs, *new_runs)), forced=forced, void=void)
    # A row's verdict is on what it did to the step: within +-margin of BASE's median step is no change.
    margin = (result.margin_pct, totals["step"].base)
    labels = {**merged_labels(new_runs), **merged_labels(base_runs)}
    result.parts = _rows(bs["parts"], ns_["parts"], "part", rows, margin, labels)
    result.classes = _rows(mean_rows(base_runs, "classes", "class"), mean_rows(new_runs, "classes", "class"),
                           "class", rows, margin)
    result.kernels = _rows(mean_rows(base_runs, "kernels", "name"), mean_rows(new_runs, "kernels", "name"),
                           "kernel", rows, margin)
    notes = [f"--force: {text}" for text in forced] + repeats + damaged
    for label, runs in (("BASE", base_runs), ("NEW", new_runs)):
        if not all(r.summary["has_kernels"] for r in runs):
            notes.append(f"{label} has no per-kernel rows for its CUDA graphs (graph-level capture): graph replays "
                         "count as one opaque class; re-capture with --cuda-graph-trace=node to compare kernels")
    if (bs["step_source"], bs["step_range"]) != (ns_["step_source"], ns_["step_range"]):
        notes.append(f"the steps were found differently (BASE: {bs['window']}; NEW: {ns_['window']}): check that a "
                     "step means the same work on both sides")
    result.notes = notes
    result.promises = promises_kept([r.promises for r in base_runs], [r.promises for r in new_runs], totals["step"])
    return result


def _sameness(base_runs: list[Run], new_runs: list[Run], force: bool) -> list[str]:
    """Refuse runs of different programs or steps (UsageError); with ``force``, what differs."""
    first = base_runs[0]
    ref = facts(first.summary, first.profile, first.command)
    found = []
    for label, runs in (("BASE", base_runs[1:]), ("NEW", new_runs)):
        for run in runs:
            problems = mismatches(ref, facts(run.summary, run.profile, run.command))
            if problems:
                found.append(f"{label} {run.summary['path']} is not a run of the same program and step as BASE "
                             f"{first.summary['path']}: " + "; ".join(problems))
    if found and not force:
        raise UsageError(f"diff compares runs of one program and step: {found[0]}; pass --force to compare anyway")
    return found


def _rows(base: Any, new: Any, kind: str, shifts: dict[str, Shift], margin: tuple[float, float],
          labels: dict[str, str] | None = None) -> list[Change]:
    """Rows of one kind, each with its median's shift, ranked by the size of its change."""
    if kind == "part":
        b = {k: float(v) for k, v in base.items()}
        n = {k: float(v) for k, v in new.items()}
        cls = {k: (labels or {}).get(k, k) for k in (*b, *n)}
    else:
        key = "class" if kind == "class" else "name"
        b = {str(r[key]): float(r["per_step_ns"]) for r in base}
        n = {str(r[key]): float(r["per_step_ns"]) for r in new}
        cls = {str(r[key]): str(r["class"]) for r in (*new, *base)}
    out = []
    for name in dict.fromkeys([*b, *n]):
        shift = shifts.get(f"{kind}:{name}")
        out.append(Change(name, kind, cls[name], b.get(name, 0.0), n.get(name, 0.0), shift,
                          verdict(shift, *margin) if shift is not None else ""))
    out.sort(key=lambda c: (-abs(c.effect_ns), -max(c.base_ns, c.new_ns), c.name))
    return out


def _steps_per_run(side: dict[str, Any]) -> float:
    return float(side["steps"]) / max(1, int(side.get("runs", 1) or 1))


def _count(value: float) -> str:
    return f"{value:.0f}" if value == int(value) else f"{value:.1f}"


def _pct(before: float, after: float) -> float:
    return 100.0 * (after - before) / before if before else (0.0 if not after else float("inf"))


def _finite(pct: float) -> float | None:
    """A change in percent for JSON: None where BASE had none of it (from zero, no percent; JSON has no Infinity)."""
    return round(pct, 2) if math.isfinite(pct) else None


def _signed(value: float | None) -> str:
    return "new" if value is None else f"{value:+.1f} %"


def _moved_by(shift: Shift, said: str) -> str:
    """``+5.8 % (+5.5 % to +6.1 %; 2.59 ms -> 2.74 ms): slower``, a total's change in words."""
    return (f"{human_ns(shift.estimate, signed=True)} ({_signed(shift.estimate_pct)}, 95 % interval "
            f"{_signed(shift.low_pct)} to {_signed(shift.high_pct)}; median {human_ns(shift.base)} -> "
            f"{human_ns(shift.new)}): {said}")


def diff_schema() -> dict[str, Any]:
    """The JSON Schema of ``diff --format json``, shipped in the package (``nsys-rules schema --diff``)."""
    import json
    from importlib import resources

    text = resources.files("nsys_rules").joinpath("schema/diff.schema.json").read_text(encoding="utf-8")
    return dict(json.loads(text))
