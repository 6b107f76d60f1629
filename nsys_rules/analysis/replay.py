"""A what-if replay of one step: the host threads' CUDA calls and the GPU streams' work, re-timed.

A :class:`StepTemplate` is one measured step as data: each host thread's calls in order (the
host time before each, its own duration, the GPU operation a blocking call waits for and how
long after that operation's end it returned), and each GPU operation (its launching call, the
latency from that call's start to the earliest moment it could run, its duration, its stream,
an operation on another stream it waited for). :func:`replay` runs the template as a loop of
identical steps and returns the steady period: the time from one step's first GPU operation to
the next step's, as the step model cuts steps (:func:`period_bounds`).

Edits (what a fix changes: calls gone, host time gone, a sync that no longer waits, kernels
shorter) are new templates (:func:`dataclasses.replace` on the arrays); replaying them gives the
step a fix leaves. Pure: numpy only, no trace model.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

#: Copies of the step replayed back to back; the period is read between the last two (the first
#: copies start from an idle GPU and an empty queue, a steady loop's queue settles within two).
COPIES = 4

#: What a call does (``StepTemplate.call_kind``): the edits pick calls by it.
CALL_OTHER, CALL_LAUNCH, CALL_SYNC, CALL_ALLOC, CALL_COPY, CALL_MODULE = 0, 1, 2, 3, 4, 5
#: What an operation is (``StepTemplate.op_kind``), as :mod:`nsys_rules.model.activity` numbers them.
OP_KERNEL, OP_MEMCPY, OP_MEMSET, OP_REPLAY = 0, 1, 2, 3


def _ints(n: int = 0, fill: int = 0) -> np.ndarray:
    return np.full(n, fill, np.int64)


@dataclass(frozen=True, eq=False)
class StepTemplate:
    """One step as the trace shows it (all times ns, arrays aligned per call or per operation).

    Calls are in measured start order. ``call_thread`` 0 is the thread that starts the step (its
    calls chain: each starts ``call_gap`` after the previous one ends); other threads' calls also
    start no earlier than ``call_offset`` after the step's start. A call with ``call_wait`` >= 0
    blocks: it ends at the later of ``call_dur`` after its start and ``call_ret`` after the end of
    operation ``call_wait`` (of the previous step when ``call_wait_prev``). ``tail_ns`` is thread
    0's host time after its last call until the next step starts.

    Operations are in measured start order: one starts at the latest of its launching call's start
    plus ``op_lat``, the end of the previous operation on its stream (the previous step's last one
    for a stream's first), and the end of ``op_dep`` (of the previous step when ``op_dep_prev``).
    ``op_step`` marks the operations that cut the step on the GPU clock (the loop's streams).
    """

    call_thread: np.ndarray = field(default_factory=_ints)
    call_gap: np.ndarray = field(default_factory=_ints)
    call_offset: np.ndarray = field(default_factory=_ints)
    call_dur: np.ndarray = field(default_factory=_ints)
    call_wait: np.ndarray = field(default_factory=_ints)
    call_wait_prev: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    call_ret: np.ndarray = field(default_factory=_ints)
    tail_ns: int = 0
    op_call: np.ndarray = field(default_factory=_ints)
    op_lat: np.ndarray = field(default_factory=_ints)
    op_dur: np.ndarray = field(default_factory=_ints)
    op_gap: np.ndarray = field(default_factory=_ints)
    op_stream: np.ndarray = field(default_factory=_ints)
    op_dep: np.ndarray = field(default_factory=_ints)
    op_dep_prev: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    op_step: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    #: What each call is (``CALL_*``) and each operation (``OP_*``), and each operation's class code (the
    #: budget's busy classes), bytes and copy kind (CUPTI's ``copyKind``, -1 for none).
    call_kind: np.ndarray = field(default_factory=_ints)
    op_kind: np.ndarray = field(default_factory=_ints)
    op_class: np.ndarray = field(default_factory=_ints)
    op_bytes: np.ndarray = field(default_factory=_ints)
    op_copy_kind: np.ndarray = field(default_factory=_ints)
    #: The copy engine an operation waits for besides its stream (-1 none): copies of one direction take turns.
    op_engine: np.ndarray = field(default_factory=_ints)
    #: Measured order of the calls' starts, the operations' starts and the calls' ends, as event codes:
    #: ``c`` >= 0 a call's start, ``-1 - o`` an operation, ``-1 - n_ops - c`` a call's end (see :func:`event_order`).
    order: np.ndarray = field(default_factory=_ints)

    @property
    def calls(self) -> int:
        """Number of host calls."""
        return len(self.call_dur)

    @property
    def ops(self) -> int:
        """Number of GPU operations."""
        return len(self.op_dur)

    @property
    def host_ns(self) -> int:
        """Thread 0's own step time when nothing waits: its gaps, calls and tail."""
        main = self.call_thread == 0
        return int(self.call_gap[main].sum() + self.call_dur[main].sum() + self.tail_ns)

    @property
    def gpu_ns(self) -> int:
        """The GPU's own work in the step: the operations' durations summed."""
        return int(self.op_dur.sum())


def event_order(call_start: np.ndarray, call_end: np.ndarray, op_start: np.ndarray) -> np.ndarray:
    """The replay's event order from measured times: every event after those it depends on.

    A call starts before the operations it launches and ends after those it waits for; an
    operation starts after its stream predecessor and its dependency end. Ties put call starts
    first, then operations, then call ends.
    """
    n_ops, n_calls = len(op_start), len(call_start)
    times = np.concatenate([call_start, op_start, call_end])
    rank = np.concatenate([np.zeros(n_calls, np.int64), np.ones(n_ops, np.int64), np.full(n_calls, 2, np.int64)])
    codes = np.concatenate([np.arange(n_calls), -1 - np.arange(n_ops), -1 - n_ops - np.arange(n_calls)])
    return codes[np.lexsort((rank, times))]


@dataclass(frozen=True, eq=False)
class Replayed:
    """The replay's outcome: the steady period and the last full copy's timeline (times from its start)."""

    period_ns: int
    call_start: np.ndarray
    call_end: np.ndarray
    op_start: np.ndarray
    op_end: np.ndarray
    #: Start of the replayed copy on the same clock as the arrays (its host start).
    origin: int = 0


def replay(template: StepTemplate, copies: int = COPIES) -> Replayed:
    """Replay ``copies`` back-to-back copies of the step; the period between the last two copies' GPU bounds."""
    n_calls, n_ops = template.calls, template.ops
    thread = template.call_thread.tolist()
    gap, offset, dur = template.call_gap.tolist(), template.call_offset.tolist(), template.call_dur.tolist()
    wait, wait_prev, ret = template.call_wait.tolist(), template.call_wait_prev.tolist(), template.call_ret.tolist()
    op_call, lat, op_dur = template.op_call.tolist(), template.op_lat.tolist(), template.op_dur.tolist()
    op_gap = template.op_gap.tolist()
    stream, dep, dep_prev = template.op_stream.tolist(), template.op_dep.tolist(), template.op_dep_prev.tolist()
    order = template.order.tolist()
    engine = template.op_engine.tolist() if len(template.op_engine) == n_ops else [-1] * n_ops
    engine_end: dict[int, int] = {}
    cut = np.flatnonzero(template.op_step) if n_ops else np.zeros(0, np.int64)
    prev_cs = [0] * n_calls
    prev_ce = [0] * n_calls
    prev_os = [0] * n_ops
    prev_oe = [0] * n_ops
    stream_end: dict[int, int] = {}
    thread_end: dict[int, int] = {}
    origin = 0
    bounds: list[int] = []
    reach = -1  # the latest end of a step-cutting operation so far
    for copy in range(copies):
        cs, ce = [0] * n_calls, [0] * n_calls
        os_, oe = [0] * n_ops, [0] * n_ops
        for code in order:
            if code >= 0:  # a call starts
                t = thread[code]
                begin = thread_end.get(t, origin) + gap[code]
                if t:
                    begin = max(begin, origin + offset[code])
                cs[code] = begin
            elif code >= -n_ops:  # an operation runs
                o = -1 - code
                c = op_call[o]
                begin = (cs[c] if c >= 0 else origin) + lat[o]
                s = stream[o]
                if s in stream_end and stream_end[s] + op_gap[o] > begin:
                    begin = stream_end[s] + op_gap[o]
                d = dep[o]
                if d >= 0:
                    other = (prev_oe[d] if dep_prev[o] else oe[d]) + op_gap[o]
                    if other > begin:
                        begin = other
                e = engine[o]
                if e >= 0 and engine_end.get(e, begin) > begin:
                    begin = engine_end[e]
                os_[o] = begin
                oe[o] = stream_end[s] = begin + op_dur[o]
                if e >= 0:
                    engine_end[e] = oe[o]
            else:  # a call ends
                c = -1 - n_ops - code
                end = cs[c] + dur[c]
                w = wait[c]
                if w >= 0:
                    done = (prev_oe[w] if wait_prev[c] else oe[w]) + ret[c]
                    if done > end:
                        end = done
                ce[c] = end
                thread_end[thread[c]] = end
        host_start = origin
        origin = thread_end.get(0, origin) + template.tail_ns
        thread_end[0] = origin
        if len(cut):
            starts = np.asarray(os_, np.int64)[cut]
            first = int(starts.min())
            low = min(reach, first) if reach >= 0 else first
            bounds.append(min(max(host_start, low), first))
            reach = max(reach, int(np.asarray(oe, np.int64)[cut].max()))
        else:
            bounds.append(host_start)
        if copy < copies - 1:
            prev_cs, prev_ce, prev_os, prev_oe = cs, ce, os_, oe
    period = bounds[-1] - bounds[-2] if len(bounds) >= 2 else 0
    return Replayed(int(period), np.asarray(prev_cs, np.int64), np.asarray(prev_ce, np.int64),
                    np.asarray(prev_os, np.int64), np.asarray(prev_oe, np.int64), int(bounds[-2]) if len(bounds) >= 2 else 0)


def busy_by_class(template: StepTemplate, period_ns: int) -> tuple[dict[int, int], int]:
    """Where one replayed step's time goes: the GPU busy time of each operation class, and the idle rest.

    In a steady loop each period holds one step's operations, so their durations by class are the
    period's busy time; where streams overlap, the classes are scaled to fit the period.
    """
    classes: dict[int, int] = {}
    for cls, dur in zip(template.op_class.tolist(), template.op_dur.tolist(), strict=True):
        classes[cls] = classes.get(cls, 0) + dur
    busy = sum(classes.values())
    if busy > period_ns > 0:
        classes = {c: v * period_ns // busy for c, v in classes.items()}
        busy = sum(classes.values())
    return classes, max(0, period_ns - busy)


def critical_gpu_ns(template: StepTemplate) -> int:
    """The step with every host call, host gap and gap between GPU operations at zero: the GPU's own critical work
    per step (its operations on the longest chain of streams and dependencies)."""
    bare = StepTemplate(**{**template.__dict__,
                           "call_gap": np.zeros_like(template.call_gap), "call_offset": np.zeros_like(template.call_offset),
                           "call_dur": np.zeros_like(template.call_dur), "call_ret": np.zeros_like(template.call_ret),
                           "op_lat": np.zeros_like(template.op_lat), "op_gap": np.zeros_like(template.op_gap),
                           "tail_ns": 0})
    return replay(bare).period_ns
