"""Running the job rules: collect each trace's ranks where it is open, then judge them together.

:func:`collect` runs beside the per-trace rules (in the same worker process or Dask task, on
the trace already loaded); :func:`run_job` runs once in the parent over the small
:class:`~nsys_rules.model.job.extract.RankData` of every rank, builds the :class:`~nsys_rules.model.job.model.Job`
and runs each selected job rule isolated, like the engine runs trace rules.
"""

from __future__ import annotations

import dataclasses
import functools
import traceback
import warnings
from dataclasses import dataclass, field
from typing import Any, Iterable, TypeGuard

import numpy as np

from nsys_rules.errors import InputError, UsageError
from nsys_rules.findings import Finding
from nsys_rules.options import effective_options
from nsys_rules.records import Capped, RunError, Skipped
from nsys_rules.containment import routed_stdout
from nsys_rules.isolation import run_rule
from nsys_rules.model.trace import Trace
from nsys_rules.model.job.extract import RankData, collect_ranks
from nsys_rules.model.job.model import Job, build_job
from nsys_rules.job_rule import JobContext, JobRule
from nsys_rules.rule import Rule


def job_rules(rules: Iterable[type[Rule]]) -> list[type[JobRule]]:
    """The job rules among ``rules`` (those of scope ``job``)."""
    return [r for r in rules if _is_job_rule(r)]


def _is_job_rule(rule: type[Rule]) -> TypeGuard[type[JobRule]]:
    """A rule of scope ``job``: its ``check`` takes a :class:`JobContext`, as :class:`JobRule`'s does."""
    return getattr(rule, "scope", "trace") == "job"


@dataclass
class Collected:
    """What the traces of one run contributed: their ranks, and any error met reading them."""

    ranks: list[RankData] = field(default_factory=list)
    errors: list[RunError] = field(default_factory=list)

    def extend(self, other: "Collected") -> None:
        """Add another trace's contribution (in input order: it numbers the traces)."""
        base = 1 + max((r.trace_index for r in self.ranks), default=-1)
        for rank in other.ranks:
            rank.trace_index += base
        self.ranks.extend(other.ranks)
        self.errors.extend(other.errors)


def collect(trace: Trace, rules: Iterable[type[Rule]], settings: Any, several: bool) -> Collected:
    """The ranks of one open trace, when any job rule is selected (else nothing is read)."""
    if not job_rules(rules):
        return Collected()
    try:
        window = None
        if settings.filter_time or settings.filter_nvtx:
            from nsys_rules.model.windows import user_window

            window = user_window(trace, settings.filter_time, settings.filter_nvtx)
        from nsys_rules.model.steps import SteadyOptions
        from nsys_rules.model.windows import steady_state_window

        # One step model per report: the job's steps are the trace's own, where it has them.
        model = steady_state_window(trace, SteadyOptions(tuple(settings.steady_ranges))).model
        ranks = collect_ranks(trace, several, window, steps=model)
    except (UsageError, InputError):
        raise
    except Exception as exc:  # noqa: BLE001 - the job analysis failing must not hide the trace's findings
        return Collected(errors=[_error("job", exc, trace.label)])
    distinct: dict[str, int] = {}
    for rank in ranks:
        rank.trace_index = distinct.setdefault(rank.trace, len(distinct))
    return Collected(ranks)


@dataclass
class JobOutcome:
    """What the job rules produced, and the ``job`` section of the JSON envelope."""

    info: dict[str, Any]
    findings: list[Finding] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    errors: list[RunError] = field(default_factory=list)
    #: Job rules whose findings were cut at ``--max-findings``.
    capped: list[Capped] = field(default_factory=list)


def run_job(collected: Collected, rules: Iterable[type[Rule]], settings: Any) -> JobOutcome | None:
    """Build the job from every rank and run the selected job rules (see :func:`judge_job`); None: no job."""
    return judge_job(collected, rules, settings)[0]


def judge_job(collected: Collected, rules: Iterable[type[Rule]], settings: Any) -> tuple[JobOutcome | None, str]:
    """The job's outcome, or None and why the traces were not judged as one job (``check -v`` says it)."""
    with warnings.catch_warnings():
        # The job's arrays hold NaN wherever a rank lacks a collective or a step, by design:
        # numpy's "mean of empty slice" warnings about them are noise on the user's terminal.
        warnings.simplefilter("ignore", RuntimeWarning)
        outcome = _run_job(collected, rules, settings)
    return (None, outcome) if isinstance(outcome, str) else (outcome, "")


def _run_job(collected: Collected, rules: Iterable[type[Rule]], settings: Any) -> JobOutcome | str:
    """Build the job from every rank and run the selected job rules; when there is no job, why.

    Traces without communication kernels on any rank are no job (one-GPU inference traces, or
    several runs compared side by side): nothing is reported. One rank with communication is a
    job seen from one side: exposed communication can still be judged, the cross-rank rules are
    skipped with the reason.
    """
    selected = job_rules(rules)
    if not selected:
        return "no job rule is selected (--select/--ignore), so the traces were judged one by one"
    ranks = collected.ranks
    if collected.errors and not ranks:
        return JobOutcome({"ranks": []}, errors=list(collected.errors))
    if not ranks:
        return "no trace holds GPU kernels (or a second GPU, process or trace to pair with), so there are no ranks"
    if len(ranks) == 1 and ranks[0].instances == 0:
        return f"one rank ({_named([ranks[0]])}) and no communication kernels: a single-GPU run, not a job"
    try:
        job = build_job(ranks)
    except (UsageError, InputError):
        raise
    except Exception as exc:  # noqa: BLE001 - one bad job model is an error entry, exit 4, not a crash
        return JobOutcome({"ranks": []}, errors=[*collected.errors, _error("job", exc, ranks[0].trace)])
    # Ranks that each ran collectives but never the same one (two jobs' ranks in one folder) make no job either.
    shared = bool(((job.rows.index >= 0).sum(axis=1) >= 2).any()) if job.rows.count else False
    if (job.rows.count == 0 or (len(job.ranks) > 1 and not shared)) and not collected.errors:
        return _no_collectives(ranks, job)
    outcome = JobOutcome(describe_job(job), errors=list(collected.errors))
    # Isolated as trace rules are (nsys_rules.isolation): time limit, contained output, findings cap.
    with routed_stdout():
        for rule in selected:
            done = run_rule(rule, functools.partial(JobContext, job, rule(), effective_options(rule, settings)), "job",
                            settings.rule_timeout, settings.max_findings)
            override = settings.severity.get(rule.name)
            outcome.findings.extend(dataclasses.replace(f, severity=override) if override else f for f in done.findings)
            outcome.skipped.extend([done.skipped] if done.skipped else [])
            outcome.errors.extend(done.errors)
            outcome.capped.extend([done.capped] if done.capped else [])
    return outcome


def _named(ranks: list[RankData]) -> str:
    """The ranks' traces, by file name, a few of them; with the rank a file name carries."""
    names = []
    for r in ranks[:4]:
        label = r.trace.replace("\\", "/").rsplit("/", 1)[-1]
        names.append(f"{label} (rank {r.hint.rank} by its {r.hint.source})" if r.hint.rank is not None else label)
    more = f" and {len(ranks) - 4} more" if len(ranks) > 4 else ""
    return ", ".join(names) + more


def _no_collectives(ranks: list[RankData], job: Job) -> str:
    """Why ranks that were collected make no job: no communication at all, or none that meets across ranks."""
    talking = sum(1 for d in job.data if d.instances)
    if not talking:
        return (f"none of the {len(ranks)} ranks ({_named(ranks)}) ran communication kernels (NCCL, RCCL, NVSHMEM, "
                "... by name, nor kernels that behave as collectives across ranks): they are separate runs, each "
                "judged on its own, not the ranks of one job")
    return (f"{talking} of the {len(ranks)} ranks ({_named(ranks)}) ran communication kernels, but no collective "
            "matched across ranks (different programs, or captures of different times): no job to judge")


def _error(rule: str, exc: BaseException, trace: str) -> RunError:
    return RunError(f"{type(exc).__name__}: {exc}", rule=rule, trace=trace,
                    traceback="".join(traceback.format_exception(exc))[-4000:])


def describe_job(job: Job) -> dict[str, Any]:
    """The ``job`` object of the JSON envelope: ranks, clock alignment, communication, steps."""
    clock = job.clock
    ranks = []
    for r, info in enumerate(job.ranks):
        entry: dict[str, Any] = {"rank": info.rank, "trace": info.trace, "rank_source": info.source,
                                 "clock_offset_ns": int(clock.offset[r]), "clock_correction_ns": int(clock.correction[r]),
                                 "communication_instances": int(job.data[r].instances)}
        if info.pid is not None:
            entry["pid"] = info.pid
        if info.device is not None:
            entry["device"] = info.device
        if np.isfinite(clock.residual_ns[r]):
            entry["residual_skew_ns"] = int(round(float(clock.residual_ns[r])))
        ranks.append(entry)
    kernels: dict[str, int] = {}
    for d in job.data:
        for code in d.code:
            kernels[d.names[code]] = kernels.get(d.names[code], 0) + 1
    family_of = {d.names[i]: d.families[i] for d in job.data for i in range(len(d.names))}
    return {
        "ranks": ranks,
        "clock": {"source": clock.source, "residual_skew_ns": int(round(clock.residual_skew_ns)),
                  "max_correction_ns": int(np.abs(clock.correction).max(initial=0)), "notes": list(job.notes)},
        "communication": {
            "collectives": job.rows.count, "collectives_all_ranks_meet": int(job.coherent.sum()),
            "kernels": [{"name": name, "family": family_of.get(name, ""), "instances": count}
                        for name, count in sorted(kernels.items(), key=lambda kv: (-kv[1], kv[0]))]},
        "steps": {"count": job.steps.count, "source": job.steps.source},
    }


