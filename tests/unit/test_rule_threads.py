"""Rules side by side on many cores: same report as one after another, plugins in the main thread."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from nsys_rules import rule_threads
from nsys_rules.cli import main
from nsys_rules.rule_threads import run_all, thread_count

ROOT = Path(__file__).resolve().parents[2]
TRACES = [ROOT / "examples" / "rust_release_build.sqlite", *sorted((ROOT / "tests" / "data" / "holdout").glob("*.sqlite"))]


@pytest.mark.parametrize("trace", TRACES, ids=lambda p: p.name)
def test_threads_give_the_same_report(trace, monkeypatch, capsys):
    # In process (the thread count is read when the rules run): a subprocess would add ~1 s of imports per run.
    outputs = []
    for threads in ("1", "4"):
        monkeypatch.setenv(rule_threads.ENV, threads)
        assert main(["check", "--format", "json", "--fail-on", "never", "--no-plugins", str(trace)]) == 0
        outputs.append(capsys.readouterr().out)
    serial, threaded = outputs
    assert threaded == serial and '"findings"' in serial


def test_results_keep_the_items_order_and_unshareable_items_stay_in_the_main_thread():
    where: dict[int, str] = {}

    def call(i: int) -> int:
        where[i] = threading.current_thread().name
        return i * i

    out = run_all(list(range(8)), call, 3, shareable=lambda i: i % 3 != 0)
    assert out == [i * i for i in range(8)]
    assert {where[i] for i in (0, 3, 6)} == {threading.main_thread().name}
    assert all(where[i].startswith("nsys-rules-rule") for i in range(8) if i % 3)


def test_an_error_in_a_rule_thread_reaches_the_caller():
    def call(i: int) -> int:
        if i == 2:
            raise ValueError("boom")
        return i

    with pytest.raises(ValueError, match="boom"):
        run_all([1, 2, 3], call, 2)


def test_thread_count(monkeypatch):
    monkeypatch.delenv(rule_threads.ENV, raising=False)
    monkeypatch.setattr(rule_threads, "usable_cores", lambda: 2)
    assert thread_count(20, False) == 1  # few cores: one after another, the peak stays one rule's
    monkeypatch.setattr(rule_threads, "usable_cores", lambda: 16)
    assert thread_count(20, False) == 4 and thread_count(1, False) == 1
    assert thread_count(20, True) == 1  # a memory limit keeps them serial
    monkeypatch.setenv(rule_threads.ENV, "3")
    assert thread_count(20, False) == 3 and thread_count(2, False) == 2
    monkeypatch.setenv(rule_threads.ENV, "many")
    assert thread_count(20, False) == 1
