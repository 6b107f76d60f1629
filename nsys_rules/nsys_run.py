"""Running ``nsys export`` for a report: a time limit that grows with the report, and SIGTERM that cleans up.

A hung ``nsys export`` (a damaged report, a broken install, a planted ``nsys``) must not hold a CI job
until its own timeout: :func:`export_time_limit` gives it ten minutes plus four seconds per MB of the
report (nsys exports tens of MB a second). And a run stopped with SIGTERM (a CI job cancelled, ``timeout``)
while the export runs must not leave its temporary folder behind: inside :func:`sigterm_unwinds`,
SIGTERM raises :class:`Terminated`, the export is killed and the folder removed as for any failure,
then the signal is delivered again to the handler that was there (by default the process ends by it,
as the sender expects).
"""

from __future__ import annotations

import os
import signal
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

#: The shortest time an export is given, and the time per MB of the report on top.
EXPORT_SECONDS = 600.0
EXPORT_SECONDS_PER_MB = 4.0


class Terminated(BaseException):
    """SIGTERM arrived inside :func:`sigterm_unwinds` (a BaseException: no ``except Exception`` swallows it)."""


def export_time_limit(report: Path) -> float:
    """Seconds ``nsys export`` may take for ``report``: :data:`EXPORT_SECONDS` plus per MB."""
    try:
        size = report.stat().st_size
    except OSError:
        size = 0
    return EXPORT_SECONDS + EXPORT_SECONDS_PER_MB * size / 2**20


@contextmanager
def sigterm_unwinds(cleanup: Callable[[], None] | None = None) -> Iterator[None]:
    """While inside, SIGTERM raises :class:`Terminated` in the main thread, so ``finally`` and ``except
    BaseException`` blocks inside run (``subprocess.run`` kills its child); then ``cleanup`` runs (temporary
    files removed), the previous handler is put back and the SIGTERM delivered to it again. Outside the main
    thread, or where SIGTERM is ignored, nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous is signal.SIG_IGN or previous is None:
        yield
        return

    def terminate(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: a second SIGTERM must not cut the cleanup short
        raise Terminated

    signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    except Terminated:
        if cleanup is not None:
            cleanup()
        signal.signal(signal.SIGTERM, previous)
        os.kill(os.getpid(), signal.SIGTERM)  # the default action ends the process here, by the signal
        raise SystemExit(128 + signal.SIGTERM) from None  # a handler that returned: end as a shell would say
    finally:
        if signal.getsignal(signal.SIGTERM) is not previous:
            signal.signal(signal.SIGTERM, previous)
