"""What a host thread was doing over time, by kind of CUDA call (for the budget's idle causes)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..trace import Trace
from .intervals import Coverage, merge_intervals
from .names import ALLOC_APIS, MODULE_LOAD_APIS, MODULE_LOADS, SYNC_APIS, flag_names, in_set, is_blocking_transfer


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
        kinds = _kinds(names)
        loads = in_set(names, MODULE_LOADS)
        pid, tid = api["pid"].to_numpy(), api["tid"].to_numpy()
        start, end = api["start"].to_numpy(np.int64), api["end"].to_numpy(np.int64)
        for key in missing:
            rows = (pid == key[0]) & (tid == key[1])
            if rows.all():  # one launching thread (the usual trace): the frame's arrays, no copies
                cache[key] = _timeline(start, end, kinds, loads)
            else:
                cache[key] = _timeline(start[rows], end[rows], kinds[rows], loads[rows])
    return {key: cache[key] for key in wanted}


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


def _kinds(names) -> np.ndarray:
    """Per API row: 0 allocation, 1 module load, 2 synchronization (or blocking transfer), 3 other."""
    kind = np.full(len(names), _OTHER, np.int8)
    kind[flag_names(names, lambda n: n in SYNC_APIS or is_blocking_transfer(n))] = _SYNC
    kind[in_set(names, MODULE_LOAD_APIS)] = _MODULE
    kind[in_set(names, ALLOC_APIS)] = _ALLOC
    return kind


def _serial(start: np.ndarray, end: np.ndarray) -> bool:
    """Whether a thread's calls follow one another without nesting (their union is themselves)."""
    return len(start) < 2 or bool((start[1:] >= end[:-1]).all())


def _timeline(start: np.ndarray, end: np.ndarray, kind: np.ndarray, loads: np.ndarray) -> HostTimeline:
    def cover(mask: np.ndarray) -> Coverage:
        return Coverage(*merge_intervals(start[mask], end[mask]))

    sync = kind == _SYNC
    order = np.argsort(end[sync], kind="stable")
    return HostTimeline(cover(kind == _ALLOC), cover(kind <= _MODULE), cover(kind <= _SYNC),
                        Coverage(start, end) if _serial(start, end) else Coverage(*merge_intervals(start, end)),
                        end[sync][order], start[sync][order],
                        np.sort(start[loads]))
