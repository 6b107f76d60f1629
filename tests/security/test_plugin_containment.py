"""Issue 43 item 5: plugins cannot take the run down.

Each plugin is installed for real (a module and a dist-info on ``PYTHONPATH``) and the console script runs it
in its own process, as users do. Whatever the plugin raises (any ``BaseException``), prints (at import, in
a hook, at exit, from a forked child or a thread), returns (values that pass validation) or changes (signal
handlers, cwd, ``Report.exit_code``), the run ends with its report on stdout, strict JSON, and a documented
exit code; the built-in finding survives.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nsys_rules.testing import TraceBuilder
from tests.conftest import ROOT, validate_report
from tests.security.ci_safety import command_lines, strict_loads
from tests.unit.test_plugin_failures import _env, install_plugin

PLUGIN = '''
import asyncio, atexit, os, signal, sys, threading, time
from dataclasses import dataclass
from nsys_rules.findings import Finding, Location
from nsys_rules.hooks import hookimpl
from nsys_rules.rule import Rule

{prelude}


@dataclass(frozen=True)
class Options:
    """No options."""


class Plugged(Rule):
    """A hostile plugin rule."""

    name = "plugged"
    title = "a hostile plugin rule"
    requires = ("kernels",)
    Options = Options

    def check(self, ctx):
{body}


@hookimpl
def register_rules():
{hook}
    return [Plugged]
'''

FINE = 'yield ctx.finding("fine", "nothing to do")'


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    b = TraceBuilder(graph_trace_mode="Graph")
    for i in range(3):
        b.graph_launch(i * 1_000_000, 500_000)  # graph-trace-hidden (built-in, an error) fires
        b.kernel("k", start=i * 1_000_000 + 600_000, duration=100_000)
    return b.write(tmp_path_factory.mktemp("plug") / "t.sqlite")


def _indent(code: str, spaces: int) -> str:
    return "\n".join(" " * spaces + line for line in code.strip("\n").splitlines()) or " " * spaces + "pass"


def run_plugin(tmp_path: Path, trace: Path, *args: str, prelude: str = "", body: str = FINE, hook: str = "",
               timeout: float = 120) -> tuple[subprocess.CompletedProcess[str], float]:
    """``check ARGS TRACE`` with the plugin made of ``prelude`` (import time), ``body`` (check) and ``hook``."""
    source = PLUGIN.format(prelude=prelude, body=_indent(body, 8), hook=_indent(hook, 4))
    root = install_plugin(tmp_path / "plugin", "plugged-plugin", "plugged_plugin", source)
    env = {**os.environ, **_env(root), "PYTHONPATH": os.pathsep.join([str(root), str(ROOT)])}
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "nsys_rules", "check", *args, str(trace)], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=timeout)
    return proc, time.monotonic() - started


def _report(proc: subprocess.CompletedProcess[str], code: int) -> dict:
    assert proc.returncode == code, (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr[-3000:]
    report = validate_report(proc.stdout)  # exactly one report, strict JSON, valid against the schema
    assert report["summary"]["exit_code"] == code
    assert "graph-trace-hidden" in {f["rule"] for f in report["findings"]}
    return report


# -- any BaseException ------------------------------------------------------------------------------
RAISED = {"CancelledError": "raise asyncio.CancelledError()", "GeneratorExit": "raise GeneratorExit()",
          "custom": "class Boom(BaseException):\n    pass\nraise Boom('boom')"}


@pytest.mark.parametrize("kind", sorted(RAISED))
def test_base_exception_in_check_is_the_rules_error(tmp_path, trace, kind):
    """Before: a traceback and exit 1 (the findings code), no report."""
    proc, _ = run_plugin(tmp_path, trace, "--format", "json", body=RAISED[kind] + "\nyield")
    report = _report(proc, 4)
    assert [e["rule"] for e in report["errors"]] == ["plugged"]


@pytest.mark.parametrize("where", ["import", "hook"])
@pytest.mark.parametrize("kind", sorted(RAISED))
def test_base_exception_at_import_or_in_a_hook_is_the_plugins_error(tmp_path, trace, kind, where):
    code = RAISED[kind]
    proc, _ = run_plugin(tmp_path, trace, "--format", "json", **({"prelude": code} if where == "import" else {"hook": code}))
    report = _report(proc, 4)
    (error,) = report["errors"]
    assert error["plugin"] == "plugged-plugin"
    assert ("Boom" if kind == "custom" else kind) in error["error"]


# -- output that is not the report --------------------------------------------------------------------
NOISE = {
    "print at import": ("print('IMPORT NOISE')", "", FINE),
    "print in register_rules": ("", "print('HOOK NOISE')", FINE),
    "atexit print": ("atexit.register(lambda: print('ATEXIT NOISE', flush=True))", "", FINE),
    "fork without _exit at import": ("os.fork()", "", FINE),
    "fork without _exit in check": ("", "", "os.fork()\n" + FINE),
    "thread writing to fd 1 and sys.__stdout__": (
        "def spam():\n    while True:\n        os.write(1, b'FD NOISE\\n')\n        sys.__stdout__.write('PY NOISE\\n')\n"
        "        sys.__stdout__.flush()\n        time.sleep(0.001)\n"
        "threading.Thread(target=spam, daemon=True).start()", "", FINE),
}


@pytest.mark.parametrize("case", sorted(NOISE))
@pytest.mark.parametrize("fmt", ["json", "sarif"])
def test_plugin_output_never_reaches_the_report(tmp_path, trace, case, fmt):
    """Before: each of these put a line (or a second report) on stdout with exit 0."""
    prelude, hook, body = NOISE[case]
    proc, _ = run_plugin(tmp_path, trace, "--format", fmt, "--fail-on", "never", prelude=prelude, hook=hook, body=body)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = strict_loads(proc.stdout)  # one document: no noise before, inside or after it
    assert "NOISE" not in proc.stdout
    if fmt == "json":
        assert "plugged" in {f["rule"] for f in data["findings"]} and data["errors"] == []


# -- values that pass validation ----------------------------------------------------------------------
VALUES = {
    "lone surrogate in key and location":
        'yield ctx.finding("odd", "name", key="k\\udcff", location=Location(kernel="ker\\udcffnel"))',
    "savings 2**2000": 'yield ctx.finding("big", "saving", estimated_savings_ns=2**2000)',
    "metric int 2**2000": ('from nsys_rules.findings import Metric\n'
                           'yield ctx.finding("big", "metric", metrics={"n": Metric(2**2000, "count")})'),
    "fingerprint raises": (
        "import dataclasses\nclass Sly(Finding):\n    @property\n    def fingerprint(self):\n        raise RuntimeError('sly')\n"
        "f = ctx.finding('sly', 'finding')\nyield Sly(**{x.name: getattr(f, x.name) for x in dataclasses.fields(Finding)})"),
    "fingerprint raises a BaseException on the second read": (
        "import dataclasses\nclass Sly(Finding):\n    reads = [0]\n    @property\n    def fingerprint(self):\n"
        "        Sly.reads[0] += 1\n        if Sly.reads[0] > 1:\n            raise GeneratorExit('later')\n"
        "        return 'f' * 16\n"
        "f = ctx.finding('sly', 'finding')\nyield Sly(**{x.name: getattr(f, x.name) for x in dataclasses.fields(Finding)})"),
}
#: Kept (the value is shown safely) or dropped as the rule's error (exit 4), never the run lost.
KEPT = {"lone surrogate in key and location": True, "savings 2**2000": False, "metric int 2**2000": False,
        "fingerprint raises": False, "fingerprint raises a BaseException on the second read": True}


@pytest.mark.parametrize("case", sorted(VALUES))
def test_plugin_values_serialise_in_every_format(tmp_path, trace, case):
    """Before: no report at all (exit 4) in json, sarif or table for each of these."""
    outputs = {}
    for fmt in ("json", "sarif", "table", "compact", "markdown", "html"):
        proc, _ = run_plugin(tmp_path / fmt, trace, "--format", fmt, "--fail-on", "never", body=VALUES[case])
        expected = 0 if KEPT[case] else 4
        assert proc.returncode == expected, (fmt, proc.returncode, proc.stderr[-2000:])
        assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr[-2000:]
        proc.stdout.encode("utf-8")  # valid Unicode: no lone surrogate reached the output
        outputs[fmt] = proc.stdout
    report = validate_report(outputs["json"])
    strict_loads(outputs["sarif"])
    plugged = [f for f in report["findings"] if f["rule"] == "plugged"]
    assert len(plugged) == (1 if KEPT[case] else 0)
    if case.startswith("lone"):
        assert plugged[0]["location"]["kernel"] == "ker\\xffnel" and "ker\\xffnel" in outputs["markdown"]


# -- process state and the exit code ----------------------------------------------------------------
STATE_BODY = """
handlers = (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGHUP))
yield ctx.finding(f"handlers={[getattr(h, 'name', 'python') for h in handlers]} cwd={os.getcwd()}", "state")
"""


@pytest.mark.parametrize("where", ["import", "hook"])
def test_signal_handlers_and_cwd_are_put_back(tmp_path, trace, where):
    """Before: SIGTERM and SIGINT stayed SIG_IGN after a plugin's import (the run could not be stopped)."""
    change = "signal.signal(signal.SIGTERM, signal.SIG_IGN)\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n" \
             "signal.signal(signal.SIGHUP, signal.SIG_IGN)\nos.chdir('/')"
    proc, _ = run_plugin(tmp_path, trace, "--format", "json", "--fail-on", "never", body=STATE_BODY,
                         **({"prelude": change} if where == "import" else {"hook": change}))
    report = _report(proc, 0)
    (message,) = [f["message"] for f in report["findings"] if f["rule"] == "plugged"]
    assert "SIG_IGN" not in message and f"cwd={tmp_path}" in message, message


def test_import_is_bounded_by_rule_timeout(tmp_path, trace):
    """Before: a plugin's import had 300 s whatever --rule-timeout said."""
    proc, seconds = run_plugin(tmp_path, trace, "--format", "json", "--rule-timeout", "1", prelude="time.sleep(60)")
    report = _report(proc, 4)
    assert seconds < 30, seconds
    assert "did not return within 1 s" in report["errors"][0]["error"]


def test_a_plugin_patching_report_exit_code_changes_nothing(tmp_path, trace):
    """A plugin that makes Report.exit_code always 0: the built-in error finding still fails the run."""
    patch = "from nsys_rules.report import Report\nReport.exit_code = property(lambda self: 0)"
    proc, _ = run_plugin(tmp_path, trace, "--format", "json", prelude=patch)
    _report(proc, 1)


def test_plugin_text_runs_no_ci_command(tmp_path, trace):
    """A plugin's finding text made of workflow commands is shown, not run, in the text formats."""
    body = 'yield ctx.finding("::error::from a plugin", "::add-mask::x\\n::warning::y ##[error]z")'
    proc, _ = run_plugin(tmp_path, trace, "--format", "compact", "--fail-on", "never", body=body)
    assert proc.returncode == 0 and "from a plugin" in proc.stdout, proc.stderr[-2000:]
    assert command_lines(proc.stdout) == [] and command_lines(proc.stderr) == []
