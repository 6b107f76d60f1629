"""One rank's communication summary, built where its trace is open (a worker process or Dask task).

Only this module reads a trace for the job analysis; what leaves it is a :class:`RankData` per
rank: the rank's communication kernel instances (times, the time compute overlapped them) and,
at each instance's start and end, running totals of what the rank did (GPU compute, copies,
host synchronization, allocation). Any interval between two instances is then two lookups, so
the cross-rank work never needs the trace again and scales with collectives, not kernels.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from ..trace import Trace
from .intervals import Busy, busy
from .names import CommNames, comm_names, display_names, family_per_row
from .ranks import RankHint, trace_hint

#: Running totals kept at every instance start and end, in this column order.
CATEGORIES = ("compute", "copy", "gpu", "sync", "alloc")

#: Kernel names per trace sent for the behaviour test (the heaviest by time), and the most
#: instances one may have: the test needs every instance, and this bounds what a rank ships.
BEHAVIOUR_NAMES = 8
BEHAVIOUR_MAX_INSTANCES = 8192
BEHAVIOUR = "behaviour"  # family of a name found by behaviour rather than by the list
NVTX_FAMILY = "NCCL NVTX range"

#: Non-communication kernels per rank whose total time is kept, heaviest first (to name what differs).
TOP_KERNELS = 30

#: A (process, GPU) pair with less kernel time than this share of the busiest pair's is a stray
#: context (a rank touching GPU 0 at start-up), not a rank of its own.
MIN_UNIT_SHARE = 0.1

_KERNEL_COLUMNS = ("start", "end", "device_id", "stream_id", "pid", "correlation_id", "name", "short_name")


@dataclass
class RankData:
    """What one rank contributes to the job analysis (small, picklable)."""

    trace: str
    pid: int | None
    device: int | None
    units_in_trace: int
    hint: RankHint
    session_start_ns: int | None  # TARGET_INFO_SESSION_START_TIME.utcEpochNs; None when unrecorded
    names: list[str]  # communication kernel names; ``code`` indexes this list
    families: list[str]  # family of each name (the list's, NVTX_FAMILY or BEHAVIOUR)
    code: np.ndarray  # per instance, in start order
    stream: np.ndarray
    start: np.ndarray
    end: np.ndarray
    overlap: np.ndarray  # time compute kernels on the same GPU ran during the instance
    cum_start: np.ndarray  # (instances, len(CATEGORIES)) running totals at each start
    cum_end: np.ndarray
    kernel_ns: int = 0
    top_kernels: dict[str, int] = field(default_factory=dict)  # heaviest compute kernels: name -> ns
    trace_index: int = 0  # position among the job's traces, set by the job
    notes: list[str] = field(default_factory=list)

    @property
    def instances(self) -> int:
        """Number of communication kernel instances (confirmed or candidate)."""
        return int(len(self.start))

    def subset(self, keep: np.ndarray) -> "RankData":
        """The same rank with only the instances where ``keep`` is True."""
        out = RankData(**{k: v for k, v in self.__dict__.items()})
        for key in ("code", "stream", "start", "end", "overlap", "cum_start", "cum_end"):
            setattr(out, key, getattr(self, key)[keep])
        return out


def session_start_ns(trace: Trace) -> int | None:
    """UTC epoch ns at the start of the capture, from TARGET_INFO_SESSION_START_TIME (None when absent)."""
    export: Any = getattr(trace, "export", None)
    try:
        cols = export.columns_of("TARGET_INFO_SESSION_START_TIME") if export is not None else ()
        if "utcEpochNs" not in cols:
            return None
        row = export.query('SELECT "utcEpochNs" FROM "TARGET_INFO_SESSION_START_TIME" LIMIT 1')
    except Exception:  # noqa: BLE001 - a loader without SQL (another format) simply has no session clock
        return None
    value = row[0][0] if row else None
    return int(value) if isinstance(value, (int, np.integer)) and not isinstance(value, bool) else None


def collect_ranks(trace: Trace, several: bool, window: Any = None, names: CommNames | None = None) -> list[RankData]:
    """The ranks of ``trace`` with their communication summaries.

    ``several`` says the job has other traces, so kernels are also sent for the behaviour test
    even when this trace holds one rank. Returns [] for a one-rank trace without communication
    in a one-trace job: nothing to analyze as a job. ``window`` (a :class:`~nsys_rules.windows.Window`)
    keeps only the kernels launched inside it.
    """
    if not trace.has("kernels"):
        return []
    kernels = trace.frame("kernels", _KERNEL_COLUMNS)
    if window is not None and len(kernels):
        from ..windows import launch_times

        kernels = kernels.loc[window.mask(launch_times(trace, kernels))].reset_index(drop=True)
    if not len(kernels):
        return []
    names = names or comm_names()
    family = family_per_row(kernels["short_name"], kernels["name"], names)
    comm = ~pd.isna(family)
    start = kernels["start"].to_numpy(np.int64)
    end = kernels["end"].to_numpy(np.int64)
    pid = _ints(kernels["pid"])
    device = _ints(kernels["device_id"])
    units = _units(pid, device, end - start, comm)
    if not units or (len(units) == 1 and not comm.any() and not several):
        return []  # one GPU, no communication: not a job (and no NVTX or API join on a big one-GPU trace)
    nvtx = _nvtx_launched(trace, kernels, names)
    if (nvtx & ~comm).any():
        family = np.where(pd.isna(family) & nvtx, NVTX_FAMILY, family)
        comm = ~pd.isna(family)
        units = _units(pid, device, end - start, comm)
    label = display_names(kernels["short_name"], kernels["name"])
    candidates = _candidates(label, comm, pid, device, units, end - start) if (several or len(units) > 1) else set()
    hint = trace_hint(trace.label, trace.capture.environment) if len(units) == 1 else RankHint(None, "")
    session = session_start_ns(trace)
    host = _host_activity(trace)
    out = []
    for unit_pid, unit_device in units:
        on_device = device == unit_device
        mine = on_device & (pid == unit_pid)
        is_candidate = np.isin(label, list(candidates)) & mine & ~comm if candidates else np.zeros(len(label), bool)
        rows = np.flatnonzero((comm & mine) | is_candidate)
        compute_rows = on_device & ~comm
        compute1 = busy(start[compute_rows], end[compute_rows])
        compute2 = busy(start[compute_rows], end[compute_rows], depth=2) if candidates else Busy.empty()
        rows = rows[np.argsort(start[rows], kind="stable")]
        s, e = start[rows], end[rows]
        overlap = np.where(is_candidate[rows], compute2.between(s, e), compute1.between(s, e))
        copies = _copy_busy(trace, unit_device)
        gpu = busy(np.concatenate([start[on_device], copies.starts]), np.concatenate([end[on_device], copies.ends]))
        sync, alloc = host.get(unit_pid, (Busy.empty(), Busy.empty()))
        totals = (compute1, copies, gpu, sync, alloc)
        cum_s = np.stack([b.until(s) for b in totals], axis=1) if len(rows) else np.zeros((0, len(CATEGORIES)), np.int64)
        cum_e = np.stack([b.until(e) for b in totals], axis=1) if len(rows) else np.zeros((0, len(CATEGORIES)), np.int64)
        uniq, first, code = np.unique(label[rows].astype(str), return_index=True, return_inverse=True)
        families = [str(family[r]) if comm[r] else BEHAVIOUR for r in rows[first]]
        out.append(RankData(
            trace=trace.label, pid=unit_pid, device=unit_device, units_in_trace=len(units), hint=hint,
            session_start_ns=session, names=[str(u) for u in uniq], families=families,
            code=code.astype(np.int32), stream=_ints(kernels["stream_id"])[rows], start=s, end=e,
            overlap=overlap.astype(np.int64), cum_start=cum_s, cum_end=cum_e,
            kernel_ns=int((end - start)[mine].sum()), top_kernels=_top(label, end - start, mine & ~comm)))
    return out


def _top(label: np.ndarray, duration: np.ndarray, mask: np.ndarray) -> dict[str, int]:
    sums = pd.Series(duration[mask]).groupby(label[mask]).sum().sort_values(ascending=False)
    return {str(k): int(v) for k, v in sums.head(TOP_KERNELS).items()}


def _ints(series: pd.Series) -> np.ndarray:
    """An id column as int64, NULL as -1 (damaged exports leave ids empty)."""
    return series.fillna(-1).to_numpy(np.int64) if series.hasnans else series.to_numpy(np.int64)


def _units(pid: np.ndarray, device: np.ndarray, duration: np.ndarray, comm: np.ndarray) -> list[tuple[int, int]]:
    """(pid, device) pairs that are ranks: those with communication, else those with real kernel time."""
    frame = pd.DataFrame({"pid": pid, "device": device, "ns": duration, "comm": comm})
    per = frame.groupby(["pid", "device"], sort=True).agg(ns=("ns", "sum"), comm=("comm", "any"))
    if per["comm"].any():
        per = per[per["comm"]]
    per = per[per["ns"] >= MIN_UNIT_SHARE * per["ns"].max()]
    return [(int(p), int(d)) for p, d in per.index]


def _candidates(label: np.ndarray, comm: np.ndarray, pid: np.ndarray, device: np.ndarray,
                units: list[tuple[int, int]], duration: np.ndarray) -> set[str]:
    """Names for the behaviour test: the heaviest non-communication names that repeat, not too often, on every unit."""
    frame = pd.DataFrame({"name": label[~comm], "ns": duration[~comm], "pid": pid[~comm], "device": device[~comm]})
    if frame.empty:
        return set()
    counts = frame.groupby(["name", "pid", "device"], sort=False).size()
    worst = counts.groupby(level="name").max()
    fewest = counts.groupby(level="name").min()
    ok = worst[(worst <= BEHAVIOUR_MAX_INSTANCES) & (fewest >= 3)].index
    heavy = frame[frame["name"].isin(ok)].groupby("name")["ns"].sum().sort_values(ascending=False)
    return {str(n) for n in heavy.index[:BEHAVIOUR_NAMES]}


def _copy_busy(trace: Trace, device: int) -> Busy:
    starts, ends = [], []
    for table in ("memcpy", "memset"):
        if trace.has(table):
            f = trace.frame(table, ["start", "end", "device_id"])
            mask = _ints(f["device_id"]) == device
            starts.append(f["start"].to_numpy(np.int64)[mask])
            ends.append(f["end"].to_numpy(np.int64)[mask])
    if not starts:
        return Busy.empty()
    return busy(np.concatenate(starts), np.concatenate(ends))


def _host_activity(trace: Trace) -> dict[int, tuple[Busy, Busy]]:
    """Per process: time its threads spent in blocking synchronization, and in allocation calls."""
    if not trace.has("api"):
        return {}
    # One list of blocking and allocation calls. It moves from the rules that judge them into
    # nsys_rules.analysis.names (main, issue 11); either place serves until the branches meet.
    try:
        from ..analysis.names import ALLOC_APIS, SYNC_APIS  # type: ignore[import-not-found]
    except ImportError:
        from ..rules.alloc_churn import ALLOC_APIS
        from ..rules.sync_stall import SYNC_APIS

    api = trace.frame("api", ["start", "end", "pid", "name"])
    names = trace.api_names()
    is_sync = names.isin(list(SYNC_APIS)).to_numpy()
    is_alloc = names.isin(list(ALLOC_APIS)).to_numpy()
    pid = _ints(api["pid"])
    start, end = api["start"].to_numpy(np.int64), api["end"].to_numpy(np.int64)
    out: dict[int, tuple[Busy, Busy]] = {}
    for p in np.unique(pid[is_sync | is_alloc]):
        mine = pid == p
        out[int(p)] = (busy(start[mine & is_sync], end[mine & is_sync]), busy(start[mine & is_alloc], end[mine & is_alloc]))
    return out


def _nvtx_launched(trace: Trace, kernels: pd.DataFrame, names: CommNames) -> np.ndarray:
    """Kernels whose launching call ran inside a communication NVTX range (NCCL's) on the same thread."""
    none = np.zeros(len(kernels), bool)
    if not (trace.has("nvtx") and trace.has("api")) or not (names.nvtx_ranges or names.nvtx_domains):
        return none
    nvtx = trace.frame("nvtx", ["start", "end", "name", "pid", "tid", "domain_id", "event_type"])
    if not len(nvtx):
        return none
    labels = nvtx["name"].astype("category")
    cats = [str(c) for c in labels.cat.categories]
    by_name = np.array([names.is_comm_range(c) for c in cats] + [False])[labels.cat.codes.to_numpy()]
    domain = _ints(nvtx["domain_id"])
    npid = _ints(nvtx["pid"])
    created = nvtx[(nvtx["event_type"] == 75) & nvtx["name"].astype(object).isin(list(names.nvtx_domains))]
    in_domain = np.zeros(len(nvtx), bool)
    for p, d in zip(_ints(created["pid"]).tolist(), _ints(created["domain_id"]).tolist(), strict=True):
        in_domain |= (npid == p) & (domain == d)
    ranges = nvtx[(by_name | in_domain) & (nvtx["event_type"] != 75) & (nvtx["end"] > nvtx["start"])]
    if not len(ranges):
        return none
    from ..windows import launching_rows

    api = trace.frame("api", ["start", "correlation_id", "pid", "tid"])
    rows, found = launching_rows(trace, _ints(kernels["pid"]), _ints(kernels["correlation_id"]))
    launch = api["start"].to_numpy(np.int64)[rows]
    thread = _thread_ids(_ints(api["pid"])[rows], _ints(api["tid"])[rows])
    r_thread = _thread_ids(_ints(ranges["pid"]), _ints(ranges["tid"]))
    inside = np.zeros(len(kernels), bool)
    for t in np.unique(r_thread):
        mask = r_thread == t
        spans = busy(ranges["start"].to_numpy(np.int64)[mask], ranges["end"].to_numpy(np.int64)[mask])
        mine = found & (thread == t)
        if mine.any():
            i = np.searchsorted(spans.starts, launch[mine], side="right") - 1
            inside[mine] = (i >= 0) & (launch[mine] < spans.ends[i.clip(0)])
    return inside


def _thread_ids(pid: np.ndarray, tid: np.ndarray) -> np.ndarray:
    return (pid.astype(np.int64) << 24) ^ (tid.astype(np.int64) & 0xFFFFFF)
