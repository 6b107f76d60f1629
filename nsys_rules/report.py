"""What a ``check`` run produced: the report the formatters read, and the JSON envelope's version.

Formatters, plugins' formats included, take a :class:`Report` and only format it: every number
comes from here. The engine (:mod:`nsys_rules.engine`) fills it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nsys_rules import __version__
from nsys_rules.errors import ExitCode
from nsys_rules.findings import Finding, Severity, rank_key
from nsys_rules.records import Capped, RunError, Skipped, TraceInfo
from nsys_rules.registry import Registry

SCHEMA_VERSION = "1.5"


@dataclass
class TraceResult:
    """What one trace produced."""

    info: TraceInfo
    findings: list[Finding] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    errors: list[RunError] = field(default_factory=list)
    #: Rules that returned more findings than ``--max-findings`` on this trace (their first ones are kept).
    capped: list[Capped] = field(default_factory=list)
    # The steady-state profile (nsys_rules.model.overview) for formats that draw it; None unless asked for.
    profile: dict[str, Any] | None = None

    @property
    def has_cuda(self) -> bool:
        """Whether the trace recorded any CUDA API call or GPU operation (else no rule has anything to judge)."""
        return any(self.info.tables.get(t) for t in CUDA_TABLES)


#: Tables whose rows mean the program used CUDA (runtime or driver calls, or GPU work).
CUDA_TABLES = ("api", "kernels", "memcpy", "memset", "graph_trace")


@dataclass
class Report:
    """The result of a ``check`` run over one or more traces."""

    rules: list[dict[str, Any]]
    plugins: list[dict[str, str]]
    fail_on: str
    results: list[TraceResult] = field(default_factory=list)
    errors: list[RunError] = field(default_factory=list)  # plugin errors, and traces a worker could not analyze
    registry: Registry | None = None
    cross_trace: dict[str, Any] | None = None  # set by nsys_rules.parallel when several traces ran
    job: Any = None  # nsys_rules.job_run.JobOutcome when the traces held a multi-rank job
    job_note: str | None = None  # several traces but no job: why not (human formats say it under check -v)
    verbose: bool = False  # human formats list skipped rules one by one (check -v)
    config: str | None = None  # the config file the run read (Settings.source), None when none

    @property
    def findings(self) -> list[Finding]:
        """Every finding of every trace and of the job rules, ranked (savings, then severity)."""
        job = self.job.findings if self.job is not None else []
        return sorted([*(f for r in self.results for f in r.findings), *job], key=rank_key)

    @property
    def all_errors(self) -> list[RunError]:
        """Plugin errors plus rule errors (job rules included)."""
        return self.errors + [e for r in self.results for e in r.errors] + (self.job.errors if self.job else [])

    @property
    def all_capped(self) -> list[Capped]:
        """Rules whose findings were cut at ``--max-findings``, trace by trace, then the job's."""
        return [c for r in self.results for c in getattr(r, "capped", ())] + (self.job.capped if self.job else [])

    @property
    def all_skipped(self) -> list[Skipped]:
        """Rules skipped on each trace, then job rules skipped."""
        return [s for r in self.results for s in r.skipped] + (self.job.skipped if self.job else [])

    @property
    def exit_code(self) -> ExitCode:
        """The run's exit code (:func:`exit_code_of`)."""
        return exit_code_of(self)

    def summary(self) -> dict[str, Any]:
        """Counts by severity and the exit code (:func:`exit_code_of`, bound when this module loaded)."""
        counts = {s.value: 0 for s in Severity}
        for f in self.findings:
            counts[f.severity.value] += 1
        return {"findings": sum(counts.values()), "by_severity": counts,
                "skipped": len(self.all_skipped), "errors": len(self.all_errors),
                "exit_code": int(_EXIT_CODE(self))}


def exit_code_of(report: Report) -> ExitCode:
    """4 when anything failed; 3 when no trace recorded CUDA activity (nothing could be judged);
    else 1 when a finding reaches ``fail_on``, else 0.

    Read from the report's fields, not its properties: the commands and :meth:`Report.summary` bind this
    function when they load, before any plugin, so a plugin that patches ``Report.exit_code`` (or this
    module's name) changes neither the process's exit code nor the one the report states.
    """
    job = report.job
    errors = [*report.errors, *(e for r in report.results for e in r.errors), *(job.errors if job else [])]
    if errors:
        return ExitCode.INCOMPLETE
    findings = [*(f for r in report.results for f in r.findings), *(job.findings if job else [])]
    used_cuda = any(r.info.tables.get(t) for r in report.results for t in CUDA_TABLES)
    if report.results and not used_cuda and not findings:
        return ExitCode.BAD_INPUT  # no trace recorded any CUDA activity: nothing at all could be judged
    if report.fail_on != "never":
        floor = Severity(report.fail_on).rank
        if any(f.severity.rank >= floor for f in findings):
            return ExitCode.FINDINGS
    return ExitCode.OK


#: :func:`exit_code_of` as this module defined it (what :meth:`Report.summary` calls).
_EXIT_CODE = exit_code_of


def tool_info(report: Report) -> dict[str, Any]:
    """The ``tool`` object of the envelope."""
    return {"name": "nsys-rules", "version": __version__, "plugins": report.plugins, "config": report.config}
