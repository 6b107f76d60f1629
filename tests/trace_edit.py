"""Test helpers that rewrite a copy of a real nsys SQLite export: rows in random order, records removed.

nsys 2025.6 and later may write an export's rows in any order, timestamp order included, so every
answer must be the same on :func:`shuffled_copy` of a trace. The damaging edits make the variants
the validity verdict is tested on (records dropped from one stream, graph nodes missing from some
replays, a cut last step, NVTX ends removed). The source file is only read; each edit writes a new
file.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import numpy as np


def _copy(source: Path, target: Path) -> sqlite3.Connection:
    shutil.copyfile(source, target)
    return sqlite3.connect(target)


def _rowid_tables(db: sqlite3.Connection) -> list[str]:
    """Tables whose stored order is free: rowid tables without an INTEGER PRIMARY KEY (an id that is data, as
    ``StringIds.id``, fixes the order of its table in every export)."""
    out = []
    for (name, sql) in db.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table' AND name NOT LIKE "
                                  "'sqlite_%'").fetchall():
        if "WITHOUT ROWID" in (sql or "").upper():
            continue
        keyed = any(pk and str(kind).upper() == "INTEGER" for _, _, kind, _, _, pk in
                    db.execute(f'PRAGMA table_info("{name}")').fetchall())
        if not keyed:
            out.append(name)
    return out


def shuffled_copy(source: Path, target: Path, seed: int = 0) -> Path:
    """``source`` written to ``target`` with the rows of every table in a random order (fixed by ``seed``)."""
    db = _copy(source, target)
    rng = np.random.default_rng(seed)
    with db:
        for name in _rowid_tables(db):
            rowids = np.array([r[0] for r in db.execute(f'SELECT rowid FROM "{name}"')], np.int64)
            if len(rowids) < 2:
                continue
            order = rng.permutation(rowids)
            db.execute("CREATE TEMP TABLE shuffle_order (pos INTEGER PRIMARY KEY, old INTEGER)")
            db.executemany("INSERT INTO shuffle_order VALUES (?, ?)", enumerate(order.tolist()))
            db.execute(f'CREATE TEMP TABLE shuffle_rows AS SELECT * FROM "{name}" JOIN shuffle_order '
                       f'ON "{name}".rowid = shuffle_order.old ORDER BY shuffle_order.pos')
            columns = ", ".join(f'"{c[1]}"' for c in db.execute(f'PRAGMA table_info("{name}")'))
            db.execute(f'DELETE FROM "{name}"')
            db.execute(f'INSERT INTO "{name}" ({columns}) SELECT {columns} FROM shuffle_rows ORDER BY pos')
            db.execute("DROP TABLE shuffle_rows")
            db.execute("DROP TABLE shuffle_order")
    db.execute("VACUUM")
    db.close()
    return target


def edited_copy(source: Path, target: Path, statements: list[str]) -> Path:
    """``source`` written to ``target`` with ``statements`` (SQL the test writes, over the copy) applied."""
    db = _copy(source, target)
    with db:
        for sql in statements:
            db.execute(sql)
    db.execute("VACUUM")
    db.close()
    return target
