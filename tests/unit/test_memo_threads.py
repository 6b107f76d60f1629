"""``Trace.memo`` under threads: each fact of a trace is built once, however many threads ask at once.

The rules of one trace run side by side (:mod:`nsys_rules.rule_threads`), and several model facts
(the framework, the Python stacks, kernel symbols, the window's rows) are first built inside
whichever rule asks first. These tests count every build through a memo whose builds are slowed
down (so that, were the lock missing, a second thread would start the same build meanwhile), and
assert each key was built exactly once and the report is the one-thread report.

``NSYS_RULES_STRESS_ROUNDS`` sets the rounds of the stress tests (3 by default; 50 to soak).
"""

from __future__ import annotations

import collections
import os
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from nsys_rules import rule_threads
from nsys_rules.cli import main
from nsys_rules.inputs import open_trace
from nsys_rules.loaders.tables import TABLES
from nsys_rules.model import memo as memo_module
from nsys_rules.model.activity import gpu_ops, kernel_symbols
from nsys_rules.model.budget import step_budget
from nsys_rules.model.framework import framework
from nsys_rules.model.gpu_metrics import metric_set
from nsys_rules.model.memo import Memo
from nsys_rules.model.python_sites import python_stacks
from nsys_rules.model.steps import step_model
from nsys_rules.model.windows import steady_state_window
from tests.conftest import ROOT, SHARED

ROUNDS = int(os.environ.get("NSYS_RULES_STRESS_ROUNDS", "3"))
#: Traces of the checkout (always there) and of ../shared where it is (graphs, host syncs, worker threads).
TRACES = [ROOT / "examples" / "rust_release_build.sqlite", *sorted((ROOT / "tests" / "data" / "holdout").glob("*.sqlite")),
          *[p for p in (SHARED / "traces" / "h200" / name for name in (
              "decode_graph_node.sqlite", "engine_worker_thread.sqlite", "decode_hostsync_nocache.sqlite")) if p.exists()]]


class CountingMemo:
    """Counts each build of every memo (by memo and key) and slows each build down by ``delay`` seconds."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.builds: collections.Counter[tuple[int, tuple[Any, ...]]] = collections.Counter()
        self._lock = threading.Lock()
        self._real = Memo.get

    def get(self, memo: Memo, key: tuple[Any, ...], build: Callable[[], Any], fresh: Any = None) -> Any:
        def counted() -> Any:
            with self._lock:
                self.builds[(id(memo), key)] += 1
            time.sleep(self.delay)  # a wide window for a second thread to start the same build, were it allowed
            return build()

        return self._real(memo, key, counted, fresh)

    def twice(self) -> dict[str, int]:
        """Keys built more than once, by name."""
        return {f"{key}": n for (_, key), n in self.builds.items() if n != 1}

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Every ``Memo.get`` of the test goes through :meth:`get` (a plain function, so it binds to the memo)."""
        monkeypatch.setattr(memo_module.Memo, "get", lambda memo, key, build, fresh=None: self.get(memo, key, build, fresh))


@pytest.fixture
def counting(monkeypatch: pytest.MonkeyPatch) -> Iterator[CountingMemo]:
    counter = CountingMemo(delay=0.002)
    counter.install(monkeypatch)
    yield counter


def test_one_key_asked_by_many_threads_at_once_is_built_once() -> None:
    memo = Memo()
    calls = []
    start = threading.Barrier(16)

    def build() -> object:
        calls.append(1)
        time.sleep(0.02)
        return object()

    def ask(_: int) -> object:
        start.wait()
        return memo.get(("k",), build)

    with ThreadPoolExecutor(16) as pool:
        got = list(pool.map(ask, range(16)))
    assert len(calls) == 1 and all(g is got[0] for g in got)


def test_builds_that_ask_for_other_keys_do_not_deadlock() -> None:
    """Thread A builds a (which needs b), thread B builds b (which needs c) at once: per-key locks, no wait cycle."""
    memo = Memo()
    order: list[str] = []
    start = threading.Barrier(3)

    def fact(name: str, needs: str | None) -> Callable[[], str]:
        def build() -> str:
            order.append(name)
            time.sleep(0.02)
            return name + (memo.get((needs,), FACTS[needs]) if needs else "")
        return build

    FACTS = {"a": fact("a", "b"), "b": fact("b", "c"), "c": fact("c", None)}

    def ask(name: str) -> str:
        start.wait()
        return memo.get((name,), FACTS[name])

    with ThreadPoolExecutor(3) as pool:
        futures = [pool.submit(ask, name) for name in "abc"]
        got = [f.result(timeout=10) for f in futures]  # a deadlock fails here, not by hanging the run
    assert got == ["abc", "bc", "c"] and sorted(order) == ["a", "b", "c"]


def test_a_value_fresh_refuses_is_built_again_and_replaces_the_old_one() -> None:
    memo = Memo()
    version = [1]
    built = memo.get(("k",), lambda: version[0], lambda v: v == version[0])
    assert built == 1 and memo.get(("k",), lambda: 99, lambda v: v == version[0]) == 1  # kept
    version[0] = 2
    assert memo.get(("k",), lambda: version[0], lambda v: v == version[0]) == 2 and memo.peek(("k",)) == 2
    memo.clear()
    assert memo.peek(("k",)) is None


def _facts(trace: Any) -> list[Callable[[], object]]:
    """The model facts rules and the engine share, each a call of no arguments."""
    return [lambda: gpu_ops(trace), lambda: kernel_symbols(trace), lambda: step_model(trace),
            lambda: steady_state_window(trace), lambda: framework(trace), lambda: python_stacks(trace),
            lambda: metric_set(trace), lambda: step_budget(trace, step_model(trace)), trace.api_names]


@pytest.mark.parametrize("round_", range(ROUNDS))
@pytest.mark.parametrize("path", TRACES[:3], ids=lambda p: p.name)
def test_model_facts_asked_by_threads_at_once_are_built_once(path: Path, round_: int, counting: CountingMemo) -> None:
    threads = 6
    trace = open_trace(path)
    try:
        # Every table read first, as the engine preloads before the rules run: a frame read again with more
        # columns while threads ask would rightly rebuild what was built from the old one.
        trace.preload({table: TABLES[table].column_names for table in trace.tables_present})
        start = threading.Barrier(threads)

        def ask(seed: int) -> list[object]:
            facts = list(enumerate(_facts(trace)))
            random.Random(seed * 7919 + round_).shuffle(facts)  # each thread asks in its own order
            start.wait()
            return [value for _, value in sorted((i, fact()) for i, fact in facts)]

        with ThreadPoolExecutor(threads) as pool:
            answers = [f.result(timeout=120) for f in [pool.submit(ask, seed) for seed in range(threads)]]
        assert counting.twice() == {}
        assert len(counting.builds) >= len(_facts(trace)) - 2  # every fact went through the memo (a few share one)
        for answer in answers[1:]:
            assert all(a is b for a, b in zip(answer, answers[0], strict=True))  # one value for every thread
    finally:
        trace.close()


def _check(path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["check", "--format", "json", "--fail-on", "never", "--no-plugins", str(path)]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("round_", range(ROUNDS))
@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_rules_in_threads_build_each_fact_once_and_report_as_one_thread(
        path: Path, round_: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(rule_threads.ENV, "1")
    serial = _check(path, capsys)
    counter = CountingMemo(delay=0.001 * (1 + round_ % 3))  # the builds' timing shifted round by round
    counter.install(monkeypatch)
    monkeypatch.setenv(rule_threads.ENV, "4")
    threaded = _check(path, capsys)
    assert counter.twice() == {}
    assert len(counter.builds) > 10  # the run's facts went through the counting memo
    assert threaded == serial and '"findings"' in serial
