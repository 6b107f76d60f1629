"""What queue-delay measures: per device and stream, how long kernels wait in the queue and whether the GPU was busy.

No judgement here: :class:`StreamQueue` holds one stream's numbers; ``judge`` weighs them and
``phrase`` says them. The walk over the streams reads million-row columns, so it keeps one
row-length temporary at a time and frees each as soon as it is used.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np
import pandas as pd

from nsys_rules.api import Metric, RuleContext, metric
from nsys_rules.api.analysis import busy_ns, first_of_each_call, merge_intervals, overlap_length, rising

#: One process and device as one integer: pid * PAIR + device + 1 (device -1, unknown, stays its own key).
PAIR = 65_536


@dataclass(frozen=True)
class QueueProfile:
    """Queue numbers of one stream (ns)."""

    kernels: int
    median_queue: float
    p90_queue: float
    median_kernel: float
    queue_total: int
    kernel_total: int
    idle_while_queued: int

    @property
    def ratio(self) -> float:
        """Median queue time over median kernel time."""
        # Zero-length kernels (damaged or synthetic traces) count as 1 ns: the ratio stays finite for JSON.
        return self.median_queue / max(self.median_kernel, 1.0)


@dataclass(frozen=True)
class StreamQueue:
    """One stream's queue profile, with its process, device and the device's busy share over the judged span."""

    pid: int
    device: int
    stream: int
    lo: int  # first kernel start of the process on the device
    hi: int  # last kernel end
    busy_share: float  # of [lo, hi], the time the device ran work of the process (0-1)
    profile: QueueProfile

    @property
    def span(self) -> int:
        """The judged span (ns, at least 1)."""
        return max(1, self.hi - self.lo)

    def metrics(self) -> dict[str, Metric]:
        """The finding's evidence."""
        prof = self.profile
        return {"kernels": metric(prof.kernels, "count"), "median_queue": metric(prof.median_queue, "ns"),
                "p90_queue": metric(prof.p90_queue, "ns"), "median_kernel": metric(prof.median_kernel, "ns"),
                "queue_to_kernel_ratio": metric(prof.ratio, "ratio"), "gpu_busy_share": metric(100 * self.busy_share, "%"),
                "idle_while_queued": metric(prof.idle_while_queued, "ns")}


# -- pure functions --------------------------------------------------------------------------
def queue_profile(k_start: np.ndarray, k_end: np.ndarray, api_end: np.ndarray, device_busy: tuple[np.ndarray, np.ndarray],
                  min_queue_ns: int, bounds: tuple[int, int] | None = None, closed: bool = False) -> QueueProfile:
    """Queue time = kernel start - end of its launch call (nsys `cuda_kern_exec_sum` Q), per kernel.

    ``idle_while_queued`` is the time some kernel of the stream waited (beyond ``min_queue_ns``
    of launch latency) while no kernel of the process ran on the device: the wait was for
    something the trace does not show (another process, a cross-stream dependency). ``closed``: the
    busy periods' gaps under ``min_queue_ns`` are closed already (``merge_intervals``' ``min_gap``).
    """
    # Summaries first, then only the waiting kernels are kept: one row-length temporary at a time.
    # The quantiles partition these temporaries in place (overwrite_input: the same order statistics,
    # no copy each), after the sums and the row-aligned mask are taken.
    dur = k_end - k_start
    kernel_total = int(dur.sum())
    median_kernel = float(np.median(dur, overwrite_input=True))
    del dur
    queue = np.subtract(k_start, api_end)
    np.maximum(queue, 0, out=queue)
    count, queue_total = len(queue), int(queue.sum())
    waiting = queue > min_queue_ns
    if queue.dtype.kind in "iu" and len(queue):
        # Both from one partition: whole ns, so the 50th percentile's interpolation is the median's mean exactly.
        median_queue, p90_queue = (float(v) for v in np.percentile(queue, [50, 90], overwrite_input=True))
    else:
        median_queue = float(np.median(queue, overwrite_input=True))
        p90_queue = float(np.percentile(queue, 90, overwrite_input=True))
    del queue
    q_from = api_end[waiting]
    q_from += min_queue_ns
    q_lo, q_hi = merge_intervals(q_from, k_start[waiting])
    del q_from, waiting
    if bounds is not None:  # only waiting inside the judged span, where the device's work is known
        np.maximum(q_lo, bounds[0], out=q_lo)
        np.minimum(q_hi, bounds[1], out=q_hi)
        inside = q_hi > q_lo
        if not inside.all():
            q_lo, q_hi = q_lo[inside], q_hi[inside]
        del inside
    b_lo, b_hi = device_busy if closed else close_short_gaps(device_busy, min_queue_ns)
    # |Q u B| - |B| = |Q| - |Q n B| for disjoint sorted Q and B: no merge of the two.
    idle_queued = int((q_hi - q_lo).sum() - overlap_length((q_lo, q_hi), (b_lo, b_hi)))
    return QueueProfile(count, median_queue, p90_queue, median_kernel, queue_total, kernel_total, max(0, idle_queued))


def close_short_gaps(busy: tuple[np.ndarray, np.ndarray], min_ns: int) -> tuple[np.ndarray, np.ndarray]:
    """The device's busy periods with gaps shorter than ``min_ns`` closed (the same set when none is).

    Gaps of a few us between back-to-back kernels are the device's own dispatch latency (a
    graph's nodes, a queue of launches), not time lost to something else.
    """
    b_lo, b_hi = busy
    if len(b_lo) < 2:
        return b_lo, b_hi
    keep = np.ones(len(b_lo), bool)
    np.greater_equal(b_lo[1:] - b_hi[:-1], min_ns, out=keep[1:])
    if keep.all():  # already closed (the caller closes them once for every stream): no copies
        return b_lo, b_hi
    closes = np.ones(len(b_lo), bool)  # boolean selection: no index arrays of 8 bytes per interval
    closes[:-1] = keep[1:]
    return b_lo[keep], b_hi[closes]


def ids(column: pd.Series) -> np.ndarray:
    """An id column as integers (int32 as the loader reads them, else int64), missing values as -1."""
    if column.dtype.kind in "iu":  # the loader's integer columns: no NaN to fill, no widening copy
        return column.to_numpy()
    return pd.to_numeric(column, errors="coerce").fillna(-1).to_numpy().astype(np.int64)


def device_work(k_start: np.ndarray, k_end: np.ndarray, others: list[pd.DataFrame]) -> tuple[np.ndarray, np.ndarray]:
    """Starts and ends of the kernels and ``others`` (the process's copies and memsets on the device), by start.

    Copies and memsets occupy the device too: a kernel queued behind one is not held back by others.
    """
    starts = np.concatenate([k_start, *[f["start"].to_numpy() for f in others]]) if others else k_start
    ends = np.concatenate([k_end, *[f["end"].to_numpy() for f in others]]) if others else k_end
    if not rising(starts):  # sorted once for both passes over them
        order = np.argsort(starts, kind="stable")
        starts, ends = starts[order], ends[order]
        del order
    return starts, ends


def process_devices(pid: np.ndarray, device: np.ndarray) -> tuple[list[int], np.ndarray | None]:
    """The (process, device) pairs of the rows as sorted keys (``pid * PAIR + device + 1``), and each row's key.

    One process on one GPU (the usual case) gives no row keys (None): every row is that pair,
    and the caller takes views instead of copies.
    """
    if bool(len(pid)) and pid.min() == pid.max() and device.min() == device.max():
        return [int(pid[0]) * PAIR + int(device[0]) + 1], None
    pair_key = pid.astype(np.int64) * PAIR  # device -1 (unknown) stays its own group
    pair_key += device
    pair_key += 1
    return sorted(pd.unique(pair_key)), pair_key  # hash-based: a sort of 1M keys per call is slow


def selected_rows(mask: np.ndarray, count: int) -> slice | np.ndarray:
    """The ``count`` rows ``mask`` selects: a slice when they are consecutive, else their row numbers.

    Consecutive rows (one stream, one kernel per call: the usual case) are then read as views, not copies.
    """
    first_row = int(np.argmax(mask))
    last_row = len(mask) - 1 - int(np.argmax(mask[::-1]))
    return slice(first_row, last_row + 1) if last_row - first_row + 1 == count else np.flatnonzero(mask)


# -- reading the window ----------------------------------------------------------------------
def stream_queues(ctx: RuleContext, min_kernels: int, min_queue_ns: int) -> Iterator[StreamQueue]:
    """Each stream of the window with at least ``min_kernels`` counted kernels, by process and device.

    Only the first kernel of each launch call counts: a graph launch (or a multi-kernel call)
    queues all its kernels at once, and after the first a node waits for the node before it,
    not in the queue.
    """
    kernels = ctx.frame("kernels")
    if kernels.empty:
        return
    start = kernels["start"].to_numpy()
    end = kernels["end"].to_numpy()
    # Damaged exports can lack ids (NULL or dropped columns): -1 keeps them one group, not a crash.
    pid_all, dev_all, stream_all, corr_all = (ids(kernels[c]) for c in ("pid", "device_id", "stream_id",
                                                                       "correlation_id"))
    # As a mask (1 byte per kernel), not row numbers (8): the loop below selects from it.
    counted = first_of_each_call(pid_all, corr_all, start)
    del corr_all
    api_end = None  # gathered after the first busy union: not held beside that union's temporaries
    others = [ctx.frame(t, ["start", "end", "pid", "device_id", "correlation_id"])
              for t in ("memcpy", "memset") if ctx.trace.has(t)]
    keys, pair_key = process_devices(pid_all, dev_all)
    del pid_all, dev_all  # million-row arrays: the loop below reads pid and device back from the key
    for key in keys:
        on = None if pair_key is None else pair_key == key
        every = on is None or bool(on.all())
        pid, dev = int(key) // PAIR, int(key) % PAIR - 1
        mine = [f[(f["pid"] == pid) & (f["device_id"] == dev)] for f in others if len(f)]
        k_start, k_end = (start, end) if every else (start[on], end[on])
        starts, ends = device_work(k_start, k_end, [f for f in mine if len(f)])
        lo, hi = int(k_start.min()), int(k_end.max())
        del k_start, k_end
        # The busy share summed from the intervals (in chunks), and one union with the short gaps
        # closed as it is built (once for every stream): the plain union is never held.
        busy_share = busy_ns(starts, ends, lo, hi) / max(1, hi - lo)
        busy = merge_intervals(starts, ends, min_queue_ns)
        del starts, ends
        if api_end is None:  # only the launch call's end is used: that column, not the whole frame
            api_end = ctx.launch_calls("kernels", columns=("api_end",))["api_end"].to_numpy()
            counted &= api_end >= 0
        launches = counted if on is None else counted & on
        one_stream = stream_all.strides == (0,) and len(stream_all)  # loaders.columns.one_value: no scans
        streams = ([stream_all[0]] if launches.any() else []) if one_stream else sorted(pd.unique(stream_all[launches]))
        for stream in streams:
            grp = launches if one_stream else launches & (stream_all == stream)
            n_grp = int(grp.sum())
            if n_grp < min_kernels:
                continue
            pick = selected_rows(grp, n_grp)
            del grp
            prof = queue_profile(start[pick], end[pick], api_end[pick], busy, min_queue_ns, (lo, hi), closed=True)
            yield StreamQueue(pid, dev, int(stream), lo, hi, busy_share, prof)
