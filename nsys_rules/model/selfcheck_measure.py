"""The trace's checks of itself, measured (:mod:`.selfcheck` names, weighs and explains them).

Each check counts the records it finds, of how many, and how many of each lie in the steady state.
They run on every check of every trace, after the rules, when the trace's frames and the activity
table are all held, so they must add no row-length copy: they read the activity table's columns
(:class:`~.activity.GpuOps`, whose one-value and spliced columns stay unexpanded) and the API frame
in chunks of :data:`~nsys_rules.malloc_tune.CHUNK_ROWS` rows, and keep only the rows they flag,
usually none. Checks sort what they read themselves: an export whose rows come in any order (nsys
2025.6 on) gives the same answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable, Iterator

import numpy as np
import pandas as pd

from nsys_rules.analysis.names import GRAPH_LAUNCH_APIS, KERNEL_LAUNCH_APIS, flag_names
from nsys_rules.analysis.spliced import Spliced
from nsys_rules.malloc_tune import CHUNK_ROWS
from nsys_rules.model.activity import KERNEL, MEMCPY, GpuOps
from nsys_rules.model.trace import Trace, base_api_name
from nsys_rules.model.windows import Window

#: Overlap of two operations on one stream that is timestamp granularity, not damage.
OVERLAP_SLACK_NS = 1_000
#: A GPU operation may start this much before its launch call by clock granularity.
LAUNCH_SLACK_NS = 1_000


@dataclass(frozen=True)
class Measured:
    """One check's result: ``count`` of ``of`` records, and the share of the steady state's (``steady``)."""

    count: int
    of: int
    steady: int = 0
    steady_of: int = 0

    def size(self) -> dict[str, Any]:
        """The ``size`` object of the reason."""
        out: dict[str, Any] = {"count": self.count, "of": self.of, "pct": _pct(self.count, self.of)}
        if self.steady_of:
            out["steady_pct"] = _pct(self.steady, self.steady_of)
        return out

    @property
    def worst_pct(self) -> float:
        """The larger of the whole-trace share and the steady-state share (percent)."""
        return max(_pct(self.count, self.of), _pct(self.steady, self.steady_of))


def _pct(count: int, of: int) -> float:
    return round(100.0 * count / of, 3) if of else 0.0


#: A check's answer: its size and the GPUs it touches; None when the trace cannot be checked so.
Result = tuple[Measured, set[int]] | None


def chunks(n: int) -> Iterator[slice]:
    """Slices of ``n`` rows, :data:`CHUNK_ROWS` at a time (each chunk's temporaries are reused from the heap)."""
    return (slice(lo, min(lo + CHUNK_ROWS, n)) for lo in range(0, n, CHUNK_ROWS))


def plain(column: "np.ndarray | Spliced", rows: slice) -> np.ndarray:
    """``column[rows]`` as an array (a spliced column's slice expanded: a chunk, never the whole column)."""
    part = column[rows]
    return np.asarray(part) if isinstance(part, Spliced) else part


class Inputs:
    """What the checks read, with what several of them share built once: the activity table, the API frame
    (None when the API was not traced), the steady window, and the facts derived from them."""

    def __init__(self, trace: Trace, ops: GpuOps, api: pd.DataFrame | None, steady: Window) -> None:
        self.trace, self.ops, self.api, self.steady = trace, ops, api, steady

    def tally(self, flag: Callable[[slice], tuple[np.ndarray, np.ndarray]]) -> Result:
        """Counts over the operations: ``flag(rows)`` gives each chunk's (counted, hit) masks (hit within
        counted); the steady shares by the operations' starts."""
        ops, count, of, steady, steady_of = self.ops, 0, 0, 0, 0
        devices: set[int] = set()
        for rows in chunks(len(ops)):
            counted, hit = flag(rows)
            inside = self.steady.mask(ops.start[rows]) & counted
            count, of = count + int(np.count_nonzero(hit)), of + int(np.count_nonzero(counted))
            steady += int(np.count_nonzero(hit & inside))
            steady_of += int(np.count_nonzero(inside))
            if hit.any():
                devices.update(int(d) for d in np.unique(ops.device[rows][hit]))
        return Measured(count, of, steady, steady_of), devices

    @cached_property
    def api_pids(self) -> np.ndarray:
        """The processes whose calls the capture recorded."""
        assert self.api is not None
        return distinct(self.api["pid"].to_numpy())

    def traced(self, rows: slice) -> np.ndarray:
        """Which of the operations at ``rows`` belong to a process whose calls were recorded."""
        return np.isin(self.ops.pid[rows], self.api_pids)

    @cached_property
    def loss(self) -> "Loss | None":
        """The launch calls without GPU work (shared by the lost and the cut check)."""
        return launch_loss(self) if self.api is not None else None


def distinct(values: np.ndarray) -> np.ndarray:
    """The distinct values of ``values``, sorted (a one-value zero-stride view: its value, without a scan)."""
    if len(values) and values.strides == (0,):
        return np.asarray(values[:1])
    return np.sort(pd.unique(values))


@dataclass(frozen=True)
class Loss:
    """The launch calls (``of``, ``steady_of`` in the steady state) and those without GPU work: each one's
    process, whether it lies in the steady state, and whether it comes after its process's last GPU operation."""

    of: int
    steady_of: int
    pid: np.ndarray
    in_steady: np.ndarray
    after: np.ndarray


def launch_loss(inputs: Inputs) -> Loss | None:
    """:attr:`Inputs.loss`: a GPU operation knows its launching row (``GpuOps.api_row``, the launch join), so
    marking those rows finds the calls left without work in one pass, no hashing of a million keys."""
    api, ops = inputs.api, inputs.ops
    assert api is not None
    launch = launch_calls(inputs.trace, api, ops)
    if launch is None:
        return None
    launched = np.zeros(len(api) + 1, bool)  # the last slot takes the rows of -1 (no launching call)
    rows = ops.api_row
    if len(rows) and int(rows.max()) >= len(api):  # a join against another frame: never, but never an IndexError
        rows = rows[rows < len(api)]
    launched[rows] = True
    missing = np.flatnonzero(launch & ~launched[:-1])
    del launched
    start = api["start"].to_numpy()
    of = steady_of = 0
    for part in chunks(len(api)):
        counted = launch[part]
        of += int(np.count_nonzero(counted))
        steady_of += int(np.count_nonzero(counted & inputs.steady.mask(start[part])))
    pid = api["pid"].to_numpy()[missing].astype(np.int64)
    when = start[missing].astype(np.int64)
    # A process with no GPU record at all lost its GPU activity (or never had it traced): no cut end, all lost.
    return Loss(of, steady_of, pid, inputs.steady.mask(when), when > _last_start_of(ops, pid))


def launch_calls(trace: Trace, api: pd.DataFrame, ops: GpuOps) -> np.ndarray | None:
    """Which API rows are kernel or graph launch calls made outside stream capture (a launch while its thread
    captures a graph records the kernel into the graph and runs nothing), None when there are none; graph
    launches are then left out when the capture mode hid their work (graph-trace-hidden says so)."""
    names = api["name"]
    launch = flag_names(names, lambda n: base_api_name(n) in KERNEL_LAUNCH_APIS | GRAPH_LAUNCH_APIS)
    begin = flag_names(names, lambda n: "BeginCapture" in n)
    if begin.any():
        _drop_captured(api, launch, begin, flag_names(names, lambda n: "EndCapture" in n))
    if not launch.any():
        return None
    if not (ops.by_graph.any() or trace.has("graph_trace")):
        launch &= ~flag_names(names, lambda n: base_api_name(n) in GRAPH_LAUNCH_APIS)
    return launch


def _drop_captured(api: pd.DataFrame, launch: np.ndarray, begin: np.ndarray, end: np.ndarray) -> None:
    """Clears in ``launch`` the calls made between their thread's BeginCapture and its next EndCapture. The
    first EndCapture after an open never comes earlier for a later open, so the last open before a call
    decides whether it was captured."""
    tid = api["tid"].to_numpy()
    start = api["start"].to_numpy()
    for thread in np.unique(tid[begin]):
        mine = tid == thread
        opens = np.sort(start[begin & mine])
        closes = np.sort(start[end & mine])
        at = np.searchsorted(closes, opens, side="left")
        until = np.full(len(opens), np.iinfo(np.int64).max, np.int64)
        closed = at < len(closes)
        until[closed] = closes[at[closed]]
        rows = np.flatnonzero(launch & mine)
        del mine
        when = start[rows]
        last_open = np.searchsorted(opens, when, side="right") - 1
        inside = (last_open >= 0) & (when <= until[np.maximum(last_open, 0)])
        launch[rows[inside]] = False


def _last_start_of(ops: GpuOps, pid: np.ndarray) -> np.ndarray:
    """For each of ``pid``: the start of its process's last GPU operation (int64 max when it has none); the
    operations are in start order, so that is the process's last row."""
    out = np.full(len(pid), np.iinfo(np.int64).max, np.int64)
    for process in np.unique(pid):  # the processes that lost launches: a few at most
        mine = np.asarray(ops.pid == process)
        if mine.any():
            out[pid == process] = ops.start[len(mine) - 1 - int(np.argmax(mine[::-1]))]
    return out


def lost_launches(inputs: Inputs, tail: bool) -> Result:
    """Launch calls whose GPU work is not in the trace: before the last GPU operation of their process (lost)
    or after it (``tail``: the capture ended before the work was recorded)."""
    loss = inputs.loss
    if loss is None:
        return None
    hit = loss.after if tail else ~loss.after
    ops = inputs.ops
    devices = {int(d) for p in np.unique(loss.pid[hit]) for d in np.unique(ops.device[np.asarray(ops.pid == p)])}
    return Measured(int(hit.sum()), loss.of, int((hit & loss.in_steady).sum()), loss.steady_of), devices


def stream_overlaps(inputs: Inputs) -> Result:
    """Operations on one stream that overlap the one before them (a stream runs its work in order) or end
    before they start; graph replays' nodes are left out (a graph's branches run side by side)."""
    ops = inputs.ops
    keep = None if not ops.by_graph.any() else np.flatnonzero(~ops.by_graph)
    start = ops.start if keep is None else ops.start[keep]
    end = ops.end if keep is None else ops.end[keep]
    key = _stream_keys(ops, keep)
    # Operations are in start order: a stable sort by stream keeps each stream's in start order, and only
    # operations starting at the same instant on one stream need the end to order them (then sorted again).
    order = None if key is None else np.argsort(key, kind="stable")
    bad, tied = _overlapping(start, end, key, order)
    if tied:  # rows of one stream starting at once: the shorter first, whatever order the export stored them in
        bad, _ = _overlapping(start, end, key, np.lexsort((end, start) if key is None else (end, start, key)))
    backwards = np.concatenate([np.zeros(0, np.int64)] + [np.flatnonzero(end[rows] < start[rows]) + rows.start
                                                          for rows in chunks(len(start))])
    bad = np.union1d(bad, backwards)
    steady_of = sum(int(np.count_nonzero(inputs.steady.mask(start[rows]))) for rows in chunks(len(start)))
    device = ops.device if keep is None else ops.device[keep]
    return (Measured(len(bad), len(start), int(np.count_nonzero(inputs.steady.mask(start[bad]))), steady_of),
            {int(d) for d in np.unique(device[bad])})


def _stream_keys(ops: GpuOps, keep: np.ndarray | None) -> np.ndarray | None:
    """One integer per operation naming its (process, device, stream), or None when all share one (a column of
    one value is left out of the key without being read)."""
    columns = []
    for column in (ops.pid, ops.device, ops.stream):
        values = np.asarray(column if keep is None else column[keep])
        if len(values) and values.strides != (0,) and values.min() != values.max():
            columns.append(values)
    if len(columns) <= 1:
        return columns[0] if columns else None
    key = np.zeros(len(columns[0]), np.int64)
    for values in columns:
        codes, uniques = pd.factorize(values)
        key = key * len(uniques) + codes
    return key


def _overlapping(start: np.ndarray, end: np.ndarray, key: np.ndarray | None, order: np.ndarray | None
                 ) -> tuple[np.ndarray, bool]:
    """Rows (sorted) that start before the previous row of their stream ends, ``order`` giving each stream's
    rows in sequence (None: one stream, in row order); and whether two rows of a stream start at once."""
    found, tied = [], False
    for rows in chunks(len(start) - 1):
        here = slice(rows.start + 1, rows.stop + 1)
        cur, prev = (here, rows) if order is None else (order[here], order[rows])
        started = start[cur]
        same = np.ones(len(started), bool) if key is None else key[cur] == key[prev]
        tied = tied or bool((same & (started == start[prev])).any())
        hit = same & (started < end[prev] - OVERLAP_SLACK_NS)
        found.append(np.flatnonzero(hit) + here.start if order is None else order[here][hit])
    return (np.sort(np.concatenate(found)) if found else np.zeros(0, np.int64)), tied


def before_launch(inputs: Inputs) -> Result:
    """GPU operations that start before the call that launched them: the GPU and CPU clocks disagree."""
    ops = inputs.ops

    def flag(rows: slice) -> tuple[np.ndarray, np.ndarray]:
        kind = ops.kind[rows]
        known = (ops.api_row[rows] >= 0) & (np.asarray(kind == KERNEL) | np.asarray(kind == MEMCPY))
        return known, known & (ops.start[rows] < ops.launch[rows] - LAUNCH_SLACK_NS)

    return inputs.tally(flag)


def outside(inputs: Inputs, limit: int) -> Result:
    """Records timed before the capture began (negative) or after ``limit``."""
    ops, count = inputs.ops, 0
    devices: set[int] = set()
    for rows in chunks(len(ops)):
        hit = (ops.start[rows] < 0) | (ops.end[rows] > limit)
        if hit.any():
            count += int(hit.sum())
            devices.update(int(d) for d in np.unique(ops.device[rows][hit]))
    of = len(ops)
    if inputs.api is not None:
        start, end = inputs.api["start"].to_numpy(np.int64), inputs.api["end"].to_numpy(np.int64)
        count += sum(int(np.count_nonzero((start[rows] < 0) | (end[rows] > limit))) for rows in chunks(len(start)))
        of += len(start)
    return Measured(count, of), devices
