"""The engine: select rules, load what they need once, cut windows, run each rule isolated."""

from __future__ import annotations

import dataclasses
import functools
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from nsys_rules.textsafe import unicode_safe
from nsys_rules.model.budget import Budget, step_budget
from nsys_rules.model.commands import debug_build
from nsys_rules.model.steps import StepModel, model_needs, restrict
from nsys_rules.answer import debug_build_error, finalize, part_owners
from nsys_rules.model.replay_timeline import step_timeline
from nsys_rules.model.replay_what_if import step_replay
from nsys_rules.replay_savings import cap_together, in_sequence, shown_rules, with_replayed_savings
from nsys_rules.model.compat import missing_table
from nsys_rules.settings import Settings
from nsys_rules.findings import rank_key
from nsys_rules.containment import routed_stdout
from nsys_rules.isolation import RuleOutcome, run_rule
from nsys_rules.options import effective_options, rule_window_kind, select_rules
from nsys_rules.records import RunError, Skipped, TraceInfo
from nsys_rules.registry import Registry
from nsys_rules.report import Report, TraceResult
from nsys_rules.rule import Rule, RuleContext
from nsys_rules.rule_threads import run_all, thread_count
from nsys_rules.textsafe import clip
from nsys_rules.model.trace import Trace
from nsys_rules.model.windows import (FULL, SteadyOptions, Window, covers_activity, intersect, require_activity,
                                     steady_state_window, user_window)

def describe_trace(trace: Trace) -> TraceInfo:
    """What the trace is (its windows and budget are added once the rules ran)."""
    cap = trace.capture
    return TraceInfo(
        path=trace.label, nsys_version=trace.export_info.nsys_version,
        export_schema_version=trace.export_info.schema_version,
        # A version of None means "unknown": exports before nsys 2022.1 carry no metadata; this says what the shapes suggest.
        nsys_version_inferred=trace.export_info.inferred,
        gpus=[dataclasses.asdict(g) for g in sorted(trace.gpus.values(), key=lambda g: g.id)],
        capture={"graph_trace_mode": cap.graph_trace_mode, "traced": list(cap.traced),
                 "command": clip(cap.command_line) or None},
        tables={name: trace.row_count(name) for name in trace.tables_present})


def analyze_trace(trace: Trace, rules: list[type[Rule]], settings: Settings,
                  progress: Callable[[str], None] | None = None) -> TraceResult:
    """Run ``rules`` on one open trace; every rule isolated (job rules run later, over all ranks)."""
    result = TraceResult(describe_trace(trace))
    rules = [r for r in rules if r.scope == "trace"]
    needs: dict[str, list[str]] = {}
    runnable: list[tuple[type[Rule], Any]] = []
    for rule in rules:
        options = effective_options(rule, settings)
        missing = [t for t in rule.requires if not trace.has(t)]
        if missing:
            from nsys_rules.loaders.tables import TABLES

            spec = TABLES[missing[0]]
            unusable = any(s in getattr(trace.export, "table_names", ()) for s in spec.sources)  # lacks columns
            # Absent tables: compat.missing_table tells "not traced" from "none happened" from "GPU activity lost".
            reason, fix = (f"the trace's {spec.sources[0]} table lacks required columns (see damage)",
                           spec.capture_hint) if unusable else missing_table(trace, missing[0])
            result.skipped.append(Skipped(rule.name, trace.label, reason, fix))
            continue
        runnable.append((rule, options))
        for table, cols in rule.needs().items():
            if trace.has(table):
                needs.setdefault(table, []).extend(c for c in cols if c not in needs.get(table, []))
    from nsys_rules.model.selfcheck import check_needs

    for table, cols in [*model_needs(trace).items(), *check_needs(trace).items()]:  # read for every run: the step
        needs.setdefault(table, []).extend(c for c in cols if c not in needs.get(table, []))  # model, budget, checks
    windows = TraceWindows(trace, settings)
    if trace.meter is not None:  # given when the trace was opened (open_trace), from settings.max_memory
        trace.meter.plan(trace.export, needs)  # exit 3 before a read that cannot fit
    trace.preload(needs)
    steady = windows.get("steady")
    model = windows.model()
    steps = model if model is not None and model.count else None
    budget = step_budget(trace, steps) if steps is not None else None
    if budget is not None and steps is not None and settings.gpu_metrics:
        from nsys_rules.model.gpu_metrics import with_gpu_metrics

        budget = with_gpu_metrics(trace, steps, budget)  # unchanged without GPU metrics in the trace
    # Isolated and time-limited (nsys_rules.isolation): a failing, hanging or lying rule is an error entry.
    # On many cores the rules run side by side (nsys_rules.rule_threads); the outcomes keep their order.
    finished: list[tuple[type[Rule], RuleOutcome]] = []

    def run_one(item: tuple[type[Rule], Any]) -> RuleOutcome:
        outcome = run_rule(item[0], functools.partial(_context, trace, item[0], item[1], windows, steps, budget),
                           trace.label, settings.rule_timeout, settings.max_findings)
        finished.append((item[0], outcome))
        return outcome

    _LIVE.partial = functools.partial(_partial_result, result, finished, settings)
    try:
        with routed_stdout():  # rule code prints to stderr: stdout is the report's
            outcomes = run_all(runnable, run_one, thread_count(len(runnable), settings.max_memory is not None),
                               started=(lambda item: progress(item[0].name)) if progress else None,
                               shareable=lambda item: item[0].__module__.startswith("nsys_rules."))
    finally:
        _LIVE.partial = None
    for (rule, _), outcome in zip(runnable, outcomes, strict=True):
        _add_outcome(result, rule, outcome, settings)
    validity = _judge_validity(trace, steady, result, rules)  # findings on lost records abstain before ranking
    judged = steady.duration_ns(_capture_span(trace)) if budget is None else 0
    replayed = step_replay(trace, steps, budget)
    result.findings = in_sequence(with_replayed_savings(result.findings, replayed), replayed)
    result.findings = finalize(result.findings, budget, steady.bounds, settings.noise_floor_pct, judged,
                               frozenset(settings.severity), frozenset(r.name for r in rules if r.needs_release_build))
    result.findings = cap_together(result.findings, replayed)
    debug = debug_build_error(result.findings)
    if debug is not None:  # every format says so beside the trace, before any number
        evidence = debug_build(trace)
        result.info.debug_build = (evidence.reason if evidence is not None else debug.title)
    if settings.profile:
        _add_profile(trace, result, windows)
        if result.profile is not None and budget is not None and budget.metrics is not None and budget.metrics.measured:
            result.profile["gpu_metrics"] = budget.metrics.strip()  # the HTML's per-step strip
        if result.profile is not None and budget is not None and replayed is not None:  # the HTML's step timeline
            owned = {part: str(o["rule"]) for part, o in part_owners(result.findings, budget).items() if o.get("rule")}
            result.profile["replay_timeline"] = step_timeline(replayed, owned, shown_rules(result.findings))
    result.info.window = windows.describe()
    result.info.budget = None
    if budget is not None:  # which finding owns each idle part of the step, or why none does
        result.info.budget = budget.to_json()
        if replayed is not None:  # the median step replayed, and with every shown finding's fix (issue 36)
            result.info.budget["replay"] = replayed.to_json(shown_rules(result.findings))
            if settings.what_if:
                result.info.budget["replay"]["what_if"] = replayed.what_if(settings.what_if)
        owners = part_owners(result.findings, budget)
        for part in result.info.budget["parts"]:
            if part["name"] in owners:
                part["owner"] = owners[part["name"]]
    if budget is None:
        result.info.budget_reason = (model.reason if model is not None and model.reason else
                                     "the steady steps ran no GPU work")
    result.info.damage = list(dict.fromkeys(trace.damage))
    result.info.validity = validity.to_json() if validity is not None else None
    return result


def _judge_validity(trace: Trace, steady: Window, result: TraceResult, rules: list[type[Rule]]) -> Any:
    """The trace's validity verdict (nsys_rules.model.validity), applied to the rules' findings; None when the
    check itself failed (an error entry, the findings untouched)."""
    from nsys_rules.model.validity import apply, judge

    try:
        validity = judge(trace, steady)
    except Exception as exc:  # noqa: BLE001 - a failed check must not hide the findings
        result.errors.append(RunError(f"{type(exc).__name__}: {exc}", rule="validity", trace=trace.label,
                                      traceback="".join(traceback.format_exception(exc))[-4000:]))
        return None
    by_nvtx = steady.model is not None and steady.model.source == "nvtx"  # steps cut by NVTX ranges
    tables = {r.name: frozenset((*r.requires, *r.optional, *(("nvtx",) if by_nvtx and r.window == "steady" else ())))
              for r in rules}
    result.findings = apply(result.findings, validity, tables, frozenset(r.name for r in rules if r.window == "full"))
    return validity


def _add_outcome(result: TraceResult, rule: type[Rule], outcome: RuleOutcome, settings: Settings) -> None:
    override = settings.severity.get(rule.name)
    result.findings.extend(dataclasses.replace(f, severity=override) if override else f for f in outcome.findings)
    result.skipped.extend([outcome.skipped] if outcome.skipped else [])
    result.errors.extend(outcome.errors)
    result.capped.extend([outcome.capped] if outcome.capped else [])


@dataclass
class _Live:
    """What the run knows while rules run, for the deadline's report (:func:`report_so_far`)."""

    report: Report | None = None
    #: Traces finished outside ``report.results`` (several traces in turn: their results join it at the end).
    done: list[TraceResult] = dataclasses.field(default_factory=list)
    partial: Callable[[RunError], TraceResult] | None = None


_LIVE = _Live()


def trace_done(result: TraceResult) -> None:
    """Note a finished trace's result for :func:`report_so_far` (a run over several traces, one after another)."""
    _LIVE.done.append(result)


def _partial_result(result: TraceResult, finished: list[tuple[type[Rule], RuleOutcome]], settings: Settings,
                    error: RunError) -> TraceResult:
    """The trace's result from the rules that finished, plus ``error`` (the rule that would not stop)."""
    info = dataclasses.replace(result.info, budget=None, budget_reason="the run was ended before the budget was "
                               "attached (a rule did not stop)")
    partial = TraceResult(info, skipped=list(result.skipped))
    for rule, outcome in list(finished):
        _add_outcome(partial, rule, outcome, settings)
    partial.errors.append(error)
    return partial


def report_so_far(error: RunError) -> Report:
    """The report of what this run knows now, with ``error``: the traces done, the one in progress with the rules
    that finished on it. Called by the deadline's watchdog thread while a rule will not stop."""
    live = _LIVE.report
    report = (dataclasses.replace(live, results=[*live.results, *_LIVE.done], errors=list(live.errors))
              if live is not None else Report(rules=[], plugins=[], fail_on="error"))
    partial = _LIVE.partial
    if partial is not None:
        report.results.append(partial(error))
    else:
        report.errors.append(error)
    return report


def _capture_span(trace: Trace) -> tuple[int, int]:
    """First and last instant of the trace's GPU work (0, 0 without any)."""
    from nsys_rules.model.activity import gpu_ops

    ops = gpu_ops(trace)
    return (int(ops.start.min()), int(ops.end.max())) if len(ops) else (0, 0)


def _context(trace: Trace, rule: type[Rule], options: Any, windows: "TraceWindows", steps: StepModel | None,
             budget: Budget | None) -> RuleContext:
    """What ``rule.check`` gets (built inside the rule's boundary: a window that cannot be cut is a skip)."""
    return RuleContext(trace, rule(), options, windows.get(rule_window_kind(rule, options)), steps, budget)


def _add_profile(trace: Trace, result: TraceResult, windows: "TraceWindows") -> None:
    """Attach the steady-state profile (only markdown/HTML ask for it: it reads every GPU row)."""
    from nsys_rules.model.overview import build_profile

    # A plugin's kernel name may hold lone surrogates, which no trace name does (Arrow refuses them): escaped.
    flagged = [unicode_safe(f.location.kernel) for f in sorted(result.findings, key=rank_key) if f.location.kernel]
    try:
        result.profile = build_profile(trace, windows.get("steady"), flagged)
    except Exception as exc:  # noqa: BLE001 - a failed profile must not hide the findings
        result.errors.append(RunError(f"{type(exc).__name__}: {exc}", rule="profile", trace=trace.label,
                                      traceback="".join(traceback.format_exception(exc))[-4000:]))


class TraceWindows:
    """The windows of one trace (``steady``, ``full``, or the user's ``filter``), computed once each and shared by
    the rules; :meth:`get` returns the one a rule judges."""

    def __init__(self, trace: Trace, settings: Settings) -> None:
        self.trace = trace
        self.settings = settings
        self._cache: dict[str, Window] = {}

    def get(self, kind: str) -> Window:
        """The window of ``kind`` (``steady`` or ``full``), cut by --filter-time/--filter-nvtx when given.

        One window per run: with a filter, the full-capture rules judge the user's window and the steady
        rules the steady steps inside it (their counts and the budget's split come from the same steps).
        A filter that holds all of the trace's activity cuts nothing: the report is the one without it.
        Where no steady step lies inside the filter, the steady rules judge the user's window as it is.
        """
        if kind not in self._cache:
            self._cache[kind] = self._compute(kind)
        return self._cache[kind]

    def _compute(self, kind: str) -> Window:
        steady = steady_state_window(self.trace, SteadyOptions(tuple(self.settings.steady_ranges)))
        user = self._user()
        if kind == "filter":
            assert user is not None
            return user
        if user is None or covers_activity(self.trace, user):
            return FULL if kind == "full" else steady
        model = steady.model
        if model is None or not model.count:
            return dataclasses.replace(user, kind="filter", model=model)
        keep = user.mask(model.host[:, 0])
        sub = restrict(model, keep)
        if kind == "full" or not sub.count:
            return dataclasses.replace(user, steps=tuple(map(tuple, sub.host.tolist())),
                                       step_name=model.name if sub.count else None, kind="filter", model=sub)
        cut = intersect(Window(((int(sub.host[0, 0]), int(sub.host[-1, 1])),), ""), user)
        return Window(cut.intervals, f"{steady.name}, {sub.count} inside {user.source}",
                      tuple(map(tuple, sub.host.tolist())), model.name, kind="filter", model=sub, cut=user.bounds)

    def _user(self) -> Window | None:
        """The user's window (checked to hold some activity), None without filters."""
        if not (self.settings.filter_time or self.settings.filter_nvtx):
            return None
        if "filter" not in self._cache:
            window = user_window(self.trace, self.settings.filter_time, self.settings.filter_nvtx)
            assert window is not None
            require_activity(self.trace, window, " and ".join(
                f"--filter-{kind} {spec}" for kind, spec in (("time", self.settings.filter_time),
                                                             ("nvtx", self.settings.filter_nvtx)) if spec))
            self._cache["filter"] = window
        return self._cache["filter"]

    def model(self) -> StepModel | None:
        """The step model of the steady window, cut to the user's filter when one is given."""
        return self.get("steady").model

    def describe(self) -> dict[str, Any]:
        """The ``window`` object of the trace's JSON entry: each window computed so far."""
        return {kind: w.to_json() for kind, w in self._cache.items()}




def run_check(paths: list[Path], registry: Registry, settings: Settings, open_trace: Callable[[Path], Trace],
              progress: Callable[[str], None] | None = None) -> Report:
    """Analyze ``paths`` one after the other and collect a :class:`Report`."""
    rules = select_rules(registry, settings)
    report = Report(rules=[{"name": r.name, "plugin": registry.rule_plugin.get(r.name, ""),
                            "severity": r.default_severity.value,
                            "options": dataclasses.asdict(effective_options(r, settings))} for r in rules],
                    plugins=registry.plugins, fail_on=settings.fail_on, errors=list(registry.errors), registry=registry,
                    config=settings.source)
    _LIVE.report = report
    _LIVE.done = []
    from nsys_rules.job_run import Collected, collect, judge_job

    ranks = Collected()
    for path in paths:
        trace = open_trace(path)
        try:
            report.results.append(analyze_trace(trace, rules, settings, progress))
            ranks.extend(collect(trace, rules, settings, several=len(paths) > 1))
        finally:
            trace.close()
    report.job, why = judge_job(ranks, rules, settings)
    report.job_note = why if len(paths) > 1 else None  # one trace that is no job is the usual case: nothing to say
    return report
