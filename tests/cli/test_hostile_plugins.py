"""Plugins that print, hang past the time limit, leave threads running, change the process or flood findings.

Each plugin is installed for real (a module and a dist-info on ``PYTHONPATH``, found through its
entry point as pip would) and the CLI runs as a subprocess with a time limit: what is checked is
what a user sees, the exit code, the stdout report (valid against the schema) and how long it took.
The built-in graph-trace-hidden finding must survive every plugin.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nsys_rules.testing import TraceBuilder
from tests import bounded
from tests.conftest import ROOT, validate_report
from tests.unit.test_plugin_failures import _env, install_plugin

RULE = '''
import os, signal, subprocess, sys, threading, time
from dataclasses import dataclass
from nsys_rules.hooks import hookimpl
from nsys_rules.rule import Rule


@dataclass(frozen=True)
class Options:
    """No options."""


class Hostile(Rule):
    """A hostile plugin rule."""

    name = "hostile"
    title = "a hostile plugin rule"
    requires = ("kernels",)
    Options = Options

    def check(self, ctx):
{body}


@hookimpl
def register_rules():
    return [Hostile]
'''


@pytest.fixture
def trace(tmp_path):
    b = TraceBuilder(graph_trace_mode="Graph")
    for i in range(3):
        b.graph_launch(i * 1_000_000, 500_000)  # graph-trace-hidden (built-in) fires
        b.kernel("k", start=i * 1_000_000 + 600_000, duration=100_000)
    return b.write(tmp_path / "t.sqlite")


def run_hostile(tmp_path: Path, body: str, *args: str, timeout: float = 60, cwd: Path | None = None):
    """``check`` with the plugin whose ``check`` body is ``body`` (indented 8 spaces); (process, seconds)."""
    indented = "\n".join("        " + line for line in body.strip("\n").splitlines())
    root = install_plugin(tmp_path / "plugin", "hostile-plugin", "hostile_plugin", RULE.format(body=indented))
    env = {**os.environ, **_env(root), "PYTHONPATH": os.pathsep.join([str(root), str(ROOT)])}
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "nsys_rules", "check", *args], capture_output=True, text=True,
                          env=env, cwd=cwd or ROOT, timeout=timeout)
    return proc, time.monotonic() - started


def _builtin_kept(report: dict) -> None:
    assert "graph-trace-hidden" in {f["rule"] for f in report["findings"]}


# -- a rule that will not stop --------------------------------------------------------------
UNSTOPPABLE = {
    "catches BaseException in a retry loop": """
while True:
    try:
        time.sleep(0.05)
    except BaseException:
        pass
""",
    "resets SIGALRM": """
signal.signal(signal.SIGALRM, signal.SIG_IGN)
while True:
    time.sleep(0.05)
""",
    "blocks SIGALRM and spins": """
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
while True:
    pass
""",
    "puts its own alarm handler back after each one": """
while True:
    try:
        time.sleep(0.05)
    except BaseException:
        signal.signal(signal.SIGALRM, lambda *a: None)
""",
}


@pytest.mark.parametrize("fmt", ["json", "table"])
@pytest.mark.parametrize("case", sorted(UNSTOPPABLE))
def test_rule_that_ignores_the_time_limit_ends_the_run_with_the_report(tmp_path, trace, case, fmt):
    proc, seconds = run_hostile(tmp_path, UNSTOPPABLE[case], "--format", fmt, "--fail-on", "never",
                                "--rule-timeout", "1", str(trace))
    # 1 s limit + 2 s grace + start-up; without the watchdog the run never ends.
    assert proc.returncode == 4, (proc.returncode, proc.stderr[-2000:])
    assert seconds < 30, seconds
    assert "Traceback" not in proc.stderr
    line = [x for x in proc.stderr.splitlines() if "rule hostile (plugin hostile-plugin) failed" in x]
    assert line and "did not stop at --rule-timeout 1 s" in line[0], proc.stderr
    if fmt == "json":
        report = validate_report(proc.stdout)
        _builtin_kept(report)
        assert [e["rule"] for e in report["errors"]] == ["hostile"]
        assert report["summary"]["exit_code"] == 4
    else:
        assert "graph-trace-hidden" in proc.stdout and "error: hostile: did not stop" in proc.stdout


def test_rule_that_stops_at_the_alarm_is_not_ended_by_the_watchdog(tmp_path, trace):
    """A rule that gives up at the first alarm is the ordinary timeout: one error, the rules after it still run."""
    proc, _ = run_hostile(tmp_path, "time.sleep(30)\nyield", "--format", "json", "--fail-on", "never",
                          "--rule-timeout", "1", str(trace))
    report = validate_report(proc.stdout)
    assert proc.returncode == 4 and "did not finish within 1 s" in report["errors"][0]["error"]
    assert report["traces"][0]["budget_reason"] != "the run was ended before the budget was attached (a rule did not stop)"


# -- output ----------------------------------------------------------------------------------
PRINTS = """
print("hello from the plugin")
sys.stdout.write("more text\\n")
os.write(1, b"raw bytes on fd 1\\n")
subprocess.run(["echo", "a child process"], check=True)
sys.stdout = open(os.devnull, "w")
yield ctx.finding("printed a lot", "nothing")
"""


@pytest.mark.parametrize("fmt", ["json", "sarif"])
def test_plugin_output_goes_to_stderr_and_the_report_stays_valid(tmp_path, trace, fmt):
    proc, _ = run_hostile(tmp_path, PRINTS, "--format", fmt, "--fail-on", "never", str(trace))
    assert proc.returncode == 0, proc.stderr[-2000:]
    for text in ("hello from the plugin", "more text", "raw bytes on fd 1", "a child process"):
        assert text in proc.stderr and text not in proc.stdout
    if fmt == "json":
        report = validate_report(proc.stdout)
        _builtin_kept(report)
        assert "hostile" in {f["rule"] for f in report["findings"]}
    else:
        from tests.cli.test_outputs import validate_sarif

        doc = json.loads(proc.stdout)
        validate_sarif(doc)
        assert "hostile" in {r["ruleId"] for r in doc["runs"][0]["results"]}


# -- threads left running ----------------------------------------------------------------------
def test_non_daemon_thread_left_running_does_not_keep_the_process(tmp_path, trace):
    body = """
threading.Thread(target=time.sleep, args=(120,), name="forgotten").start()
threading.Thread(target=lambda: [print("late line") or time.sleep(0.01) for _ in range(3000)], name="chatty").start()
yield ctx.finding("left threads", "nothing")
"""
    proc, seconds = run_hostile(tmp_path, body, "--format", "json", "--fail-on", "never", str(trace))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert seconds < 30, seconds  # the thread sleeps 120 s
    report = validate_report(proc.stdout)  # the chatty thread printed all along: never into the report
    _builtin_kept(report)
    assert "late line" in proc.stderr
    assert "rule hostile left 2 thread(s) running" in proc.stderr and "forgotten" in proc.stderr


def test_non_daemon_thread_left_running_keeps_the_exit_code_of_the_findings(tmp_path, trace):
    body = """
threading.Thread(target=time.sleep, args=(120,)).start()
yield ctx.finding("left a thread", "nothing")
"""
    proc, seconds = run_hostile(tmp_path, body, "--format", "json", "--fail-on", "error", str(trace))
    assert proc.returncode == 1 and seconds < 30  # graph-trace-hidden is an error


# -- process state ----------------------------------------------------------------------------
def test_chdir_and_umask_of_a_rule_are_put_back(tmp_path, trace):
    work = tmp_path / "work"
    elsewhere = tmp_path / "elsewhere"
    work.mkdir()
    elsewhere.mkdir()
    body = f"""
os.chdir({str(elsewhere)!r})
os.umask(0o777)
yield ctx.finding("moved", "nothing")
"""
    mask = os.umask(0o022)
    os.umask(mask)
    proc, _ = run_hostile(tmp_path, body, "--format", "json", "--fail-on", "never", "--html", "report.html",
                          "--write-baseline", "base.json", str(trace), cwd=work)
    assert proc.returncode == 0, proc.stderr[-2000:]
    validate_report(proc.stdout)
    assert sorted(p.name for p in work.iterdir()) == ["base.json", "report.html"]
    assert list(elsewhere.iterdir()) == []
    assert (work / "report.html").stat().st_mode & 0o777 == 0o666 & ~mask


def test_keyboard_interrupt_raised_by_a_rule_is_its_error(tmp_path, trace):
    proc, _ = run_hostile(tmp_path, "raise KeyboardInterrupt\nyield", "--format", "json", "--fail-on", "never",
                          str(trace))
    assert proc.returncode == 4, proc.stderr[-2000:]
    report = validate_report(proc.stdout)
    _builtin_kept(report)
    (error,) = report["errors"]
    assert error["rule"] == "hostile" and "KeyboardInterrupt without a Ctrl-C" in error["error"]
    assert "interrupted" not in proc.stderr


def test_real_ctrl_c_during_a_rule_that_swallows_it_still_ends_the_run(tmp_path, trace):
    marker = tmp_path / "started"
    body = f"""
open({str(marker)!r}, "w").close()
while True:
    try:
        time.sleep(0.05)
    except BaseException:
        pass
yield ctx.finding("never", "nothing")
"""
    indented = "\n".join("        " + line for line in body.strip("\n").splitlines())
    root = install_plugin(tmp_path / "plugin", "hostile-plugin", "hostile_plugin", RULE.format(body=indented))
    env = {**os.environ, **_env(root), "PYTHONPATH": os.pathsep.join([str(root), str(ROOT)])}
    proc = bounded.popen([sys.executable, "-m", "nsys_rules", "check", "--format", "json", str(trace)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    try:
        deadline = time.monotonic() + 60
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists()
        proc.send_signal(signal.SIGINT)
        started = time.monotonic()
        out, err = bounded.finish(proc, 30)
        assert time.monotonic() - started < 15
    finally:
        proc.kill()
    assert proc.returncode == 130, (proc.returncode, err[-2000:])
    assert "interrupted" in err and out == ""


# -- findings floods ----------------------------------------------------------------------------
def test_endless_generator_is_cut_at_the_cap_without_reading_on(tmp_path, trace):
    body = """
i = 0
while True:
    i += 1
    yield ctx.finding(f"finding {i}", "nothing", key=str(i))
"""
    proc, seconds = run_hostile(tmp_path, body, "--format", "json", "--fail-on", "never", str(trace))
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = validate_report(proc.stdout)
    assert report["schema_version"] == "1.5"
    assert sum(f["rule"] == "hostile" for f in report["findings"]) == 1000
    assert report["capped"] == [{"rule": "hostile", "trace": str(trace), "kept": 1000, "dropped": None}]
    assert seconds < 30


def test_list_of_findings_over_the_cap_counts_the_dropped(tmp_path, trace):
    body = "return [ctx.finding(f'finding {i}', 'nothing', key=str(i)) for i in range(2500)]"
    proc, _ = run_hostile(tmp_path, body, "--format", "json", "--fail-on", "never", "--max-findings", "300",
                          str(trace))
    report = validate_report(proc.stdout)
    assert proc.returncode == 0
    assert sum(f["rule"] == "hostile" for f in report["findings"]) == 300
    assert report["capped"] == [{"rule": "hostile", "trace": str(trace), "kept": 300, "dropped": 2200}]
    proc, _ = run_hostile(tmp_path / "again", body, "--fail-on", "never", "--max-findings", "300", str(trace))
    flat = " ".join(proc.stdout.split())  # piped: laid out for 80 columns, the line wraps
    assert "capped: rule hostile on " in flat and "300 findings kept, 2200 more dropped" in flat
    proc, _ = run_hostile(tmp_path / "third", body, "--format", "json", "--fail-on", "never", "--max-findings", "0",
                          str(trace))
    report = validate_report(proc.stdout)
    assert sum(f["rule"] == "hostile" for f in report["findings"]) == 2500 and "capped" not in report


def test_endless_generator_stays_small(tmp_path, trace):
    """Peak memory of the whole run with a plugin that yields forever, against one that yields nothing."""
    endless = "while True:\n    yield ctx.finding('x' * 2000, 'y' * 2000)"
    quiet = "return []"
    peaks = {}
    for name, body in (("endless", endless), ("quiet", quiet)):
        # The run is the wrapper's only child: its peak is RUSAGE_CHILDREN's.
        script = ("import resource, subprocess, sys\n"
                  f"subprocess.run([sys.executable, '-m', 'nsys_rules', 'check', '--format', 'json', "
                  f"'--fail-on', 'never', {str(trace)!r}], stdout=subprocess.DEVNULL)\n"
                  "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n")
        indented = "\n".join("        " + line for line in body.splitlines())
        root = install_plugin(tmp_path / name, "hostile-plugin", "hostile_plugin", RULE.format(body=indented))
        env = {**os.environ, **_env(root), "PYTHONPATH": os.pathsep.join([str(root), str(ROOT)])}
        proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=ROOT,
                              timeout=120)
        peaks[name] = int(proc.stdout.strip()) // 1024
    assert peaks["endless"] - peaks["quiet"] < 100, peaks  # MB: 1000 findings of 4 KB, not gigabytes


def test_rule_that_ignores_the_time_limit_in_a_worker_ends_that_worker(tmp_path, trace):
    """--jobs: the worker is ended, the parent writes the report with the failed trace (exit 4), no hang."""
    other = tmp_path / "second.sqlite"
    other.write_bytes(trace.read_bytes())
    proc, seconds = run_hostile(tmp_path, UNSTOPPABLE["catches BaseException in a retry loop"], "--format", "json",
                                "--fail-on", "never", "--rule-timeout", "1", "--jobs", "2", str(trace), str(other))
    assert proc.returncode == 4, (proc.returncode, proc.stderr[-2000:])
    assert seconds < 60, seconds
    report = validate_report(proc.stdout)
    assert report["errors"] and "its worker process was ended" in proc.stderr


def test_rule_that_ignores_the_time_limit_on_a_later_trace_keeps_the_earlier_ones(tmp_path, trace):
    other = tmp_path / "second.sqlite"
    other.write_bytes(trace.read_bytes())
    body = """
if ctx.trace.label.endswith("second.sqlite"):
    while True:
        try:
            time.sleep(0.05)
        except BaseException:
            pass
yield ctx.finding("fine here", "nothing")
"""
    proc, seconds = run_hostile(tmp_path, body, "--format", "json", "--fail-on", "never", "--rule-timeout", "1",
                                str(trace), str(other))
    assert proc.returncode == 4 and seconds < 30, (proc.returncode, proc.stderr[-2000:])
    report = validate_report(proc.stdout)
    assert [t["path"] for t in report["traces"]] == [str(trace), str(other)]
    assert {f["location"].get("trace") for f in report["findings"] if f["rule"] == "hostile"} == {str(trace)}
    assert [(e["rule"], e["trace"]) for e in report["errors"]] == [("hostile", str(other))]
