"""The median step as a timeline the HTML report draws: as measured (its replay) and with the shown fixes.

Rows: each host thread's CUDA calls (by kind), then each GPU stream's operations (by kernel
class), then the GPU's idle stretches, each named by the budget part whose cause the launching
thread shows at that moment (inside a sync: ``after_sync``; in an allocation; loading a module; a
block of host work: ``host_prep``; else ``launch_wait``) and the finding that owns that part.
Times are ns from the step's start. Spans closer than a drawing's resolution are merged, so a
step of thousands of operations stays a few hundred shapes.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from nsys_rules.analysis.intervals import merge_intervals
from nsys_rules.analysis.replay import (CALL_ALLOC, CALL_COPY, CALL_LAUNCH, CALL_MODULE, CALL_SYNC, StepTemplate,
                                        replay)
from nsys_rules.model.activity import BUSY_CLASSES
from nsys_rules.model.replay_what_if import BLOCK_NS, EDITS, StepReplay

#: The drawing's resolution: spans of one row closer than this share of the step merge into one.
RESOLUTION = 1 / 1500
#: Host call kinds as the timeline names them.
CALL_NAMES = {CALL_LAUNCH: "launch", CALL_SYNC: "sync", CALL_ALLOC: "allocation", CALL_COPY: "copy",
              CALL_MODULE: "module load"}


def step_timeline(replayed: StepReplay, owners: Mapping[str, str], shown: tuple[str, ...]) -> dict[str, Any]:
    """``profile.replay_timeline``: the median step as measured (its replay) and with the fixes of ``shown``."""
    template = replayed.measured.template
    fixes = tuple(r for r in sorted(shown) if r in EDITS)
    fixed = template
    for rule in fixes:
        fixed, _ = EDITS[rule][0](fixed, replayed, 1)
    return {"measured_step_ns": replayed.measured_ns, "fixes": list(fixes),
            "as_measured": _picture(template, owners), "with_fixes": _picture(fixed, owners) if fixes else None}


def _picture(t: StepTemplate, owners: Mapping[str, str]) -> dict[str, Any]:
    r = replay(t)
    origin, period = r.origin, max(r.period_ns, 1)
    merge = max(1, int(period * RESOLUTION))
    rows: list[dict[str, Any]] = []
    for thread in np.unique(t.call_thread).tolist():
        mine = np.flatnonzero(t.call_thread == thread)
        spans = [(int(r.call_start[c] - origin), int(r.call_end[c] - origin),
                  CALL_NAMES.get(int(t.call_kind[c]), "other")) for c in mine if r.call_end[c] > r.call_start[c]]
        rows.append({"label": "launching thread" if thread == 0 else f"thread {thread + 1}", "kind": "host",
                     "spans": _merged(spans, merge)})
    for stream in np.unique(t.op_stream).tolist():
        mine = np.flatnonzero(t.op_stream == stream)
        spans = [(int(r.op_start[o] - origin), int(r.op_end[o] - origin), _class(int(t.op_class[o]))) for o in mine]
        rows.append({"label": f"stream {stream}", "kind": "gpu", "spans": _merged(spans, merge)})
    idle = _idle(t, r.op_start - origin, r.op_end - origin, r.call_start - origin, r.call_end - origin, period)
    return {"step_ns": int(r.period_ns), "rows": rows,
            "idle": [[a, b, part, owners.get(part, "")] for a, b, part in _merged(idle, merge)]}


def _class(code: int) -> str:
    return BUSY_CLASSES[code] if 0 <= code < len(BUSY_CLASSES) else "other"


def _merged(spans: list[tuple[int, int, str]], merge: int) -> list[list[Any]]:
    """Spans in start order, neighbours of one name closer than ``merge`` joined."""
    out: list[list[Any]] = []
    for a, b, name in sorted(spans):
        if out and out[-1][2] == name and a - out[-1][1] <= merge:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b, name])
    return out


def _idle(t: StepTemplate, op_start: np.ndarray, op_end: np.ndarray, call_start: np.ndarray, call_end: np.ndarray,
          period: int) -> list[tuple[int, int, str]]:
    """The GPU's idle stretches in the step, each with the budget part its launching thread's state names."""
    busy_a, busy_b = merge_intervals(np.clip(op_start, 0, period), np.clip(op_end, 0, period))
    edges = np.concatenate([[0], busy_b]), np.concatenate([busy_a, [period]])
    main = np.flatnonzero(t.call_thread == 0)
    block = max(BLOCK_NS, period // 10)
    out = []
    for a, b in zip(*edges, strict=True):
        if b <= a:
            continue
        mid = (int(a) + int(b)) // 2
        inside = main[(call_start[main] <= mid) & (call_end[main] > mid)]
        launched = t.op_call >= 0
        queued = launched & (op_start > mid) & (call_start[np.maximum(t.op_call, 0)] <= mid)
        if queued.any():
            part = "idle_other"  # the next operation was launched already: the GPU's own gap (a dependency, a node)
        elif len(inside):
            kind = int(t.call_kind[inside[0]])
            part = {CALL_SYNC: "after_sync", CALL_ALLOC: "allocation", CALL_MODULE: "module_loading"}.get(
                kind, "after_sync" if t.call_wait[inside[0]] >= 0 and kind != CALL_LAUNCH else "launch_wait")
        else:
            before = main[call_end[main] <= mid]
            after = main[call_start[main] > mid]
            host = (int(call_start[after[0]]) if len(after) else period) - (int(call_end[before[-1]]) if len(before)
                                                                             else 0)
            part = "host_prep" if host >= block else "launch_wait"
        out.append((int(a), int(b), part))
    return out
