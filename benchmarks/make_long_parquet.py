"""``make_long.py`` for a parquetdir folder: the same rows, shifts and order, written with pyarrow.

Each table file is written one row group at a time (the rows before and inside the window, then
each copy of the window, then the rows after it, moved past the copies); files without a time
column are copied as they are, and ``ANALYSIS_DETAILS`` grows with the capture. The plan (window,
correlation-id range, copies) is :class:`make_long.Plan`, found from the folder's own runtime and
kernel files.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any

from make_long import KERNELS, NOT_REPEATED, RUNTIME, Plan, TableShape, steady_window


def _folder_plan(source: Path, window: tuple[int, int], copies: int | None, kernels: int | None) -> Plan:
    """:func:`plan_for` over a parquetdir's runtime and kernel files."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    start, end = window
    api = pq.read_table(source / f"{RUNTIME}.parquet", columns=["start", "correlationId"])
    corr, begin = pc.fill_null(api["correlationId"], 0), api["start"]
    inside = pc.and_(pc.and_(pc.greater_equal(begin, start), pc.less(begin, end)), pc.greater(corr, 0))
    later = pc.and_(pc.greater_equal(begin, end), pc.greater(corr, 0))
    lo, hi = pc.min(pc.filter(corr, inside)).as_py(), pc.min(pc.filter(corr, later)).as_py()
    if lo is None:
        raise SystemExit(f"no CUDA API call starts in the window [{start}, {end})")
    hi = (pc.max(corr).as_py() or 0) + 1 if hi is None else hi
    kern = pq.read_table(source / f"{KERNELS}.parquet", columns=["start", "correlationId", "gridId"])
    plan = Plan(start, end, int(lo), int(hi), copies or 0, int(pc.max(kern["gridId"]).as_py() or 0) + 1)
    if copies is None:
        shape = TableShape(KERNELS, ("start", "correlationId"))
        inside_k = int(pc.sum(_window_mask(kern, shape, plan).cast("int64")).as_py() or 0)
        need = max(0, (kernels or 0) - kern.num_rows)
        plan = Plan(start, end, plan.corr_lo, plan.corr_hi, math.ceil(need / inside_k) if need else 0,
                    plan.grid_stride)
    return plan


def _window_mask(data: Any, shape: TableShape, plan: Plan) -> Any:
    """:func:`_window_sql` as an Arrow mask over one row group."""
    import pyarrow.compute as pc

    t = data[shape.time or "start"]
    by_time = pc.and_(pc.greater_equal(t, plan.start), pc.less(t, plan.end))
    if not shape.has_corr:
        return pc.fill_null(by_time, False)
    corr = pc.fill_null(data["correlationId"], 0)
    in_ids = pc.and_(pc.greater_equal(corr, plan.corr_lo), pc.less(corr, plan.corr_hi))
    return pc.fill_null(pc.or_(in_ids, pc.and_(pc.less_equal(corr, 0), by_time)), False)


def _after_mask(data: Any, shape: TableShape, plan: Plan) -> Any:
    """:func:`_after_sql` as an Arrow mask over one row group."""
    import pyarrow.compute as pc

    t = data[shape.time or "start"]
    if not shape.has_corr:
        return pc.fill_null(pc.greater_equal(t, plan.end), False)
    corr = pc.fill_null(data["correlationId"], 0)
    return pc.fill_null(pc.or_(pc.greater_equal(corr, plan.corr_hi),
                               pc.and_(pc.less_equal(corr, 0), pc.greater_equal(t, plan.end))), False)


def _moved(data: Any, shape: TableShape, plan: Plan, k: int) -> Any:
    """:func:`_shifted` on an Arrow table: ``k`` windows later."""
    import pyarrow as pa
    import pyarrow.compute as pc

    for name in data.column_names:
        col = data[name]
        if name in ("start", "end", "timestamp"):
            moved = pc.add_checked(col, pa.scalar(k * plan.span, col.type))
        elif name == "correlationId":
            moved = pc.if_else(pc.greater(col, 0), pc.add_checked(col, pa.scalar(k * plan.corr_span, col.type)), col)
        elif name == "gridId" and shape.name == KERNELS:
            moved = pc.add_checked(col, pa.scalar(k * plan.grid_stride, col.type))
        else:
            continue
        data = data.set_column(data.column_names.index(name), data.schema.field(name), moved)
    return data


def _kept_rows(data: Any, shape: TableShape, plan: Plan) -> Any:
    """:func:`_kept` on an Arrow table: a range enclosing the window ends as much later as the capture."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if shape.time != "start" or "end" not in data.column_names:
        return data
    end = data["end"]
    encloses = pc.fill_null(pc.and_(pc.less(data["start"], plan.start), pc.greater_equal(end, plan.end)), False)
    later = pc.if_else(encloses, pc.add_checked(end, pa.scalar(plan.copies * plan.span, end.type)), end)
    return data.set_column(data.column_names.index("end"), data.schema.field("end"), later)


def make_long_folder(source: Path, out: Path, window: tuple[int, int] | None = None, copies: int | None = None,
                     kernels: int | None = None) -> dict[str, int]:
    """:func:`make_long` for a parquetdir folder: ``out`` written one row group at a time; rows per table."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    if out.exists():
        raise SystemExit(f"{out} exists; remove it first")
    plan = _folder_plan(source, window or steady_window(source), copies, kernels)
    partial = out.with_name(out.name + ".part")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    counts: dict[str, int] = {}
    for path in sorted(source.glob("*.parquet")):
        reader = pq.ParquetFile(path)
        shape = TableShape(path.stem, tuple(reader.schema_arrow.names))
        if shape.time is None and shape.name != "ANALYSIS_DETAILS":
            shutil.copyfile(path, partial / path.name)
            counts[shape.name] = reader.metadata.num_rows
            continue
        groups = range(reader.num_row_groups)
        meta = reader.metadata
        compression = meta.row_group(0).column(0).compression.lower() if meta.num_row_groups else "snappy"
        written = 0
        with pq.ParquetWriter(partial / path.name, reader.schema_arrow, compression=compression) as writer:
            def put(data: Any) -> None:
                nonlocal written
                if data.num_rows:
                    writer.write_table(data)
                    written += data.num_rows
            if shape.time is None:  # ANALYSIS_DETAILS: the capture's duration grows with it
                for g in groups:
                    data = reader.read_row_group(g)
                    for name in ("duration", "stopTime"):
                        if name in data.column_names:
                            col = data[name]
                            data = data.set_column(data.column_names.index(name), data.schema.field(name),
                                                   pc.add_checked(col, plan.copies * plan.span).cast(col.type))
                    put(data)
            else:
                for g in groups:
                    data = reader.read_row_group(g)
                    put(_kept_rows(data.filter(pc.invert(_after_mask(data, shape, plan))), shape, plan))
                if shape.name not in NOT_REPEATED:
                    for k in range(1, plan.copies + 1):
                        for g in groups:
                            data = reader.read_row_group(g)
                            put(_moved(data.filter(_window_mask(data, shape, plan)), shape, plan, k))
                for g in groups:
                    data = reader.read_row_group(g)
                    put(_moved(data.filter(_after_mask(data, shape, plan)), shape, plan, plan.copies))
        counts[shape.name] = written
    for other in source.iterdir():  # anything beside the table files (none in nsys's folders) as it is
        if other.is_file() and other.suffix != ".parquet":
            shutil.copyfile(other, partial / other.name)
    partial.rename(out)
    counts["copies"] = plan.copies
    return counts
