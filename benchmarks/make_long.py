"""Make a long nsys SQLite export from a real one by repeating its steady-state steps.

Usage:
    python benchmarks/make_long.py SOURCE.sqlite OUT.sqlite --kernels 5M
    python benchmarks/make_long.py SOURCE.sqlite OUT.sqlite --copies 4 [--window START:END]
    python benchmarks/make_long.py SOURCE.parquetdir OUT.parquetdir --kernels 5M

A long capture is a warm-up followed by many more steps of the same loop, so that is what this
writes: the source's rows before the window (warm-up) as they are, the window ``[START, END)``
(by default the step model's steady steps, from the first steady step's start to the last one's
start) ``copies + 1`` times back to back, each copy shifted by one window length in time, and
the rows after the window (the last steps, the end of the capture) shifted past the copies.
Unlike ``replicate.py``, which repeats the whole capture (its warm-up too), the result has one
warm-up and a steady state ``copies + 1`` times as long: the 5M, 10M and 20M-kernel cases of
issue 39 from the 1M-kernel trace.

What "a row of the window" is: a CUDA row (API call, kernel, copy, memset, sync) by its
correlation id, so that a kernel launched inside the window is copied with its launching call
even when it runs after the window's end on the GPU (``correlationId`` grows with the call's
time in nsys exports; the window is the id range of the calls that start inside it). Every other
row (NVTX, OS runtime, GPU metrics, profiler overhead) by its start (or ``timestamp``). Copies get
correlation ids shifted by the window's id range, so launch joins stay one-to-one and ids keep
growing with time; kernel ``gridId`` values stay unique. A range that encloses the window (an
NVTX ``measured`` range around all steps) keeps its start and ends as much later as the capture
does; ``ANALYSIS_DETAILS`` (the capture's duration) grows the same. Strings, metadata and the GPU
description are copied as they are.

All the work is SQL over the attached source (``INSERT ... SELECT`` with offsets, rows written in
time order: before and window, copy 1 ... copy N, after), read-only on the source: the 1M-kernel
trace becomes a 5M-kernel one in about a minute on one core. The output is written to
``OUT.part`` and renamed when complete. A ``parquetdir`` folder (``nsys export --type=parquetdir``)
is made the same way with pyarrow (``make_long_parquet.py``), table file by table file and one row group at a time (the same
rows, shifts and order; the other files copied as they are).
"""

from __future__ import annotations

import argparse
import math
import sqlite3
import sys
import time
from dataclasses import dataclass
from pathlib import Path

#: Tables whose rows are never copied (only shifted when they lie after the window): one-off session events.
NOT_REPEATED = frozenset({"DIAGNOSTIC_EVENT"})
KERNELS = "CUPTI_ACTIVITY_KIND_KERNEL"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


@dataclass(frozen=True)
class Plan:
    """What is repeated: the time window ``[start, end)``, its correlation-id range ``[corr_lo, corr_hi)``,
    the number of copies, and the gridId stride that keeps copied kernels' ids unique."""

    start: int
    end: int
    corr_lo: int
    corr_hi: int
    copies: int
    grid_stride: int

    @property
    def span(self) -> int:
        """The window's length in ns: the time shift of one copy."""
        return self.end - self.start

    @property
    def corr_span(self) -> int:
        """The window's correlation-id range: the id shift of one copy."""
        return self.corr_hi - self.corr_lo


@dataclass(frozen=True)
class TableShape:
    """The columns of one table that the copy shifts."""

    name: str
    columns: tuple[str, ...]

    @property
    def time(self) -> str | None:
        """The column a row is placed in time by: ``start``, else ``timestamp``."""
        return "start" if "start" in self.columns else "timestamp" if "timestamp" in self.columns else None

    @property
    def has_corr(self) -> bool:
        """Whether rows carry a correlation id (CUDA activity and API calls)."""
        return "correlationId" in self.columns


def steady_window(source: Path) -> tuple[int, int]:
    """The step model's steady steps as ``[first step's start, last step's start)`` (host clock, ns)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from nsys_rules.inputs import open_trace  # noqa: PLC0415 - only when no --window is given
    from nsys_rules.model.steps import step_model  # noqa: PLC0415

    trace = open_trace(source)
    try:
        model = step_model(trace)
    finally:
        trace.export.close()
    if model.count < 2:
        raise SystemExit(f"{source}: no steady steps to repeat ({model.reason or model.description}); give --window")
    return int(model.host[0, 0]), int(model.host[-1, 0])


def _window_sql(shape: TableShape, plan: Plan) -> str:
    """SQL condition: the row belongs to the repeated window."""
    t = _q(shape.time or "start")
    by_time = f"({t} >= {plan.start} AND {t} < {plan.end})"
    if not shape.has_corr:
        return by_time
    corr = 'coalesce("correlationId", 0)'
    return f"(({corr} >= {plan.corr_lo} AND {corr} < {plan.corr_hi}) OR ({corr} <= 0 AND {by_time}))"


def _after_sql(shape: TableShape, plan: Plan) -> str:
    """SQL condition: the row lies after the window (it moves past the copies)."""
    t = _q(shape.time or "start")
    if not shape.has_corr:
        return f"({t} >= {plan.end})"
    corr = 'coalesce("correlationId", 0)'
    return f"({corr} >= {plan.corr_hi} OR ({corr} <= 0 AND {t} >= {plan.end}))"


def _shifted(shape: TableShape, plan: Plan, k: int) -> str:
    """The select list of the table's rows moved ``k`` windows later."""
    out = []
    for c in shape.columns:
        if c in ("start", "end", "timestamp"):
            out.append(f"{_q(c)} + {k * plan.span}")
        elif c == "correlationId":
            out.append(f'CASE WHEN "correlationId" > 0 THEN "correlationId" + {k * plan.corr_span} '
                       'ELSE "correlationId" END')
        elif c == "gridId" and shape.name == KERNELS:
            out.append(f'"gridId" + {k * plan.grid_stride}')
        else:
            out.append(_q(c))
    return ", ".join(out)


def _kept(shape: TableShape, plan: Plan) -> str:
    """The select list of rows before or inside the window: as they are, but a row that encloses the window
    (starts before it, ends after it) ends as much later as the capture does."""
    out = []
    for c in shape.columns:
        if c == "end" and shape.time == "start":
            out.append(f'CASE WHEN "start" < {plan.start} AND "end" >= {plan.end} '
                       f'THEN "end" + {plan.copies * plan.span} ELSE "end" END')
        else:
            out.append(_q(c))
    return ", ".join(out)


def _shapes(db: sqlite3.Connection) -> list[TableShape]:
    names = [r[0] for r in db.execute("SELECT name FROM src.sqlite_master WHERE type = 'table' ORDER BY rowid")]
    return [TableShape(n, tuple(r[1] for r in db.execute(f"PRAGMA src.table_info({_q(n)})"))) for n in names]


def plan_for(db: sqlite3.Connection, window: tuple[int, int], copies: int | None, kernels: int | None) -> Plan:
    """The plan over the attached source ``src``: the window's id ranges and the copies needed."""
    start, end = window
    lo, = db.execute(f'SELECT min("correlationId") FROM src.{RUNTIME} WHERE "start" >= ? AND "start" < ? '
                     'AND "correlationId" > 0', (start, end)).fetchone()
    hi, = db.execute(f'SELECT min("correlationId") FROM src.{RUNTIME} WHERE "start" >= ? AND "correlationId" > 0',
                     (end,)).fetchone()
    top, = db.execute(f'SELECT coalesce(max("correlationId"), 0) FROM src.{RUNTIME}').fetchone()
    if lo is None:
        raise SystemExit(f"no CUDA API call starts in the window [{start}, {end})")
    hi = top + 1 if hi is None else hi
    grid, = db.execute(f'SELECT coalesce(max("gridId"), 0) + 1 FROM src.{KERNELS}').fetchone()
    plan = Plan(start, end, int(lo), int(hi), copies or 0, int(grid))
    if copies is None:
        shape = TableShape(KERNELS, ("start", "correlationId"))
        total, = db.execute(f"SELECT count(*) FROM src.{KERNELS}").fetchone()
        inside, = db.execute(f"SELECT count(*) FROM src.{KERNELS} WHERE {_window_sql(shape, plan)}").fetchone()
        need = max(0, (kernels or 0) - total)
        plan = Plan(start, end, plan.corr_lo, plan.corr_hi, math.ceil(need / inside) if need else 0, int(grid))
    return plan


def make_long(source: Path, out: Path, window: tuple[int, int] | None = None, copies: int | None = None,
              kernels: int | None = None) -> dict[str, int]:
    """Write ``out`` from ``source`` (never modified) with the window repeated; rows per table of the result."""
    if out.exists():
        raise SystemExit(f"{out} exists; remove it first")
    window = window or steady_window(source)
    partial = out.with_name(out.name + ".part")
    partial.unlink(missing_ok=True)
    db = sqlite3.connect(partial)
    try:
        db.execute("PRAGMA journal_mode = OFF")
        db.execute("PRAGMA synchronous = OFF")
        db.execute("PRAGMA cache_size = -65536")
        db.execute("ATTACH DATABASE ? AS src", (f"file:{source.resolve()}?mode=ro&immutable=1",))
        plan = plan_for(db, window, copies, kernels)
        schema = {r[0]: r[1] for r in db.execute("SELECT name, sql FROM src.sqlite_master WHERE type = 'table'")}
        counts: dict[str, int] = {}
        for shape in _shapes(db):
            db.execute(schema[shape.name])
            cols = ", ".join(_q(c) for c in shape.columns)
            src = f"src.{_q(shape.name)}"
            if shape.time is None:
                db.execute(f"INSERT INTO {_q(shape.name)} ({cols}) SELECT {cols} FROM {src} ORDER BY rowid")
            else:
                window_rows, after_rows = _window_sql(shape, plan), _after_sql(shape, plan)
                db.execute(f"INSERT INTO {_q(shape.name)} ({cols}) SELECT {_kept(shape, plan)} FROM {src} "
                           f"WHERE NOT {after_rows} ORDER BY rowid")
                if shape.name not in NOT_REPEATED:
                    for k in range(1, plan.copies + 1):
                        db.execute(f"INSERT INTO {_q(shape.name)} ({cols}) SELECT {_shifted(shape, plan, k)} "
                                   f"FROM {src} WHERE {window_rows} ORDER BY rowid")
                db.execute(f"INSERT INTO {_q(shape.name)} ({cols}) SELECT {_shifted(shape, plan, plan.copies)} "
                           f"FROM {src} WHERE {after_rows} ORDER BY rowid")
            if shape.name == "ANALYSIS_DETAILS":
                db.execute(f'UPDATE "ANALYSIS_DETAILS" SET "duration" = "duration" + {plan.copies * plan.span}, '
                           f'"stopTime" = "stopTime" + {plan.copies * plan.span}')
            db.commit()
            counts[shape.name] = db.execute(f"SELECT count(*) FROM {_q(shape.name)}").fetchone()[0]
        for (sql,) in db.execute("SELECT sql FROM src.sqlite_master WHERE type IN ('index', 'view', 'trigger') "
                                 "AND sql IS NOT NULL ORDER BY rowid").fetchall():
            db.execute(sql)
        db.commit()
    finally:
        db.close()
    partial.rename(out)
    counts["copies"] = plan.copies
    return counts


def _count(text: str) -> int:
    """``5M``, ``10m``, ``250k``, ``1000000`` -> an integer."""
    scale = {"k": 10**3, "m": 10**6, "g": 10**9}.get(text[-1:].lower(), 1)
    return int(float(text[:-1] if scale > 1 else text) * scale)


def main(argv: list[str] | None = None) -> int:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path)
    parser.add_argument("out", type=Path)
    size = parser.add_mutually_exclusive_group(required=True)
    size.add_argument("--kernels", type=_count, help="at least this many kernels in the result (5M, 10M, 20M)")
    size.add_argument("--copies", type=int, help="repeat the window this many more times")
    parser.add_argument("--window", help="START:END in ns (default: the steady steps of the step model)")
    args = parser.parse_args(argv)
    window = tuple(int(x) for x in args.window.split(":")) if args.window else None
    began = time.perf_counter()
    if args.source.is_dir():
        from make_long_parquet import make_long_folder  # noqa: PLC0415 - a sibling script, not a package

        build = make_long_folder
    else:
        build = make_long
    counts = build(args.source, args.out, window, args.copies, args.kernels)  # type: ignore[arg-type]
    for table, n in counts.items():
        if n and table.startswith(("CUPTI", "NVTX", "OSRT", "GPU_METRICS", "copies")):
            print(f"{table}: {n}")
    size = sum(p.stat().st_size for p in args.out.iterdir()) if args.out.is_dir() else args.out.stat().st_size
    print(f"{args.out} ({size / 1e6:.0f} MB) in {time.perf_counter() - began:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
