"""The long-trace case of ``benchmarks/run.py --long 5M,10M`` (issue 39): check time and peak per size.

Long traces are made from the big SQLite trace by ``make_long.py`` (its steady steps repeated after one
warm-up) and kept in ``--long-dir``; each is checked like the main table's figures (a whole process,
peak RSS from ``wait4``) and its time compared with the 1M case scaled by the kernel count.
"""

from __future__ import annotations

import sys
from pathlib import Path

from run import _CHECK, HERE, _argv, _median, _size_mb, measure, print_table

#: Issue 39: a long trace checked within this many times linear time from the 1M case, within this peak RSS.
LONG_TIME_TARGET = 1.2
LONG_RSS_TARGET_MB = 1024.0


def _kernel_count(trace: Path) -> int:
    import sqlite3  # noqa: PLC0415 - only the long case counts rows

    db = sqlite3.connect(f"file:{trace}?mode=ro&immutable=1", uri=True)
    try:
        return int(db.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0])
    finally:
        db.close()


def _long_trace(trace: Path, size: str, folder: Path) -> Path:
    """``trace`` made long (``make_long.py --kernels size``), built once in ``folder``."""
    sys.path.insert(0, str(HERE))
    from make_long import _count, make_long  # noqa: PLC0415 - a sibling script, not a package

    path = folder / f"{trace.name.split('.')[0]}_{size}.sqlite"
    if not path.exists():
        make_long(trace, path, kernels=_count(size))
    return path


def long_case(trace: Path, sizes: list[str], folder: Path, repeat: int, extra: list[str]) -> None:
    """``check`` time and peak RSS on the trace and on long traces made from it, against linear time."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    base: tuple[float, int] | None = None
    for size in ["1M", *sizes]:
        path = trace if size == "1M" else _long_trace(trace, size, folder)
        kernels = _kernel_count(path)
        run = _median([measure(_argv(_CHECK + extra, path)) for _ in range(repeat)])
        base = base or (run.seconds, kernels)
        linear = run.seconds / (base[0] * kernels / base[1])
        ok_t = "ok" if linear <= LONG_TIME_TARGET else "OVER"
        ok_m = "ok" if run.rss_mb <= LONG_RSS_TARGET_MB else "OVER"
        if run.status not in (0, 1):
            ok_t = ok_m = f"exit {run.status}"
        rows.append([size, f"{kernels / 1e6:.2f}", f"{_size_mb(path):.0f}", f"{run.seconds:.1f}", f"{run.cpu:.1f}",
                     f"{linear:.2f} {ok_t}", f"{run.rss_mb:.0f} {ok_m}", f"{run.rss_mb / (kernels / 1e6):.0f}"])
    print(f"long traces: check{' ' + ' '.join(extra) if extra else ''} with all built-in rules, median of {repeat}; "
          f"time/linear = seconds / (1M seconds x kernels / 1M kernels), target <= {LONG_TIME_TARGET}; "
          f"peak RSS target <= {LONG_RSS_TARGET_MB:.0f} MB")
    print_table(["size", "M kernels", "MB", "check s", "CPU s", "time/linear", "peak RSS MB", "MB per M kernels"], rows)
