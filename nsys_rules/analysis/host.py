"""Host calls that block on the GPU: synchronizations and device-to-host readbacks.

Used by the step model (a readback repeating once per step marks the step), the budget (GPU
idle after a synchronization) and the sync-stall and alloc-churn rules.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from nsys_rules.analysis.keys import find_keys, sorted_keys
from nsys_rules.analysis.names import NAMED_DTOH_ASYNC_COPIES, NAMED_DTOH_SYNC_COPIES, SYNC_APIS, flag_names

DTOH = 2  # CUPTI copyKind of a device-to-host copy


def copy_directions(api: pd.DataFrame, memcpy: pd.DataFrame | None) -> pd.DataFrame:
    """Copy kind and bytes of each API row's memcpy (same pid + correlationId); -1 / 0 when none.

    ``api`` needs ``pid`` and ``correlation_id``; ``memcpy`` ``pid``, ``correlation_id``,
    ``copy_kind`` and ``bytes``. The result is aligned with ``api``.
    """
    out = pd.DataFrame({"copy_kind": np.full(len(api), -1, np.int64), "bytes": np.zeros(len(api), np.int64)})
    if memcpy is None or not len(memcpy) or not len(api):
        return out
    rows = memcpy[["pid", "correlation_id", "copy_kind", "bytes"]].dropna()
    rows = rows.groupby(["pid", "correlation_id"], sort=True, observed=True).agg(
        copy_kind=("copy_kind", "first"), bytes=("bytes", "sum")).reset_index()
    # The launch join seen from the API side (a sorted-key lookup, not a merge: the API table has
    # millions of rows, memcpy few).
    at, found = find_keys(*sorted_keys(rows["pid"].to_numpy(np.int64), rows["correlation_id"].to_numpy(np.int64)),
                          api["pid"].to_numpy(np.int64), api["correlation_id"].to_numpy(np.int64))
    out["copy_kind"] = np.where(found, rows["copy_kind"].to_numpy(np.int64)[at], -1)
    out["bytes"] = np.where(found, rows["bytes"].to_numpy(np.int64)[at], 0)
    return out


def blocking_calls(api: pd.DataFrame, names: pd.Series, copies: pd.DataFrame | None) -> pd.DataFrame:
    """The host calls that block on the GPU, one row each.

    ``api`` has ``start``, ``end``, ``pid``, ``tid``, ``correlation_id``; ``names`` are base
    names aligned with it; ``copies`` comes from :func:`copy_directions` (None: no memcpy rows). Returned columns:
    ``start``, ``end``, ``pid``, ``tid``, ``correlation_id``, ``api``, ``kind`` (``sync`` or
    ``readback``: a synchronous device-to-host copy), ``bytes``, and ``after_readback`` (a sync
    whose previous call on the same thread queued an asynchronous device-to-host copy: the
    ``.item()`` pattern of copy-then-wait).
    """
    # Judge each distinct name once and map by category code: millions of API rows carry a few
    # dozen names, and a string operation per row would dominate the run.
    is_copy, is_async, named_dtoh, sync = _name_flags(names)
    # A copy's direction comes from its memcpy row; the name decides only when no row matched.
    if copies is None:
        dtoh = named_dtoh
    else:
        kind = copies["copy_kind"].to_numpy()
        dtoh = np.where(kind >= 0, kind == DTOH, named_dtoh)
    readback = is_copy & ~is_async & dtoh
    async_dtoh = is_copy & is_async & dtoh

    start = api["start"].to_numpy(np.int64)
    pid, tid = api["pid"].to_numpy(), api["tid"].to_numpy()
    if _one_thread_in_order(start, pid, tid):
        # Row order is thread order already: a call's previous call on its thread is the row before.
        rows = np.flatnonzero(sync | readback)
        after = sync[rows] & (rows > 0) & async_dtoh[np.maximum(rows - 1, 0)]
        prev_rows = rows - 1
        return _blocking_frame(api, names, copies, start, pid, tid, rows, after, prev_rows, readback)
    order = _thread_order(start, pid, tid)  # rows by (pid, tid, start), stable
    # One reordered id column at a time, not both held together.
    ordered = pid[order]
    same_thread = ordered[1:] == ordered[:-1]
    ordered = tid[order]
    same_thread &= ordered[1:] == ordered[:-1]
    del ordered
    previous_async_dtoh = np.r_[False, same_thread & async_dtoh[order][:-1]]
    del same_thread
    sync_sorted = sync[order]
    after_readback_sorted = sync_sorted & previous_async_dtoh
    keep_sorted = sync_sorted | readback[order]
    del sync_sorted, previous_async_dtoh
    rows = order[keep_sorted]  # original row numbers of the kept calls, in thread order
    after = after_readback_sorted[keep_sorted]
    prev_rows = order[np.flatnonzero(keep_sorted) - 1]
    return _blocking_frame(api, names, copies, start, pid, tid, rows, after, prev_rows, readback)


def busiest_thread(calls: pd.DataFrame, durations: np.ndarray | pd.Series) -> tuple[int | None, int | None, int]:
    """The thread that spent the most time in ``calls``: its pid, its tid and that time (ns).

    ``calls`` has ``pid`` and ``tid`` columns; ``durations`` is aligned with it. A missing id
    (a damaged export can leave thread ids NULL) comes back as None; ties go to the first
    thread in (pid, tid) order.
    """
    per_thread = calls.assign(d=durations).groupby(["pid", "tid"], observed=True, dropna=False)["d"].sum()
    pid, tid = per_thread.idxmax()
    return _id(pid), _id(tid), int(per_thread.max())


def _id(value: Any) -> int | None:
    """An id (a scalar of a group key: int, numpy int, NaN, None) as int, None when missing."""
    try:
        return None if pd.isna(value) else int(value)
    except (TypeError, ValueError):
        return None


def _one_thread_in_order(start: np.ndarray, pid: np.ndarray, tid: np.ndarray) -> bool:
    """One thread whose calls come in start order (the usual single-threaded launcher)."""
    if len(start) < 2:
        return True
    return bool(int(pid.min()) == int(pid.max()) and int(tid.min()) == int(tid.max())
                and (start[1:] >= start[:-1]).all())


def _blocking_frame(api: pd.DataFrame, names: pd.Series, copies: pd.DataFrame | None, start: np.ndarray,
                    pid: np.ndarray, tid: np.ndarray, rows: np.ndarray, after: np.ndarray, prev_rows: np.ndarray,
                    readback: np.ndarray) -> pd.DataFrame:
    """The kept calls (``rows``, in thread order) as :func:`blocking_calls` returns them, sorted by start."""
    # The copy that the sync waits on is the readback's size (the previous call on the thread).
    if copies is None:
        kept_bytes = np.zeros(len(rows), np.int64)
    else:
        nbytes = copies["bytes"].to_numpy()
        kept_bytes = np.where(after, nbytes[prev_rows], nbytes[rows])
    out = pd.DataFrame({
        "start": start[rows], "end": api["end"].to_numpy(np.int64)[rows], "pid": pid[rows], "tid": tid[rows],
        "correlation_id": api["correlation_id"].to_numpy()[rows],
        "api": np.asarray(names.iloc[rows].astype(object).to_numpy(), dtype=object),
        "bytes": kept_bytes, "after_readback": after,
        "kind": np.where(readback[rows], "readback", "sync")})
    out = out.sort_values("start", kind="stable")
    return out.reset_index(drop=True)


def _name_flags(names: pd.Series) -> tuple[np.ndarray, ...]:
    """Per row: (is a memcpy, is async, device-to-host by name, is a sync call), judged per distinct name."""
    tests = (lambda n: "Memcpy" in n, lambda n: "Async" in n,
             lambda n: n in NAMED_DTOH_SYNC_COPIES or n in NAMED_DTOH_ASYNC_COPIES, lambda n: n in SYNC_APIS)
    return tuple(flag_names(names, test) for test in tests)


def _thread_order(start: np.ndarray, pid: np.ndarray, tid: np.ndarray) -> np.ndarray:
    """Row order by (pid, tid, start), stable, without a 3-key sort when the rows are in time order already."""
    if len(start) > 1 and bool((start[1:] >= start[:-1]).all()) and int(tid.max(initial=0)) < (1 << 24):
        thread = np.left_shift(pid, 24, dtype=np.int64)  # built in place: one key array, no temporaries
        thread |= np.bitwise_and(tid, 0xFFFFFF, dtype=np.int64)
        return np.argsort(thread, kind="stable")
    return np.lexsort((start, tid, pid))
