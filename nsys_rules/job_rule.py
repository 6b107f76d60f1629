"""The job rule API: rules that judge several ranks together.

A job rule looks like a trace rule (``name``, ``title``, ``default_severity``, a frozen
``Options`` dataclass, the same docstring sections), so selection, ``--set``, config,
severity overrides, ``rules``, ``explain`` and every output format treat it alike. It differs
in what it gets: ``check(ctx)`` receives a :class:`JobContext` over the whole job (ranks on
one clock, matched collectives, steps), not one trace, and it runs once per ``check``, after
every trace has been read. Plugins register job rules with the ``register_job_rules`` hook.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Iterable, Mapping

import numpy as np

from nsys_rules.findings import Finding, Location, Metric, Severity
from nsys_rules.rule import Rule
from nsys_rules.model.job.model import Job


class JobRule(Rule["JobContext"]):
    """Base class of job rules (see the module docstring); subclasses implement :meth:`check`."""

    scope: ClassVar[str] = "job"
    window: ClassVar[str] = "full"
    requires: ClassVar[tuple[str, ...]] = ()

    def check(self, ctx: JobContext) -> Iterable[Finding]:
        """Yield findings for ``ctx.job``; raise :class:`~nsys_rules.errors.MissingData` to be skipped."""
        raise NotImplementedError


@dataclass
class JobContext:
    """What :meth:`JobRule.check` gets: the job, the rule and its effective options."""

    job: Job
    rule: JobRule
    options: Any

    def step_time_ns(self) -> float:
        """All steps' time on the job clock (first step's start to last step's end), 0 without steps."""
        job = self.job
        if job.steps.count < 1:
            return 0.0
        ends = np.nanmedian(job.end[job.steps.bounds], axis=1)
        return float(ends[-1] - ends[0])

    def finding(self, message: str, recommendation: str, *, rank: int | None = None, severity: Severity | None = None,
                title: str | None = None, metrics: Mapping[str, Metric] | None = None,
                estimated_savings_ns: float | None = None, step_span: tuple[float, float] | None = None,
                key: str = "") -> Finding:
        """A finding of this rule about ``rank`` (its trace, process and GPU fill the location).

        Savings are bounded by the steps' time: no change saves more than the job spends.
        ``step_span`` (job-clock ns) becomes the location's start/end on that rank's own clock.
        """
        info = next((r for r in self.job.ranks if r.rank == rank), None) if rank is not None else None
        loc = Location(trace=info.trace if info else None, pid=info.pid if info else None,
                       device=info.device if info else None, rank=rank)
        if step_span is not None and info is not None:
            offset = int(self.job.clock.offset[self.job.ranks.index(info)])
            loc = dataclasses.replace(loc, start_ns=int(step_span[0]) - offset, end_ns=int(step_span[1]) - offset)
        savings = None
        if estimated_savings_ns is not None and np.isfinite(estimated_savings_ns):
            savings = int(max(0.0, min(float(estimated_savings_ns), self.step_time_ns())))
        return Finding(self.rule.name, severity or self.rule.default_severity, title or self.rule.title, message,
                       recommendation, dict(metrics or {}), loc, savings, key or (f"rank {rank}" if rank is not None else ""))


def step_list(steps: Iterable[int], limit: int = 8) -> str:
    """``3, 7, 12`` (1-based step numbers), with ``and N more`` past ``limit``."""
    items = [int(s) + 1 for s in steps]
    text = ", ".join(str(s) for s in items[:limit])
    return text + (f" and {len(items) - limit} more" if len(items) > limit else "")
