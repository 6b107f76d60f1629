"""Build an N-times larger nsys export by replicating its activity rows with shifted timestamps.

Usage: python benchmarks/replicate.py SOURCE.sqlite OUT.sqlite --factor 4

The source is copied (never modified); in the copy, every row of the activity tables
(kernels, runtime/driver API, memcpy, memset, synchronization, NVTX) is appended ``factor - 1``
more times, each copy shifted by one capture span in time and by one correlation-id span, so
the launch joins (pid + correlationId) stay one-to-one and the result looks like a capture that
ran ``factor`` times as long. Used by ``benchmarks/run.py`` to show time and memory growth.
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import sys
from pathlib import Path

#: Tables whose rows are copied; the others (strings, metadata, GPU info) stay as they are.
ACTIVITY_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_MEMCPY",
                   "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "NVTX_EVENTS")


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _span(db: sqlite3.Connection, tables: list[str]) -> tuple[int, int]:
    """(time span, correlation-id span) over the activity tables, each plus one."""
    t_lo, t_hi, c_hi = None, None, 0
    for table in tables:
        cols = {r[1] for r in db.execute(f"PRAGMA table_info({_quote(table)})")}
        lo, hi = db.execute(f'SELECT min("start"), max(coalesce("end", "start")) FROM {_quote(table)}').fetchone()
        if lo is not None:
            t_lo = lo if t_lo is None else min(t_lo, lo)
            t_hi = hi if t_hi is None else max(t_hi, hi)
        if "correlationId" in cols:
            c_hi = max(c_hi, db.execute(f'SELECT coalesce(max("correlationId"), 0) FROM {_quote(table)}').fetchone()[0])
    return (0 if t_lo is None else t_hi - t_lo + 1), c_hi + 1


def replicate(source: Path, out: Path, factor: int) -> dict[str, int]:
    """Write ``out``: ``source`` with its activity rows repeated ``factor`` times; returns rows per table."""
    if factor < 1:
        raise ValueError("factor must be >= 1")
    if out.resolve() == source.resolve():
        raise ValueError("OUT must differ from SOURCE (the source is never modified)")
    shutil.copyfile(source, out)
    db = sqlite3.connect(out)
    try:
        db.execute("PRAGMA journal_mode = OFF")
        db.execute("PRAGMA synchronous = OFF")
        present = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        tables = [t for t in ACTIVITY_TABLES if t in present]
        time_span, corr_span = _span(db, tables)
        counts: dict[str, int] = {}
        for table in tables:
            cols = [r[1] for r in db.execute(f"PRAGMA table_info({_quote(table)})")]
            original = db.execute(f"SELECT max(rowid) FROM {_quote(table)}").fetchone()[0] or 0
            for k in range(1, factor):
                exprs = []
                for c in cols:
                    if c in ("start", "end"):
                        exprs.append(f"{_quote(c)} + {k * time_span}")
                    elif c == "correlationId":
                        exprs.append(f"CASE WHEN {_quote(c)} > 0 THEN {_quote(c)} + {k * corr_span} ELSE {_quote(c)} END")
                    else:
                        exprs.append(_quote(c))
                col_list = ", ".join(_quote(c) for c in cols)
                db.execute(f"INSERT INTO {_quote(table)} ({col_list}) SELECT {', '.join(exprs)} "
                           f"FROM {_quote(table)} WHERE rowid <= {int(original)} ORDER BY rowid")
            db.commit()
            counts[table] = db.execute(f"SELECT count(*) FROM {_quote(table)}").fetchone()[0]
        return counts
    finally:
        db.close()


def main(argv: list[str] | None = None) -> int:
    """Command line: SOURCE OUT --factor N."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--factor", type=int, default=2)
    args = parser.parse_args(argv)
    counts = replicate(args.source, args.out, args.factor)
    for table, n in counts.items():
        print(f"{table}: {n} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
