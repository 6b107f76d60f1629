"""Running ``nsys-rules stats`` in-process for the stats tests."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from nsys_rules.cli import main


def run_stats(capsys: Any, path: Path, report: str, *flags: str, fmt: str = "json") -> tuple[int, Any, str]:
    """Exit code, parsed stdout (json) or text, and stderr of one ``stats`` run."""
    code = main(["stats", "--report", report, "--format", fmt, *flags, str(path)])
    out = capsys.readouterr()
    return code, (json.loads(out.out) if fmt == "json" and out.out else out.out), out.err


def add_nvtx_rows(path: Path, rows: list[tuple[Any, ...]]) -> None:
    """Append NVTX_EVENTS rows (start, end, eventType, text, globalTid, domainId) the builder has no helper for."""
    db = sqlite3.connect(path)
    try:
        db.executemany("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) VALUES (?, ?, ?, ?, ?, ?)",
                       rows)
        db.commit()
    finally:
        db.close()


def add_memcpy_enum(path: Path, labels: dict[int, str]) -> None:
    """Write an ``ENUM_CUDA_MEMCPY_OPER`` table (nsys writes one; the builder does not)."""
    db = sqlite3.connect(path)
    try:
        db.execute("CREATE TABLE ENUM_CUDA_MEMCPY_OPER (id INTEGER PRIMARY KEY, name TEXT, label TEXT)")
        db.executemany("INSERT INTO ENUM_CUDA_MEMCPY_OPER VALUES (?, ?, ?)",
                       [(i, f"KIND_{i}", label) for i, label in labels.items()])
        db.commit()
    finally:
        db.close()
