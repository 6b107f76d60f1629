"""Whether a trace can be trusted, before its findings are: the validity verdict and what it does to findings.

:func:`judge` puts nsys's own diagnostics (:mod:`.diagnostics`) beside the trace's checks of itself
(:mod:`.selfcheck`) and gives ``traces[].validity`` of the JSON: ``trusted`` (nothing touches what
the rules read), ``caveats`` (some numbers may be off, each reason names which) or
``untrustworthy`` (records the rules rest on were lost). :func:`apply` then looks at each finding:
one that rests on a table an untrustworthy reason touches abstains (it leaves the findings and is
listed under ``validity.abstained``), and so does an idle-time finding on a GPU whose records were
lost (a gap where records are missing is no idle time); one that rests on a caveat stays, listed
under ``validity.doubtful`` with the reason: its confidence is lower.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Protocol, TypeVar

from nsys_rules.analysis.names import PROFILER_START_APIS, in_set
from nsys_rules.loaders.diagnostics import read_diagnostics
from nsys_rules.model.diagnostics import LEVELS, Reason, explain
from nsys_rules.model.selfcheck import self_checks
from nsys_rules.model.trace import Trace
from nsys_rules.model.windows import Window

class FindingLike(Protocol):
    """What :func:`apply` reads of a finding (``nsys_rules.findings.Finding``; the model floor does not import it)."""

    @property
    def rule(self) -> str: ...

    @property
    def title(self) -> str: ...

    @property
    def location(self) -> Any: ...

    @property
    def fingerprint(self) -> str: ...


F = TypeVar("F", bound=FindingLike)

#: Verdicts, best first.
VERDICTS = ("trusted", "caveats", "untrustworthy")
#: Rules whose findings measure GPU idle time: records lost on a GPU make its gaps no idle time.
IDLE_RULES = frozenset({"gpu-idle-gaps", "gpu-low-utilization", "input-prep", "launch-bound"})
#: Reasons that say GPU records were lost.
LOST_RECORDS = frozenset({"launches-without-gpu", "graph-replays-partial", "cuda-events-lost"})


@dataclass
class Validity:
    """The verdict on one trace: ``reasons`` (caveats and worse), ``notes`` (nothing this tool reads is
    touched), each check's measured size (``checks``), and the findings it changed."""

    verdict: str
    reasons: list[Reason]
    notes: list[Reason]
    checks: dict[str, dict[str, Any]]
    abstained: list[dict[str, Any]] = field(default_factory=list)
    doubtful: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """``traces[].validity``."""
        return {"verdict": self.verdict, "reasons": [r.to_json() for r in self.reasons],
                "notes": [r.to_json() for r in self.notes], "checks": self.checks,
                "abstained": self.abstained, "doubtful": self.doubtful}


def judge(trace: Trace, steady: Window) -> Validity:
    """The trace's validity: nsys's diagnostics explained and the trace checked against itself."""
    has_cuda = any(trace.row_count(t) for t in ("kernels", "memcpy", "memset", "graph_trace", "api"))
    has_nvtx = trace.row_count("nvtx") > 0
    from_nsys = explain(read_diagnostics(trace.export), has_cuda, has_nvtx, _profiler_range(trace))
    found, checks = self_checks(trace, steady)
    everything = sorted(from_nsys + found, key=lambda r: (-LEVELS.index(r.level), r.source != "check", r.code))
    reasons = [r for r in everything if r.level != "note"]
    worst = max((LEVELS.index(r.level) for r in reasons), default=0)
    return Validity(VERDICTS[worst], reasons, [r for r in everything if r.level == "note"], checks)


def _profiler_range(trace: Trace) -> bool:
    """Whether the program called cudaProfilerStart (a ``-c cudaProfilerApi`` capture keeps only its range)."""
    return trace.has("api") and bool(in_set(trace.api_names(), PROFILER_START_APIS).any())


def apply(findings: Iterable[F], validity: Validity, tables: Mapping[str, frozenset[str]],
          full_window: frozenset[str] = frozenset()) -> list[F]:
    """The findings that stand: those resting on untrustworthy data abstain (listed in ``validity.abstained``);
    those resting on a caveat stay and are listed in ``validity.doubtful``. ``tables``: each rule's tables;
    ``full_window``: the rules that judge the whole capture (a check that found nothing inside the steady state,
    a cut end, touches only them)."""
    kept: list[F] = []
    for finding in findings:
        steady_only = finding.rule not in full_window
        touching = [r for r in validity.reasons if _touches(r, finding, tables.get(finding.rule, frozenset()))
                    and not (steady_only and r.size.get("steady_pct", 1) == 0)]
        worst = next((r for r in touching if r.level == "untrustworthy"), None)
        if worst is None and finding.rule in IDLE_RULES:
            worst = next((r for r in touching if r.code in LOST_RECORDS), None)
        entry = {"rule": finding.rule, "fingerprint": finding.fingerprint, "title": finding.title}
        if worst is not None:
            validity.abstained.append({**entry, "because": worst.code})
            continue
        if touching:
            validity.doubtful.append({**entry, "because": sorted({r.code for r in touching})})
        kept.append(finding)
    return kept


def _touches(reason: Reason, finding: FindingLike, tables: frozenset[str]) -> bool:
    if not set(reason.tables) & tables:
        return False
    device = finding.location.device
    return not reason.devices or device is None or device in reason.devices
