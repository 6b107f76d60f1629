"""What a fix changes in a replayed step (:mod:`.replay`): each edit is a new :class:`StepTemplate`.

Each edit is the fix a finding recommends, applied to the measured step and nothing else:

- :func:`as_graphs`: CUDA graphs. Between two synchronizations the thread's launches become one
  graph launch of ``launch_ns``; the host time between launches that is launching (gaps up to
  ``keep_gap_ns``) goes with them, longer host work stays; inside the graph each operation follows
  the one before after ``graph_gap_ns``.
- :func:`without_syncs`: the synchronizations no longer wait (removed, or deferred past the step).
- :func:`prep_to_worker`: blocks of host work of at least ``min_block_ns`` leave the launching
  thread; a worker still does them, so the step is never shorter than they are (see :func:`floor_ns`).
- :func:`cached_allocations`: allocations and frees cost ``alloc_ns`` and never synchronize.
- :func:`pinned_copies`: host copies run at ``bytes_per_s`` and their calls return at once.
- :func:`scaled_kernels`: kernels of some classes take ``ratio`` of their time (TF32/bf16 GEMMs).
- :func:`resident_copies`: host-to-device copies gone (weights kept on the GPU).

Pure: numpy only.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from nsys_rules.analysis.replay import (CALL_ALLOC, CALL_COPY, CALL_LAUNCH, CALL_OTHER, CALL_SYNC, OP_KERNEL,
                                        OP_MEMCPY, StepTemplate)

#: CUPTI copy kinds of host copies: host to device, device to host.
HTOD, DTOH = 1, 2


def _replace(t: StepTemplate, **arrays: object) -> StepTemplate:
    return dataclasses.replace(t, **arrays)  # type: ignore[arg-type]


def _others_earlier(t: StepTemplate, removed: np.ndarray) -> np.ndarray:
    """Other threads' offsets when thread 0 loses ``removed`` ns of host time before each of its calls.

    Another thread's work follows the step's progress (an autograd thread runs the backward the
    main thread's forward set up): it moves earlier by the launching thread's time gone before it.
    """
    main = np.flatnonzero(t.call_thread == 0)
    if not len(main) or not removed.any():
        return t.call_offset
    gone_before = np.cumsum(removed[main])  # removed before (and at) each main call, in call order
    at = np.searchsorted(t.call_offset[main], t.call_offset, side="right") - 1
    shift = np.where(at >= 0, gone_before[np.maximum(at, 0)], 0)
    return np.where(t.call_thread == 0, t.call_offset, np.maximum(t.call_offset - shift, 0))


def as_graphs(t: StepTemplate, launch_ns: int, graph_gap_ns: int, keep_gap_ns: int, node_ns: int = 0) -> StepTemplate:
    """Thread 0's launches captured as CUDA graphs, one graph per stretch between synchronizations.

    A graph launch costs ``launch_ns`` plus ``node_ns`` per operation in it. Allocations and frees
    inside a stretch are gone too: a captured graph allocates its memory once, at capture.
    """
    gap, dur, wait = t.call_gap.copy(), t.call_dur.copy(), t.call_wait.copy()
    op_call, lat, op_gap = t.op_call.copy(), t.op_lat.copy(), t.op_gap.copy()
    main = t.call_thread == 0
    launches_of = np.bincount(op_call[op_call >= 0], minlength=t.calls)
    blocking = (t.call_wait >= 0) & (launches_of == 0) & (t.call_kind != CALL_ALLOC)
    graph_call = -1
    new_call = np.arange(t.calls)
    for c in np.flatnonzero(main).tolist():
        if blocking[c] or t.call_kind[c] == CALL_SYNC:
            graph_call = -1  # a graph ends where the host waits
            continue
        launches = launches_of[c] > 0 and t.call_kind[c] in (CALL_LAUNCH, CALL_COPY, CALL_OTHER)
        if graph_call < 0:
            if launches and t.call_kind[c] == CALL_LAUNCH:
                graph_call = c
                dur[c], wait[c] = launch_ns, -1
            continue
        # Inside a graph: the call is gone, and so is the launching host time before it. A long call that launches
        # nothing (a module load, a query that blocks) is the host's own work: it stays.
        quick = t.call_kind[c] != CALL_OTHER or launches or t.call_dur[c] <= keep_gap_ns
        if quick and (t.call_kind[c] in (CALL_LAUNCH, CALL_OTHER, CALL_ALLOC)
                      or (t.call_kind[c] == CALL_COPY and launches)):
            if gap[c] <= keep_gap_ns:
                gap[c] = 0
            dur[c], wait[c] = 0, -1
            if launches:
                new_call[c] = graph_call
    moved = new_call[np.maximum(op_call, 0)]
    nodes = np.bincount(moved[op_call >= 0], minlength=t.calls)
    heads = np.flatnonzero((new_call == np.arange(t.calls)) & (dur == launch_ns) & (nodes > 0))
    dur[heads] += node_ns * nodes[heads]
    regrouped = (op_call >= 0) & (moved != op_call)
    op_call = np.where(op_call >= 0, moved, op_call)
    lat[regrouped] = 0
    op_gap[regrouped] = graph_gap_ns
    removed = (t.call_gap - gap) + (t.call_dur - np.maximum(dur, 0)).clip(min=0)
    return _replace(t, call_gap=gap, call_dur=dur, call_wait=wait, op_call=op_call, op_lat=lat, op_gap=op_gap,
                    call_offset=_others_earlier(t, removed))


def without_syncs(t: StepTemplate, calls: np.ndarray | None = None) -> StepTemplate:
    """The synchronizing calls (``calls``, a mask; default: every sync call and blocking copy that waited) no longer wait."""
    if calls is None:
        launches_of = np.bincount(t.op_call[t.op_call >= 0], minlength=t.calls)
        calls = (t.call_kind == CALL_SYNC) | ((t.call_kind == CALL_COPY) & (t.call_wait >= 0) & (launches_of > 0))
    wait = np.where(calls, -1, t.call_wait)
    dur = np.where(calls, np.minimum(t.call_dur, 1_000), t.call_dur)
    return _replace(t, call_wait=wait, call_dur=dur)


def prep_to_worker(t: StepTemplate, min_block_ns: int) -> tuple[StepTemplate, int]:
    """Thread 0's blocks of host work of at least ``min_block_ns`` moved to a worker; and their total (the worker's step)."""
    main = t.call_thread == 0
    block = main & (t.call_gap >= min_block_ns)
    # A block while another thread launches the step's work is the launching thread waiting for it (the main
    # thread in backward() while the autograd thread launches): no input to prepare.
    others = np.sort(t.call_offset[t.call_thread != 0])
    for c in np.flatnonzero(block).tolist():
        lo, hi = t.call_offset[c] - t.call_gap[c], t.call_offset[c]
        inside = others[(others >= lo) & (others < hi)]
        if len(inside) and inside[-1] - inside[0] >= 0.5 * (hi - lo):
            block[c] = False
    moved = int(t.call_gap[block].sum())
    gap = np.where(block, 0, t.call_gap)
    offset = _others_earlier(t, np.where(block, t.call_gap, 0))
    tail = t.tail_ns
    if tail >= min_block_ns:
        moved += tail
        tail = 0
    return _replace(t, call_gap=gap, tail_ns=tail, call_offset=offset), moved


def cached_allocations(t: StepTemplate, alloc_ns: int = 1_000) -> StepTemplate:
    """Allocations and frees from a cache: ``alloc_ns`` each, never a synchronization."""
    alloc = t.call_kind == CALL_ALLOC
    return _replace(t, call_dur=np.where(alloc, np.minimum(t.call_dur, alloc_ns), t.call_dur),
                    call_wait=np.where(alloc, -1, t.call_wait))


def pinned_copies(t: StepTemplate, bytes_per_s: float, launch_ns: int) -> StepTemplate:
    """Host copies from pinned memory: each at ``bytes_per_s`` (never slower than measured), its call async."""
    host = (t.op_kind == OP_MEMCPY) & np.isin(t.op_copy_kind, (HTOD, DTOH)) & (t.op_bytes > 0)
    fast = np.minimum(t.op_dur, np.ceil(t.op_bytes / bytes_per_s * 1e9).astype(np.int64))
    op_dur = np.where(host, fast, t.op_dur)
    calls = np.zeros(t.calls, bool)
    calls[t.op_call[host & (t.op_call >= 0)]] = True
    calls &= t.call_kind == CALL_COPY
    # A pageable copy's call also stages the data on the host: the async call from pinned memory only queues it.
    dur = np.where(calls, np.minimum(t.call_dur, launch_ns), t.call_dur)
    return _replace(t, op_dur=op_dur, call_dur=dur, call_wait=np.where(calls, -1, t.call_wait))


def scaled_kernels(t: StepTemplate, classes: np.ndarray, ratio: float, only: np.ndarray | None = None) -> StepTemplate:
    """Kernels of ``classes`` (or the operations in mask ``only``) take ``ratio`` of their time."""
    pick = (t.op_kind == OP_KERNEL) & np.isin(t.op_class, classes)
    if only is not None:
        pick &= only
    return _replace(t, op_dur=np.where(pick, np.round(t.op_dur * ratio).astype(np.int64), t.op_dur))


def resident_copies(t: StepTemplate, launch_ns: int) -> StepTemplate:
    """Host-to-device copies gone (the data stays on the GPU): no copy time, their calls only queue."""
    htod = (t.op_kind == OP_MEMCPY) & (t.op_copy_kind == HTOD)
    calls = np.zeros(t.calls, bool)
    calls[t.op_call[htod & (t.op_call >= 0)]] = True
    return _replace(t, op_dur=np.where(htod, 0, t.op_dur),
                    call_dur=np.where(calls, np.minimum(t.call_dur, launch_ns), t.call_dur),
                    call_wait=np.where(calls, -1, t.call_wait))


def floor_ns(worker_ns: int, period_ns: int) -> int:
    """The step with work moved to a worker: the replayed one, never shorter than the worker's own step."""
    return max(period_ns, worker_ns)
