"""One measured step as a replay template (:class:`~nsys_rules.analysis.replay.StepTemplate`).

The step is the host interval from the step's start to the next step's start on the process's
threads that launch its GPU work or block on it, and the GPU operations those calls launched on
the loop's device. What the template keeps from the trace, and why:

- a thread's calls nest (a runtime call around its driver call): only the outermost call of a
  thread is a host event; an inner call's launches belong to the outer one;
- a call blocks when a GPU operation launched before it ended while it ran and the call returned
  within :data:`RETURN_NS` after (a synchronize, a blocking copy, a free, a launch into a full
  queue); a synchronizing call that waited for nothing still waits, in a what-if, for the latest
  operation launched before it;
- an operation's latency after its launching call's start is the measured one where nothing else
  held it back; where its stream predecessor or an operation on another stream (an event wait,
  seen as a start right at that operation's end) held it, the typical launch latency;
- an operation or wait of the step before maps to the same position of the template's own
  operations on that stream, counted from the end (the replay runs the step as a loop).

Built once per trace, model and step (memoized on the trace).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nsys_rules.analysis.names import ALLOC_APIS, MODULE_LOAD_APIS, SYNC_APIS, is_any_launch, is_blocking_transfer
from nsys_rules.analysis.replay import (CALL_ALLOC, CALL_COPY, CALL_LAUNCH, CALL_MODULE, CALL_OTHER, CALL_SYNC,
                                         StepTemplate,
                                         event_order)
from nsys_rules.model.activity import COLUMNS, MEMCPY, MEMSET, gpu_ops
from nsys_rules.model.steps import StepModel
from nsys_rules.model.trace import Trace

#: A blocking call returns within this long after the operation it waited for ends.
RETURN_NS = 50_000
#: Any other call (a launch into a full queue) returns at once when the operation it waited for ends.
QUICK_RETURN_NS = 10_000
#: A start within this long after another stream's operation ends waited for it (an event wait).
DEPENDENCY_NS = 4_000
#: Another thread idle this long before a call was waiting for the step's progress, not doing its own work.
TRIGGER_NS = 50_000
#: Slack of the clocks: a start this close to a predecessor's end was held by it.
SLACK_NS = 1_000
#: Typical latency from a launch call's start to the operation running, when none was measured.
DEFAULT_LATENCY_NS = 4_000
#: A blocking call's own time when the GPU work it waits for is already done.
OWN_SYNC_NS = 3_000
#: Calls that free memory: they synchronize the device.
FREE_APIS = frozenset({"cudaFree", "cuMemFree", "cudaFreeHost", "cuMemFreeHost"})


@dataclass(frozen=True, eq=False)
class MeasuredStep:
    """A step's template and what it was measured from."""

    template: StepTemplate
    index: int
    measured_ns: int
    host: tuple[int, int]
    tid: int
    #: The template operations' rows in :func:`~nsys_rules.model.activity.gpu_ops`, and the calls' API rows.
    op_rows: np.ndarray
    call_rows: np.ndarray
    call_names: tuple[str, ...]


def measured_step(trace: Trace, model: StepModel, index: int) -> MeasuredStep | None:
    """Step ``index`` of ``model`` as a replay template (None without API calls or GPU work)."""
    # By the model's identity, kept alongside so a recycled id never matches.
    return trace.memo(("replay_step.measured_step", id(model), index), lambda: (model, _build(trace, model, index)),
                      lambda hit: hit[0] is model)[1]


def _build(trace: Trace, model: StepModel, index: int) -> MeasuredStep | None:
    if not model.count or model.device is None or not trace.has("api") or not 0 <= index < model.count:
        return None
    t0 = int(model.host[index, 0])
    t1 = int(model.host[index + 1, 0]) if index + 1 < model.count else int(model.host[index, 1])
    api = trace.frame("api", ["start", "end", "pid", "tid", "name"])
    a_start, a_end = api["start"].to_numpy(), api["end"].to_numpy()
    a_pid, a_tid = api["pid"].to_numpy(), api["tid"].to_numpy()
    ops = gpu_ops(trace)
    # Operations launched in the step by the process on the loop's device (starts come after launches).
    begin = int(np.searchsorted(ops.start, t0, side="left"))
    launch = ops.launch[begin:]
    mine = (launch >= t0) & (launch < t1) & (ops.device[begin:] == model.device) & (ops.api_row[begin:] >= 0)
    if model.pid is not None:
        mine &= ops.pid[begin:] == model.pid
    op_rows = begin + np.flatnonzero(mine)
    if not len(op_rows):
        return None
    op_api = ops.api_row[op_rows].astype(np.int64)
    op_tid = a_tid[op_api]
    tids, counts = np.unique(op_tid, return_counts=True)
    # The thread that drives the step: the one its NVTX range is on, else the first of the launching threads to
    # make a call in the step (the main thread prepares the input and starts the forward; an autograd thread
    # launches more kernels, but later).
    main_tid = _step_thread(trace, model, t0, tids) if model.source == "nvtx" else None
    if main_tid is None:
        in_step = (a_start >= t0) & (a_start < t1) & np.isin(a_tid, tids)
        if model.pid is not None:
            in_step &= a_pid == model.pid
        first = np.flatnonzero(in_step)
        main_tid = int(a_tid[first[np.argmin(a_start[first])]]) if len(first) else int(tids[np.argmax(counts)])
    # The process's calls in the step, on every thread.
    in_window = (a_start >= t0) & (a_start < t1)
    if model.pid is not None:
        in_window &= a_pid == model.pid
    rows = np.flatnonzero(in_window)
    rows = rows[np.lexsort((a_start[rows], a_tid[rows]))]
    names = trace.api_names()
    # Outermost calls per thread: a call starting before the running end of its thread's calls is nested.
    outer = np.ones(len(rows), bool)
    last_tid, reach = None, -1
    r_start, r_end, r_tid = a_start[rows], a_end[rows], a_tid[rows]
    for k in range(len(rows)):
        if r_tid[k] != last_tid:
            last_tid, reach = r_tid[k], -1
        if r_start[k] < reach:
            outer[k] = False
        else:
            reach = r_end[k]
    # Each operation's call: the outer call of its thread starting at or before its launching call.
    out_rows = rows[outer]
    out_tid, out_start = a_tid[out_rows], a_start[out_rows]
    op_call_row = np.full(len(op_rows), -1, np.int64)
    for t in np.unique(op_tid):
        sel = np.flatnonzero(out_tid == t)
        which = np.flatnonzero(op_tid == t)
        at = np.searchsorted(out_start[sel], a_start[op_api[which]], side="right") - 1
        ok = at >= 0
        op_call_row[which[ok]] = out_rows[sel[at[ok]]]
    # The device's operations around the step: stream predecessors, dependencies, waits.
    lo = int(model.host[index - 1, 0]) if index > 0 else t0 - (t1 - t0)
    hi = int(ops.end[op_rows].max()) + 1
    near = ops.near(lo, hi, model.device)
    n_start, n_end = np.asarray(near.start, np.int64), np.asarray(near.end, np.int64)
    n_stream = np.asarray(near.stream, np.int64)
    n_launch = np.asarray(near.launch, np.int64)
    # Rows of near in gpu_ops: near is a slice or a selection of the slice from the first start >= lo.
    near_rows = _rows_of(ops, near, lo, hi, model.device)
    pos = {int(r): k for k, r in enumerate(near_rows)}
    t_pos = np.array([pos.get(int(r), -1) for r in op_rows], np.int64)
    order = np.lexsort((n_start, n_stream))
    pred_end = np.full(len(near_rows), -1, np.int64)
    same = n_stream[order][1:] == n_stream[order][:-1]
    pred_end[order[1:][same]] = n_end[order[:-1][same]]
    # Template operations by their position from the end on their stream (the previous step's map onto them).
    t_stream = n_stream[t_pos]
    prev_map = _from_end_map(t_stream)
    in_template = np.full(len(near_rows), -1, np.int64)
    in_template[t_pos] = np.arange(len(op_rows))
    before = (n_launch < t0) & (n_launch >= lo)  # launched by the step before (not queued from further back)
    stream_rank = _rank_from_end(near_rows, n_stream, before)

    def template_op(k: int) -> tuple[int, bool]:
        """The template operation standing for operation ``k`` of ``near`` (-1 when none), and whether of the step before."""
        if in_template[k] >= 0:
            return int(in_template[k]), False
        if before[k] and stream_rank[k] >= 0:
            return prev_map.get((int(n_stream[k]), int(stream_rank[k])), -1), True
        return -1, False

    # Calls of the template: the main thread's outer calls, and other threads' that launch or block.
    call_rows_all = out_rows
    call_names = [str(names.iat[int(r)]) for r in call_rows_all]
    launching = set(op_call_row.tolist())
    by_end = np.argsort(n_end, kind="stable")
    sorted_end = n_end[by_end]
    calls: list[tuple[int, int, int, int, int, bool, int, bool]] = []  # row, tid, start, end, wait, prev, ret, waited
    kept_names: list[str] = []
    for r, name in zip(call_rows_all.tolist(), call_names, strict=True):
        t_begin, t_end, t_tid = int(a_start[r]), int(a_end[r]), int(a_tid[r])
        wait, prev, ret, did_wait = -1, False, 0, False
        syncs = name in SYNC_APIS or is_blocking_transfer(name) or name in FREE_APIS
        # The latest-ending operation launched before the call ended, ending inside the call: a sync returns
        # soon after, any other call (a launch into a full queue) at once.
        k = int(np.searchsorted(sorted_end, t_end, side="right")) - 1
        while k >= 0 and sorted_end[k] > t_begin:
            cand = int(by_end[k])
            if 0 <= n_launch[cand] < t_end:
                if t_end - sorted_end[k] <= (RETURN_NS if syncs else QUICK_RETURN_NS):
                    wait, prev = template_op(cand)
                    ret, did_wait = t_end - int(sorted_end[k]), True
                break
            k -= 1
        if wait < 0 and did_wait and is_any_launch(name):
            # A launch into a full queue waited for an operation launched steps before: the GPU being behind,
            # which the replay's own queue reproduces. The call's own time is a launch's.
            ret = -1
        elif wait < 0 and syncs:
            # A sync that waited for nothing: in a what-if it waits for the latest operation launched before it
            # that had ended when it returned (one ending later ran on a stream it did not wait for).
            launched = np.flatnonzero((n_launch >= 0) & (n_launch < t_begin) & (n_end <= t_end))
            if len(launched):
                cand = int(launched[np.argmax(n_end[launched])])
                wait, prev = template_op(cand)
                ret, did_wait = OWN_SYNC_NS, False
        did_wait = did_wait and wait >= 0
        if t_tid != main_tid and r not in launching and wait < 0:
            continue
        calls.append((r, t_tid, t_begin, t_end, wait, prev, ret, did_wait))
        kept_names.append(name)
    calls.sort(key=lambda c: (c[2], c[0]))
    c_row = np.array([c[0] for c in calls], np.int64)
    c_tid = np.array([c[1] for c in calls], np.int64)
    c_start = np.array([c[2] for c in calls], np.int64)
    c_end = np.array([c[3] for c in calls], np.int64)
    c_wait = np.array([c[4] for c in calls], np.int64)
    c_prev = np.array([c[5] for c in calls], bool)
    c_ret = np.array([c[6] for c in calls], np.int64)
    kept_names = [n for _, n in sorted(zip([(c[2], c[0]) for c in calls], kept_names, strict=True))]
    thread_codes = {main_tid: 0}
    for t in c_tid.tolist():
        thread_codes.setdefault(int(t), len(thread_codes))
    c_thread = np.array([thread_codes[int(t)] for t in c_tid], np.int64)
    gap = np.zeros(len(calls), np.int64)
    for code in set(c_thread.tolist()):
        sel = np.flatnonzero(c_thread == code)
        gap[sel[0]] = c_start[sel[0]] - t0
        gap[sel[1:]] = c_start[sel[1:]] - c_end[sel[:-1]]
        if code:
            # Another thread idle for a while waits for the step's progress (an autograd thread for the forward
            # to end): its start is its offset in the step, which moves with the launching thread's time.
            gap[sel[gap[sel] >= TRIGGER_NS]] = 0
    waited = np.array([c[7] for c in calls], bool)
    dur = np.where(waited, np.minimum(c_end - c_start, OWN_SYNC_NS), c_end - c_start)
    queued = c_ret < 0  # launches that waited for queue space (marked above)
    if queued.any():
        names_kept = np.array(kept_names, object)
        for name in set(names_kept[queued].tolist()):
            same = names_kept == name
            usual = int(np.median(dur[same & ~queued])) if (same & ~queued).any() else OWN_SYNC_NS
            dur[same & queued] = np.minimum(dur[same & queued], usual)
        c_ret = np.maximum(c_ret, 0)
    main = c_thread == 0
    tail = t1 - int(c_end[main][-1]) if main.any() else t1 - t0
    # Operations: launching call, latency, dependency.
    call_index = {int(r): k for k, r in enumerate(c_row)}
    op_call = np.array([call_index.get(int(r), -1) for r in op_call_row], np.int64)
    o_start, o_end = n_start[t_pos], n_end[t_pos]
    anchor = np.where(op_call >= 0, c_start[np.maximum(op_call, 0)], t0)
    lat_measured = np.maximum(o_start - anchor, 0)
    kind = np.asarray(ops.kind[op_rows], np.int64)
    op_bytes = np.full(len(op_rows), -1, np.int64)
    copy_kind = np.full(len(op_rows), -1, np.int64)
    for code, table in ((MEMCPY, "memcpy"), (MEMSET, "memset")):
        sel = np.flatnonzero(kind == code)
        if len(sel) and trace.has(table):
            frame = trace.frame(table, COLUMNS[table])
            at = np.asarray(ops.table_row[op_rows[sel]], np.int64)
            op_bytes[sel] = frame["bytes"].to_numpy()[at]
            if code == MEMCPY and "copy_kind" in frame:
                copy_kind[sel] = frame["copy_kind"].to_numpy()[at]
    engine = _copy_engines(kind, copy_kind, o_start, o_end, t_stream)
    engine_pred = np.full(len(op_rows), -1, np.int64)
    # A copy engine serving one direction in turn holds a copy back like its stream does.
    for e in np.unique(engine[engine >= 0]).tolist():
        turn = np.flatnonzero(engine == e)
        turn = turn[np.argsort(o_start[turn], kind="stable")]
        engine_pred[turn[1:]] = o_end[turn[:-1]]
    held = np.maximum(pred_end[t_pos], engine_pred)
    # Held back by its stream predecessor when it was queued before that one ended (its launch call had
    # returned): the time between them is the GPU's own. Otherwise launched late: the latency is the host's.
    launch_end = np.where(op_call >= 0, c_end[np.maximum(op_call, 0)], t0)
    free = (o_start > held + SLACK_NS) & (launch_end > held)
    dep = np.full(len(op_rows), -1, np.int64)
    dep_prev = np.zeros(len(op_rows), bool)
    typical = int(np.median(lat_measured[free])) if free.any() else DEFAULT_LATENCY_NS
    for j in np.flatnonzero(free & (lat_measured > typical + DEPENDENCY_NS)).tolist():
        k = int(np.searchsorted(sorted_end, o_start[j], side="right")) - 1
        while k >= 0 and sorted_end[k] >= o_start[j] - DEPENDENCY_NS:
            cand = int(by_end[k])
            if n_stream[cand] != t_stream[j]:
                d, p = template_op(cand)
                if d >= 0 and (p or d != j):
                    dep[j], dep_prev[j] = d, p
                    free[j] = False
                break
            k -= 1
    lat = np.where(free, lat_measured, np.minimum(lat_measured, typical))
    # The GPU's own time between an operation and the one it waited for: measured where it waited, else typical.
    dep_end = np.full(len(op_rows), -1, np.int64)
    for j in np.flatnonzero(dep >= 0).tolist():
        k = int(np.searchsorted(sorted_end, o_start[j], side="right")) - 1
        dep_end[j] = sorted_end[k] if k >= 0 else -1
    behind = np.maximum(held, dep_end)
    gpu_gap = np.maximum(o_start - behind, 0)
    tight = ~free & (behind >= 0)
    usual_gap = int(np.median(gpu_gap[tight])) if tight.any() else 0
    gap_ns = np.where(tight, gpu_gap, usual_gap)
    streams = set(model.streams)
    host_end = int(model.host[index, 1])
    op_step = np.array([int(s) in streams for s in t_stream], bool) & (ops.launch[op_rows] < host_end) if streams \
        else np.ones(len(op_rows), bool)
    template = StepTemplate(
        call_thread=c_thread, call_gap=gap, call_offset=c_start - t0, call_dur=dur, call_wait=c_wait,
        call_wait_prev=c_prev, call_ret=c_ret, tail_ns=int(tail), op_call=op_call, op_lat=lat.astype(np.int64),
        op_dur=(o_end - o_start).astype(np.int64), op_gap=gap_ns.astype(np.int64),
        op_stream=t_stream.astype(np.int64), op_dep=dep,
        op_dep_prev=dep_prev, op_step=op_step, call_kind=np.array([_call_kind(n) for n in kept_names], np.int64),
        op_kind=kind, op_class=np.asarray(ops.cls[op_rows], np.int64), op_bytes=op_bytes, op_copy_kind=copy_kind,
        op_engine=engine,
        order=event_order(c_start - t0, c_end - t0, o_start - t0))
    measured = int(model.gpu[index, 1] - model.gpu[index, 0])
    return MeasuredStep(template, index, measured, (t0, t1), main_tid, op_rows, c_row, tuple(kept_names))


def _copy_engines(kind: np.ndarray, copy_kind: np.ndarray, start: np.ndarray, end: np.ndarray,
                  stream: np.ndarray) -> np.ndarray:
    """Each host copy's copy engine (its direction) where that direction's copies never overlapped though several
    streams ran them: one engine served them in turn. -1 for the rest (several engines, or no copy)."""
    engine = np.full(len(kind), -1, np.int64)
    for direction in (1, 2):  # CUPTI copyKind: host to device, device to host
        sel = np.flatnonzero((kind == MEMCPY) & (copy_kind == direction))
        if len(sel) < 2 or len(np.unique(stream[sel])) < 2:
            continue
        order = sel[np.argsort(start[sel], kind="stable")]
        if (start[order[1:]] >= end[order[:-1]]).all():
            engine[sel] = direction
    return engine


def _step_thread(trace: Trace, model: StepModel, t0: int, tids: np.ndarray) -> int | None:
    """The thread of the step's NVTX range (it drives the step: input, forward, optimizer), when it launches work."""
    if not trace.has("nvtx"):
        return None
    nvtx = trace.frame("nvtx", ["start", "tid"])
    at = np.flatnonzero(nvtx["start"].to_numpy() == t0)
    for tid in nvtx["tid"].to_numpy()[at].tolist():
        if tid in set(tids.tolist()):
            return int(tid)
    return None


def _call_kind(name: str) -> int:
    """What a call does, for the edits (``CALL_*`` of :mod:`nsys_rules.analysis.replay`)."""
    if name in SYNC_APIS:
        return CALL_SYNC
    if name in ALLOC_APIS or name in FREE_APIS:
        return CALL_ALLOC
    if name in MODULE_LOAD_APIS:
        return CALL_MODULE
    if name.startswith(("cudaMemcpy", "cuMemcpy", "cudaMemset", "cuMemset")):
        return CALL_COPY
    if is_any_launch(name):
        return CALL_LAUNCH
    return CALL_OTHER


def _rows_of(ops, near, lo: int, hi: int, device: int) -> np.ndarray:  # type: ignore[no-untyped-def]
    """Row numbers in ``ops`` of the operations ``near`` holds (same selection as :meth:`GpuOps.near`)."""
    first = int(np.searchsorted(ops.start, lo, side="left"))
    last = int(np.searchsorted(ops.start, hi, side="left"))
    early = np.flatnonzero(ops.end[:first] > lo)
    begin = int(early[0]) if len(early) else first
    rows = np.arange(begin, last)
    keep = (ops.end[begin:last] > lo) & (ops.device[begin:last] == device)
    return rows[keep]


def _from_end_map(stream: np.ndarray) -> dict[tuple[int, int], int]:
    """(stream, position from the end on it) -> template operation."""
    out: dict[tuple[int, int], int] = {}
    seen: dict[int, int] = {}
    for j in range(len(stream) - 1, -1, -1):
        s = int(stream[j])
        out[(s, seen.get(s, 0))] = j
        seen[s] = seen.get(s, 0) + 1
    return out


def _rank_from_end(rows: np.ndarray, stream: np.ndarray, before: np.ndarray) -> np.ndarray:
    """For operations launched before the step: their position from the last such one on their stream."""
    rank = np.full(len(rows), -1, np.int64)
    seen: dict[int, int] = {}
    for k in np.flatnonzero(before)[::-1].tolist():
        s = int(stream[k])
        rank[k] = seen.get(s, 0)
        seen[s] = rank[k] + 1
    return rank
