"""Subprocesses in tests, each with a hard time limit and a clear failure when it passes (issue 42, item 6).

A child that hangs (a deadlock after a Ctrl-C, a pipe nobody reads) must fail its test, never the suite: on
timeout the child is asked for its threads' stacks (``SIGABRT`` with ``PYTHONFAULTHANDLER``, which every child
these helpers start has), then killed with its process group, and the test fails naming the command, the limit
and the end of what it wrote to stderr. ``tests/meta/test_bounded_subprocesses.py`` keeps every subprocess call
of the tests bounded.
"""

from __future__ import annotations

import os
import signal
import subprocess
from typing import Any, Sequence

import pytest

#: Seconds a child gets by default: a check of the biggest committed trace takes a few on a loaded 2-core machine.
DEFAULT_TIMEOUT = 120.0
#: Seconds given to a hung child to print its stacks after SIGABRT, before it is killed.
DUMP_WAIT = 5.0


def _env(env: dict[str, str] | None) -> dict[str, str]:
    full = dict(os.environ if env is None else env)
    full.setdefault("PYTHONFAULTHANDLER", "1")  # a hung Python child prints every thread's stack on SIGABRT
    return full


def popen(args: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
    """``subprocess.Popen`` in its own process group (so a timeout kills what it started too), faulthandler on."""
    kwargs["env"] = _env(kwargs.get("env"))
    kwargs.setdefault("start_new_session", True)
    return subprocess.Popen(list(args), **kwargs)


def finish(proc: subprocess.Popen[Any], timeout: float = DEFAULT_TIMEOUT, stdin: Any = None) -> tuple[Any, Any]:
    """``proc.communicate(timeout=...)``; past the limit: stacks, kill, and ``pytest.fail`` saying so."""
    try:
        return proc.communicate(stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        pass
    _signal_group(proc, signal.SIGABRT)
    try:
        out, err = proc.communicate(timeout=DUMP_WAIT)
    except subprocess.TimeoutExpired:
        _signal_group(proc, signal.SIGKILL)
        out, err = proc.communicate()
    _signal_group(proc, signal.SIGKILL)  # whatever it started
    text = err.decode("utf-8", "replace") if isinstance(err, bytes) else (err or "")
    pytest.fail(f"subprocess did not end within {timeout:g} s and was killed: {proc.args!r}\n"
                f"its stderr (stacks at the kill, when it is Python):\n{text[-6000:]}", pytrace=False)


def run(args: Sequence[str], timeout: float = DEFAULT_TIMEOUT, check: bool = False, input: Any = None,
        **kwargs: Any) -> subprocess.CompletedProcess[Any]:
    """``subprocess.run`` with a hard limit (see the module docstring); ``check`` as subprocess's."""
    if kwargs.pop("capture_output", False):
        kwargs["stdout"] = kwargs["stderr"] = subprocess.PIPE
    if input is not None:
        kwargs["stdin"] = subprocess.PIPE
    proc = popen(args, **kwargs)
    out, err = finish(proc, timeout, input)
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    if check:
        done.check_returncode()
    return done


def _signal_group(proc: subprocess.Popen[Any], sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        try:
            proc.send_signal(sig)
        except ProcessLookupError:
            pass
