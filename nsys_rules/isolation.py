"""The boundary around plugin code: run one rule with a time limit and check what it returns.

Rules (built-in or from plugins) are code we do not control at run time. Whatever one does,
the run must end with the report of every other rule and a documented exit code:

* an exception, ``sys.exit()`` (``SystemExit``) or a value that is not an iterable of findings
  becomes an error entry naming the rule (exit 4), never the end of the run;
* a rule that runs past ``--rule-timeout`` seconds is stopped and reported the same way;
* each finding is checked (a :class:`Finding` of this rule, a real :class:`Severity`, text
  fields that are text, metrics that are numbers, savings a finite number >= 0, a location
  that serializes): a bad one is dropped with an error naming the rule and what is wrong.

* a rule returns at most ``--max-findings`` findings (1000 by default): the first ones are kept and
  the rest counted (:class:`~nsys_rules.records.Capped`, the report's ``capped``); a generator is
  read no further than one past the limit, so an endless one costs nothing;
* the process state a rule changes is put back after it, and its output goes to stderr, never
  into the report on stdout (:mod:`nsys_rules.containment`);
* a ``KeyboardInterrupt`` *raised* by the rule (no Ctrl-C arrived) is that rule's error; a real
  Ctrl-C is the user's and still ends the run (exit 130), even when the rule swallowed it;
* a rule that ignores the time limit (catches ``BaseException`` in a loop, resets ``SIGALRM``)
  is ended with the process, after the report of what is known (:mod:`nsys_rules.deadline`).

The time limit uses ``SIGALRM`` in the main thread: the alarm raises :class:`RuleTimeout`
(a ``BaseException``, so a plugin's ``except Exception`` cannot swallow it) and is re-armed
every second until the rule gives up. Outside the main thread (Dask workers run tasks in
threads) the rule runs in a daemon thread that is abandoned when it overruns. A rule stuck
inside C code that never returns to Python cannot be stopped by either; that is the one case
left to the operating system (``timeout``, the CI job limit).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import signal
import sys
import threading
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from nsys_rules.containment import Contained, contained, end_forked_child, signal_handlers_kept
from nsys_rules.deadline import watch
from nsys_rules.settings import DEFAULT_MAX_FINDINGS, DEFAULT_RULE_TIMEOUT
from nsys_rules.units import plain_number
from nsys_rules.errors import InputError, MissingData, PluginError, UsageError
from nsys_rules.findings import Finding, Location, Metric, Severity, rank_key
from nsys_rules.records import Capped, RunError, Skipped
from nsys_rules.rule import Rule, RuleContext
from nsys_rules.job_rule import JobContext, JobRule
from nsys_rules.textsafe import clip_value



class RuleTimeout(BaseException):
    """Raised inside a rule that ran past its time limit (not an ``Exception``: rules cannot catch it by accident)."""


@dataclass
class RuleOutcome:
    """What one rule produced: its valid findings, a skip reason, or errors (exit 4)."""

    findings: list[Finding] = field(default_factory=list)
    skipped: Skipped | None = None
    errors: list[RunError] = field(default_factory=list)
    capped: Capped | None = None


def run_rule(rule: type[Rule] | type[JobRule], context: Callable[[], RuleContext | JobContext], label: str,
             timeout: float | None = DEFAULT_RULE_TIMEOUT, max_findings: int | None = DEFAULT_MAX_FINDINGS) -> RuleOutcome:
    """Run ``rule`` on the :class:`RuleContext` that ``context()`` builds, within ``timeout`` seconds.

    ``context`` is called inside the boundary but outside the time limit (the windows it cuts
    are shared by every rule): its :class:`MissingData` is a skip like the rule's own. ``label``
    names the trace in the outcome; ``timeout`` None means no limit. :class:`UsageError` and
    :class:`InputError` still end the run (a bad filter, a damaged file found mid-read are not
    one rule's fault); everything else a rule can do is recorded. ``max_findings`` None: no limit.
    """
    outcome = RuleOutcome()

    def error(message: str, exc: BaseException | None = None) -> None:
        stack = "".join(traceback.format_exception(exc))[-4000:] if exc is not None else ""
        outcome.errors.append(RunError(message, rule=rule.name, trace=label, traceback=stack))

    seen: Contained | None = None
    hard = (f"did not stop at --rule-timeout {timeout:g} s (it ignored the stop) and the run was ended with what was "
            "known" if timeout is not None else "")
    try:
        ctx = context()
        pid = os.getpid()
        with contained() as seen, signal_handlers_kept(), watch(timeout, RunError(hard, rule=rule.name, trace=label)):
            try:
                produced, dropped = limited(lambda: _collect(ctx, max_findings), timeout)
            finally:
                end_forked_child(pid)  # the rule forked and its child came back: it must not report twice
        if seen.interrupted:
            raise KeyboardInterrupt  # the user's Ctrl-C, even when the rule swallowed it
    except KeyboardInterrupt as exc:
        if seen is None or seen.interrupted:  # SIGINT is delivered to the main thread, the one that watches it
            raise
        error("raised KeyboardInterrupt without a Ctrl-C; a rule must return its findings, not interrupt the run", exc)
        return outcome
    except MissingData as gap:
        outcome.skipped = Skipped(rule.name, label, gap.reason, gap.fix)
        return outcome
    except (UsageError, InputError):
        raise
    except RuleTimeout:
        error(f"did not finish within {plain_number(timeout or 0, 6)} s and was stopped (raise the limit with --rule-timeout)")
        return outcome
    except SystemExit as exc:
        error(f"called sys.exit({safe_repr(exc.code)}); a rule must return its findings, not end the run", exc)
        return outcome
    except BaseException as exc:  # noqa: BLE001 - one rule failing (CancelledError, GeneratorExit, its own) hides no other
        error(f"{type(exc).__name__}: {safe_text(exc, 500)}", exc)
        return outcome
    finally:
        if seen is not None and seen.stray:
            _note_stray(rule.name, label, seen.stray)
    if dropped != 0:
        outcome.capped = Capped(rule.name, label, len(produced), dropped)
    for i, item in enumerate(produced, 1):
        problem = finding_problem(item, rule.name)
        if problem:
            error(f"finding {i} dropped: {problem}")
        else:
            outcome.findings.append(_normalized(item))
    return outcome


def _collect(ctx: RuleContext | JobContext, limit: int | None) -> tuple[list[Any], int | None]:
    """The first ``limit`` things ``check`` returns, and how many more there were (None: more, not counted)."""
    # A job rule's context is a JobContext and a trace rule's a RuleContext: each rule gets its own kind.
    produced = ctx.rule.check(ctx)  # type: ignore[arg-type]
    if isinstance(produced, (str, bytes, dict)) or not hasattr(produced, "__iter__"):
        raise TypeError(f"check() returned {type(produced).__name__}, not an iterable of findings")
    if limit is None:
        return list(produced), 0
    if isinstance(produced, (list, tuple)):  # already whole: the count of the rest is free
        return list(produced[:limit]), max(0, len(produced) - limit)
    items = list(itertools.islice(produced, limit + 1))  # one past the limit says there were more
    if len(items) <= limit:
        return items, 0
    close = getattr(produced, "close", None)
    if callable(close):
        try:
            close()  # the generator's own cleanup (finally blocks), not its next finding
        except Exception:  # noqa: BLE001 - a generator that yields on close: its findings are not read anyway
            pass
    return items[:limit], None


def _note_stray(rule: str, label: str, threads: list[threading.Thread]) -> None:
    """One stderr line: the rule left threads running; the process will not wait for them."""
    kept_alive = [t for t in threads if not t.daemon]
    if not kept_alive:
        return
    names = ", ".join(clip_value(t.name, 40) for t in kept_alive[:3]) + (", ..." if len(kept_alive) > 3 else "")
    sys.stderr.write(f"nsys-rules: rule {rule} left {len(kept_alive)} thread(s) running on {clip_value(label, 200)} "
                     f"({names}); the run does not wait for them\n")


def call_plugin(function: Callable[..., Any], what: str, *args: Any) -> Any:
    """``function(*args)`` for plugin code the run needs (a formatter): its failure, ``sys.exit()``
    included, is :class:`PluginError` (one line, exit 4) naming ``what``."""
    pid = os.getpid()
    try:
        with signal_handlers_kept():
            try:
                return function(*args)
            finally:
                end_forked_child(pid)
    except (UsageError, InputError, PluginError, KeyboardInterrupt):
        raise
    except SystemExit as exc:
        raise PluginError(f"{what} called sys.exit({safe_repr(exc.code)})") from None
    except BaseException as exc:  # noqa: BLE001 - plugin code: say whose, one line
        raise PluginError(f"{what} failed: {type(exc).__name__}: {safe_text(exc, 300)}") from exc


def safe_text(value: object, limit: int) -> str:
    """``value`` as one clipped line (:func:`clip_value`), even when its ``__str__`` raises (plugin objects)."""
    try:
        return clip_value(value, limit)
    except BaseException:  # noqa: BLE001 - a plugin's __str__ may raise anything
        return f"<{type(value).__name__} that cannot be shown>"


def safe_repr(value: object) -> str:
    """``repr(value)`` as one clipped line, even when its ``__repr__`` raises."""
    try:
        return clip_value(repr(value), 120)
    except BaseException:  # noqa: BLE001 - a plugin's __repr__ may raise anything
        return f"<{type(value).__name__}>"


# -- the time limit -------------------------------------------------------------------------
def limited(call: Callable[[], Any], timeout: float | None) -> Any:
    """``call()`` stopped with :class:`RuleTimeout` after ``timeout`` seconds (None: no limit)."""
    if timeout is None:
        return call()
    if threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer"):
        with _alarm(timeout):
            return call()
    return _in_thread(call, timeout)


@contextmanager
def _alarm(seconds: float) -> Iterator[None]:
    def expire(signum: int, frame: Any) -> None:
        raise RuleTimeout()

    previous = signal.signal(signal.SIGALRM, expire)
    started = time.monotonic()
    # Re-armed every second after the first expiry: a rule that swallows one alarm gets the next.
    old_delay, _ = signal.setitimer(signal.ITIMER_REAL, seconds, 1.0)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if old_delay:  # someone else's alarm was pending: give it back what is left (at least a moment)
            signal.setitimer(signal.ITIMER_REAL, max(old_delay - (time.monotonic() - started), 0.001))


def _in_thread(call: Callable[[], Any], timeout: float) -> Any:
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the calling thread as is
            box["error"] = exc

    worker = threading.Thread(target=target, name="nsys-rules-rule", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        raise RuleTimeout()
    if "error" in box:
        raise box["error"]
    return box["value"]


# -- what a rule returns --------------------------------------------------------------------
def finding_problem(item: Any, rule_name: str) -> str | None:
    """Why ``item`` is not a usable finding of rule ``rule_name``; None when it is."""
    if not isinstance(item, Finding):
        return f"check() yielded {type(item).__name__}, not a Finding"
    if item.rule != rule_name:
        return f"it names rule {clip_value(item.rule, 60)!r}, not {rule_name!r} (use ctx.finding())"
    if not isinstance(item.severity, Severity):
        return f"severity {clip_value(item.severity, 40)!r} is a {type(item.severity).__name__}, not a Severity"
    for name in ("title", "message", "recommendation", "key"):
        if not isinstance(getattr(item, name), str):
            return f"{name} is a {type(getattr(item, name)).__name__}, not text"
    savings = item.estimated_savings_ns
    if savings is not None and not (_number(savings) and 0 <= savings <= MAX_SAVINGS_NS):
        return f"estimated_savings_ns {safe_text(savings, 60)} is not a finite number from 0 to 2**63 - 1"
    if item.savings_range is not None:
        low_high = item.savings_range
        if not (isinstance(low_high, (tuple, list)) and len(low_high) == 2
                and all(_number(v) and 0 <= v <= MAX_SAVINGS_NS for v in low_high)):
            return f"savings_range {safe_text(low_high, 60)} is not two numbers from 0 to 2**63 - 1"
    if not hasattr(item.metrics, "items"):
        return f"metrics is a {type(item.metrics).__name__}, not a mapping"
    for key, value in item.metrics.items():
        if not isinstance(key, str) or not isinstance(value, Metric) or isinstance(value.value, bool) \
                or not isinstance(value.value, (int, float)) or not isinstance(value.unit, str):
            return f"metric {clip_value(key, 60)!r} is not a Metric(number, unit)"
        if isinstance(value.value, int) and not _number(value.value):
            return f"metric {clip_value(key, 60)!r} is an int beyond what a float holds (no format can show it)"
    if not isinstance(item.location, Location):
        return f"location is a {type(item.location).__name__}, not a Location"
    try:
        json.dumps(item.location.to_json())
        rank_key(item)
        item.fingerprint  # noqa: B018 - a subclass's property may raise: read it once here
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - plugin objects: whatever their properties raise
        return f"location does not serialize ({type(exc).__name__}: {safe_text(exc, 120)})"
    return None


#: The largest saving a finding may claim (int64 nanoseconds: 292 years); beyond it no format can show it.
MAX_SAVINGS_NS = 2**63 - 1


def _number(value: Any) -> bool:
    """A real number (not a bool) that a float holds, finite: what every format can print."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int past 1.8e308
        return False


def _normalized(finding: Finding) -> Finding:
    """The finding as a plain :class:`Finding` (a plugin's subclass may override what the formats read:
    ``fingerprint``, ``to_json``), savings as an int (a float from a plugin would print as 1234.0 in the JSON)."""
    from dataclasses import fields, replace

    if type(finding) is not Finding:
        finding = Finding(**{f.name: getattr(finding, f.name) for f in fields(Finding)})
    savings = finding.estimated_savings_ns
    if savings is None or isinstance(savings, int):
        return finding
    return replace(finding, estimated_savings_ns=int(savings))
