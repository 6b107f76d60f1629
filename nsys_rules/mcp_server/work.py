"""The tools' work, done in the worker process (:mod:`.worker`): check, finding, explain, stats, rule pages.

Each tool goes through the code the CLI runs: ``check`` is :func:`nsys_rules.engine.run_check`
with the settings ``check`` builds and the registered ``json`` format (so its report is the one
``check --format json`` prints), ``stats`` the report modules of ``nsys-rules stats``, ``explain``
the rule pages of ``nsys-rules explain``. A check's report is kept for the next calls on the same
unchanged file (a page, a finding, a verify), so paging through findings runs the rules once.
"""

from __future__ import annotations

import argparse
import json
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nsys_rules.errors import ExitCode, InputError, UsageError
from nsys_rules.mcp_server.paths import PathPolicy
from nsys_rules.mcp_server.schemas import DEFAULT_PAGE
from nsys_rules.textsafe import clip_value
from nsys_rules.units import human_ns

if TYPE_CHECKING:
    from nsys_rules.diff import Run
    from nsys_rules.registry import Registry

#: Reports and measured runs kept per worker (each a few hundred kB; a Run holds per-step series).
KEPT_REPORTS = 8
KEPT_RUNS = 16


@dataclass(frozen=True)
class ServerConfig:
    """How the server was started (``nsys-rules mcp`` flags): the same for every tool call."""

    root: str | None = None
    allow_profile: bool = False
    config: str | None = None
    max_memory: str | None = None
    rule_timeout: str | None = None
    call_timeout: float = 300.0
    no_plugins: bool = False


@dataclass
class Work:
    """The worker's state: the configuration, the registry (plugins loaded once), kept reports and runs."""

    config: ServerConfig
    policy: PathPolicy = field(init=False)
    _registry: Registry | None = None
    reports: OrderedDict[tuple[Any, ...], dict[str, Any]] = field(default_factory=OrderedDict)
    runs: OrderedDict[tuple[Any, ...], Run] = field(default_factory=OrderedDict)

    def __post_init__(self) -> None:
        self.policy = PathPolicy.confined_to(self.config.root)

    @property
    def registry(self) -> Registry:
        """The plugin registry, built on first use (the rule pack and entry-point plugins)."""
        if self._registry is None:
            from nsys_rules.plugin_manager import build_registry

            self._registry = build_registry(autoload=not self.config.no_plugins)
        return self._registry

    def args(self, **flags: Any) -> argparse.Namespace:
        """The ``check`` flags this server applies to every call, plus ``flags`` (the call's own)."""
        base: dict[str, Any] = {"config": self.config.config, "select": None, "ignore": None, "fail_on": None,
                                "set": None, "noise_floor": None, "max_memory": self.config.max_memory,
                                "rule_timeout": self.config.rule_timeout, "max_findings": None, "filter_time": None,
                                "filter_nvtx": None, "export_format": "sqlite", "no_gpu_metrics": False,
                                "no_plugins": self.config.no_plugins, "format": "json", "verbose": False}
        base.update(flags)
        return argparse.Namespace(**base)

    def trace(self, value: object, what: str = "trace") -> Path:
        """One trace argument: the path policy's checks, then one export (a file or an export folder)."""
        from nsys_rules.loaders.arrowdir import folder_kind

        path = self.policy.trace(value, what)
        if path.is_dir() and folder_kind(path) is None:
            raise UsageError(f"{what}: {clip_value(str(value), 200)} is a folder but no parquetdir/arrowdir export; "
                             "name one trace")
        return path

    def report(self, value: object, rules: list[str] | None = None, filter_time: str | None = None,
               what: str = "trace") -> dict[str, Any]:
        """``check --format json`` of one trace as a dict (kept for later calls on the unchanged file)."""
        path = self.trace(value, what)
        key = (_file_key(path), tuple(rules or ()), filter_time)
        if key in self.reports:
            self.reports.move_to_end(key)
            return self.reports[key]
        envelope = self._check(path, rules, filter_time)
        self.reports[key] = envelope
        while len(self.reports) > KEPT_REPORTS:
            self.reports.popitem(last=False)
        return envelope

    def _check(self, path: Path, rules: list[str] | None, filter_time: str | None) -> dict[str, Any]:
        from nsys_rules.commands.common import settings_for
        from nsys_rules.engine import run_check
        from nsys_rules.inputs import open_trace
        from nsys_rules.isolation import call_plugin

        args = self.args(select=[",".join(rules)] if rules else None, filter_time=filter_time)
        registry = self.registry  # loaded once per worker, not per call as a CLI run loads it
        settings = settings_for(args, registry)
        report = run_check([path], registry, settings,
                           lambda p: open_trace(p, registry.loaders, settings.export_format, settings.max_memory))
        if report.exit_code == ExitCode.BAD_INPUT:
            raise InputError(f"{clip_value(path.name, 120)}: no CUDA activity (no CUDA API call, kernel, copy or "
                             "memset was recorded), so there is nothing to judge; capture with `nsys profile "
                             "--trace=cuda`")
        text = call_plugin(registry.formatters["json"], "the 'json' format", report)
        return dict(json.loads(str(text)))

    def run_of(self, value: object, what: str) -> Run:
        """The per-step measurement ``diff`` compares, of one trace (kept for later calls)."""
        from nsys_rules.commands.common import settings_for
        from nsys_rules.diff import run_of
        from nsys_rules.inputs import open_trace
        from nsys_rules.model.windows import SteadyOptions

        path = self.trace(value, what)
        key = _file_key(path)
        if key in self.runs:
            self.runs.move_to_end(key)
            return self.runs[key]
        settings = settings_for(self.args(), self.registry)
        trace = open_trace(path, self.registry.loaders, max_memory=settings.max_memory)
        try:
            run = run_of(trace, SteadyOptions(tuple(settings.steady_ranges)))
        finally:
            trace.close()
        self.runs[key] = run
        while len(self.runs) > KEPT_RUNS:
            self.runs.popitem(last=False)
        return run


def _file_key(path: Path) -> tuple[str, int, int]:
    st = path.stat()
    return str(path), st.st_size, st.st_mtime_ns


def page_of(items: list[Any], offset: int, limit: int) -> tuple[list[Any], dict[str, Any]]:
    """``items[offset:offset+limit]`` and the page's description."""
    chunk = items[offset: offset + limit]
    after = offset + len(chunk)
    return chunk, {"offset": offset, "limit": limit, "returned": len(chunk), "total": len(items),
                   "next_offset": after if after < len(items) else None}


def check_tool(work: Work, a: dict[str, Any]) -> dict[str, Any]:
    """``check``: the report with one page of its findings, and the summary before it."""
    envelope = work.report(a["trace"], a.get("rules"), a.get("filter_time"))
    findings, page = page_of(envelope["findings"], int(a.get("offset", 0)), int(a.get("limit", DEFAULT_PAGE)))
    return {"summary": check_summary(envelope, page), "page": page, "report": {**envelope, "findings": findings}}


def _steps(envelope: dict[str, Any]) -> int | None:
    """The steady steps of a one-trace report (the budget's, else the steady window's)."""
    if not envelope["traces"]:
        return None
    trace = envelope["traces"][0]
    steps = (trace.get("budget") or {}).get("steps") or ((trace.get("window") or {}).get("steady") or {}).get("steps")
    return int(steps) if steps else None


def _steady_ns(envelope: dict[str, Any]) -> int | None:
    budget = (envelope["traces"] or [{}])[0].get("budget") or {}
    return int(budget["total_ns"]) if budget.get("total_ns") else None


def savings_words(finding: dict[str, Any], envelope: dict[str, Any]) -> str:
    """``saves ~16.39 ms (18.9 % of the steady state, 341.5 us per step)``, or "" without a figure."""
    saved = finding.get("estimated_savings_ns")
    if not saved:
        return ""
    steady, steps = _steady_ns(envelope), _steps(envelope)
    parts = [f"{100 * saved / steady:.1f} % of the steady state"] if steady else []
    parts += [f"{human_ns(saved / steps)} per step"] if steps else []
    return f"saves ~{human_ns(saved)}" + (f" ({', '.join(parts)})" if parts else "")


def check_summary(envelope: dict[str, Any], page: dict[str, Any]) -> str:
    """A few lines: counts, the step, the first findings to act on, and where this page sits."""
    s = envelope["summary"]
    by = s["by_severity"]
    counts = ", ".join(f"{by[k]} {k}" for k in ("error", "warning", "info") if by.get(k))
    name = Path(envelope["traces"][0]["path"]).name if envelope["traces"] else "trace"
    lines = [f"{name}: {s['findings']} finding(s)" + (f" ({counts})" if counts else "")
             + f", {s['skipped']} rule(s) skipped, {s['errors']} failed; exit code {s['exit_code']}"]
    budget = (envelope["traces"] or [{}])[0].get("budget") or {}
    if budget.get("steps"):
        lines.append(f"steady state: {budget['steps']} steps, median step {human_ns(budget['step_ns']['p50'])}")
    acting = [f for f in envelope["findings"] if not f.get("folded_into") and not f.get("minor")]
    for i, f in enumerate(acting[:3]):
        saved = savings_words(f, envelope)
        lines.append(f"{'fix first' if i == 0 else 'then'}: {f['rule']} ({f['severity']}, {f['fingerprint']})"
                     f"{': ' + saved if saved else ''}: {clip_value(f['title'], 160)}")
    lines.append(f"this page: findings {page['offset'] + 1}-{page['offset'] + page['returned']} of {page['total']}"
                 if page["returned"] else f"this page: none (there are {page['total']})")
    return "\n".join(lines)


def finding_tool(work: Work, a: dict[str, Any]) -> dict[str, Any]:
    """``finding``: one finding by fingerprint, its symptoms, its windows and the re-capture command."""
    envelope = work.report(a["trace"], a.get("rules"), a.get("filter_time"))
    finding = find(envelope, a["fingerprint"], "trace")
    symptoms = [f for f in envelope["findings"] if f.get("folded_into") == finding["fingerprint"]]
    steps = _steps(envelope)
    saved = finding.get("estimated_savings_ns")
    per_step = round(saved / steps, 1) if saved is not None and steps else None
    lines = [f"{finding['rule']} ({finding['severity']}): {finding['title']}", finding["message"]]
    lines += [f"savings: {savings_words(finding, envelope)}"] if saved else []
    lines += [f"{len(symptoms)} symptom(s) folded into it: {', '.join(sorted({f['rule'] for f in symptoms}))}"
              ] if symptoms else []
    lines.append(f"next: {finding['recommendation']}")
    return {"summary": "\n".join(lines), "trace": envelope["traces"][0]["path"], "finding": finding,
            "symptoms": symptoms, "windows": _windows(finding, envelope), "steps": steps,
            "savings_per_step_ns": per_step, "recapture": _recapture(work, a["trace"])}


def find(envelope: dict[str, Any], fingerprint: str, side: str) -> dict[str, Any]:
    """The finding of ``fingerprint`` in a report; a usage error naming the fingerprints there otherwise."""
    for f in envelope["findings"]:
        if f["fingerprint"] == fingerprint:
            return dict(f)
    known = ", ".join(f"{f['rule']} {f['fingerprint']}" for f in envelope["findings"][:12]) or "none"
    raise UsageError(f"no finding {clip_value(str(fingerprint), 40)!r} in the {side}'s report (its findings: {known})")


def _windows(finding: dict[str, Any], envelope: dict[str, Any]) -> list[dict[str, Any]]:
    """The time windows to look at: the finding's own span, then the steady state it was judged on."""
    out = []
    loc = finding.get("location") or {}
    if isinstance(loc.get("start_ns"), int) and isinstance(loc.get("end_ns"), int):
        out.append(_window("the finding", loc["start_ns"], loc["end_ns"]))
    steady = ((envelope["traces"] or [{}])[0].get("window") or {}).get("steady") or {}
    if isinstance(steady.get("start_ns"), int) and isinstance(steady.get("end_ns"), int):
        out.append(_window(f"the steady state ({steady.get('source') or 'as judged'})", steady["start_ns"],
                           steady["end_ns"]))
    return out


def _window(what: str, start: int, end: int) -> dict[str, Any]:
    return {"what": what, "start_ns": start, "end_ns": end, "filter_time": f"{start}ns/{end}ns"}


def _recapture(work: Work, value: object) -> str:
    """The standard nsys capture of the trace's program, as the rules' recommendations write it."""
    from nsys_rules.inputs import open_trace
    from nsys_rules.model.commands import recapture_command

    trace = open_trace(work.trace(value), work.registry.loaders)
    try:
        return recapture_command(trace)
    finally:
        trace.close()


def explain_tool(work: Work, a: dict[str, Any]) -> dict[str, Any]:
    """``explain``: a rule's page, as ``nsys-rules explain RULE`` prints it."""
    from nsys_rules.docs import rule_markdown
    from nsys_rules.settings import resolve_rule_name

    registry = work.registry
    name = resolve_rule_name(str(a["rule"]), registry.rules, registry.aliases(), "explain")
    rule = registry.rules[name]
    plugin = registry.rule_plugin.get(name, "")
    return {"rule": name, "title": str(rule.title), "plugin": plugin, "markdown": rule_markdown(rule, plugin)}


def rule_pages(work: Work, a: dict[str, Any]) -> dict[str, Any]:
    """The rule pages as resources: every rule's name and title, or one page (``a['rule']``)."""
    if a.get("rule"):
        return explain_tool(work, a)
    return {"rules": [{"rule": n, "title": str(r.title)} for n, r in sorted(work.registry.rules.items())]}


def stats_tool(work: Work, a: dict[str, Any]) -> dict[str, Any]:
    """``stats``: one nsys stats report, its rows paged (the array ``stats --format json`` prints)."""
    from nsys_rules.inputs import open_trace
    from nsys_rules.loaders.memory_limit import STATS_BYTES_PER_NAME
    from nsys_rules.stats import parse_report
    from nsys_rules.stats.filters import stats_window
    from nsys_rules.stats.output import render
    from nsys_rules.units import parse_size

    spec = str(a["report"]).strip()
    module, variant = parse_report(spec)
    path = work.trace(a["trace"])
    limit = parse_size(work.config.max_memory) if work.config.max_memory else None
    trace = open_trace(path, max_memory=limit, per_text_value=STATS_BYTES_PER_NAME)
    try:
        window = stats_window(trace, a.get("filter_time"), None)
        result = module.build(trace, window, variant, False)
    finally:
        trace.close()
    rows = json.loads(render(result, "json"))
    chunk, page = page_of(rows, int(a.get("offset", 0)), int(a.get("limit", DEFAULT_PAGE)))
    return {"report": spec, "columns": list(result.columns), "rows": chunk, "page": page,
            "reason": None if rows else (result.reason or "the report is empty")}
