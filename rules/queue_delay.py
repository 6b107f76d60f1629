"""queue-delay: kernels wait long in the stream queue relative to their run time."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import numpy as np
import pandas as pd

from nsys_rules.api import (Finding, Location, Renamed, Rule, RuleContext, Severity, busy_ns, first_of_each_call,
                            merge_intervals, metric, overlap_length, pct, rising)


@dataclass(frozen=True)
class Options:
    """Options of queue-delay."""

    min_ratio: float = field(default=1.0, metadata={
        "help": "report a stream when its median queue time is at least this many times its median kernel time"})
    min_queue_ns: int = field(default=10_000, metadata={
        "help": "queue time below this (ns) is launch latency, not queueing; also the median queue must reach it"})
    min_kernels: int = field(default=50, metadata={"help": "fewest kernels of a stream in the window to judge it"})
    gpu_bound_pct: float = field(default=80.0, metadata={
        "help": "percent of the time the GPU is busy at or above which queueing means the GPU is the bottleneck (info)"})
    warn_share_pct: float = field(default=5.0, metadata={
        "help": "warning when the GPU idles (for this process) while kernels wait for this percent of the window"})


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


def _ids(column: pd.Series) -> np.ndarray:
    """An id column as integers (int32 as the loader reads them, else int64), missing values as -1."""
    if column.dtype.kind in "iu":  # the loader's integer columns: no NaN to fill, no widening copy
        return column.to_numpy()
    return pd.to_numeric(column, errors="coerce").fillna(-1).to_numpy().astype(np.int64)


class QueueDelay(Rule):
    """Kernels that wait in the stream queue much longer than they run.

    What it detects: per device and stream in the steady state, the queue time of each kernel
    (its start minus the end of the call that launched it, nsys `cuda_kern_exec_sum`'s Q against
    K) when the median queue time is at least `min_ratio` times the median kernel time.
    Why it hurts: queueing itself is how an asynchronous host keeps a GPU busy, so with a busy
    GPU it only says the GPU is the bottleneck (host-side work will not help; faster kernels
    will). When the process's GPU work is *not* busy while kernels wait, the wait is for
    something else: another process or context sharing the GPU, or a dependency on another
    stream, and the latency of every step grows by it.
    Only the first kernel of each launch call counts (a CUDA graph's later nodes wait for the
    nodes before them, not in the queue).
    Evidence: kernels, median and p90 queue time, median kernel time, their ratio, GPU busy
    share, and the time the GPU idled for this process while kernels waited.
    Next optimizations: GPU-bound: shorten the kernels that dominate (see gemv-dominance,
    kernel-tail) or batch more work per launch. Contention: give the latency-critical process
    the GPU alone (no co-located jobs, MPS limits, or a dedicated GPU), or a higher stream
    priority (`cudaStreamCreateWithPriority`); remove unneeded cross-stream waits.
    Options: `min_ratio`, `min_queue_ns`, `min_kernels`, `gpu_bound_pct`, `warn_share_pct`.
    Requires: the kernel and API tables (`--trace=cuda`).
    False positives: a host that launches a whole step ahead and then synchronizes shows long
    queues by design: that is the GPU-bound (info) case.
    """

    name = "queue-delay"
    title = "Kernels wait long in the stream queue"
    default_severity = Severity.INFO
    requires = ("kernels", "api")
    optional = ("nvtx", "memcpy", "memset")
    columns = {"kernels": ("start", "end", "pid", "correlation_id", "device_id", "stream_id"),
               "memcpy": ("start", "end", "pid", "device_id", "correlation_id"),
               "memset": ("start", "end", "pid", "device_id", "correlation_id"),
               "api": ("start", "end", "correlation_id", "pid", "name"),
               "nvtx": ("start", "end", "name")}
    window = "steady"
    Options = Options
    renamed_options = {"gpu_bound_share": Renamed("gpu_bound_pct", 100), "warning_share": Renamed("warn_share_pct", 100)}

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        opts = ctx.options
        kernels = ctx.frame("kernels")
        if kernels.empty:
            return
        start = kernels["start"].to_numpy()
        end = kernels["end"].to_numpy()
        # Damaged exports can lack ids (NULL or dropped columns): -1 keeps them one group, not a crash.
        pid_all, dev_all, stream_all, corr_all = (_ids(kernels[c]) for c in ("pid", "device_id", "stream_id",
                                                                            "correlation_id"))
        # A graph launch (or a multi-kernel call) queues all its kernels at once; after the first, a
        # node waits for the node before it, not in the queue, so only the first kernel per call counts.
        # As a mask (1 byte per kernel), not row numbers (8): the loop below selects from it.
        counted = first_of_each_call(pid_all, corr_all, start)
        del corr_all
        api_end = None  # gathered after the first busy union: not held beside that union's temporaries
        others = [ctx.frame(t, ["start", "end", "pid", "device_id", "correlation_id"])
                  for t in ("memcpy", "memset") if ctx.trace.has(t)]
        # One process on one GPU (the usual case): no pair key, views instead of copies.
        single = bool(len(pid_all)) and pid_all.min() == pid_all.max() and dev_all.min() == dev_all.max()
        pair_key = None
        if single:
            keys = [int(pid_all[0]) * 65_536 + int(dev_all[0]) + 1]
        else:
            pair_key = pid_all.astype(np.int64) * 65_536  # device -1 (unknown) stays its own group
            pair_key += dev_all
            pair_key += 1
            keys = sorted(pd.unique(pair_key))  # hash-based: a sort of 1M keys per call is slow
        del pid_all, dev_all  # million-row arrays: the loop below reads pid and device back from the key
        for key in keys:
            on = None if pair_key is None else pair_key == key
            every = on is None or bool(on.all())
            pid, dev = int(key) // 65_536, int(key) % 65_536 - 1
            # Copies and memsets occupy the device too: a kernel queued behind one is not held back by others.
            mine = [f[(f["pid"] == pid) & (f["device_id"] == dev)] for f in others if len(f)]
            mine = [f for f in mine if len(f)]
            k_start, k_end = (start, end) if every else (start[on], end[on])
            starts = np.concatenate([k_start, *[f["start"].to_numpy() for f in mine]]) if mine else k_start
            ends = np.concatenate([k_end, *[f["end"].to_numpy() for f in mine]]) if mine else k_end
            if not rising(starts):  # sorted once for both passes below
                order = np.argsort(starts, kind="stable")
                starts, ends = starts[order], ends[order]
                del order
            lo, hi = int(k_start.min()), int(k_end.max())
            del k_start, k_end
            span = max(1, hi - lo)
            # The busy share summed from the intervals (in chunks), and one union with the short gaps
            # closed as it is built (once for every stream): the plain union is never held.
            busy_share = busy_ns(starts, ends, lo, hi) / span
            busy = merge_intervals(starts, ends, opts.min_queue_ns)
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
                if n_grp < opts.min_kernels:
                    continue
                # Consecutive rows (one stream, one kernel per call: the usual case) as views, not copies.
                first_row = int(np.argmax(grp))
                last_row = len(grp) - 1 - int(np.argmax(grp[::-1]))
                pick = slice(first_row, last_row + 1) if last_row - first_row + 1 == n_grp else np.flatnonzero(grp)
                del grp
                prof = queue_profile(start[pick], end[pick], api_end[pick], busy, opts.min_queue_ns, (lo, hi), closed=True)
                if prof.median_queue < opts.min_queue_ns or prof.ratio < opts.min_ratio:
                    continue
                held_back = prof.idle_while_queued >= opts.warn_share_pct / 100 * span
                gpu_bound = busy_share >= opts.gpu_bound_pct / 100 and not held_back
                severity = Severity.WARNING if held_back else Severity.INFO
                head = (f"Kernels on stream {stream} (GPU {dev}) waited a median {prof.median_queue / 1e3:.1f} us "
                        f"(p90 {prof.p90_queue / 1e3:.1f} us) in the queue for a median run of "
                        f"{prof.median_kernel / 1e3:.1f} us ({prof.ratio:.1f}x, {prof.kernels} kernels); the GPU was "
                        f"busy {100 * busy_share:.1f} % of {span / 1e6:.1f} ms")
                if held_back:
                    message = head + (f", and it idled {prof.idle_while_queued / 1e6:.2f} ms "
                                      f"({pct(prof.idle_while_queued, span):.1f} %) while these kernels waited: "
                                      "something outside this process's trace held them back.")
                    rec = ("Check for another process or context on the same GPU (`nvidia-smi`, or profile it with "
                           "`nsys profile --trace=cuda` system-wide) and give the latency-critical work the GPU alone "
                           "or a higher stream priority (`cudaStreamCreateWithPriority`); remove cross-stream waits "
                           "that are not needed.")
                elif gpu_bound:
                    message = head + ": the host runs ahead and the GPU is the bottleneck."
                    rec = ("Host-side work will not shorten this: speed up the kernels that dominate GPU time "
                           "(see gemv-dominance, kernel-tail) or do more work per kernel (batching, fusion).")
                else:
                    message = head + (": they queue behind earlier work of their own stream (a CUDA graph or "
                                      "long kernels launched just before), not behind other processes.")
                    rec = ("Nothing to fix in the queue itself; the GPU's idle time is elsewhere (see gpu-idle-gaps "
                           "and sync-stall for what the host does between steps).")
                yield ctx.finding(
                    message, rec, severity=severity,
                    metrics={"kernels": metric(prof.kernels, "count"), "median_queue": metric(prof.median_queue, "ns"),
                             "p90_queue": metric(prof.p90_queue, "ns"),
                             "median_kernel": metric(prof.median_kernel, "ns"),
                             "queue_to_kernel_ratio": metric(prof.ratio, "ratio"),
                             "gpu_busy_share": metric(100 * busy_share, "%"),
                             "idle_while_queued": metric(prof.idle_while_queued, "ns")},
                    location=Location(pid=int(pid), device=int(dev), stream=int(stream), start_ns=lo, end_ns=hi),
                    # Queueing on a busy GPU or behind the stream's own work is how async launching
                    # looks: nothing to gain (0 puts it under the noise floor). Held back: the idle
                    # time while kernels waited is what others' work took.
                    estimated_savings_ns=prof.idle_while_queued if held_back else 0,
                    budget_part="idle_other" if held_back else None, key=str(stream))


RULE = QueueDelay
