"""What the host threads were doing while the GPU waited through a block of host time: the evidence of its cause.

The budget says *where* the GPU waited (a block between steps, ``host_prep``); this module says
*what the trace shows the host doing then*, and nothing more: a cause is named by a rule only with
evidence from here.

- the launching thread's CUDA calls inside the blocks, by kind: allocation (``cudaFree`` after
  ``empty_cache()``), module loads (compilation), synchronization, other calls;
- its OS runtime calls (``--trace=osrt``) by kind: waiting on another thread (futex,
  ``pthread_cond_wait``, ``sem_wait``), on a socket or event (``poll``, ``epoll_wait``), on a file
  (``read``, ``fread``, ``open``), sleeping; the rest of the block it ran its own code;
- the other threads of the process: their CUDA calls in the blocks, host-to-device copies they
  launched (a loader thread staging the batch) and their file reads;
- the GPU operation that ends each block: a host-to-device copy of the next batch right after
  the block is the mark of input preparation;
- whether a device-to-host readback completed as the block began (the host read a value back and
  only then did its work);
- the Python functions nsys's samples saw in the blocks, when captured.

No thresholds of a rule here: counts and nanoseconds only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from nsys_rules.analysis.intervals import Coverage, merge_intervals
from nsys_rules.analysis.names import ALLOC_APIS, MODULE_LOADS, SYNC_APIS
from nsys_rules.model.activity import KERNEL, MEMCPY, REPLAY, GpuOps, gpu_ops
from nsys_rules.model.python_sites import PythonSite, host_sites, python_stacks
from nsys_rules.model.trace import Trace, base_api_name

HTOD, DTOH = 1, 2  # CUPTI copyKind
#: OS runtime calls by what the thread waits on (names as nsys records them).
OSRT_KINDS: dict[str, tuple[str, ...]] = {
    "thread_wait": ("futex", "pthread_cond_wait", "pthread_cond_timedwait", "sem_wait", "sem_timedwait",
                    "pthread_join", "pthread_mutex_lock", "pthread_rwlock_rdlock", "pthread_rwlock_wrlock",
                    "pthread_barrier_wait"),
    "socket_wait": ("poll", "ppoll", "epoll_wait", "epoll_pwait", "select", "pselect6", "recv", "recvfrom",
                    "recvmsg", "accept", "accept4", "connect"),
    "file_io": ("read", "pread", "pread64", "readv", "write", "pwrite", "pwrite64", "fread", "fwrite", "open",
                "open64", "openat", "fopen", "fopen64", "fclose", "close", "stat", "stat64", "fstat", "lstat", "mmap",
                "mmap64", "munmap", "fsync", "getdents64"),
    "sleep": ("nanosleep", "clock_nanosleep", "usleep", "sleep", "sched_yield"),
}
#: Python functions or files of an input pipeline (a loader, a dataset, collation, augmentation, tokenization).
LOADER_FRAME = re.compile(r"(?i)dataloader|data_loader|loader|collate|dataset|__getitem__|__next__|prefetch|batch|"
                          r"augment|transform|tokeni[sz]|preprocess|torchvision|/PIL/|tf\.data|/grain/|datasets/")
#: How long after a block the GPU operations that follow it still count as "right after" it.
AFTER_NS = 200_000


@dataclass(frozen=True)
class BlockEvidence:
    """What the host did during the blocks (times in ns, summed over the blocks)."""

    blocks: int
    block_ns: int
    launch_tid: int | None
    #: The launching thread's time in CUDA calls, by kind: ``alloc``, ``module_load``, ``sync``, ``other``.
    cuda_ns: dict[str, int] = field(default_factory=dict)
    #: The launching thread's time in OS runtime calls, by kind (:data:`OSRT_KINDS`, ``other``); empty without osrt.
    osrt_ns: dict[str, int] = field(default_factory=dict)
    osrt_traced: bool = False
    #: Other threads of the process: time in CUDA calls, and the threads that launched host-to-device copies.
    other_cuda_ns: int = 0
    loader_threads: int = 0  # other threads that launched a host-to-device copy inside a block
    other_file_io_ns: int = 0  # other threads' file reads and writes inside the blocks
    htod_after: int = 0  # blocks a host-to-device copy ends (or follows within AFTER_NS)
    htod_bytes_after: int = 0  # the median bytes of those copies per block
    readback_before: int = 0  # blocks that begin as a device-to-host copy completes
    python_sampled: bool = False
    python_sites: list[PythonSite] = field(default_factory=list)
    loader_frames_share: float = 0.0  # of the Python samples in the blocks, in loader-like functions

    @property
    def own_code_ns(self) -> int:
        """The launching thread's time in no traced call at all (its own code: Python, the framework)."""
        return max(0, self.block_ns - sum(self.cuda_ns.values()) - sum(self.osrt_ns.values()))


def block_evidence(trace: Trace, blocks: tuple[np.ndarray, np.ndarray], pid: int | None,
                   device: int | None) -> BlockEvidence:
    """The evidence of what the host did during ``blocks`` (sorted, disjoint [start, end) intervals of GPU idle)
    for the process ``pid`` launching onto ``device``."""
    bs, be = (np.asarray(x, np.int64) for x in blocks)
    if not len(bs):
        return BlockEvidence(0, 0, None)
    ops = gpu_ops(trace)
    mine = ops.pid == pid if pid is not None else np.ones(len(ops), bool)
    tid, api_tid = _launch_thread(trace, ops, mine & _on(ops, device), be)
    cuda_ns, other_cuda, loaders = _cuda_calls(trace, bs, be, pid, tid, api_tid, ops, mine)
    osrt_ns, other_io, traced = _osrt_calls(trace, bs, be, pid, tid)
    after, after_bytes, before = _copies_around(trace, ops.take(mine & _on(ops, device)), bs, be)
    sampled = python_stacks(trace).samples is not None
    sites = host_sites(trace, (bs, be), tid=tid, top=3, by="function") if sampled and tid is not None else []
    loader_share = float(sum(s.share for s in sites if LOADER_FRAME.search(f"{s.frame.function} {s.frame.file}")))
    return BlockEvidence(
        blocks=len(bs), block_ns=int((be - bs).sum()), launch_tid=tid, cuda_ns=cuda_ns, osrt_ns=osrt_ns,
        osrt_traced=traced, other_cuda_ns=other_cuda, loader_threads=loaders, other_file_io_ns=other_io,
        htod_after=after, htod_bytes_after=after_bytes, readback_before=before, python_sampled=sampled,
        python_sites=sites, loader_frames_share=round(loader_share, 4))


def _on(ops: GpuOps, device: int | None) -> np.ndarray:
    return np.ones(len(ops), bool) if device is None else np.asarray(ops.device == device)


def _launch_thread(trace: Trace, ops: GpuOps, mine: np.ndarray, block_ends: np.ndarray
                   ) -> tuple[int | None, np.ndarray | None]:
    """The thread that launched the first kernel after most blocks (the step's launching thread: in PyTorch the
    main thread, not the autograd thread that launches the backward pass), and the API frame's thread column."""
    if not trace.has("api"):
        return None, None
    tids = trace.frame("api", ["tid"])["tid"].to_numpy()
    kernels = np.flatnonzero(mine & ((ops.kind == KERNEL) | (ops.kind == REPLAY)) & (ops.api_row >= 0))
    if not len(kernels) or not len(tids):
        return None, tids
    at = np.searchsorted(ops.start[kernels], block_ends, side="left")
    at = at[at < len(kernels)]
    rows = ops.api_row[kernels[at]] if len(at) else ops.api_row[kernels]
    values, counts = np.unique(tids[rows], return_counts=True)
    return int(values[np.argmax(counts)]), tids


def _within(starts: np.ndarray, ends: np.ndarray, bs: np.ndarray, be: np.ndarray) -> int:
    """Time of the union of the intervals inside the blocks."""
    if not len(starts):
        return 0
    s, e = merge_intervals(starts, ends)
    return int(Coverage(s, e).within(bs, be).sum())


def _cuda_kind(base: str) -> str:
    return ("alloc" if base in ALLOC_APIS else "module_load" if base in MODULE_LOADS
            else "sync" if base in SYNC_APIS else "other")


def _cuda_calls(trace: Trace, bs: np.ndarray, be: np.ndarray, pid: int | None, tid: int | None,
                tids: np.ndarray | None, ops: GpuOps, mine: np.ndarray) -> tuple[dict[str, int], int, int]:
    """The launching thread's CUDA time in the blocks by kind, the other threads' CUDA time, and how many other
    threads launched a host-to-device copy inside a block."""
    if tids is None or tid is None:
        return {}, 0, 0
    api = trace.frame("api", ["start", "end", "pid", "name"])
    start, end = api["start"].to_numpy(np.int64), api["end"].to_numpy(np.int64)
    near = (end > bs[0]) & (start < be[-1])
    if pid is not None:
        near &= api["pid"].to_numpy() == pid
    rows = np.flatnonzero(near)
    start, end, row_tid = start[rows], end[rows], tids[rows]
    kind_by_code = np.array([_cuda_kind(base_api_name(str(name))) for name in api["name"].cat.categories] + ["other"],
                            dtype=object)
    row_kind = kind_by_code[api["name"].cat.codes.to_numpy()[rows]]  # code -1 (NULL) -> the appended "other"
    own = row_tid == tid
    out: dict[str, int] = {}
    for kind in ("alloc", "module_load", "sync", "other"):
        sel = own & (row_kind == kind)
        out[kind] = _within(start[sel], end[sel], bs, be)
    other = _within(start[~own], end[~own], bs, be)
    # Other threads that launched a host-to-device copy inside a block: a loader staging the batch.
    copies = np.flatnonzero(mine & (ops.kind == MEMCPY) & (ops.api_row >= 0))
    loaders = 0
    if len(copies) and trace.has("memcpy"):
        kinds_col = trace.frame("memcpy", ["copy_kind"])["copy_kind"].to_numpy()
        htod = copies[kinds_col[np.asarray(ops.table_row[copies], np.int64)] == HTOD]
        at = np.searchsorted(bs, ops.launch[htod], side="right") - 1
        inside = (at >= 0) & (ops.launch[htod] < be[np.maximum(at, 0)])
        threads = tids[ops.api_row[htod][inside]]
        loaders = len(set(np.unique(threads).tolist()) - {tid})
    return out, other, loaders


def _osrt_calls(trace: Trace, bs: np.ndarray, be: np.ndarray, pid: int | None, tid: int | None
                ) -> tuple[dict[str, int], int, bool]:
    """The launching thread's OS runtime time in the blocks by kind, and the other threads' file I/O time."""
    if not trace.has("osrt") or tid is None:
        return {}, 0, False
    osrt = trace.frame("osrt", ["start", "end", "pid", "tid", "name"])
    start, end = osrt["start"].to_numpy(np.int64), osrt["end"].to_numpy(np.int64)
    near = (end > bs[0]) & (start < be[-1])
    if pid is not None:
        near &= osrt["pid"].to_numpy() == pid
    rows = np.flatnonzero(near)
    start, end, row_tid = start[rows], end[rows], osrt["tid"].to_numpy()[rows]
    names = osrt["name"].cat.categories
    kind_by_code = np.array([next((k for k, v in OSRT_KINDS.items() if str(n) in v), "other") for n in names] + ["other"],
                            dtype=object)
    row_kind = kind_by_code[osrt["name"].cat.codes.to_numpy()[rows]]  # code -1 (NULL) -> the appended "other"
    own = row_tid == tid
    out = {kind: _within(start[own & (row_kind == kind)], end[own & (row_kind == kind)], bs, be)
           for kind in (*OSRT_KINDS, "other")}
    io = ~own & (row_kind == "file_io")
    return out, _within(start[io], end[io], bs, be), True


def _copies_around(trace: Trace, ops: GpuOps, bs: np.ndarray, be: np.ndarray) -> tuple[int, int, int]:
    """Blocks a host-to-device copy ends (and their median bytes), and blocks that begin as a readback completes."""
    copies = np.flatnonzero(ops.kind == MEMCPY)
    if not len(copies) or not trace.has("memcpy"):
        return 0, 0, 0
    memcpy = trace.frame("memcpy", ["copy_kind", "bytes"])
    table_row = np.asarray(ops.table_row[copies], np.int64)
    kind = memcpy["copy_kind"].to_numpy()[table_row]
    nbytes = memcpy["bytes"].to_numpy(np.int64)[table_row]
    up = copies[kind == HTOD]
    up_bytes = nbytes[kind == HTOD]
    # A copy starting in [end, end + AFTER_NS) of a block follows it (the batch the block prepared).
    at = np.searchsorted(be, ops.start[up], side="right") - 1
    follows = (at >= 0) & (ops.start[up] < be[np.maximum(at, 0)] + AFTER_NS)
    per_block = np.zeros(len(bs), np.int64)
    np.add.at(per_block, at[follows], up_bytes[follows])
    after = int(np.count_nonzero(per_block))
    down = copies[kind == DTOH]
    # A readback ending within AFTER_NS before a block's start, or inside it: the host read a value, then worked.
    done = ops.end[down]
    at = np.searchsorted(bs, done - AFTER_NS, side="left")  # the first block starting at or after end - slack
    ok = at < len(bs)
    ok[ok] = bs[at[ok]] <= done[ok] + AFTER_NS
    before = len(np.unique(at[ok]))
    return after, int(np.median(per_block[per_block > 0])) if after else 0, before


#: A device-to-host copy of at most this size is a readback of a value (a loss, a token, a flag), not a result.
READBACK_BYTES = 65_536
#: A host wait that ends this soon after a readback completes was waiting for it (a callback or an event woke it).
WAKE_NS = 1_000_000


def readback_waits(trace: Trace, lo: int, hi: int, known: int = 0) -> pd.DataFrame:
    """Host waits for device data that are no CUDA sync call: a small device-to-host copy, then a thread blocked in
    an OS wait (``futex``, ``pthread_cond_wait``: JAX's ``float(loss)``, a ``cuLaunchHostFunc`` callback) that
    returns as the copy completes.

    One row per readback whose GPU end lies in [lo, hi], in :func:`~nsys_rules.analysis.host.blocking_calls`'s
    columns (``kind`` ``readback``; ``api`` the OS call and the copy call, ``start`` the wait's start, but not before
    the copy was issued). Empty without OS runtime calls or such copies, and when there are no more such copies
    than ``known`` (readbacks the CUDA sync calls already wait on): then the OS calls are not read at all.
    """
    empty = pd.DataFrame({"start": np.zeros(0, np.int64), "end": np.zeros(0, np.int64), "pid": np.zeros(0, np.int64),
                          "tid": np.zeros(0, np.int64), "correlation_id": np.zeros(0, np.int64),
                          "api": np.zeros(0, object), "bytes": np.zeros(0, np.int64),
                          "after_readback": np.zeros(0, bool), "kind": np.zeros(0, object)})
    if not (trace.has("osrt") and trace.has("memcpy") and trace.has("api")):
        return empty
    ops = gpu_ops(trace)
    copies = np.flatnonzero((ops.kind == MEMCPY) & (ops.end >= lo) & (ops.end <= hi) & (ops.api_row >= 0))
    if not len(copies):
        return empty
    memcpy = trace.frame("memcpy", ["copy_kind", "bytes"])
    table_row = np.asarray(ops.table_row[copies], np.int64)
    small = (memcpy["copy_kind"].to_numpy()[table_row] == DTOH) & (memcpy["bytes"].to_numpy()[table_row] <= READBACK_BYTES)
    copies, nbytes = copies[small], memcpy["bytes"].to_numpy(np.int64)[table_row[small]]
    if len(copies) <= known:
        return empty
    osrt = trace.frame("osrt", ["start", "end", "pid", "tid", "name"])
    waiting = np.array([str(n) in OSRT_KINDS["thread_wait"] for n in osrt["name"].cat.categories] + [False])
    rows = np.flatnonzero(waiting[osrt["name"].cat.codes.to_numpy()])
    w_start, w_end = osrt["start"].to_numpy(np.int64)[rows], osrt["end"].to_numpy(np.int64)[rows]
    order = np.argsort(w_end, kind="stable")
    rows, w_start, w_end = rows[order], w_start[order], w_end[order]
    done = ops.end[copies]
    w_tid, w_pid = osrt["tid"].to_numpy()[rows], osrt["pid"].to_numpy()[rows]
    # Per readback, the waits that return within WAKE_NS of its end, begun before the copy ran, in its process.
    first = np.searchsorted(w_end, done, side="left")
    last = np.searchsorted(w_end, done + WAKE_NS, side="right")
    candidates: list[np.ndarray] = []
    votes: dict[int, int] = {}
    for i, (a, b) in enumerate(zip(first.tolist(), last.tolist(), strict=True)):
        j = np.arange(a, b)
        j = j[(w_start[j] < ops.start[copies[i]]) & (w_pid[j] == ops.pid[copies[i]])]
        candidates.append(j)
        for t in set(w_tid[j].tolist()):
            votes[t] = votes.get(t, 0) + 1
    if not votes:
        return empty
    # The consumer is the thread woken after most readbacks (helper threads that happen to wake there vary).
    consumer = max(votes, key=lambda t: (votes[t], -t))
    main = int(ops.pid[copies[0]])  # a process's main thread has the process's id: a Python program's own thread
    if 2 * votes.get(main, 0) >= len(copies):
        consumer = main
    pick = np.array([int(j[w_tid[j] == consumer][0]) if (w_tid[j] == consumer).any() else -1 for j in candidates])
    found = pick >= 0
    at, copies, nbytes = pick[found], copies[found], nbytes[found]
    api = trace.frame("api", ["start", "name"])
    issued = api["start"].to_numpy(np.int64)[ops.api_row[copies]]
    call = api["name"].to_numpy()[ops.api_row[copies]].astype(object)
    wait_name = osrt["name"].to_numpy()[rows[at]].astype(object)
    out = pd.DataFrame({
        "start": np.maximum(w_start[at], issued), "end": w_end[at], "pid": osrt["pid"].to_numpy()[rows[at]].astype(np.int64),
        "tid": osrt["tid"].to_numpy()[rows[at]].astype(np.int64), "correlation_id": np.asarray(ops.corr[copies], np.int64),
        "api": np.array([f"{w} on {base_api_name(str(c))}" for w, c in zip(wait_name, call, strict=True)], dtype=object),
        "bytes": nbytes, "after_readback": np.zeros(len(at), bool), "kind": np.full(len(at), "readback", dtype=object)})
    # One wait answers one readback (two copies completing together wake it once).
    out = out.drop_duplicates(["pid", "tid", "end"]).sort_values("start", kind="stable")
    return out.reset_index(drop=True)
