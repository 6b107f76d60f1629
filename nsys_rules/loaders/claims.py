"""Which read-ahead an export may take its early columns from: the one started for that very file.

Kept apart from :mod:`.readahead`, which opens the exports to read them, so that the readers
depend on this small registry only and the loaders import no cycle. Standard library only.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

_current: Any = None
#: Set in a read-ahead worker while it opens the export it reads from: that export must not claim.
worker = threading.local()


def identity(path: Path) -> tuple[Any, ...] | None:
    """What tells that a later open is of the same file, unchanged: its resolved path and status."""
    try:
        st = os.stat(path)
        return (str(path.resolve()), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    except (OSError, RuntimeError):
        return None


def publish(ahead: Any) -> None:
    """Make ``ahead`` (a :class:`.readahead.ReadAhead`) the one an export of its file may claim."""
    global _current
    _current = ahead


def withdraw() -> Any:
    """The published read-ahead, if any, no longer claimable (the caller stops it)."""
    global _current
    ahead, _current = _current, None
    return ahead


def claim(path: Path) -> Any:
    """The read-ahead of ``path`` when one was started for this very file (unchanged since), else None."""
    ahead = _current
    if ahead is None or ahead._claimed or getattr(worker, "opening", False) or identity(path) != ahead.identity:
        return None
    ahead._claimed = True
    return ahead
