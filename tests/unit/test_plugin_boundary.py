"""The plugin boundary: a plugin that exits, hangs or returns garbage ends the run with exit 4, a
line naming it, and the report of every other rule.

End-to-end cases install a real entry-point plugin (``install_plugin``) and run the CLI as a
subprocess; the many small "returns garbage" cases register a plugin object in process.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass

import pytest

from nsys_rules.findings import Finding, Location, Metric, Severity
from nsys_rules.hooks import hookimpl
from nsys_rules.plugin_manager import build_registry
from nsys_rules.rule import Rule
from tests.conftest import run_cli, validate_report
from tests.fuzz.harness import check_run, run_cli_inprocess
from nsys_rules.testing import TraceBuilder
from tests.unit.test_plugin_failures import _env, install_plugin


@pytest.fixture
def trace(tmp_path):
    """Three graph-mode replays: the built-in graph-trace-hidden fires (its finding must survive any plugin)."""
    b = TraceBuilder(graph_trace_mode="Graph")
    for i in range(3):
        b.graph_launch(i * 1_000_000, 500_000)
        b.kernel("k", start=i * 1_000_000 + 600_000, duration=100_000)
    return b.write(tmp_path / "t.sqlite")


@dataclass(frozen=True)
class NoOptions:
    """No options."""


def make_rule(check, **attrs) -> type[Rule]:
    body = {"name": "plugged", "title": "a plugin rule", "requires": ("kernels",), "Options": NoOptions,
            "__doc__": "A plugin rule.", "check": check, **attrs}
    return type("Plugged", (Rule,), body)


def plugin_with(**hooks):
    """A plugin object whose hooks return the given values (callables are called)."""
    class Plugin:
        pass

    for name, value in hooks.items():
        def hook(value=value):
            return value() if callable(value) and not isinstance(value, type) else value
        hook.__name__ = name
        setattr(Plugin, name, staticmethod(hookimpl(hook)))
    return Plugin()


def run_with(monkeypatch, plugin, *args: str):
    """``check --format json`` on ``args`` with the built-ins plus ``plugin`` (named "bad")."""
    from nsys_rules.commands import check as check_cmd

    monkeypatch.setattr(check_cmd, "registry_for",
                        lambda a: build_registry(autoload=False, extra=(("bad", plugin),)))
    return run_cli_inprocess("check", "--format", "json", "--fail-on", "never", *args)


def _kept_builtin_report(run, trace_count: int = 1) -> dict:
    data = check_run(run)
    assert run.code == 4, (run.code, run.stderr)
    assert data is not None and len(data["traces"]) == trace_count
    assert "graph-trace-hidden" in {f["rule"] for f in data["findings"]}  # the built-in rule's finding is kept
    return data


# -- a rule that exits or hangs ---------------------------------------------------------------
def _exits(self, ctx):
    raise SystemExit(0)


def _spins(self, ctx):
    while True:
        try:
            time.sleep(0.05)
        except Exception:  # noqa: BLE001 - a careless plugin swallowing everything it can
            pass


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_rule_calling_sys_exit_is_a_rule_error(monkeypatch, trace, tmp_path, jobs):
    other = tmp_path / "second.sqlite"
    other.write_bytes(trace.read_bytes())
    run = run_with(monkeypatch, plugin_with(register_rules=[make_rule(_exits)]), "--jobs", jobs, str(trace), str(other))
    data = _kept_builtin_report(run, 2)
    assert [e["rule"] for e in data["errors"]] == ["plugged", "plugged"]
    assert "sys.exit(0)" in data["errors"][0]["error"]
    assert "nsys-rules: rule plugged (plugin bad) failed on" in run.stderr


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_rule_that_hangs_is_stopped_at_the_rule_timeout(monkeypatch, trace, tmp_path, jobs):
    other = tmp_path / "second.sqlite"
    other.write_bytes(trace.read_bytes())
    started = time.monotonic()
    run = run_with(monkeypatch, plugin_with(register_rules=[make_rule(_spins)]), "--rule-timeout", "1",
                   "--jobs", jobs, str(trace), str(other))
    assert time.monotonic() - started < 30
    data = _kept_builtin_report(run, 2)
    assert len(data["errors"]) == 2 and all("did not finish within 1 s" in e["error"] for e in data["errors"])


def test_rule_timeout_also_works_off_the_main_thread(trace):
    """Dask runs tasks in threads, where no alarm signal can be used."""
    import threading

    from nsys_rules.isolation import RuleTimeout, limited

    box = {}

    def worker():
        try:
            limited(lambda: time.sleep(30), 0.5)
        except RuleTimeout:
            box["stopped"] = time.monotonic()

    began = time.monotonic()
    thread = threading.Thread(target=worker)
    thread.start()
    thread.join(10)
    assert box and box["stopped"] - began < 5


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "soon", "1e999"])
def test_bad_rule_timeout_is_a_usage_error(trace, value):
    run = run_cli_inprocess("check", "--no-plugins", "--rule-timeout", value, str(trace))
    assert run.code == 2 and run.stderr.count("\n") == 1 and "--rule-timeout" in run.stderr


# -- garbage in what a plugin returns ---------------------------------------------------------
def _finding(**changes):
    def check(self, ctx):
        good = ctx.finding("fine", "nothing", estimated_savings_ns=10)
        fields = {**good.__dict__, **changes}
        yield good
        yield Finding(**fields)
    return check


GARBAGE_FINDINGS = {
    "string severity": _finding(severity="error"),
    "NaN savings": _finding(estimated_savings_ns=math.nan),
    "negative savings": _finding(estimated_savings_ns=-5),
    "text message": _finding(message=42),
    "metric of text": _finding(metrics={"x": Metric("fast", "ns")}),
    "metrics not a mapping": _finding(metrics=[1, 2]),
    "location not a Location": _finding(location="here"),
    "location with text pid": _finding(location=Location(pid="me")),
    "another rule's name": _finding(rule="graph-trace-hidden"),
}


@pytest.mark.parametrize("case", sorted(GARBAGE_FINDINGS))
def test_bad_finding_is_dropped_and_named(monkeypatch, trace, case):
    run = run_with(monkeypatch, plugin_with(register_rules=[make_rule(GARBAGE_FINDINGS[case])]), str(trace))
    data = _kept_builtin_report(run)
    (error,) = data["errors"]
    assert error["rule"] == "plugged" and error["error"].startswith("finding 2 dropped: "), error
    plugged = [f for f in data["findings"] if f["rule"] == "plugged"]
    assert len(plugged) == 1 and plugged[0]["message"] == "fine"  # the good finding of that rule is kept


CHECK_RESULTS = {"an int": lambda self, ctx: 42, "None": lambda self, ctx: None, "a string": lambda self, ctx: "finding",
                 "a non-Finding": lambda self, ctx: [{"rule": "plugged"}]}


@pytest.mark.parametrize("case", sorted(CHECK_RESULTS))
def test_check_returning_garbage_is_a_rule_error(monkeypatch, trace, case):
    data = _kept_builtin_report(run_with(monkeypatch, plugin_with(register_rules=[make_rule(CHECK_RESULTS[case])]),
                                         str(trace)))
    (error,) = data["errors"]
    assert error["rule"] == "plugged" and ("not an iterable" in error["error"] or "not a Finding" in error["error"])


def _fails_options():
    @dataclass(frozen=True)
    class Options:
        """Options whose defaults do not build."""

        x: float = 1.0

        def __post_init__(self):
            raise ValueError("bad default")
    return Options


BAD_RULES = {
    "requires=None": make_rule(lambda s, c: [], requires=None),
    "requires a string": make_rule(lambda s, c: [], requires="kernels"),
    "unknown column": make_rule(lambda s, c: [], columns={"kernels": ("start", "nope")}),
    "severity as text": make_rule(lambda s, c: [], default_severity="error"),
    "window typo": make_rule(lambda s, c: [], window="stedy"),
    "options that do not build": make_rule(lambda s, c: [], Options=_fails_options()),
    "no check": type("NoCheck", (Rule,), {"name": "no-check", "Options": NoOptions}),
    "not a class": 42,
}


@pytest.mark.parametrize("case", sorted(BAD_RULES))
def test_bad_rule_class_is_refused_and_the_rest_runs(monkeypatch, trace, case):
    data = _kept_builtin_report(run_with(monkeypatch, plugin_with(register_rules=[BAD_RULES[case]]), str(trace)))
    (error,) = data["errors"]
    assert error["plugin"] == "bad"
    assert "plugged" not in {r["name"] for r in data["rules"]}


HOOKS = {
    "register_rules returns 42": {"register_rules": 42},
    "register_rules returns a dict": {"register_rules": {"x": 1}},
    "register_formatters returns 42": {"register_formatters": 42},
    "register_formatters exits": {"register_formatters": lambda: (_ for _ in ()).throw(SystemExit(0))},
    "register_loaders returns a list": {"register_loaders": [".x"]},
    "loader takes over .sqlite": {"register_loaders": {".sqlite": lambda path: None}},
    "loader takes over .nsys-rep": {"register_loaders": {".NSYS-REP": lambda path: None}},
    "formatter takes over json": {"register_formatters": {"json": lambda report: "hijacked\n"}},
}


@pytest.mark.parametrize("case", sorted(HOOKS))
def test_bad_hook_result_is_a_plugin_error(monkeypatch, trace, case):
    run = run_with(monkeypatch, plugin_with(**HOOKS[case]), str(trace))
    data = _kept_builtin_report(run)  # the built-in json format and sqlite reader did the work
    (error,) = data["errors"]
    assert error["plugin"] == "bad"
    assert "nsys-rules: plugin bad failed" in run.stderr


@pytest.mark.parametrize("behaviour", ["raise", "exit", "not text"])
def test_plugin_formatter_failure_is_one_line_and_exit_4(monkeypatch, trace, behaviour):
    def fmt(report):
        if behaviour == "raise":
            raise RuntimeError("no ink")
        if behaviour == "exit":
            raise SystemExit(0)
        return 42

    from nsys_rules.commands import check as check_cmd

    monkeypatch.setattr(check_cmd, "registry_for", lambda a: build_registry(
        autoload=False, extra=(("inky", plugin_with(register_formatters={"inky": fmt})),)))
    run = run_cli_inprocess("check", "--format", "inky", str(trace))
    assert run.code == 4 and run.stdout == ""
    assert run.stderr.count("\n") == 1 and "the 'inky' format" in run.stderr


# -- end to end: a real entry-point plugin ----------------------------------------------------
EXIT_AT_IMPORT = "import sys\nsys.exit({code})\n"


@pytest.mark.parametrize("code", [0, 3])
@pytest.mark.parametrize("jobs", ["1", "2"])
def test_plugin_calling_sys_exit_at_import_is_exit_4(tmp_path, trace, code, jobs):
    root = install_plugin(tmp_path / "p", "exiting-plugin", "exiting_plugin", EXIT_AT_IMPORT.format(code=code))
    other = tmp_path / "second.sqlite"
    other.write_bytes(trace.read_bytes())
    proc = run_cli("check", "--format", "json", "--jobs", jobs, str(trace), str(other), env=_env(root))
    assert proc.returncode == 4, (proc.returncode, proc.stderr)
    report = validate_report(proc.stdout)
    (error,) = report["errors"]
    assert error["plugin"] == "exiting-plugin" and f"sys.exit({code})" in error["error"]
    assert "graph-trace-hidden" in {f["rule"] for f in report["findings"]}
    assert proc.stderr.strip().splitlines() == [f"nsys-rules: plugin exiting-plugin failed: {error['error']}"]


def test_plugin_hanging_at_import_is_stopped(tmp_path, monkeypatch):
    from nsys_rules import plugin_manager as plugins

    root = install_plugin(tmp_path / "p", "slow-plugin", "slow_plugin", "import time\ntime.sleep(60)\n")
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setattr(plugins, "DEFAULT_RULE_TIMEOUT", 0.5)
    started = time.monotonic()
    registry = build_registry(autoload=True)
    assert time.monotonic() - started < 10
    (error,) = [e for e in registry.errors if e.plugin == "slow-plugin"]
    assert "did not return within" in error.error
    assert "graph-trace-hidden" in registry.rules


def test_severity_strings_are_not_accepted_silently():
    from nsys_rules.isolation import finding_problem

    good = Finding("r", Severity.INFO, "t", "m", "n")
    assert finding_problem(good, "r") is None
    assert "not a Severity" in finding_problem(Finding("r", "info", "t", "m", "n"), "r")  # type: ignore[arg-type]
    assert json.dumps(good.to_json())
