#!/usr/bin/env python3
"""Facts for issue 37's cases, from our own SQL over the nsys SQLite exports (the basis of expected.json).

    python3 causes_facts.py FOLDER [NAME...]    # FOLDER holds NAME.sqlite or NAME.sqlite.xz; prints JSON

Per trace: its program's step marks (NVTX ranges or per-token readbacks), the CUDA calls, GPU work, copies
and OS runtime calls inside each step, and per-kind counts and medians. Nothing here reads nsys-rules.
"""

from __future__ import annotations

import json
import lzma
import shutil
import sqlite3
import sys
import tempfile
from pathlib import Path

import numpy as np

DTOH, HTOD, DTOD = 2, 1, 8


def unpack(folder: Path, name: str, scratch: Path) -> Path | None:
    """NAME.sqlite from FOLDER, unpacked from NAME.sqlite.xz into SCRATCH where needed."""
    plain = folder / f"{name}.sqlite"
    if plain.exists():
        return plain
    packed = folder / f"{name}.sqlite.xz"
    if not packed.exists():
        return None
    out = scratch / f"{name}.sqlite"
    with lzma.open(packed) as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return out


def tables(db: sqlite3.Connection) -> set[str]:
    return {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def calls(db: sqlite3.Connection) -> np.ndarray:
    """CUDA API calls: rows (start, end, globalTid, correlationId, name), name as a Python str array column."""
    rows = db.execute("SELECT r.start, r.end, r.globalTid, r.correlationId, s.value FROM CUPTI_ACTIVITY_KIND_RUNTIME r "
                      "JOIN StringIds s ON r.nameId = s.id ORDER BY r.start").fetchall()
    return np.array(rows, dtype=object).reshape(-1, 5)


def gpu_ops(db: sqlite3.Connection) -> list[tuple]:
    """(start, end, correlationId, kind, bytes, copyKind, name) of kernels, copies and memsets."""
    have = tables(db)
    out = [(s, e, c, "kernel", 0, None, n) for s, e, c, n in db.execute(
        "SELECT k.start, k.end, k.correlationId, s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k "
        "JOIN StringIds s ON k.shortName = s.id")]
    if "CUPTI_ACTIVITY_KIND_MEMCPY" in have:
        out += [(s, e, c, "memcpy", b, k, None) for s, e, c, b, k in db.execute(
            "SELECT start, end, correlationId, bytes, copyKind FROM CUPTI_ACTIVITY_KIND_MEMCPY")]
    if "CUPTI_ACTIVITY_KIND_MEMSET" in have:
        out += [(s, e, c, "memset", b, None, None) for s, e, c, b in db.execute(
            "SELECT start, end, correlationId, bytes FROM CUPTI_ACTIVITY_KIND_MEMSET")]
    return sorted(out)


def nvtx(db: sqlite3.Connection, like: str) -> list[tuple[int, int, int, str]]:
    if "NVTX_EVENTS" not in tables(db):
        return []
    return [tuple(r) for r in db.execute(
        "SELECT n.start, n.end, n.globalTid, COALESCE(n.text, s.value) FROM NVTX_EVENTS n LEFT JOIN StringIds s "
        "ON n.textId = s.id WHERE n.eventType IN (59, 60) AND n.end IS NOT NULL AND COALESCE(n.text, s.value) LIKE ? "
        "ORDER BY n.start", (like,))]


def osrt(db: sqlite3.Connection) -> list[tuple[int, int, int, str]]:
    if "OSRT_API" not in tables(db):
        return []
    return [tuple(r) for r in db.execute(
        "SELECT o.start, o.end, o.globalTid, s.value FROM OSRT_API o JOIN StringIds s ON o.nameId = s.id ORDER BY o.start")]


def med(xs) -> float | None:
    return round(float(np.median(xs)) / 1e6, 4) if len(xs) else None


def per_window(windows: list[tuple[int, int]], api: np.ndarray, ops: list[tuple], os_calls: list[tuple],
               tid: int | None) -> list[dict]:
    """What each window [start, end) holds: calls by name, GPU ops they launched, copies, OS calls."""
    by_corr: dict[int, list[tuple]] = {}
    for op in ops:
        by_corr.setdefault(op[2], []).append(op)
    starts = np.array([r[0] for r in api], dtype=np.int64)
    ostarts = np.array([r[0] for r in os_calls], dtype=np.int64)
    out = []
    for ws, we in windows:
        lo, hi = np.searchsorted(starts, ws), np.searchsorted(starts, we)
        names: dict[str, int] = {}
        launched: list[tuple] = []
        for r in api[lo:hi]:
            if tid is not None and r[2] != tid:
                continue
            n = r[4].split("_v")[0]
            names[n] = names.get(n, 0) + 1
            launched += by_corr.get(r[3], [])
        olo, ohi = np.searchsorted(ostarts, ws), np.searchsorted(ostarts, we)
        onames: dict[str, int] = {}
        for r in os_calls[olo:ohi]:
            if tid is None or r[2] == tid:
                onames[r[3]] = onames.get(r[3], 0) + 1
        kern = [o for o in launched if o[3] == "kernel"]
        cp = [o for o in launched if o[3] == "memcpy"]
        out.append({
            "host_ns": we - ws, "calls": names, "os_calls": onames, "kernels": len(kern),
            "kernel_names": sorted({o[6] for o in kern}),
            "gpu_start": min((o[0] for o in launched), default=None),
            "gpu_end": max((o[1] for o in launched), default=None),
            "kernel_ns": sum(o[1] - o[0] for o in kern),
            "dtoh": [o[4] for o in cp if o[5] == DTOH], "htod": [o[4] for o in cp if o[5] == HTOD],
            "dtod": [o[4] for o in cp if o[5] == DTOD],
            "dtod_ns": sum(o[1] - o[0] for o in cp if o[5] == DTOD),
        })
    return out


def periods(steps: list[dict]) -> list[int]:
    g = [s["gpu_start"] for s in steps]
    return [b - a for a, b in zip(g, g[1:], strict=False) if a is not None and b is not None]


def summary(steps: list[dict]) -> dict:
    """Counts and medians over a list of steps."""
    def mean_count(key):
        return round(float(np.mean([len(s[key]) for s in steps])), 3) if steps else None
    keys = set().union(*(x["calls"] for x in steps)) if steps else set()
    calls_all = {k: [s["calls"].get(k, 0) for s in steps] for k in keys}
    return {
        "steps": len(steps), "host_ms_median": med([s["host_ns"] for s in steps]),
        "gpu_period_ms_median": med(periods(steps)),
        "kernels_per_step_median": float(np.median([s["kernels"] for s in steps])) if steps else None,
        "kernel_ms_per_step_median": med([s["kernel_ns"] for s in steps]),
        "dtoh_per_step": mean_count("dtoh"), "htod_per_step": mean_count("htod"), "dtod_per_step": mean_count("dtod"),
        "dtoh_bytes": sorted({b for s in steps for b in s["dtoh"]}),
        "dtod_bytes_per_step_median": float(np.median([sum(s["dtod"]) for s in steps])) if steps else None,
        "dtod_ms_per_step_median": med([s["dtod_ns"] for s in steps]),
        "calls_per_step_median": {k: float(np.median(v)) for k, v in sorted(calls_all.items()) if np.median(v) > 0},
    }


def main(argv: list[str]) -> int:
    folder = Path(argv[1])
    names = argv[2:] or sorted(p.name.split(".")[0] for p in folder.glob("*.sqlite*"))
    out = {}
    with tempfile.TemporaryDirectory() as scratch:
        for name in names:
            path = unpack(folder, name, Path(scratch))
            if path is None:
                continue
            with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
                out[name] = facts(name, db)
    print(json.dumps(out, indent=1, default=str))
    return 0


def facts(name: str, db: sqlite3.Connection) -> dict:
    """The facts of one trace, by its kind of program."""
    api, ops, os_calls = calls(db), gpu_ops(db), osrt(db)
    ranges = nvtx(db, "serve_step") or nvtx(db, "step=%") or nvtx(db, "decode_step") or nvtx(db, "train_step%")
    if ranges:
        tid = ranges[0][2]
        steps = per_window([(s, e) for s, e, _, _ in ranges], api, ops, os_calls, tid)
        for s, r in zip(steps, ranges, strict=False):
            s["name"] = r[3]
        return {"marks": f"NVTX '{ranges[0][3]}'", "count": len(steps), "steps": steps}
    # No NVTX: the per-token / per-step readback (a small device-to-host copy) marks the iterations.
    reads = sorted((o for o in ops if o[3] == "memcpy" and o[5] == DTOH and o[4] <= 64), key=lambda o: o[0])
    corr_call = {r[3]: r for r in api}
    ends = [corr_call[o[2]][1] for o in reads if o[2] in corr_call]
    windows = list(zip(ends, ends[1:], strict=False))
    # Every thread's calls count: JAX launches from its own execution threads, not the one that reads back.
    steps = per_window(windows, api, ops, os_calls, None)
    return {"marks": "end of one small device-to-host readback call to the end of the next", "count": len(steps),
            "readbacks": len(reads), "steps": steps}


if __name__ == "__main__":
    sys.exit(main(sys.argv))
