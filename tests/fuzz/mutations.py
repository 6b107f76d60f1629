"""Ways to damage an nsys export, shared by the named hostile-input tests and the fuzz suite.

Byte-level damage (truncation, flipped bytes, shuffled pages) and SQL-level damage (dropped
tables and columns, NULLs, wrong types, duplicate rows, planted views and triggers) are
applied to a *copy* of a real export; the originals are never touched.
"""

from __future__ import annotations

import random
import shutil
import sqlite3
from pathlib import Path

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
NVTX = "NVTX_EVENTS"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
SYNC = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
STRINGS = "StringIds"

#: Tables the loader reads, and columns of each worth damaging.
DAMAGE_TARGETS: dict[str, tuple[str, ...]] = {
    KERNEL: ("start", "end", "deviceId", "streamId", "correlationId", "globalPid", "demangledName", "shortName",
             "gridX", "blockX", "registersPerThread"),
    RUNTIME: ("start", "end", "correlationId", "globalTid", "nameId", "returnValue"),
    NVTX: ("start", "end", "text", "textId", "globalTid", "eventType", "domainId"),
    MEMCPY: ("start", "end", "bytes", "copyKind", "srcKind", "dstKind", "correlationId"),
    SYNC: ("start", "end", "syncType", "correlationId"),
    STRINGS: ("id", "value"),
    "TARGET_INFO_GPU": ("id", "name", "smCount", "memoryBandwidth"),
    "META_DATA_CAPTURE": ("name", "value"),
    "META_DATA_EXPORT": ("name", "value"),
}


def loosen(table: str) -> list[str]:
    """Statements that rebuild ``table`` without NOT NULL/PRIMARY KEY constraints, data kept.

    nsys declares most columns NOT NULL; to plant a NULL the constraint must go first.
    """
    return [f'CREATE TABLE "_loose" AS SELECT * FROM "{table}"', f'DROP TABLE "{table}"',
            f'ALTER TABLE "_loose" RENAME TO "{table}"']


def damaged_copy(source: Path, target: Path, statements: list[str]) -> Path:
    """Copy ``source`` to ``target`` and run ``statements`` on the copy (a fixture, not the tool)."""
    shutil.copyfile(source, target)
    db = sqlite3.connect(target)
    db.execute("PRAGMA synchronous = OFF")  # a scratch copy: no fsync
    try:
        for sql in statements:
            db.execute(sql)
        db.commit()
    finally:
        db.close()
    return target


def tables_of(path: Path) -> dict[str, list[str]]:
    """Table -> column names of a SQLite file."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {n: [r[1] for r in db.execute(f'PRAGMA table_info("{n}")')] for n in names}
    finally:
        db.close()


# -- SQL-level damage ------------------------------------------------------------------------
def sql_damage(rng: random.Random, tables: dict[str, list[str]]) -> tuple[str, list[str]]:
    """One random SQL-level damage to an export with ``tables``: ``(name, statements)``."""
    kind, statements = _sql_damage(rng, tables)
    return kind, statements


def _sql_damage(rng: random.Random, tables: dict[str, list[str]]) -> tuple[str, list[str]]:
    present = [t for t in DAMAGE_TARGETS if t in tables]
    table = rng.choice(present)
    cols = [c for c in DAMAGE_TARGETS[table] if c in tables[table]] or tables[table]
    col = rng.choice(cols)
    every = rng.choice([1, 2, 3, 7, 50])
    where = f"rowid % {every} = 0"
    kind = rng.choice(["drop_table", "drop_column", "null", "text", "blob", "real", "huge", "negative",
                       "zero_dur", "swap", "dup", "dangling", "big_string", "view", "trigger", "empty",
                       "shuffle_ids", "bad_utf8", "zero"])
    t, c = f'"{table}"', f'"{col}"'
    if kind == "drop_table":
        return kind, [f"DROP TABLE {t}"]
    if kind == "drop_column":
        return kind, loosen(table) + [f"ALTER TABLE {t} DROP COLUMN {c}"]
    if kind == "null":
        return kind, loosen(table) + [f"UPDATE {t} SET {c} = NULL WHERE {where}"]
    if kind == "text":
        return kind, loosen(table) + [f"UPDATE {t} SET {c} = 'x' || rowid WHERE {where}"]
    if kind == "blob":
        return kind, loosen(table) + [f"UPDATE {t} SET {c} = x'00ff10' WHERE {where}"]
    if kind == "real":
        return kind, loosen(table) + [f"UPDATE {t} SET {c} = {c} + 0.5 WHERE {where}"]
    if kind == "huge":
        value = rng.choice(["9223372036854775807", "-9223372036854775808", "1e300", "-1e300"])
        return kind, loosen(table) + [f"UPDATE {t} SET {c} = {value} WHERE {where}"]
    if kind == "negative":
        return kind, loosen(table) + [f"UPDATE {t} SET {c} = -abs(coalesce({c}, 1)) - 1 WHERE {where}"]
    if kind == "zero_dur" and "end" in tables[table] and "start" in tables[table]:
        return kind, [f'UPDATE {t} SET "end" = "start" WHERE {where}']
    if kind == "swap" and "end" in tables[table] and "start" in tables[table]:
        return kind, loosen(table) + [f'UPDATE {t} SET "start" = "end", "end" = "start" WHERE {where}']
    if kind == "dup":
        return kind, loosen(table) + [f"INSERT INTO {t} SELECT * FROM {t} WHERE {where}"]
    if kind == "dangling":
        return kind, loosen(table) + [f"UPDATE {t} SET {c} = coalesce({c}, 0) + 100000007 WHERE {where}"]
    if kind == "big_string" and STRINGS in tables:
        # One 5 MB string, or a few of 100 KB (every row at 5 MB would be gigabytes, not a test).
        size, rows = rng.choice([(100_000, f"rowid % 50 = {rng.randrange(50)}"), (5_000_000, f"rowid = {rng.randrange(1, 60)}")])
        return kind, [f"UPDATE \"{STRINGS}\" SET \"value\" = printf('%.*c', {size}, 'k') WHERE {rows}"]
    if kind == "view":
        return kind, [f'ALTER TABLE {t} RENAME TO "_moved"', f'CREATE VIEW {t} AS SELECT * FROM "_moved"']
    if kind == "trigger":
        return kind, ['CREATE TABLE IF NOT EXISTS "_log" (x)',
                f'CREATE TRIGGER "_t{rng.randrange(10**6)}" AFTER INSERT ON {t} BEGIN INSERT INTO "_log" VALUES (1); END']
    if kind == "empty":
        return kind, [f"DELETE FROM {t}"]
    if kind == "shuffle_ids" and "id" in tables[table]:
        return kind, loosen(table) + [f'UPDATE {t} SET "id" = ("id" * 7919) % 1009 WHERE {where}']
    if kind == "zero":  # divisors: bandwidth, SM count, clock, bytes, grid sizes
        return kind, [f"UPDATE {t} SET {c} = 0 WHERE {where}"]
    if kind == "bad_utf8":
        return kind, loosen(table) + [f"UPDATE {t} SET {c} = CAST(x'c328ff41' AS TEXT) WHERE {where}"]
    return "delete_rows", [f"DELETE FROM {t} WHERE {where}"]


# -- byte-level damage -----------------------------------------------------------------------
def byte_damage(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    """One random byte-level damage of a SQLite file's bytes: ``(name, damaged bytes)``."""
    kind = rng.choice(["truncate", "flip", "zero_page", "shuffle_pages", "header", "garbage_tail", "splice"])
    size = len(data)
    page = int.from_bytes(data[16:18], "big") or 4096 if size >= 18 else 4096
    page = 65536 if page == 1 else page
    buf = bytearray(data)
    if kind == "truncate":
        return kind, bytes(buf[:rng.randrange(0, size)])
    if kind == "flip":
        for _ in range(rng.choice([1, 4, 64, 1024])):
            i = rng.randrange(size)
            buf[i] ^= 1 << rng.randrange(8)
        return kind, bytes(buf)
    if kind == "zero_page":
        n = rng.randrange(max(size // page, 1))
        buf[n * page:(n + 1) * page] = bytes(min(page, size - n * page))
        return kind, bytes(buf)
    if kind == "shuffle_pages":
        pages = [buf[i:i + page] for i in range(0, size, page)]
        first, rest = pages[:1], pages[1:]
        k = min(len(rest), rng.choice([2, 4, 16]))
        if k >= 2:
            idx = rng.sample(range(len(rest)), k)
            chosen = [rest[i] for i in idx]
            rng.shuffle(chosen)
            for i, p in zip(idx, chosen, strict=True):
                rest[i] = p
        return kind, b"".join(bytes(p) for p in first + rest)
    if kind == "header":
        i = rng.randrange(16, min(100, size))
        buf[i] = rng.randrange(256)
        return kind, bytes(buf)
    if kind == "garbage_tail":
        return kind, bytes(buf) + rng.randbytes(rng.choice([1, 100, 4096]))
    # splice: a random run of bytes overwritten with random bytes
    kind = "splice"
    start = rng.randrange(size)
    length = min(rng.choice([8, 512, 8192]), size - start)
    buf[start:start + length] = rng.randbytes(length)
    return kind, bytes(buf)
