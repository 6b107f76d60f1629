"""The Python API: ``nsys_rules.check(path, **options)`` runs ``nsys-rules check`` and returns the report.

For notebooks and scripts::

    import nsys_rules
    r = nsys_rules.check("examples/rust_release_build.sqlite")
    r.to_frame()            # the ranked findings as a pandas DataFrame
    r.to_frame("budget")    # the step budget's parts
    r                       # in Jupyter: the HTML report

It is the command's own pipeline (:func:`nsys_rules.commands.check.build_report`): the same inputs (files,
export folders, a folder of traces, ``.nsys-rep``), the same config file lookup, the same rules, numbers and
ranking; it returns instead of printing. Errors are exceptions: :class:`~nsys_rules.errors.UsageError` (what
exit 2 means), :class:`~nsys_rules.errors.InputError` (exit 3). docs/python.md is the reference.
"""

from __future__ import annotations

import html
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence, Union

from nsys_rules.errors import UsageError
from nsys_rules.findings import Finding
from nsys_rules.notebook_types import (BudgetPart, StepBudget, TraceSummary, budget_frame, findings_frame,
                                       metrics_frame)
from nsys_rules.records import RunError, Skipped
from nsys_rules.registry import Registry
from nsys_rules.report import Report
from nsys_rules.settings import Settings

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["check", "CheckReport", "StepBudget", "BudgetPart", "TraceSummary"]

PathLike = Union[str, "os.PathLike[str]"]
Names = Union[str, Iterable[str]]


@dataclass(frozen=True)
class CheckReport:
    """What :func:`check` returns: the ranked findings, each trace with its step budget, what was skipped or
    failed, and the exit code the command would have returned. ``report`` is the engine's
    :class:`~nsys_rules.report.Report` that every format renders (:meth:`text`)."""

    findings: tuple[Finding, ...]  #: every finding of every trace (and of the job rules), ranked
    traces: tuple[TraceSummary, ...]
    skipped: tuple[Skipped, ...]  #: rules that did not run, with the reason and the fix
    errors: tuple[RunError, ...]  #: rules or plugins that failed (the command's exit 4)
    exit_code: int  #: 0, 1 (a finding at or above ``fail_on``) or 4, as the command's
    report: Report

    @property
    def budget(self) -> StepBudget | None:
        """The step budget of the first trace that has one (one trace: its budget)."""
        return next((t.budget for t in self.traces if t.budget is not None), None)

    def to_frame(self, what: str = "findings") -> pd.DataFrame:
        """A pandas DataFrame: ``"findings"`` (one row per finding, ranked; index: rank from 1), ``"budget"`` (one
        row per budget part of each trace) or ``"metrics"`` (one row per metric of each finding)."""
        if what == "findings":
            return findings_frame(self.findings)
        if what == "budget":
            return budget_frame([t.budget for t in self.traces if t.budget is not None])
        if what == "metrics":
            return metrics_frame(self.findings)
        raise ValueError(f"to_frame({what!r}): choose 'findings', 'budget' or 'metrics'")

    def text(self, format: str = "compact") -> str:
        """The report as the command prints it in ``format`` (``table``, ``compact``, ``markdown``, ``json``,
        ``sarif``, ``html`` or a plugin's format). Markdown and HTML draw the steady-state profile only when
        :func:`check` ran with ``profile=True`` (the default)."""
        from nsys_rules.isolation import call_plugin

        registry = self.report.registry
        formatters = registry.formatters if registry is not None else {}
        if format not in formatters:
            raise ValueError(f"unknown format {format!r}; choose from {', '.join(sorted(formatters))}")
        out = call_plugin(formatters[format], f"the {format!r} format", self.report)
        return out if isinstance(out, str) else str(out)

    def _repr_html_(self) -> str:
        """Jupyter shows the HTML report, inside a frame so its page style stays out of the notebook's."""
        page = self.text("html")
        return (f'<iframe srcdoc="{html.escape(page, quote=True)}" title="nsys-rules report" '
                'style="width:100%;height:720px;border:1px solid #e2e8f0;border-radius:8px;resize:vertical"></iframe>')

    def __repr__(self) -> str:
        counts = self.report.summary()["by_severity"]
        return (f"<CheckReport: {len(self.traces)} trace{'s' if len(self.traces) != 1 else ''}, "
                f"{len(self.findings)} finding{'s' if len(self.findings) != 1 else ''} "
                f"({counts['error']} error, {counts['warning']} warning, {counts['info']} info), "
                f"exit code {self.exit_code}>")


def check(path: PathLike | Sequence[PathLike], *, select: Names | None = None, ignore: Names | None = None,
          options: Mapping[str, Mapping[str, Any]] | None = None, fail_on: str | None = None,
          filter_time: str | None = None, filter_nvtx: str | None = None, max_memory: str | int | None = None,
          noise_floor: float | None = None, max_findings: int | None = None, rule_timeout: float | None = None,
          what_if: Names | None = None, baseline: PathLike | None = None, config: PathLike | None = None,
          jobs: int = 1, plugins: bool = True, gpu_metrics: bool = True, profile: bool = True) -> CheckReport:
    """Run the rules on one trace (or several, or a folder of them) and return the report.

    The keyword arguments are ``nsys-rules check``'s flags: ``select``/``ignore`` (rule names, a list or a
    comma-separated string), ``options`` (``{rule: {option: value}}``, as ``--set RULE.OPTION=VALUE`` but with
    Python values), ``fail_on``, ``filter_time`` (``"5s/7s"``), ``filter_nvtx``, ``max_memory`` (bytes or
    ``"8G"``), ``noise_floor`` (percent), ``max_findings``, ``rule_timeout`` (seconds), ``what_if`` (rules whose
    fixes are replayed), ``baseline`` (report only new findings), ``config`` (default: the nearest
    ``nsys-rules.toml`` or ``pyproject.toml``, as the command finds it), ``jobs`` (worker processes for several
    traces), ``plugins`` (False: the built-in rules only), ``gpu_metrics``. ``profile`` (default True) computes
    the steady-state profile the HTML report draws; False saves reading every GPU row again.

    Raises :class:`~nsys_rules.errors.UsageError` for a bad option, rule name or value and
    :class:`~nsys_rules.errors.InputError` for an input that is not a readable nsys export.
    """
    from nsys_rules.cli import build_parser
    from nsys_rules.commands.check import build_report, check_setup

    paths = [os.fspath(p) for p in ([path] if isinstance(path, (str, os.PathLike)) else path)]
    if not paths:
        raise UsageError("check() needs a trace: a .sqlite export, an export folder or a folder of traces")
    args = build_parser("check").parse_args(["check", "--format", "json", "--", *paths])
    args.select = _names(select, "select")
    args.ignore = _names(ignore, "ignore")
    args.what_if = _names(what_if, "what_if")
    args.fail_on = _choice(fail_on, "fail_on", ("info", "warning", "error", "never"))
    for key, value in (("filter_time", filter_time), ("filter_nvtx", filter_nvtx), ("max_memory", max_memory),
                       ("noise_floor", noise_floor), ("max_findings", max_findings), ("rule_timeout", rule_timeout),
                       ("baseline", baseline), ("config", config)):
        setattr(args, key, None if value is None else os.fspath(value) if isinstance(value, os.PathLike) else str(value))
    args.jobs = int(jobs)
    args.no_plugins = not plugins
    args.no_gpu_metrics = not gpu_metrics
    registry, settings = check_setup(args)
    _apply_options(options or {}, registry, settings)
    settings.profile = bool(profile)
    report = build_report(args, registry, settings)
    return CheckReport(findings=tuple(report.findings), traces=tuple(TraceSummary.from_result(r) for r in report.results),
                       skipped=tuple(report.all_skipped), errors=tuple(report.all_errors),
                       exit_code=int(report.exit_code), report=report)


def _names(value: Names | None, key: str) -> list[str] | None:
    """A rule list as the flags give it (comma-separated strings); a lone string may hold commas too."""
    if value is None:
        return None
    items = [value] if isinstance(value, str) else list(value)
    if not all(isinstance(v, str) for v in items):
        raise UsageError(f"check({key}=...) takes rule names (strings), not {items!r}")
    return items


def _choice(value: str | None, key: str, choices: tuple[str, ...]) -> str | None:
    if value is not None and value not in choices:
        raise UsageError(f"check({key}={value!r}): choose from {', '.join(choices)}")
    return value


def _apply_options(options: Mapping[str, Mapping[str, Any]], registry: Registry, settings: Settings) -> None:
    """``options={rule: {option: value}}`` over the config file's, checked as ``--set`` is (exit 2's errors)."""
    from nsys_rules.settings import build_options, option_setting, resolve_rule_name

    aliases = registry.aliases()
    for rule, values in options.items():
        if not isinstance(values, Mapping):
            raise UsageError(f"check(options=...): {rule!r} needs a dict of option values, not {values!r}")
        name = resolve_rule_name(str(rule), registry.rules, aliases, "options")
        for option, value in values.items():
            key, setting = option_setting(registry.rules[name], str(option), value, "options")
            settings.rule_options.setdefault(name, {})[key] = setting
        build_options(registry.rules[name], settings.rule_options[name], "options")

