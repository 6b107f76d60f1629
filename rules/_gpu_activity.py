"""Numbers about GPU activity shared by the launch, gap and nsys-analyze-parity rules.

Pure functions over canonical frames: no judgement, no findings. Times are int64 ns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
import pandas as pd

from nsys_rules.errors import MissingData
from nsys_rules.rule import RuleContext
from nsys_rules.trace import Trace
from nsys_rules.analysis.launches import launch_api_rows  # noqa: F401 - re-exported

#: Canonical GPU tables whose rows occupy a device: nsys's gpu_gaps/gpu_time_util count kernels, copies
#: and memsets; graph replays traced in graph mode (whose kernels have no rows) are GPU work too.
GPU_OP_TABLES = ("kernels", "memcpy", "memset", "graph_trace")

#: API calls that launch one kernel (runtime and driver names, ``_v<digits>`` removed).
KERNEL_LAUNCH_APIS = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel",
                      "cudaLaunchCooperativeKernelMultiDevice", "cuLaunchKernel", "cuLaunchKernelEx",
                      "cuLaunchCooperativeKernel", "cuLaunchCooperativeKernelMultiDevice", "cudaLaunch")

#: API calls that launch a whole CUDA graph (many kernels share the launch's correlationId).
GRAPH_LAUNCH_APIS = ("cudaGraphLaunch", "cuGraphLaunch")

REPORT_MODES = ("auto", "group", "all")


# -- intervals ---------------------------------------------------------------------------------
def merge_intervals(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of intervals as sorted, disjoint (start, end) arrays (vectorized)."""
    if not len(starts):
        return np.empty(0, np.int64), np.empty(0, np.int64)
    s = np.asarray(starts, np.int64)
    e = np.asarray(ends, np.int64)
    if len(s) > 1 and not bool((s[1:] >= s[:-1]).all()):  # GPU rows usually come in start order: no sort
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
    # Ends in order too (one stream, serialized work): the running max is the ends themselves.
    running = e if len(e) < 2 or bool((e[1:] >= e[:-1]).all()) else np.maximum.accumulate(e)
    new = np.empty(len(s), bool)  # row opens a busy period
    new[0] = True
    np.greater(s[1:], running[:-1], out=new[1:])
    closes = np.empty(len(s), bool)  # row ends one: the next row opens the next period
    closes[-1] = True
    closes[:-1] = new[1:]
    # Boolean selection, not index arrays: two fewer 8-byte-per-row temporaries on 1M kernels.
    return s[new], running[closes]


def busy_ns(starts: np.ndarray, ends: np.ndarray, lo: int | None = None, hi: int | None = None) -> int:
    """Time covered by at least one interval, optionally clipped to [lo, hi]."""
    s, e = merge_intervals(starts, ends)
    s, e = s.copy() if s is starts else s, e.copy() if e is ends else e  # fresh arrays: clipped in place
    if lo is not None:
        np.maximum(s, lo, out=s)
    if hi is not None:
        np.minimum(e, hi, out=e)
    e -= s
    np.maximum(e, 0, out=e)
    return int(e.sum())


def idle_gaps(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Gaps between busy periods: (gap start, gap length), in time order.

    A gap starts when every operation so far has ended (running max of ends), so an
    operation that overlaps others never opens a false gap.
    """
    s, e = merge_intervals(starts, ends)
    if len(s) < 2:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    return e[:-1], s[1:] - e[:-1]


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
    # GPU rows come in start order and often in end order: no sorted copies then (8 MB each per 1M).
    order_s = s if _rising(s) else np.sort(s)
    order_e = e if _rising(e) else np.sort(e)
    cs = np.zeros(len(s) + 1)
    np.cumsum(order_s, dtype=np.float64, out=cs[1:])
    ce = np.zeros(len(e) + 1)
    np.cumsum(order_e, dtype=np.float64, out=ce[1:])

    def covered(t: np.ndarray) -> np.ndarray:
        ns_ = np.searchsorted(order_s, t, side="right")
        ne_ = np.searchsorted(order_e, t, side="right")
        started = ns_ * t.astype(np.float64) - cs[ns_]  # sum over started ops of (t - s)
        ended = ne_ * t.astype(np.float64) - ce[ne_]  # minus what ended ops did not run past e
        return started - ended

    cum = covered(edges)
    lengths = np.diff(edges)
    used = np.diff(cum)
    keep = lengths > 0
    pct = np.where(keep, 100.0 * used / np.where(keep, lengths, 1), 0.0)
    return edges[:-1][keep], lengths[keep], pct[keep]


def _rising(values: np.ndarray) -> bool:
    """Whether ``values`` never decrease."""
    return len(values) < 2 or bool((values[1:] >= values[:-1]).all())


def device_intervals(frames: Sequence[pd.DataFrame]) -> Iterator[tuple[object, object, np.ndarray, np.ndarray]]:
    """(pid, device_id, starts, ends) of the rows of ``frames`` per process and device, in (pid, device) order.

    The order of one pair's rows is unspecified (callers take unions and sums). One process on
    one device (the usual trace) needs no concatenated frame and no group-by (40+ MB on 1M
    kernels), and its rows come in start order when each frame's do.
    """
    frames = [f for f in frames if len(f)]
    if not frames:
        return
    pairs = set()
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
        if all(_rising(p[0]) for p in parts):
            # Smaller tables (memsets, copies) inserted into the kernels at their place in time: the
            # result stays in start order, so the interval merge needs no argsort and gathered copies.
            starts, ends = parts[0]
            for other_s, other_e in parts[1:]:
                at = np.searchsorted(starts, other_s, side="right")
                starts, ends = np.insert(starts, at, other_s), np.insert(ends, at, other_e)
            yield pid, dev, starts, ends
        else:
            yield pid, dev, np.concatenate([f["start"].to_numpy() for f in frames]), \
                np.concatenate([f["end"].to_numpy() for f in frames])
        return
    ops = pd.concat([f[["start", "end", "pid", "device_id"]] for f in frames], ignore_index=True)
    for (pid, dev), grp in ops.groupby(["pid", "device_id"], sort=True, observed=True):
        yield pid, dev, grp["start"].to_numpy(), grp["end"].to_numpy()


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


# -- GPU operations --------------------------------------------------------------------------
def gpu_op_frames(ctx: RuleContext) -> list[pd.DataFrame]:
    """The window's kernel, memcpy and memset rows (start, end, pid, device_id, correlation_id).

    Raises :class:`MissingData` when the trace has none of the three tables, so the whole-capture
    GPU rules are skipped with the capture fix, as nsys analyze skips them.
    """
    tables = [t for t in GPU_OP_TABLES if ctx.trace.has(t)]
    if not tables:
        raise MissingData("the trace has no GPU operations (kernel, memcpy, memset or graph-trace tables)",
                          "capture with `nsys profile --trace=cuda`")
    return [ctx.frame(t, ["start", "end", "pid", "device_id", "correlation_id"]) for t in tables]


def gpu_operations(trace: Trace, tables: Sequence[str] = GPU_OP_TABLES) -> pd.DataFrame:
    """Kernels, memcpys and memsets as one frame: start, end, pid, device_id, kind."""
    parts = []
    for name in tables:
        if trace.has(name):
            frame = trace.frame(name, ["start", "end", "pid", "device_id"])
            if len(frame):
                part = frame[["start", "end", "pid", "device_id"]].copy()
                part["kind"] = name
                parts.append(part)
    if not parts:
        return pd.DataFrame({"start": np.empty(0, np.int64), "end": np.empty(0, np.int64),
                             "pid": np.empty(0, np.int64), "device_id": np.empty(0, np.int64),
                             "kind": np.empty(0, object)})
    return pd.concat(parts, ignore_index=True)


# -- how parity findings are split -----------------------------------------------------------
@dataclass(frozen=True)
class FlaggedGroup:
    """Flagged rows of one group (or one row): what one finding reports."""

    key: tuple[object, ...]
    rows: pd.DataFrame  # sorted by start; columns start, end + the rule's own
    single: bool  # one flagged row per finding
    ordinal: int = -1  # the row's position in its group when single: keeps fingerprints distinct and stable

    @property
    def key_suffix(self) -> str:
        """What to add to a finding's fingerprint key: ``#<n>`` for the n-th row of a group, else nothing."""
        return f"#{self.ordinal}" if self.single else ""

    @property
    def start(self) -> int:
        """First flagged instant: the finding's ``start_ns``."""
        return int(self.rows["start"].min())

    @property
    def end(self) -> int:
        """Last flagged instant: the finding's ``end_ns``."""
        return int(self.rows["end"].max())


def split_flagged(rows: pd.DataFrame, group_by: Sequence[str], mode: str, max_findings: int) -> Iterator[FlaggedGroup]:
    """Turn flagged rows into finding-sized groups.

    ``all``: one group per row. ``group``: one per ``group_by`` key, whose time range runs
    from its first to its last flagged row (so every flagged row overlaps its finding).
    ``auto``: per row while a group has at most ``max_findings`` rows, else per group.
    """
    if mode not in REPORT_MODES:
        raise ValueError(f"report must be one of {', '.join(REPORT_MODES)}, not {mode!r}")
    if rows.empty:
        return
    rows = rows.sort_values("start", kind="stable")
    keys = list(group_by)
    grouped = rows.groupby(keys, sort=True, observed=True, dropna=False) if keys else [((), rows)]
    for key, grp in grouped:
        key_t = key if isinstance(key, tuple) else (key,)
        if mode == "all" or (mode == "auto" and len(grp) <= max_findings):
            for i in range(len(grp)):
                yield FlaggedGroup(key_t, grp.iloc[i:i + 1], True, i)
        else:
            yield FlaggedGroup(key_t, grp, False)
