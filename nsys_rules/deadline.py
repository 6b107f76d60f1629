"""The run's last resort against a rule that will not stop: a watchdog thread that ends the process.

``--rule-timeout`` stops a rule from inside (``SIGALRM`` raising :class:`~nsys_rules.isolation.RuleTimeout`
every second), which needs the rule's cooperation: a plugin that catches ``BaseException`` in a
retry loop, resets ``SIGALRM`` or blocks the signal never stops that way. So when the process is
ours (the console script, not a library caller of ``cli.main``), a :class:`Deadline` watches each
rule run in the main thread from a daemon thread that does not depend on the rule at all: at
``timeout + grace`` seconds it writes what is known (the report of the rules that finished, with
this rule's error entry; the command decides how, through ``expire``), then ends the process with
exit 4 (``os._exit``: no cleanup code of the rule's can delay it).

Normal runs pay one thread start per run and a condition notify per rule. The one case left to the
operating system is a rule stuck in C code that holds the GIL: no Python thread runs then.
"""

from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator

from nsys_rules.errors import ExitCode
from nsys_rules.records import RunError

__all__ = ["Deadline", "grace_seconds", "install", "installed", "watch"]

#: ``os._exit`` as it was at import: a plugin replacing ``os._exit`` cannot disarm the watchdog.
_hard_exit: Callable[[int], None] = os._exit  # typed as returning: a test stands in for it


#: Seconds a rule gets to give up after a real Ctrl-C before the process ends with exit 130.
INTERRUPT_GRACE_S = 2.0


def grace_seconds(timeout: float) -> float:
    """Seconds the watchdog waits past ``--rule-timeout`` for the rule to give up on its own: 2 s, or a tenth
    of the limit, at most 30 s (the alarm's RuleTimeout is re-raised every second meanwhile)."""
    return min(30.0, max(2.0, timeout / 10))


class Deadline:
    """A watchdog thread with at most one armed deadline; ``expire(error)`` runs in that thread when it passes."""

    def __init__(self, expire: Callable[[RunError], None]) -> None:
        self.expire = expire
        self._cond = threading.Condition()
        self._due: float | None = None
        self._error: RunError | None = None
        self._interrupted = False
        self._pid = os.getpid()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the watchdog thread (before any rule runs: a rule's new threads are noted as its own)."""
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._watch, name="nsys-rules-deadline", daemon=True)
            self._thread.start()

    def arm(self, seconds: float, error: RunError) -> None:
        """End the process with ``error`` unless :meth:`disarm` comes within ``seconds``."""
        self.start()
        with self._cond:
            self._due = time.monotonic() + seconds
            self._error = error
            self._cond.notify()

    def disarm(self) -> None:
        """The rule returned (or was stopped) in time."""
        with self._cond:
            if not self._interrupted:
                self._due = None
                self._error = None

    def interrupted(self) -> None:
        """A real Ctrl-C arrived while a rule ran: the rule gets :data:`INTERRUPT_GRACE_S` to give up, then the
        process ends with exit 130 (the run ends as interrupted even when the rule swallows the interrupt)."""
        with self._cond:
            if self._interrupted:
                return
            self._interrupted = True
            due = time.monotonic() + INTERRUPT_GRACE_S
            self._due = due if self._due is None else min(self._due, due)
            self._cond.notify()

    def _watch(self) -> None:
        with self._cond:
            while True:
                if self._due is None:
                    self._cond.wait()
                    continue
                left = self._due - time.monotonic()
                if left > 0:
                    self._cond.wait(left)
                    continue
                error = self._error
                break
        if self._interrupted:
            _say("nsys-rules: interrupted")
            _hard_exit(130)
            return  # only reached when _hard_exit is a test's stand-in
        try:
            if error is not None:
                self.expire(error)
        except BaseException as exc:  # noqa: BLE001 - the process ends below whatever the report did
            _say(f"nsys-rules: the report could not be written ({type(exc).__name__}: {exc})")
        finally:
            _hard_exit(int(ExitCode.INCOMPLETE))


_installed: Deadline | None = None


def install(expire: Callable[[RunError], None]) -> Deadline:
    """Watch every rule this process runs in its main thread from now on; ``expire`` writes what is known."""
    global _installed
    _installed = Deadline(expire)
    _installed.start()
    return _installed


def installed() -> Deadline | None:
    """The deadline of this process (None when none was installed).

    A worker forked from a process with a deadline (``--jobs``) gets its own: the parent's thread is not in the
    child. There the report is the parent's to write, so the worker says which rule would not stop and ends; the
    parent reports that trace as failed (exit 4).
    """
    global _installed
    deadline = _installed
    if deadline is not None and deadline._pid != os.getpid():
        _installed = deadline = Deadline(_end_worker)
        deadline.start()
    return deadline


def _end_worker(error: RunError) -> None:
    _say(f"nsys-rules: rule {error.rule} {error.error} (on {error.trace}); its worker process was ended")


@contextmanager
def watch(seconds: float | None, error: RunError) -> Iterator[None]:
    """The body (a rule, in the main thread) ends by ``seconds`` plus the grace, or the process does."""
    deadline = installed()
    if deadline is None or seconds is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    deadline.arm(seconds + grace_seconds(seconds), error)
    try:
        yield
    finally:
        deadline.disarm()


def _say(line: str) -> None:
    try:
        os.write(2, (line + "\n").encode("utf-8", "replace"))
    except OSError:
        pass
