"""Turn a built SQLite export into the folder exports nsys writes (``--type=parquetdir|arrowdir``).

Columns get the Arrow types nsys 2025.3 gives them (unsigned ids, nullable), so the folder
loader's unsigned and NULL paths are exercised, not only int64.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

UINT64 = {"globalTid", "globalPid", "nameId", "demangledName", "shortName", "mangledName", "contextId", "streamId",
          "graphNodeId", "endGlobalTid", "rangeId", "domainId", "bytes", "eventId", "graphId", "graphExecId"}
UINT32 = {"deviceId", "correlationId", "registersPerThread", "launchType", "textId", "eventType", "copyKind",
          "srcKind", "dstKind", "memKind", "srcDeviceId", "dstDeviceId", "syncType", "returnValue", "smCount",
          "clockRate"}


def _type(column: str, table: str) -> pa.DataType | None:
    if table == "StringIds" and column == "id":
        return pa.int32()
    if column in UINT64 and not (table.startswith(("TARGET_INFO", "META_DATA")) and column == "name"):
        return pa.uint64()
    if column in UINT32:
        return pa.uint32()
    if column in ("start", "end"):
        return pa.int64()
    return None


def folder_from_sqlite(sqlite_path: Path, folder: Path, kind: str = "parquet") -> Path:
    """Write every table of ``sqlite_path`` as ``folder/TABLE.parquet`` (or ``.arrow``, IPC stream); returns ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(sqlite_path)
    try:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in tables:
            columns = [r[1] for r in db.execute(f'PRAGMA table_info("{table}")')]
            rows = db.execute(f'SELECT * FROM "{table}"').fetchall()
            arrays = {}
            for i, column in enumerate(columns):
                values = [r[i] for r in rows]
                texts = all(isinstance(v, str) for v in values if v is not None) and any(v is not None for v in values)
                arrays[column] = pa.array(values, type=pa.large_string() if texts else _type(column, table))
            data = pa.table(arrays)
            if kind == "parquet":
                pq.write_table(data, folder / f"{table}.parquet")
            else:
                with pa.OSFile(str(folder / f"{table}.arrow"), "wb") as sink, pa.ipc.new_stream(sink, data.schema) as out:
                    out.write_table(data)
    finally:
        db.close()
    return folder


def step_exports(root: Path, ranges: int, kernels: int) -> dict[str, Path]:
    """A small export of ``ranges`` NVTX "step" ranges and ``kernels`` GEMV kernels, as a parquetdir and an
    arrowdir under ``root`` (by kind: ``parquet``, ``arrow``)."""
    from nsys_rules.testing import TraceBuilder

    b = TraceBuilder()
    for i in range(ranges):
        b.nvtx("step", i * 100_000, i * 100_000 + 90_000, registered=False)
    for i in range(kernels):
        b.kernel("gemv", i * 50_000, 20_000)
    sqlite = b.write(root / "base.sqlite")
    return {kind: folder_from_sqlite(sqlite, root / f"base.{kind}dir", kind) for kind in ("parquet", "arrow")}
