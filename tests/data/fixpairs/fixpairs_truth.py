#!/usr/bin/env python3
"""The measured truth of issue 36's fix pairs, from our own SQL over the nsys SQLite exports.

    python3 fixpairs_truth.py [FOLDER]     # FOLDER holds NAME.sqlite or NAME.sqlite.xz; writes truth.json

A step is the program's own marker, never the tool's step model:
  * ``nvtx``: the program's NVTX step range (``train_step {i}``, ``decode_step``, ``train_step``); the
    warm-up ranges (the program's own warm-up count) are skipped. The step's GPU start is the earliest
    start of the kernels, copies and memsets launched by CUDA calls made inside the range on the range's
    thread (matched through ``correlationId``). The step time is the period between consecutive GPU starts:
    ``gpu_start[i + 1] - gpu_start[i]``, which is the step whether the host or the GPU sets the pace (a loop
    without a per-step sync has host ranges far shorter than its step; the period is unaffected).
  * ``kernel``: programs without NVTX (the JAX pair): the period between consecutive starts of one kernel
    that runs exactly once per iteration (its count is warm-up + measured iterations), warm-up skipped.
The change is ``median_after - median_before`` (negative: the fix saved that much per step); its 95 %
interval is a percentile bootstrap over both sides' steps (seeded, ``BOOT`` resamples).
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

HERE = Path(__file__).resolve().parent
BOOT = 4000
SEED = 36

#: One entry per trace: how its steps are marked and how many leading marks are the program's warm-up.
STEPS: dict[str, dict] = {
    **{n: {"kind": "nvtx", "like": "train_step %", "skip": 0}
       for n in ("fx_llama_base", "fx_llama_loader20", "fx_llama_empty_cache", "fx_llama_compile",
                 "fx_resnet_pinned", "fx_resnet_pageable_item", "fx_resnet_pageable", "fx_resnet_pinned_item",
                 "fx_resnet_fp32")},
    "fx_decode_eager": {"kind": "nvtx", "like": "decode_step", "skip": 5},
    "fx_decode_graphs": {"kind": "nvtx", "like": "decode_step", "skip": 5},
    "fx_alloc_cached": {"kind": "nvtx", "like": "train_step", "skip": 5},
    "fx_alloc_nocache": {"kind": "nvtx", "like": "train_step", "skip": 5},
    "fx_jax_readback": {"kind": "kernel", "iterations": 65, "skip": 5},
    "fx_jax_noreadback": {"kind": "kernel", "iterations": 65, "skip": 5},
}

#: The pairs: BEFORE has the habit, AFTER is the same program without it.
PAIRS: list[dict[str, str]] = [
    {"pair": "llama_loader20", "before": "fx_llama_loader20", "after": "fx_llama_base", "area": "host input",
     "habit": "20 ms of host batch preparation (busy loop) on the launching thread at the start of every step"},
    {"pair": "llama_empty_cache", "before": "fx_llama_empty_cache", "after": "fx_llama_base", "area": "allocation",
     "habit": "torch.cuda.empty_cache() at the end of every step"},
    {"pair": "llama_compile", "before": "fx_llama_base", "after": "fx_llama_compile", "area": "launch overhead / fusion",
     "habit": "eager execution (the fix: torch.compile of the model, default mode)"},
    {"pair": "resnet_pageable_item", "before": "fx_resnet_pageable_item", "after": "fx_resnet_pinned",
     "area": "copies + syncs", "habit": "pageable batch copies (.cuda()) and loss.item() every step"},
    {"pair": "resnet_pageable", "before": "fx_resnet_pageable", "after": "fx_resnet_pinned", "area": "copies",
     "habit": "pageable batch copies (.cuda()) instead of pin_memory() + non_blocking=True"},
    {"pair": "resnet_item", "before": "fx_resnet_pinned_item", "after": "fx_resnet_pinned", "area": "syncs",
     "habit": "loss.item() every step"},
    {"pair": "resnet_fp32", "before": "fx_resnet_fp32", "after": "fx_resnet_pinned", "area": "FP32",
     "habit": "FP32 with TF32 off (no autocast) instead of bf16 autocast"},
    {"pair": "decode_graphs", "before": "fx_decode_eager", "after": "fx_decode_graphs", "area": "launch overhead",
     "habit": "eager kernel launches per token (the fix: one CUDA graph replay per token)"},
    {"pair": "alloc_caching", "before": "fx_alloc_nocache", "after": "fx_alloc_cached", "area": "allocation",
     "habit": "PYTORCH_NO_CUDA_MEMORY_CACHING=1: cudaMalloc/cudaFree for every tensor"},
    {"pair": "jax_readback", "before": "fx_jax_readback", "after": "fx_jax_noreadback", "area": "syncs",
     "habit": "float(loss) every step (a device-to-host readback and a host wait)"},
]

_GPU_OPS = """
WITH api AS (
  SELECT start, globalTid, correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME
  {driver}
), gpu AS (
  SELECT start, correlationId, globalPid FROM CUPTI_ACTIVITY_KIND_KERNEL
  UNION ALL SELECT start, correlationId, globalPid FROM CUPTI_ACTIVITY_KIND_MEMCPY
  {memset}
)
SELECT api.globalTid, api.start, gpu.start FROM api JOIN gpu
  ON api.correlationId = gpu.correlationId AND api.globalTid / 16777216 = gpu.globalPid / 16777216
"""


def _tables(db: sqlite3.Connection) -> set[str]:
    return {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def nvtx_steps(db: sqlite3.Connection, like: str) -> list[tuple[int, int, int]]:
    """(start, end, globalTid) of every push/pop or start/end range whose name matches ``like``, in time order."""
    return [tuple(r) for r in db.execute(
        "SELECT n.start, n.end, n.globalTid FROM NVTX_EVENTS n LEFT JOIN StringIds s ON n.textId = s.id "
        "WHERE n.eventType IN (59, 60) AND n.end IS NOT NULL AND COALESCE(n.text, s.value) LIKE ? ORDER BY n.start",
        (like,))]


def launched_gpu_starts(db: sqlite3.Connection) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per thread: the CUDA calls' start times (sorted) and the earliest GPU start each call launched."""
    have = _tables(db)
    sql = _GPU_OPS.format(
        driver="UNION ALL SELECT start, globalTid, correlationId FROM CUPTI_ACTIVITY_KIND_DRIVER"
        if "CUPTI_ACTIVITY_KIND_DRIVER" in have else "",
        memset="UNION ALL SELECT start, correlationId, globalPid FROM CUPTI_ACTIVITY_KIND_MEMSET"
        if "CUPTI_ACTIVITY_KIND_MEMSET" in have else "")
    rows = np.array(db.execute(sql).fetchall(), dtype=np.int64).reshape(-1, 3)
    out: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for tid in np.unique(rows[:, 0]):
        mine = rows[rows[:, 0] == tid]
        order = np.argsort(mine[:, 1], kind="stable")
        out[int(tid)] = (mine[order, 1], mine[order, 2])
    return out


def step_periods(db: sqlite3.Connection, spec: dict) -> tuple[np.ndarray, dict]:
    """The measured steps' periods in ns (GPU start to the next step's GPU start) and how they were found."""
    if spec["kind"] == "nvtx":
        ranges = nvtx_steps(db, spec["like"])[spec["skip"]:]
        calls = launched_gpu_starts(db)
        starts = []
        for start, end, tid in ranges:
            api_t, gpu_t = calls.get(tid, (np.empty(0, np.int64), np.empty(0, np.int64)))
            lo, hi = np.searchsorted(api_t, start, "left"), np.searchsorted(api_t, end, "right")
            if hi > lo:
                starts.append(int(gpu_t[lo:hi].min()))
        host = np.array([e - s for s, e, _ in ranges], dtype=np.int64)
        info = {"marks": len(ranges), "marks_with_gpu_work": len(starts),
                "host_range_median_ns": int(np.median(host)) if len(host) else None}
    else:
        names = db.execute(
            "SELECT k.shortName, COUNT(*), MIN(k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k GROUP BY k.shortName "
            "HAVING COUNT(*) = ? ORDER BY MIN(k.start)", (spec["iterations"],)).fetchall()
        if not names:
            raise ValueError(f"no kernel runs exactly {spec['iterations']} times")
        short = names[0][0]
        starts = [r[0] for r in db.execute(
            "SELECT start FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE shortName = ? ORDER BY start", (short,))][spec["skip"]:]
        kname = db.execute("SELECT value FROM StringIds WHERE id = ?", (short,)).fetchone()
        info = {"marks": len(starts), "marker_kernel": kname[0] if kname else str(short),
                "kernels_once_per_iteration": len(names)}
    return np.diff(np.array(starts, dtype=np.int64)), info


def bootstrap_change(before: np.ndarray, after: np.ndarray, n: int = BOOT, seed: int = SEED) -> tuple[int, int]:
    """95 % percentile interval of median(after) - median(before), resampling each side's steps."""
    rng = np.random.default_rng(seed)
    b = np.median(before[rng.integers(0, len(before), (n, len(before)))], axis=1)
    a = np.median(after[rng.integers(0, len(after), (n, len(after)))], axis=1)
    lo, hi = np.percentile(a - b, [2.5, 97.5])
    return int(round(lo)), int(round(hi))


def open_trace(folder: Path, name: str, scratch: Path) -> sqlite3.Connection | None:
    """The trace NAME from FOLDER (unpacking NAME.sqlite.xz into SCRATCH), read-only; None when absent."""
    plain = folder / f"{name}.sqlite"
    if not plain.exists():
        packed = folder / f"{name}.sqlite.xz"
        if not packed.exists():
            return None
        plain = scratch / f"{name}.sqlite"
        if not plain.exists():
            with lzma.open(packed) as src, open(plain, "wb") as dst:
                shutil.copyfileobj(src, dst)
    return sqlite3.connect(f"file:{plain}?mode=ro", uri=True)


def measure(folder: Path, scratch: Path) -> dict[str, dict]:
    """Every trace's measured steps: periods (ns), median and how steps were defined."""
    out = {}
    for name, spec in STEPS.items():
        db = open_trace(folder, name, scratch)
        if db is None:
            continue
        with db:
            periods, info = step_periods(db, spec)
        out[name] = {"periods": periods, "median_ns": int(np.median(periods)), "steps": len(periods), **info}
    return out


def definition(spec: dict) -> str:
    """A sentence saying how the steps of a trace were found."""
    if spec["kind"] == "nvtx":
        return (f"NVTX range '{spec['like']}' ({spec['skip']} warm-up ranges skipped); step = period between the "
                "GPU starts of consecutive ranges' launched work (correlationId)")
    return (f"a kernel run exactly once per iteration ({spec['iterations']} iterations, {spec['skip']} warm-up "
            "skipped); step = period between its consecutive starts")


def truths(measured: dict[str, dict]) -> dict[str, dict]:
    """truth.json's pairs: both medians, the change and its bootstrap interval."""
    out = {}
    for p in PAIRS:
        if p["before"] not in measured or p["after"] not in measured:
            continue
        b, a = measured[p["before"]], measured[p["after"]]
        lo, hi = bootstrap_change(b["periods"], a["periods"])
        out[p["pair"]] = {
            **p, "median_before_ns": b["median_ns"], "median_after_ns": a["median_ns"],
            "change_ns": a["median_ns"] - b["median_ns"], "interval_ns": [lo, hi],
            "change_pct": round(100.0 * (a["median_ns"] - b["median_ns"]) / b["median_ns"], 2),
            "steps_before": b["steps"], "steps_after": a["steps"],
            "steps_defined_before": definition(STEPS[p["before"]]),
            "steps_defined_after": definition(STEPS[p["after"]]),
            "host_range_median_before_ns": b.get("host_range_median_ns"),
            "host_range_median_after_ns": a.get("host_range_median_ns"),
            **({"marker_kernel_before": b["marker_kernel"], "marker_kernel_after": a["marker_kernel"]}
               if "marker_kernel" in b else {}),
        }
    return out


def main(argv: list[str]) -> int:
    folder = Path(argv[1]) if len(argv) > 1 else HERE
    with tempfile.TemporaryDirectory() as scratch:
        measured = measure(folder, Path(scratch))
    for name, m in measured.items():
        print(f"{name:28s} steps={m['steps']:3d} median={m['median_ns'] / 1e6:9.3f} ms "
              f"host_range={(m.get('host_range_median_ns') or 0) / 1e6:9.3f} ms {m.get('marker_kernel', '')}")
    result = truths(measured)
    for k, t in result.items():
        print(f"{k:22s} {t['median_before_ns'] / 1e6:9.3f} -> {t['median_after_ns'] / 1e6:9.3f} ms  "
              f"change {t['change_ns'] / 1e6:+9.3f} ms [{t['interval_ns'][0] / 1e6:+.3f}, {t['interval_ns'][1] / 1e6:+.3f}]")
    doc = {"about": __doc__.strip().splitlines()[0], "change": "median_after_ns - median_before_ns (negative: saved)",
           "interval": f"95 % percentile bootstrap of the change, {BOOT} resamples, seed {SEED}", "pairs": result}
    (HERE / "truth.json").write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
