"""GPU time per process and device: the operations that occupy a device, and how full equal chunks of it are.

The whole-capture GPU rules (idle gaps, low utilization, as ``nsys analyze`` judges them) read
the same operations: kernels, copies and memsets, and graph replays traced in graph mode.
Pure numbers, no judgement; times are int64 ns.
"""

from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np
import pandas as pd

from nsys_rules.malloc_tune import CHUNK_ROWS as _CHUNK
from nsys_rules.analysis.intervals import rising
from nsys_rules.analysis.spliced import interleave

#: Canonical GPU tables whose rows occupy a device: nsys's gpu_gaps/gpu_time_util count kernels, copies
#: and memsets; graph replays traced in graph mode (whose kernels have no rows) are GPU work too.
GPU_OP_TABLES = ("kernels", "memcpy", "memset", "graph_trace")


def device_intervals(frames: Sequence[pd.DataFrame]) -> Iterator[tuple[object, object, np.ndarray, np.ndarray]]:
    """(pid, device_id, starts, ends) of the rows of ``frames`` per process and device, in (pid, device) order.

    The order of one pair's rows is unspecified (callers take unions and sums). One process on
    one device (the usual trace) needs no concatenated frame and no group-by, and its rows come
    in start order when each frame's do.
    """
    frames = [f for f in frames if len(f)]
    if not frames:
        return
    pairs: set[tuple[int, int] | None] = set()
    for f in frames:
        pid, dev = f["pid"].to_numpy(), f["device_id"].to_numpy()
        if pid.dtype.kind not in "iu" or dev.dtype.kind not in "iu" or pid.min() != pid.max() or dev.min() != dev.max():
            pairs.add(None)
            break
        pairs.add((int(pid[0]), int(dev[0])))
    if len(pairs) == 1 and None not in pairs:
        pid, dev = frames[0]["pid"].iloc[0], frames[0]["device_id"].iloc[0]
        if len(frames) == 1:
            yield pid, dev, frames[0]["start"].to_numpy(), frames[0]["end"].to_numpy()
            return
        parts = sorted(((f["start"].to_numpy(), f["end"].to_numpy()) for f in frames), key=lambda p: -len(p[0]))
        if all(rising(p[0]) for p in parts):
            # The smaller tables (memsets, copies) inserted into the kernels at their place in time: the
            # result stays in start order, so the interval merge needs no sort.
            starts, ends = parts[0]
            for other_s, other_e in parts[1:]:
                starts, ends = insert_in_order(starts, ends, other_s, other_e)
            yield pid, dev, starts, ends
        else:
            yield pid, dev, np.concatenate([f["start"].to_numpy() for f in frames]), \
                np.concatenate([f["end"].to_numpy() for f in frames])
        return
    ops = pd.concat([f[["start", "end", "pid", "device_id"]] for f in frames], ignore_index=True)
    for (pid, dev), grp in ops.groupby(["pid", "device_id"], sort=True, observed=True):
        yield pid, dev, grp["start"].to_numpy(), grp["end"].to_numpy()


#: Rows :func:`insert_in_order` places by block copies; more go through ``np.insert``.
FEW_ROWS = 64


def insert_in_order(starts: np.ndarray, ends: np.ndarray, other_s: np.ndarray, other_e: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray]:
    """``np.insert`` of the rows (``other_s``, ``other_e``) into (``starts``, ``ends``) at their place in
    time (after equal starts), both in start order.

    A few rows among a million: the blocks between them are copied whole (``np.insert`` selects
    the old rows by a row-length mask, several times slower than the copy itself).
    """
    at = np.searchsorted(starts, other_s, side="right")
    if len(at) > FEW_ROWS:
        return np.insert(starts, at, other_s), np.insert(ends, at, other_e)
    final = at + np.arange(len(at))  # each inserted row's position in the result
    return interleave(starts, final, other_s, starts.dtype), interleave(ends, final, other_e, ends.dtype)


def chunk_utilization(starts: np.ndarray, ends: np.ndarray, lo: int, hi: int,
                      chunks: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Cut [lo, hi] into ``chunks`` equal chunks (length rounded up to whole ns, the last one clipped).

    Returns (chunk starts, chunk lengths, in-use percent). In-use sums the durations of
    the operations inside each chunk, so concurrent operations add up and it can pass
    100 %, as nsys's gpu_time_util computes it.
    """
    span = max(0, hi - lo)
    length = -(-span // chunks) if span else 0
    if not length:
        return np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0)
    edges = lo + length * np.arange(chunks + 1, dtype=np.int64)
    edges[-1] = min(edges[-1], hi)
    edges = np.minimum(edges, hi)
    s = np.asarray(starts, np.int64)
    e = np.asarray(ends, np.int64)
    # Per chunk, covered time = integral of the "active operations" count. Using the
    # cumulative busy time C(t) = sum(clip(t - s, 0, e - s)), chunk k gets C(b) - C(a).
    # Starts and ends need only be sorted each on its own: rows in order need no sorted copy.
    order_s = s if rising(s) else np.sort(s)
    order_e = e if rising(e) else np.sort(e)
    ns_ = np.searchsorted(order_s, edges, side="right")
    ne_ = np.searchsorted(order_e, edges, side="right")
    started = ns_ * edges.astype(np.float64) - prefix_sums_at(order_s, ns_)  # sum over started ops of (t - s)
    ended = ne_ * edges.astype(np.float64) - prefix_sums_at(order_e, ne_)  # minus what ended ops did not run past e
    cum = started - ended
    lengths = np.diff(edges)
    used = np.diff(cum)
    keep = lengths > 0
    pct = np.where(keep, 100.0 * used / np.where(keep, lengths, 1), 0.0)
    return edges[:-1][keep], lengths[keep], pct[keep]


def prefix_sums_at(values: np.ndarray, at: np.ndarray) -> np.ndarray:
    """The float64 running sums of ``values`` before each position of ``at`` (0 at position 0): bit for bit
    ``np.concatenate(([0.0], np.cumsum(values, dtype=np.float64)))[at]``, without the whole running sum.

    An accumulation adds one value at a time, so carrying the last sum into the next chunk repeats
    exactly the same float additions (8 MB per million rows not held for a few thousand look-ups).
    """
    at = np.asarray(at, np.int64)
    out = np.zeros(len(at), np.float64)
    carry = 0.0
    for first in range(0, len(values), _CHUNK):
        part = values[first:first + _CHUNK]
        run = np.empty(len(part) + 1, np.float64)
        run[0] = carry
        run[1:] = part
        np.cumsum(run, out=run)
        inside = (at > first) & (at <= first + len(part))
        out[inside] = run[at[inside] - first]
        carry = float(run[-1])
    return out


def merge_low_chunks(starts: np.ndarray, lengths: np.ndarray, pct: np.ndarray,
                     below: float) -> list[tuple[int, int, float]]:
    """Consecutive chunks under ``below`` percent merged: (start, length, duration-weighted percent)."""
    out: list[tuple[int, int, float]] = []
    low = pct < below
    i = 0
    n = len(pct)
    while i < n:
        if not low[i]:
            i += 1
            continue
        j = i
        while j + 1 < n and low[j + 1]:
            j += 1
        seg_len = int(lengths[i:j + 1].sum())
        weighted = float((pct[i:j + 1] * lengths[i:j + 1]).sum() / seg_len) if seg_len else 0.0
        out.append((int(starts[i]), seg_len, weighted))
        i = j + 1
    return out
