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

import os
import sys
from types import FrameType

# The C module under `signal`: importing signal.py first builds its enums (~1 ms on 2 busy cores), a window
# in which the interrupt would still land unhandled. typeshed has no stub for it.
import _signal  # type: ignore[import-not-found]


def _interrupted_at_start(signum: int, frame: FrameType | None) -> None:
    """Ctrl-C before the CLI runs: the one line (written straight to the descriptor), exit 130, no teardown."""
    try:
        os.write(2, b"nsys-rules: interrupted\n")
    except OSError:  # stderr closed: the exit code still says it
        pass
    os._exit(130)


# Only in the program itself: a worker that multiprocessing spawns (Dask's local cluster) runs the console
# script's wrapper again, from multiprocessing's own start-up; its Ctrl-C is its parent's to handle, not one
# more "interrupted" line.
if not {"multiprocessing.spawn", "multiprocessing.forkserver"} & sys.modules.keys():
    _signal.signal(_signal.SIGINT, _interrupted_at_start)


def console() -> None:
    """The ``nsys-rules`` console script: :func:`nsys_rules.cli.console`."""
    from nsys_rules.cli import console as run_console

    run_console()


if __name__ == "__main__":
    console()
