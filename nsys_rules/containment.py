"""The process state a rule may not change: what :func:`contained` puts back after each rule.

Rule code shares the process with the report. What it does to process-wide state must not reach
the report or the rules after it:

* **stdout** belongs to the report (JSON, SARIF). While a rule runs, ``print()`` and
  ``sys.stdout.write`` go to stderr (Python's ``sys.stdout`` is a :class:`RuleStdout` that
  routes them), and so do writes to file descriptor 1 (``os.write(1, ...)``, a child process, C
  code's ``printf``): fd 1 is pointed at stderr for the rule's duration. A thread the rule leaves
  running keeps writing to stderr: only the thread that installed the router writes the report.
* ``sys.stdout``/``sys.stderr`` objects, the working directory, the ``umask``, the thread's signal
  mask (a rule that blocks ``SIGALRM`` would disarm the next rules' time limit) and the interpreter's
  thread switch interval are put back as they were, whatever the rule set them to.
* ``KeyboardInterrupt``: a real Ctrl-C is the user's and still ends the run (exit 130), even when
  the rule swallows it (the deadline's watchdog ends the process 2 s later); a rule *raising*
  ``KeyboardInterrupt`` without one (a plugin's ``raise KeyboardInterrupt`` to bail out) is that
  rule's error. :attr:`Contained.interrupted` says whether SIGINT really arrived.
* Threads the rule started and left running (:attr:`Contained.stray`) are named in a stderr line;
  they cannot keep the process alive after the report (``cli._leave`` does not wait for them).

Cost per rule: a few system calls (``dup``/``dup2``, ``open`` of ``.``, ``umask``); nothing
while the rule runs. Outside the main thread (rules side by side, Dask) only the stdout routing
applies: the other guards change process-wide state that another thread's rule may be using.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator, TextIO

from nsys_rules.deadline import installed

__all__ = ["Contained", "RuleStdout", "contained", "end_forked_child", "kept_cwd", "real_stdout_fd", "report_output",
           "report_stream", "routed_stdout", "signal_handlers_kept"]


# -- the report's own stdout ------------------------------------------------------------------
#: Where a command writes its report while :func:`report_output` holds stdout (None otherwise: ``sys.stdout``).
_report: Any = None
#: The report's descriptor while the console script runs with fd 1 on stderr (None otherwise).
_report_fd: int | None = None


def report_stream() -> Any:
    """The stream a command writes its report to: stdout as it was when the command started, whatever plugin
    code has done to ``sys.stdout`` and fd 1 since (:func:`report_output`)."""
    return _report if _report is not None else sys.stdout


@contextmanager
def report_output(own_process: bool) -> Iterator[None]:
    """Hold stdout for the report while a command runs (its plugins' imports, hooks, rules and formats).

    ``sys.stdout`` is stderr for the command's duration, so ``print()`` from any plugin code, at import, in a
    hook, from a thread it leaves running, goes to stderr. In the console script's own process (``own_process``)
    fd 1 is pointed at stderr too, for good: a plugin's ``os.write(1, ...)``, C ``printf``, ``sys.__stdout__``,
    a child process and its ``atexit`` handlers all reach stderr, and the report goes to a duplicate of the
    original fd 1 that only :func:`report_stream` writes. A library caller's descriptors are left alone.
    """
    global _report, _report_fd
    saved, saved_report, saved_fd = sys.stdout, _report, _report_fd
    opened = None
    if own_process and saved is not None and _report_fd is None:
        try:
            saved.flush()
            fd = os.dup(1)
            os.dup2(2, 1)
        except (OSError, ValueError):
            fd = None  # fd 1 or 2 closed: nothing to protect, or nowhere to send it
        if fd is not None:
            _report_fd = fd
            opened = _report = open(fd, "w", encoding=getattr(saved, "encoding", None) or "utf-8",  # noqa: SIM115
                                    errors=getattr(saved, "errors", None) or "strict", closefd=True)
    if opened is None:
        _report = saved
    sys.stdout = sys.stderr
    try:
        yield
    finally:
        if sys.stdout is sys.stderr:
            sys.stdout = saved
        _report, _report_fd = saved_report, saved_fd
        if opened is not None:
            try:
                opened.close()  # the report is whole: the reader sees its end; an atexit print cannot add to it
            except (OSError, ValueError):
                pass


def report_isatty() -> bool:
    """Whether the report is read on a terminal (the layout's width follows it)."""
    try:
        stream = report_stream()
        return stream is not None and stream.isatty()
    except (OSError, ValueError, AttributeError):
        return False


def end_forked_child(pid: int) -> None:
    """Plugin code that started in process ``pid`` forked, and its child came back into ours: end that child
    at once (``os._exit``), before it writes a second report or runs the rest of the analysis twice."""
    if os.getpid() != pid:
        os._exit(0)


@contextmanager
def signal_handlers_kept() -> Iterator[None]:
    """Put back every signal handler plugin code changed (``SIG_IGN`` on SIGTERM/SIGINT would make the run
    deaf to its stop): the handlers of the main thread as they were before the body."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {}
    for sig in signal.valid_signals():
        try:
            before[sig] = signal.getsignal(sig)
        except (ValueError, OSError):
            continue
    try:
        yield
    finally:
        for sig, handler in before.items():
            try:
                if handler is not None and signal.getsignal(sig) is not handler:
                    signal.signal(sig, handler)
            except (ValueError, OSError, TypeError):
                pass


class RuleStdout:
    """``sys.stdout`` while rules run: the owner thread's writes outside rule code go to the real stdout, every
    other write (inside a rule, or from any other thread) to stderr."""

    def __init__(self, real: TextIO, owner: int) -> None:
        self.real = real
        self.owner = owner
        self.in_rule = 0  # > 0 while the owner thread runs rule code
        self.keep = False  # a rule left threads running: stay installed after the rules

    def _target(self) -> TextIO:
        if self.in_rule == 0 and threading.get_ident() == self.owner:
            return self.real
        err = sys.stderr
        return sys.__stderr__ if err is None or err is self else err  # type: ignore[return-value]

    def write(self, text: str) -> int:
        """Write ``text`` where the calling thread's output belongs."""
        return self._target().write(text)

    def flush(self) -> None:
        """Flush the stream the calling thread writes to."""
        self._target().flush()

    def __getattr__(self, name: str) -> Any:  # fileno, isatty, encoding, buffer...: the target's own
        return getattr(self._target(), name)


@contextmanager
def routed_stdout() -> Iterator[RuleStdout]:
    """Install the stdout router for the rules of a run, owned by the calling thread (the one that writes the
    report); removed afterwards unless a rule left threads running that may still print."""
    current = sys.stdout
    if isinstance(current, RuleStdout):
        yield current
        return
    router = RuleStdout(current, threading.get_ident())
    if current is None:  # no stdout at all (pythonw, closed by a library caller): no report to protect
        yield router
        return
    sys.stdout = router  # a stream in all that print() and write() use (TextIO is not checked at runtime)
    try:
        yield router
    finally:
        if sys.stdout is router and not router.keep:
            sys.stdout = current


@dataclass
class Contained:
    """What :func:`contained` saw while the rule ran."""

    #: A real SIGINT (Ctrl-C) arrived during the rule.
    interrupted: bool = False
    #: Threads the rule started that were still running when it returned.
    stray: list[threading.Thread] = field(default_factory=list)


#: The duplicate of the report's stdout descriptor while fd 1 points at stderr (None otherwise).
_saved_stdout_fd: int | None = None


def real_stdout_fd() -> int:
    """The descriptor the report goes to: the report's own (:func:`report_output`), else fd 1, or its saved
    duplicate while a rule runs with fd 1 on stderr."""
    if _report_fd is not None:
        return _report_fd
    return _saved_stdout_fd if _saved_stdout_fd is not None else 1


@contextmanager
def contained() -> Iterator[Contained]:
    """Run the body (a rule) with stdout routed to stderr, and put back the process state afterwards."""
    seen = Contained()
    before = set(threading.enumerate())
    with routed_stdout() as router:
        old_out, old_err = sys.stdout, sys.stderr
        mine = threading.get_ident() == router.owner
        router.in_rule += mine
        if threading.current_thread() is not threading.main_thread():
            try:
                yield seen
            finally:
                router.in_rule -= mine
                _after(router, old_out, old_err, before, seen)
            return
        cwd = _open_cwd()
        mask = os.umask(0o022)
        os.umask(mask)
        blocked = _signal_mask()
        switch = sys.getswitchinterval()
        saved_fd = _point_stdout_fd_at_stderr()
        old_sigint = _watch_sigint(seen)
        try:
            yield seen
        finally:
            if old_sigint is not None:
                try:
                    signal.signal(signal.SIGINT, old_sigint)
                except (ValueError, OSError, TypeError):
                    pass
            _restore_stdout_fd(saved_fd)
            router.in_rule -= mine
            _after(router, old_out, old_err, before, seen)
            _restore_cwd(cwd)
            os.umask(mask)
            if blocked is not None:
                signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
            sys.setswitchinterval(switch)


def _signal_mask() -> set[int | signal.Signals] | None:
    if not hasattr(signal, "pthread_sigmask"):
        return None  # not POSIX: no signal masks
    return signal.pthread_sigmask(signal.SIG_BLOCK, [])


def _after(router: RuleStdout, old_out: Any, old_err: Any, before: set[threading.Thread], seen: Contained) -> None:
    """Streams back as they were; the threads the rule left running noted (the router then stays)."""
    sys.stdout, sys.stderr = old_out, old_err
    seen.stray = [t for t in threading.enumerate() if t not in before and t.is_alive()]
    if seen.stray:
        router.keep = True


def _point_stdout_fd_at_stderr() -> int | None:
    global _saved_stdout_fd
    if _saved_stdout_fd is not None:
        return None  # already pointed (a rule inside a rule): the outer one restores it
    try:
        sys.__stdout__.flush() if sys.__stdout__ is not None else None
        saved = os.dup(1)
    except (OSError, ValueError):
        return None  # fd 1 is closed: nothing of the report's to protect there
    try:
        os.dup2(2, 1)
    except OSError:
        os.close(saved)
        return None
    _saved_stdout_fd = saved
    return saved


def _restore_stdout_fd(saved: int | None) -> None:
    global _saved_stdout_fd
    if saved is None:
        return
    try:
        os.dup2(saved, 1)
    finally:
        os.close(saved)
        _saved_stdout_fd = None


def _watch_sigint(seen: Contained) -> Any:
    """Note a real SIGINT in ``seen`` and then act as the handler in place did; the handler to put back."""
    try:
        previous = signal.getsignal(signal.SIGINT)
    except ValueError:
        return None
    if not callable(previous):
        return None  # ignored or default: nothing of ours to tell apart

    def note(signum: int, frame: Any) -> None:
        seen.interrupted = True
        deadline = installed()
        if deadline is not None:
            deadline.interrupted()  # the process ends even if the rule swallows the KeyboardInterrupt below
        previous(signum, frame)

    try:
        signal.signal(signal.SIGINT, note)
    except (ValueError, OSError):
        return None
    return previous


@contextmanager
def kept_cwd() -> Iterator[None]:
    """The working folder put back after the body, whatever it changed it to (a worker's task)."""
    cwd = _open_cwd()
    try:
        yield
    finally:
        _restore_cwd(cwd)


def _open_cwd() -> int | str | None:
    # A descriptor of the folder finds it back even when the rule renamed it or changed into a deleted one.
    try:
        return os.open(".", os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        try:
            return os.getcwd()
        except OSError:
            return None


def _restore_cwd(cwd: int | str | None) -> None:
    if cwd is None:
        return
    try:
        os.chdir(cwd)
    except OSError:
        pass
    finally:
        if isinstance(cwd, int):
            os.close(cwd)
