"""``python -m nsys_rules`` and the ``nsys-rules`` console script: the CLI, with Ctrl-C handled from here on.

Until the CLI's own handling takes over (the first line inside :func:`nsys_rules.cli.main`'s ``try``),
a Ctrl-C ends the process at once with the one ``interrupted`` line and exit 130: nothing has been
read or written yet, so there is nothing to clean up. Without it, an interrupt landing while the
CLI's modules import (argparse, the command's module) printed a traceback from the import machinery.

Only the interpreter's own start-up, before this module's first line (Python's ``site``, ``runpy``),
is out of a program's reach: an interrupt there ends Python with its own traceback or by the signal.
This module is the console script's entry too (``nsys_rules.__main__:console``), so both ways of
starting share the same first line; it imports nothing of the package before the handler is set.
"""

from __future__ import annotations

# The C module under `signal`: importing signal.py first builds its enums (~1 ms on 2 busy cores), a window
# in which the interrupt would still land unhandled. typeshed has no stub for it. First, before anything else
# runs: every statement above the handler is still Python's own Ctrl-C.
import _signal  # type: ignore[import-not-found]
import sys


def _interrupted_at_start(signum: int, frame: object) -> None:
    """Ctrl-C before the CLI runs: the one line (written straight to the descriptor), exit 130, no teardown."""
    import os

    try:
        os.write(2, b"nsys-rules: interrupted\n")
    except OSError:  # stderr closed: the exit code still says it
        pass
    os._exit(130)


# Set before anything else runs (each statement before it is a moment where Ctrl-C is still Python's own), then
# taken back in a worker that multiprocessing spawns (Dask's local cluster): it runs the console script's wrapper
# again, from multiprocessing's own start-up, and its Ctrl-C is its parent's to handle, not one more line.
_PREVIOUS = _signal.signal(_signal.SIGINT, _interrupted_at_start)
_PROGRAM = not {"multiprocessing.spawn", "multiprocessing.forkserver"} & sys.modules.keys()
if not _PROGRAM:
    _signal.signal(_signal.SIGINT, _PREVIOUS)


def _end_a_swallowed_interrupt() -> None:
    """End as Python ends on SIGINT when a Ctrl-C before this module was swallowed by the import system.

    CPython runs a module lock's weakref callback (``_get_module_lock.<locals>.cb``) when an import ends; a
    KeyboardInterrupt raised there is printed ("Exception ignored in: ...cb") and dropped, and when it lands
    between the callback's ``_imp.acquire_lock()`` and its ``try`` the global import lock stays taken. The run
    then went on as if no Ctrl-C had come, until a thread that imports (the read-ahead) waited for that lock
    for ever (issue 42: a test's process still running 60 s after its Ctrl-C). Nothing legitimate holds the
    import lock while this module's body runs, so a held one is that interrupt: the signal's own end, as
    Python's start-up would have ended (exit by SIGINT, its message already on stderr).
    """
    import _imp
    import os

    if _imp.lock_held():
        _signal.signal(_signal.SIGINT, _signal.SIG_DFL)
        os.kill(os.getpid(), _signal.SIGINT)
        os._exit(130)  # a platform where the signal did not end the process


if _PROGRAM:
    _end_a_swallowed_interrupt()


def console() -> None:
    """The ``nsys-rules`` console script: :func:`nsys_rules.cli.console`."""
    from nsys_rules.cli import console as run_console

    run_console()


if __name__ == "__main__":
    console()
