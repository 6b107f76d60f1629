"""What a rule may not change in the process (nsys_rules.containment), the findings cap and the deadline's watchdog
(nsys_rules.deadline), in process. The whole-process cases (a rule that will not stop, threads left running, a real
Ctrl-C) run the CLI as a subprocess in tests/cli/test_hostile_plugins.py."""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass

import pytest

from nsys_rules import deadline as deadline_module
from nsys_rules.containment import RuleStdout, contained, routed_stdout
from nsys_rules.deadline import Deadline
from nsys_rules.findings import Finding, Severity
from nsys_rules.isolation import run_rule
from nsys_rules.records import RunError
from nsys_rules.rule import Rule


@dataclass(frozen=True)
class NoOptions:
    """No options."""


class _Ctx:
    """The little of a RuleContext that isolation reads."""

    def __init__(self, rule: Rule) -> None:
        self.rule = rule


def outcome_of(check, **kwargs):
    rule = type("Plugged", (Rule,), {"name": "plugged", "title": "t", "requires": ("kernels",), "Options": NoOptions,
                                     "__doc__": "A rule.", "check": check})
    return run_rule(rule, lambda: _Ctx(rule()), "t.sqlite", timeout=30, **kwargs)  # type: ignore[arg-type]


def _finding(i: int) -> Finding:
    return Finding("plugged", Severity.INFO, "t", f"finding {i}", "nothing", key=str(i))


# -- process state ------------------------------------------------------------------------------
def test_cwd_umask_and_streams_are_put_back(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    mask = os.umask(0o022)
    out, err = sys.stdout, sys.stderr
    try:
        def check(self, ctx):
            os.chdir("/")
            os.umask(0o777)
            sys.stdout = open(os.devnull, "w")
            sys.stderr = open(os.devnull, "w")
            return []

        assert outcome_of(check).errors == []
        assert os.getcwd() == str(tmp_path)
        assert os.umask(0o022) == 0o022
        assert sys.stdout is out and sys.stderr is err
    finally:
        os.umask(mask)


def test_signal_mask_and_switch_interval_are_put_back():
    import signal

    switch = sys.getswitchinterval()

    def check(self, ctx):
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        sys.setswitchinterval(100)
        return []

    outcome_of(check)
    assert signal.SIGALRM not in signal.pthread_sigmask(signal.SIG_BLOCK, [])
    assert sys.getswitchinterval() == switch

    def spins(self, ctx):
        while True:
            pass

    # The next rule's time limit still works: its alarm is not blocked.
    rule = type("Spin", (Rule,), {"name": "spin", "title": "t", "requires": ("kernels",), "Options": NoOptions,
                                  "__doc__": "A rule.", "check": spins})
    (error,) = run_rule(rule, lambda: _Ctx(rule()), "t.sqlite", timeout=0.5).errors  # type: ignore[arg-type]
    assert "did not finish within 0.5 s" in error.error


def test_cwd_is_found_back_after_the_rule_renames_it(tmp_path, monkeypatch):
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)

    def check(self, ctx):
        os.rename(here, tmp_path / "moved")
        os.chdir(tmp_path)
        return []

    outcome_of(check)
    assert os.getcwd() == str(tmp_path / "moved")


def test_rule_output_goes_to_stderr(capfd):
    def check(self, ctx):
        print("python print")
        os.write(1, b"fd one\n")
        yield _finding(1)

    print("report before")
    assert len(outcome_of(check).findings) == 1
    print("report after")
    out, err = capfd.readouterr()
    assert out == "report before\nreport after\n"
    assert "python print" in err and "fd one" in err


def test_threads_other_than_the_owner_write_to_stderr(capsys):
    with routed_stdout() as router:
        assert isinstance(sys.stdout, RuleStdout) and router.owner == threading.get_ident()
        worker = threading.Thread(target=print, args=("from a thread",))
        worker.start()
        worker.join()
        print("from the owner")
    out, err = capsys.readouterr()
    assert out == "from the owner\n" and err == "from a thread\n"
    assert not isinstance(sys.stdout, RuleStdout)  # removed: no thread was left running


def test_stray_threads_are_noted_and_keep_the_router(capsys):
    release = threading.Event()

    def check(self, ctx):
        threading.Thread(target=release.wait, name="left-behind").start()
        return []

    try:
        with routed_stdout():
            outcome_of(check)
        assert isinstance(sys.stdout, RuleStdout)  # a stray thread may print: still routed
        print("report")
    finally:
        release.set()
        if isinstance(sys.stdout, RuleStdout):
            sys.stdout = sys.stdout.real
    out, err = capsys.readouterr()
    assert out == "report\n"
    assert "rule plugged left 1 thread(s) running on t.sqlite (left-behind)" in err


def test_keyboard_interrupt_raised_without_ctrl_c_is_the_rules_error():
    def check(self, ctx):
        raise KeyboardInterrupt

    (error,) = outcome_of(check).errors
    assert "KeyboardInterrupt without a Ctrl-C" in error.error


def test_a_real_sigint_is_not_swallowed_by_the_rule():
    import signal

    def check(self, ctx):
        try:
            signal.raise_signal(signal.SIGINT)
        except KeyboardInterrupt:
            pass  # swallowed: the run must still end as interrupted
        return [_finding(1)]

    with pytest.raises(KeyboardInterrupt):
        outcome_of(check)


def test_contained_outside_the_main_thread_routes_output_only(capsys):
    box = {}

    def work():
        with contained() as seen:
            print("thread rule")
        box["seen"] = seen

    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    assert box["seen"].interrupted is False
    assert capsys.readouterr().err == "thread rule\n"


# -- the findings cap -------------------------------------------------------------------------------
def test_a_generator_is_read_one_past_the_cap_and_closed():
    read = []
    closed = []

    def check(self, ctx):
        try:
            i = 0
            while True:
                read.append(i)
                yield _finding(i)
                i += 1
        finally:
            closed.append(True)

    outcome = outcome_of(check, max_findings=50)
    assert len(outcome.findings) == 50 and len(read) == 51 and closed == [True]
    assert outcome.capped is not None and (outcome.capped.kept, outcome.capped.dropped) == (50, None)


@pytest.mark.parametrize("size, cap, kept, dropped", [(10, 10, 10, None), (11, 10, 10, 1), (5000, 1000, 1000, 4000),
                                                      (5000, None, 5000, None)])
def test_a_list_is_cut_at_the_cap_and_the_rest_counted(size, cap, kept, dropped):
    outcome = outcome_of(lambda self, ctx: [_finding(i) for i in range(size)], max_findings=cap)
    assert len(outcome.findings) == kept
    assert (outcome.capped.dropped if outcome.capped else None) == dropped


def test_the_cap_counts_items_before_they_are_checked():
    """Garbage beyond the cap is never read, so it makes no error entries either."""
    outcome = outcome_of(lambda self, ctx: iter([_finding(0)] + ["garbage"] * 100_000), max_findings=3)
    assert len(outcome.findings) == 1 and len(outcome.errors) == 2


def test_layout_orders_the_answer_without_comparing_findings(monkeypatch):
    """The table's order once came from ``list.index``: each lookup compared findings field by field (20,000
    findings: 80 s). Now no two findings are compared for equality at all."""
    from nsys_rules.formatters.layout import answer
    from nsys_rules.records import TraceInfo
    from nsys_rules.report import Report, TraceResult

    findings = [Finding("plugged", Severity.WARNING if i % 2 else Severity.INFO, "t", f"m{i}", "r", key=str(i),
                        estimated_savings_ns=i) for i in range(2000)]
    result = TraceResult(TraceInfo("t.sqlite", None, None, [], {}, {"kernels": 1}), findings=findings)
    report = Report(rules=[], plugins=[], fail_on="error", results=[result])
    compared = []
    original = Finding.__eq__
    monkeypatch.setattr(Finding, "__eq__", lambda a, b: compared.append(1) or original(a, b))
    ranked = answer(report)
    assert len(ranked.entries) == 2000 and compared == []
    assert [e.finding.estimated_savings_ns for e in ranked.entries[:3]] == [1999, 1997, 1995]


# -- the deadline's watchdog -------------------------------------------------------------------------
def test_deadline_expires_once_armed_and_not_after_disarm(monkeypatch):
    exits: list[int] = []
    expired: list[RunError] = []
    done = threading.Event()

    def fake_exit(code: int) -> None:
        exits.append(code)
        done.set()  # and returns: the watchdog thread ends instead of the test process

    monkeypatch.setattr(deadline_module, "_hard_exit", fake_exit)
    watchdog = Deadline(expired.append)
    watchdog.start()
    watchdog.arm(0.2, RunError("first", rule="a"))
    watchdog.disarm()
    time.sleep(0.4)
    assert exits == [] and expired == []
    watchdog.arm(0.2, RunError("second", rule="b"))
    assert done.wait(5)
    assert exits == [4] and [e.error for e in expired] == ["second"]


def test_deadline_interrupt_ends_with_130(monkeypatch):
    exits: list[int] = []
    done = threading.Event()

    def fake_exit(code: int) -> None:
        exits.append(code)
        done.set()

    monkeypatch.setattr(deadline_module, "_hard_exit", fake_exit)
    monkeypatch.setattr(deadline_module, "INTERRUPT_GRACE_S", 0.1)
    watchdog = Deadline(lambda error: None)
    watchdog.start()
    watchdog.arm(60, RunError("slow", rule="a"))
    watchdog.interrupted()
    watchdog.disarm()  # the rule returned: the interrupt still ends the run
    assert done.wait(5) and exits == [130]


def test_grace_grows_with_the_limit_within_bounds():
    from nsys_rules.deadline import grace_seconds

    assert grace_seconds(1) == 2 and grace_seconds(100) == 10 and grace_seconds(3000) == 30


@pytest.mark.parametrize("text, cap", [("max-findings = 5\n", 5), ("max-findings = 0\n", None), ("", 1000)])
def test_max_findings_from_the_config_file(tmp_path, text, cap):
    from nsys_rules.config import load_config
    from nsys_rules.plugin_manager import build_registry

    path = tmp_path / "nsys-rules.toml"
    path.write_text(text)
    registry = build_registry(autoload=False)
    assert load_config(path, registry.rules, registry.aliases()).max_findings == cap
