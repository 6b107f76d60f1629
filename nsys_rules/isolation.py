"""The boundary around plugin code: run one rule with a time limit and check what it returns.

Rules (built-in or from plugins) are code we do not control at run time. Whatever one does,
the run must end with the report of every other rule and a documented exit code:

* an exception, ``sys.exit()`` (``SystemExit``) or a value that is not an iterable of findings
  becomes an error entry naming the rule (exit 4), never the end of the run;
* a rule that runs past ``--rule-timeout`` seconds is stopped and reported the same way;
* each finding is checked (a :class:`Finding` of this rule, a real :class:`Severity`, text
  fields that are text, metrics that are numbers, savings a finite number >= 0, a location
  that serializes): a bad one is dropped with an error naming the rule and what is wrong.

``KeyboardInterrupt`` is the user's, not the plugin's: it still ends the run (exit 130).

The time limit uses ``SIGALRM`` in the main thread: the alarm raises :class:`RuleTimeout`
(a ``BaseException``, so a plugin's ``except Exception`` cannot swallow it) and is re-armed
every second until the rule gives up. Outside the main thread (Dask workers run tasks in
threads) the rule runs in a daemon thread that is abandoned when it overruns. A rule stuck
inside C code that never returns to Python cannot be stopped by either; that is the one case
left to the operating system (``timeout``, the CI job limit).
"""

from __future__ import annotations

import json
import math
import signal
import threading
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from nsys_rules.units import plain_number
from nsys_rules.settings import DEFAULT_RULE_TIMEOUT
from nsys_rules.errors import InputError, MissingData, PluginError, UsageError
from nsys_rules.findings import Finding, Location, Metric, Severity, rank_key
from nsys_rules.records import RunError, Skipped
from nsys_rules.rule import Rule, RuleContext
from nsys_rules.textsafe import clip_value



class RuleTimeout(BaseException):
    """Raised inside a rule that ran past its time limit (not an ``Exception``: rules cannot catch it by accident)."""


@dataclass
class RuleOutcome:
    """What one rule produced: its valid findings, a skip reason, or errors (exit 4)."""

    findings: list[Finding] = field(default_factory=list)
    skipped: Skipped | None = None
    errors: list[RunError] = field(default_factory=list)


def run_rule(rule: type[Rule], context: Callable[[], RuleContext], label: str,
             timeout: float | None = DEFAULT_RULE_TIMEOUT) -> RuleOutcome:
    """Run ``rule`` on the :class:`RuleContext` that ``context()`` builds, within ``timeout`` seconds.

    ``context`` is called inside the boundary but outside the time limit (the windows it cuts
    are shared by every rule): its :class:`MissingData` is a skip like the rule's own. ``label``
    names the trace in the outcome; ``timeout`` None means no limit. :class:`UsageError` and
    :class:`InputError` still end the run (a bad filter, a damaged file found mid-read are not
    one rule's fault); everything else a rule can do is recorded.
    """
    outcome = RuleOutcome()

    def error(message: str, exc: BaseException | None = None) -> None:
        stack = "".join(traceback.format_exception(exc))[-4000:] if exc is not None else ""
        outcome.errors.append(RunError(message, rule=rule.name, trace=label, traceback=stack))

    try:
        ctx = context()
        produced = limited(lambda: _collect(ctx), timeout)
    except MissingData as gap:
        outcome.skipped = Skipped(rule.name, label, gap.reason, gap.fix)
        return outcome
    except (UsageError, InputError):
        raise
    except RuleTimeout:
        error(f"did not finish within {plain_number(timeout or 0, 6)} s and was stopped (raise the limit with --rule-timeout)")
        return outcome
    except SystemExit as exc:
        error(f"called sys.exit({exc.code!r}); a rule must return its findings, not end the run", exc)
        return outcome
    except Exception as exc:  # noqa: BLE001 - one rule failing must not hide the others
        error(f"{type(exc).__name__}: {clip_value(exc, 500)}", exc)
        return outcome
    for i, item in enumerate(produced, 1):
        problem = finding_problem(item, rule.name)
        if problem:
            error(f"finding {i} dropped: {problem}")
        else:
            outcome.findings.append(_normalized(item))
    return outcome


def _collect(ctx: RuleContext) -> list[Any]:
    produced = ctx.rule.check(ctx)
    if isinstance(produced, (str, bytes, dict)) or not hasattr(produced, "__iter__"):
        raise TypeError(f"check() returned {type(produced).__name__}, not an iterable of findings")
    return list(produced)


def call_plugin(function: Callable[..., Any], what: str, *args: Any) -> Any:
    """``function(*args)`` for plugin code the run needs (a formatter): its failure, ``sys.exit()``
    included, is :class:`PluginError` (one line, exit 4) naming ``what``."""
    try:
        return function(*args)
    except (UsageError, InputError, PluginError):
        raise
    except SystemExit as exc:
        raise PluginError(f"{what} called sys.exit({exc.code!r})") from None
    except Exception as exc:  # noqa: BLE001 - plugin code: say whose, one line
        raise PluginError(f"{what} failed: {type(exc).__name__}: {clip_value(exc, 300)}") from exc


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
    if savings is not None and (isinstance(savings, bool) or not isinstance(savings, (int, float))
                                or not math.isfinite(savings) or savings < 0):
        return f"estimated_savings_ns {savings!r} is not a finite number >= 0"
    if not hasattr(item.metrics, "items"):
        return f"metrics is a {type(item.metrics).__name__}, not a mapping"
    for key, value in item.metrics.items():
        if not isinstance(key, str) or not isinstance(value, Metric) or isinstance(value.value, bool) \
                or not isinstance(value.value, (int, float)) or not isinstance(value.unit, str):
            return f"metric {clip_value(key, 60)!r} is not a Metric(number, unit)"
    if not isinstance(item.location, Location):
        return f"location is a {type(item.location).__name__}, not a Location"
    try:
        json.dumps(item.location.to_json())
        rank_key(item)
    except (TypeError, ValueError, OverflowError, AttributeError) as exc:
        return f"location does not serialize ({type(exc).__name__}: {clip_value(exc, 120)})"
    return None


def _normalized(finding: Finding) -> Finding:
    """Savings as an int (a float from a plugin would print as 1234.0 in the JSON)."""
    savings = finding.estimated_savings_ns
    if savings is None or isinstance(savings, int):
        return finding
    from dataclasses import replace

    return replace(finding, estimated_savings_ns=int(savings))
