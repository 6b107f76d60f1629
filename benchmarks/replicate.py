"""Build an N-times larger nsys export by replicating its activity rows with shifted timestamps.

Usage: python benchmarks/replicate.py SOURCE.sqlite OUT.sqlite --factor 4
       python benchmarks/replicate.py SOURCE.parquetdir OUT.parquetdir --factor 4

The source is copied (never modified); in the copy, every row of the activity tables
(kernels, runtime/driver API, memcpy, memset, synchronization, NVTX) is appended ``factor - 1``
more times, each copy shifted by one capture span in time and by one correlation-id span, so
the launch joins (pid + correlationId) stay one-to-one and the result looks like a capture that
ran ``factor`` times as long. Used by ``benchmarks/run.py`` to show time and memory growth.
A ``parquetdir`` folder (``nsys export --type=parquetdir``) is replicated the same way, table file
by table file, one row group at a time (the copy never holds more than one row group of it).
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


def replicate_folder(source: Path, out: Path, factor: int) -> dict[str, int]:
    """Write the parquetdir ``out``: ``source`` with its activity rows repeated ``factor`` times; rows per table."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    if factor < 1:
        raise ValueError("factor must be >= 1")
    if out.resolve() == source.resolve():
        raise ValueError("OUT must differ from SOURCE (the source is never modified)")
    out.mkdir(parents=True, exist_ok=True)
    files = {p.stem: p for p in source.glob("*.parquet")}
    tables = [t for t in ACTIVITY_TABLES if t in files]
    t_lo, t_hi, c_hi = None, None, 0
    for table in tables:
        names = pq.read_schema(files[table]).names
        data = pq.read_table(files[table], columns=[c for c in ("start", "end", "correlationId") if c in names])
        ends = pc.coalesce(data["end"], data["start"]) if "end" in names else data["start"]
        lo, hi = pc.min(data["start"]).as_py(), pc.max(ends).as_py()
        if lo is not None:
            t_lo = lo if t_lo is None else min(t_lo, lo)
            t_hi = hi if t_hi is None else max(t_hi, hi)
        if "correlationId" in names:
            c_hi = max(c_hi, pc.max(data["correlationId"]).as_py() or 0)
    time_span, corr_span = (0 if t_lo is None else t_hi - t_lo + 1), c_hi + 1
    counts: dict[str, int] = {}
    for stem, path in files.items():
        if stem not in tables:
            shutil.copyfile(path, out / path.name)
            continue
        reader = pq.ParquetFile(path)
        compression = reader.metadata.row_group(0).column(0).compression if reader.metadata.num_row_groups else "snappy"
        with pq.ParquetWriter(out / path.name, reader.schema_arrow, compression=compression.lower()) as writer:
            for k in range(factor):
                for group in range(reader.num_row_groups):
                    data = reader.read_row_group(group)
                    for name in ("start", "end", "correlationId"):
                        if k == 0 or name not in data.column_names:
                            continue
                        col = data[name]
                        shift = pa.scalar(k * (corr_span if name == "correlationId" else time_span), col.type)
                        moved = pc.add_checked(col, shift)
                        if name == "correlationId":  # 0 means "no correlation": kept, as in replicate()
                            moved = pc.if_else(pc.greater(col, pa.scalar(0, col.type)), moved, col)
                        data = data.set_column(data.column_names.index(name), data.schema.field(name), moved)
                    writer.write_table(data)
        counts[stem] = reader.metadata.num_rows * factor
    return counts


def main(argv: list[str] | None = None) -> int:
    """Command line: SOURCE OUT --factor N."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--factor", type=int, default=2)
    args = parser.parse_args(argv)
    counts = (replicate_folder if args.source.is_dir() else replicate)(args.source, args.out, args.factor)
    for table, n in counts.items():
        print(f"{table}: {n} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
