"""What a host thread was doing over time, by kind of CUDA call (for the budget's idle causes)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from nsys_rules.model.trace import Trace
from nsys_rules.analysis.intervals import Coverage, merge_intervals
from nsys_rules.analysis.names import ALLOC_APIS, MODULE_LOAD_APIS, MODULE_LOADS, SYNC_APIS, is_blocking_transfer


@dataclass(frozen=True, eq=False)
class HostTimeline:
    """One thread's CUDA calls as nested unions: allocation, + module loads, + synchronization, + any call.

    Nested unions give each instant one cause in that order of precedence: time in a
    ``cudaFree`` (which also synchronizes) is allocation time, not synchronization time.
    """

    alloc: Coverage
    alloc_module: Coverage
    alloc_module_sync: Coverage
    any_call: Coverage
    sync_ends: np.ndarray
    sync_starts: np.ndarray
    load_starts: np.ndarray
    #: Whether ``any_call``'s intervals are the API frame's rows one to one (one thread whose calls never
    #: nest): then a call's row number says where a time falls among them.
    by_row: bool = False

    def outside_before_load(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """For each [a, b]: time outside any CUDA call from ``a`` to the last module load that starts inside."""
        if not len(self.load_starts):
            return np.zeros(len(a), np.int64)
        k = np.searchsorted(self.load_starts, b, side="right") - 1  # last load starting at or before b
        found = k >= 0
        load = np.where(found, self.load_starts[np.maximum(k, 0)], a)
        load = np.where(load >= a, load, a)
        # Only intervals holding a load have time before it: the rest are 0 without a look-up.
        need = load > a
        out = np.zeros(len(a), np.int64)
        if need.any():
            a, load = a[need], load[need]
            out[need] = np.maximum((load - a) - self.any_call.within(a, load), 0)
        return out

    def sync_ended_in(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """For each idle gap [a, b]: whether the thread was blocked in a sync when the GPU ran dry at ``a``.

        That sync returned inside the gap, and everything the host did until the GPU's next work
        is the bubble the sync caused. A sync that starts after the GPU already went idle waited
        for nothing: the gap is the host's own slowness.
        """
        if not len(self.sync_ends):
            return np.zeros(len(a), bool)
        k = np.searchsorted(self.sync_ends, a, side="left")  # first sync ending at or after a
        found = k < len(self.sync_ends)
        kc = np.minimum(k, len(self.sync_ends) - 1)
        return found & (self.sync_ends[kc] <= b) & (self.sync_starts[kc] <= a)


def host_timelines(trace: Trace, pids: np.ndarray, tids: np.ndarray,
                   cache: dict[tuple[int, int], HostTimeline]) -> dict[tuple[int, int], HostTimeline]:
    """The timelines of the distinct (pid, tid) pairs given, built once into ``cache``.

    The caller owns the cache (the budget keeps it for one computation): a launching thread can
    have millions of calls, arrays not worth keeping for the whole run.
    """
    wanted = _pairs(pids, tids)
    missing = [key for key in wanted if key not in cache]
    if missing:
        api = trace.frame("api", ["start", "end", "pid", "tid", "name"])
        names = trace.api_names()
        kinds = _kind_table(names)[names.cat.codes.to_numpy()]  # one gather; a NULL name (code -1) is other
        special = np.flatnonzero(kinds != _OTHER)  # the few allocation, module-load and sync calls
        kinds = kinds[special]
        pid, tid = api["pid"].to_numpy(), api["tid"].to_numpy()
        start, end = api["start"].to_numpy(np.int64), api["end"].to_numpy(np.int64)
        for key in missing:
            if _only(pid, key[0]) and _only(tid, key[1]):  # one launching thread (the usual trace): no copies
                cache[key] = _timeline(start, end, start[special], end[special], kinds, by_row=True)
            else:
                rows = (pid == key[0]) & (tid == key[1])
                theirs = rows[special]
                cache[key] = _timeline(start[rows], end[rows], start[special[theirs]], end[special[theirs]],
                                       kinds[theirs])
    return {key: cache[key] for key in wanted}


def _only(column: np.ndarray, value: int) -> bool:
    """Whether every row of ``column`` holds ``value`` (a one-value column: one comparison)."""
    if column.strides == (0,) or not len(column):  # loaders.columns.one_value
        return not len(column) or int(column[0]) == value
    return bool((column == value).all())


def _pairs(pids: np.ndarray, tids: np.ndarray) -> set[tuple[int, int]]:
    """The distinct (pid, tid) pairs (tids >= 0), without a Python tuple per row (a gap batch holds 131k)."""
    if not len(pids):
        return set()
    if int(pids.min()) == int(pids.max()) and int(tids.min()) == int(tids.max()):
        return {(int(pids[0]), int(tids[0]))}
    key = np.left_shift(pids, 32, dtype=np.int64)
    key |= np.bitwise_and(tids, 0xFFFFFFFF, dtype=np.int64)
    return {(int(k) >> 32, int(k) & 0xFFFFFFFF) for k in pd.unique(key)}


_ALLOC, _MODULE, _SYNC, _OTHER = 0, 1, 2, 3
_LOAD = 4  # flag beside the kind: a module load (time before it may be compilation)


def _kind_table(names: pd.Series) -> np.ndarray:
    """Per category of the API names (then one entry for no name): 0 allocation, 1 module load,
    2 synchronization (or blocking transfer), 3 other, plus :data:`_LOAD` for a module load.

    Judged once per distinct name, in that order of precedence.
    """
    table = []
    for category in names.cat.categories:
        name = str(category)
        kind = _ALLOC if name in ALLOC_APIS else _MODULE if name in MODULE_LOAD_APIS else _SYNC if (
            name in SYNC_APIS or is_blocking_transfer(name)) else _OTHER
        table.append(kind | (_LOAD if name in MODULE_LOADS else 0))
    return np.array([*table, _OTHER], np.int8)


def _serial(start: np.ndarray, end: np.ndarray) -> bool:
    """Whether a thread's calls follow one another without nesting (their union is themselves)."""
    return len(start) < 2 or bool((start[1:] >= end[:-1]).all())


def _timeline(start: np.ndarray, end: np.ndarray, special_start: np.ndarray, special_end: np.ndarray,
              special_kind: np.ndarray, *, by_row: bool = False) -> HostTimeline:
    """A thread's timeline from all its calls and, in row order, its allocation, module-load and sync calls."""
    def cover(mask: np.ndarray) -> Coverage:
        return Coverage(*merge_intervals(special_start[mask], special_end[mask]))

    kind = special_kind & ~_LOAD
    sync = kind == _SYNC
    order = np.argsort(special_end[sync], kind="stable")
    serial = _serial(start, end)
    return HostTimeline(cover(kind == _ALLOC), cover(kind <= _MODULE), cover(kind <= _SYNC),
                        Coverage(start, end) if serial else Coverage(*merge_intervals(start, end)),
                        special_end[sync][order], special_start[sync][order],
                        np.sort(special_start[(special_kind & _LOAD) > 0]), by_row=by_row and serial)
