"""The typed objects :func:`nsys_rules.check` returns besides findings: each trace and its step budget.

Built from the same records the JSON report holds (``traces[]``, ``traces[].budget``), so a notebook
reads the very numbers every format prints. Findings stay :class:`nsys_rules.findings.Finding` objects.
``to_frame()`` on each of them gives a pandas DataFrame (pandas is imported only then).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from nsys_rules.findings import Finding, rank_key
from nsys_rules.report import TraceResult

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class BudgetPart:
    """One part of the step budget: GPU time of one kernel class (``kind == "busy"``) or one cause of GPU idle
    time (``kind == "idle"``). The parts of a budget add up to its steady time."""

    name: str  #: stable id: ``gemv``, ``launch_wait``, ``after_sync``, ...
    label: str  #: how the reports name it: "idle: after a synchronization"
    kind: str  #: ``busy`` or ``idle``
    total_ns: int  #: over all steady steps
    per_step_ns: float  #: ``total_ns`` / steps (the mean)
    median_step_ns: int  #: in the median step (the step the budget shows)
    owner: str | None = None  #: the rule whose finding explains this part, if one does
    owner_fingerprint: str | None = None  #: that finding's fingerprint
    unowned_why: str | None = None  #: why no finding owns the part ("under 10% of the median step")

    @classmethod
    def from_json(cls, part: Mapping[str, Any]) -> "BudgetPart":
        """From one ``budget.parts[]`` entry of the JSON report."""
        owner = part.get("owner") or {}
        return cls(name=str(part["name"]), label=str(part["label"]), kind=str(part["kind"]), total_ns=int(part["ns"]),
                   per_step_ns=float(part["per_step_ns"]), median_step_ns=int(part["median_step_ns"]),
                   owner=owner.get("rule"), owner_fingerprint=owner.get("fingerprint"), unowned_why=owner.get("why"))


@dataclass(frozen=True)
class StepBudget:
    """Where the steady steps' time goes on the loop's GPU (``traces[].budget`` of the JSON report).

    ``typical_step_ns`` is the typical step every format prints: the median step's own duration (the lower of
    the two middle steps for an even count, so it is a step that ran). ``p90_step_ns`` and ``max_step_ns`` are
    labelled as such everywhere; ``mean_step_ns`` is the mean over the inner steps (the loop's edges cut the first
    and the last), as the parts' ``per_step_ns`` and diff's ``step_time_ns`` are.
    """

    trace: str
    steps: int
    total_ns: int
    device: int | None
    typical_step_ns: int
    p90_step_ns: int
    max_step_ns: int
    median_step: int  #: index (from 0) of the step the budget's median column shows
    parts: tuple[BudgetPart, ...]
    raw: Mapping[str, Any]  #: the JSON object itself (evidence, replay, GPU metrics)

    @property
    def mean_step_ns(self) -> float:
        """The mean step over the inner steps (not the typical step): the parts' means add up to it, as each step's
        parts add up to the step."""
        return round(sum(p.per_step_ns for p in self.parts), 1)

    @property
    def busy_ns(self) -> int:
        """GPU time of the loop's kernel classes over the steady steps."""
        return sum(p.total_ns for p in self.parts if p.kind == "busy")

    @property
    def idle_ns(self) -> int:
        """Time the loop's GPU was idle over the steady steps."""
        return sum(p.total_ns for p in self.parts if p.kind == "idle")

    def part(self, name: str) -> BudgetPart | None:
        """The part called ``name``, or None."""
        return next((p for p in self.parts if p.name == name), None)

    @classmethod
    def from_json(cls, trace: str, budget: Mapping[str, Any]) -> "StepBudget":
        """From ``traces[].budget`` of the JSON report."""
        step = budget["step_ns"]
        return cls(trace=trace, steps=int(budget["steps"]), total_ns=int(budget["total_ns"]),
                   device=None if budget.get("device") is None else int(budget["device"]),
                   typical_step_ns=int(step["p50"]), p90_step_ns=int(step["p90"]), max_step_ns=int(step["max"]),
                   median_step=int(budget["median_step"]),
                   parts=tuple(BudgetPart.from_json(p) for p in budget["parts"]), raw=budget)

    def to_frame(self) -> pd.DataFrame:
        """One row per part: trace, part, label, kind, total_ns, per_step_ns, median_step_ns, share_pct (of the
        steady time), owner, owner_fingerprint."""
        return budget_frame([self])


@dataclass(frozen=True)
class TraceSummary:
    """One trace of the report: what it is, its step budget (None with ``budget_reason``) and its findings."""

    path: str
    nsys_version: str | None
    gpus: tuple[str, ...]  #: GPU names, by device id
    budget: StepBudget | None
    budget_reason: str | None
    findings: tuple[Finding, ...]  #: ranked, as the report lists them
    damage: tuple[str, ...]  #: what the loader had to repair or drop, one line each
    window: Mapping[str, Any]  #: the windows the rules judged (``traces[].window`` of the JSON)

    @classmethod
    def from_result(cls, result: TraceResult) -> "TraceSummary":
        """From the engine's result for one trace."""
        info = result.info
        return cls(path=info.path, nsys_version=info.nsys_version,
                   gpus=tuple(str(g.get("name", "")) for g in info.gpus),
                   budget=StepBudget.from_json(info.path, info.budget) if info.budget else None,
                   budget_reason=info.budget_reason, findings=tuple(sorted(result.findings, key=rank_key)),
                   damage=tuple(info.damage), window=info.window)


#: Columns of the findings frame, in order (docs/python.md lists them).
FINDING_COLUMNS = ("rule", "severity", "savings_ns", "savings_low_ns", "savings_high_ns", "budget_part", "title",
                   "minor", "trace", "kernel", "api", "device", "stream", "nvtx", "fingerprint", "message",
                   "recommendation", "metrics")


def findings_frame(findings: list[Finding] | tuple[Finding, ...]) -> pd.DataFrame:
    """One row per finding, ranked as given (index: rank from 1); ``metrics`` holds ``{name: value}``."""
    import pandas as pd

    rows = []
    for f in findings:
        loc = f.location
        low, high = f.savings_range if f.savings_range is not None else (None, None)
        rows.append({"rule": f.rule, "severity": f.severity.value, "title": f.title,
                     "savings_ns": f.estimated_savings_ns, "savings_low_ns": low, "savings_high_ns": high,
                     "budget_part": f.budget_part, "minor": bool(f.minor or f.folded_into), "trace": loc.trace,
                     "kernel": loc.kernel, "api": loc.api, "device": loc.device, "stream": loc.stream,
                     "nvtx": " / ".join(loc.nvtx) if loc.nvtx else None, "message": f.message,
                     "recommendation": f.recommendation, "fingerprint": f.fingerprint,
                     "metrics": {name: m.value for name, m in f.metrics.items()}})
    frame = pd.DataFrame(rows, columns=list(FINDING_COLUMNS))
    for column in ("savings_ns", "savings_low_ns", "savings_high_ns", "device", "stream"):
        frame[column] = frame[column].astype("Int64")  # nullable: a finding without a saving is <NA>, not NaN
    frame.index = pd.RangeIndex(1, len(frame) + 1, name="rank")
    return frame


#: Columns of the budget frame, in order.
BUDGET_COLUMNS = ("trace", "part", "label", "kind", "total_ns", "per_step_ns", "median_step_ns", "share_pct",
                  "owner", "owner_fingerprint")


def budget_frame(budgets: list[StepBudget]) -> pd.DataFrame:
    """One row per budget part of each budget given."""
    import pandas as pd

    rows = [{"trace": b.trace, "part": p.name, "label": p.label, "kind": p.kind, "total_ns": p.total_ns,
             "per_step_ns": p.per_step_ns, "median_step_ns": p.median_step_ns,
             "share_pct": round(100 * p.total_ns / b.total_ns, 2) if b.total_ns else 0.0,
             "owner": p.owner, "owner_fingerprint": p.owner_fingerprint} for b in budgets for p in b.parts]
    return pd.DataFrame(rows, columns=list(BUDGET_COLUMNS))


def metrics_frame(findings: list[Finding] | tuple[Finding, ...]) -> pd.DataFrame:
    """One row per metric of each finding: rank, rule, fingerprint, metric, value, unit."""
    import pandas as pd

    rows = [{"rank": i, "rule": f.rule, "fingerprint": f.fingerprint, "metric": name, "value": m.value, "unit": m.unit}
            for i, f in enumerate(findings, 1) for name, m in f.metrics.items()]
    return pd.DataFrame(rows, columns=["rank", "rule", "fingerprint", "metric", "value", "unit"])
