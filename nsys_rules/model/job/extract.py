"""One rank's communication summary, built where its trace is open (a worker process or Dask task).

Only this module reads a trace for the job analysis; what leaves it is a :class:`RankData` per
rank: the rank's communication kernel instances (times, the time compute overlapped them) and,
at each instance's start and end, running totals of what the rank did (GPU compute, copies,
host synchronization, allocation). Any interval between two instances is then two lookups, so
the cross-rank work never needs the trace again and scales with collectives, not kernels.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from nsys_rules.analysis.intervals import Coverage, coverage
from nsys_rules.analysis.names import ALLOC_APIS, SYNC_APIS, in_set
from nsys_rules.model.framework import Framework, framework
from nsys_rules.model.trace import Trace
from nsys_rules.model.job.names import CommNames, comm_names, family_per_row, name_codes
from nsys_rules.model.job.ranks import RankHint, trace_hint

if TYPE_CHECKING:  # annotations only: the step model is not imported for a job without steps
    from nsys_rules.model.steps import StepModel
    from nsys_rules.model.windows import Window

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
    #: Where the trace's steady steps begin and end on this rank's GPU clock (the first step's start, then
    #: each step's end: n + 1 bounds for n steps), when the trace's step model steps this rank.
    step_bounds: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    step_source: str = ""
    #: The rank's program's framework (job rules give their advice in its terms); None when unknown.
    framework: Framework | None = None

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
    export = trace.export
    try:
        cols = export.columns_of("TARGET_INFO_SESSION_START_TIME")
        if "utcEpochNs" not in cols:
            return None
        row = export.rows("TARGET_INFO_SESSION_START_TIME", ["utcEpochNs"], limit=1)
    except Exception:  # noqa: BLE001 - a loader that cannot read the table simply has no session clock
        return None
    value = row[0][0] if row else None
    return int(value) if isinstance(value, (int, np.integer)) and not isinstance(value, bool) else None


def collect_ranks(trace: Trace, several: bool, window: Window | None = None, names: CommNames | None = None,
                  steps: StepModel | None = None) -> list[RankData]:
    """The ranks of ``trace`` with their communication summaries.

    ``several`` says the job has other traces, so kernels are also sent for the behaviour test
    even when this trace holds one rank. Returns [] for a one-rank trace without communication
    in a one-trace job: nothing to analyze as a job. ``window`` (a :class:`~nsys_rules.model.windows.Window`)
    keeps only the kernels launched inside it. ``steps`` (the trace's
    :class:`~nsys_rules.model.steps.StepModel`) gives the rank it steps its step ends, so the job
    cuts its steps where the trace does.
    """
    if not trace.has("kernels"):
        return []
    names = names or comm_names()
    if not several and _plainly_one_gpu(trace, names):
        return []  # one process on one GPU and no name that could be communication: no job, nothing more read
    kernels = trace.frame("kernels", _KERNEL_COLUMNS)
    if window is not None and len(kernels):
        from nsys_rules.model.launches import launch_times

        kernels = kernels.loc[window.mask(launch_times(trace, kernels))].reset_index(drop=True)
    if not len(kernels):
        return []
    family = family_per_row(kernels["short_name"], kernels["name"], names)
    pid = _ints(kernels["pid"])
    device = _ints(kernels["device_id"])
    ranges = _nccl_ranges(trace, names)
    if family is None and not several and _one_value(pid) and _one_value(device) and not ranges:
        return []  # one process on one GPU, no communication: not a job (and nothing more to read)
    comm = np.zeros(len(kernels), bool) if family is None else ~pd.isna(family)
    nvtx = _nvtx_launched(trace, kernels, names) if ranges else comm
    if (nvtx & ~comm).any():
        family = np.where(nvtx & ~comm, NVTX_FAMILY, np.full(len(comm), None, dtype=object) if family is None else family)
        comm = ~pd.isna(family)
    start = kernels["start"].to_numpy(np.int64)
    end = kernels["end"].to_numpy(np.int64)
    units, unit_of = _units(pid, device, end - start, comm)
    if not units or (len(units) == 1 and not comm.any() and not several):
        return []  # one GPU, no communication: not a job
    code, labels = name_codes(kernels["short_name"], kernels["name"])
    candidates = _candidates(code, len(labels), comm, unit_of, len(units), end - start) \
        if (several or len(units) > 1) else np.zeros(0, np.int64)
    hint = trace_hint(trace.label, trace.capture.environment) if len(units) == 1 else RankHint(None, "")
    session = session_start_ns(trace)
    host = _host_activity(trace)
    out = []
    for u, (unit_pid, unit_device) in enumerate(units):
        mine = unit_of == u
        is_candidate = np.isin(code, candidates) & mine & ~comm if len(candidates) else np.zeros(len(code), bool)
        rows = np.flatnonzero((comm & mine) | is_candidate)
        rows = rows[np.argsort(start[rows], kind="stable")]
        overlap, cum_s, cum_e = _timelines(trace, start, end, (device, unit_device), comm, rows, is_candidate[rows],
                                           host.get(unit_pid, (Coverage.empty(), Coverage.empty())))
        uniq, first, inverse = np.unique(code[rows], return_index=True, return_inverse=True)
        families = [str(family[r]) if family is not None and comm[r] else BEHAVIOUR for r in rows[first]]
        out.append(RankData(
            trace=trace.label, pid=unit_pid, device=unit_device, units_in_trace=len(units), hint=hint,
            session_start_ns=session, names=[labels[c] for c in uniq], families=families,
            code=inverse.astype(np.int32), stream=_ints(kernels["stream_id"])[rows], start=start[rows], end=end[rows],
            overlap=overlap, cum_start=cum_s, cum_end=cum_e,
            kernel_ns=int((end - start)[mine].sum()), top_kernels=_top(code, labels, end - start, mine & ~comm),
            framework=framework(trace)))
    if steps is not None and steps.count:
        for rank in out:
            if steps.pid is None or rank.pid == steps.pid:
                rank.step_bounds = np.concatenate([steps.gpu[:1, 0], steps.gpu[:, 1]]).astype(np.int64)
                rank.step_source = steps.description
    return out


def _timelines(trace: Trace, start: np.ndarray, end: np.ndarray, gpu_of: tuple[np.ndarray, int], comm: np.ndarray,
               rows: np.ndarray, candidate: np.ndarray, host: tuple[Coverage, Coverage]) -> tuple[np.ndarray, ...]:
    """For the instances ``rows``: time compute overlapped each, and the running totals at their starts and ends.

    ``gpu_of`` is (each kernel's device, the rank's device). One busy timeline at a time, freed
    after use: each holds arrays as long as the kernels.
    """
    on_device = gpu_of[0] == gpu_of[1]
    s, e = start[rows], end[rows]
    cum_s = np.zeros((len(rows), len(CATEGORIES)), np.int64)
    cum_e = np.zeros((len(rows), len(CATEGORIES)), np.int64)

    def record(column: str, timeline: Coverage) -> None:
        cum_s[:, CATEGORIES.index(column)] = timeline.before(s)
        cum_e[:, CATEGORIES.index(column)] = timeline.before(e)

    compute_rows = on_device & ~comm
    compute = coverage(start[compute_rows], end[compute_rows])
    overlap = compute.within(s, e)
    record("compute", compute)
    del compute
    if candidate.any():  # a candidate is compute itself: what overlaps it is where two compute kernels run
        overlap[candidate] = coverage(start[compute_rows], end[compute_rows], depth=2).within(s[candidate], e[candidate])
    copies = _copy_busy(trace, gpu_of[1])
    record("copy", copies)
    gpu = coverage(np.concatenate([start[on_device], copies.starts]), np.concatenate([end[on_device], copies.ends]))
    record("gpu", gpu)
    del gpu
    record("sync", host[0])
    record("alloc", host[1])
    return overlap.astype(np.int64), cum_s, cum_e


def _top(code: np.ndarray, labels: list[str], duration: np.ndarray, mask: np.ndarray) -> dict[str, int]:
    sums = np.bincount(code[mask], weights=duration[mask].astype(float), minlength=len(labels))
    heaviest = np.argsort(-sums, kind="stable")[:TOP_KERNELS]
    return {labels[c]: int(sums[c]) for c in heaviest if sums[c] > 0}


def _plainly_one_gpu(trace: Trace, names: CommNames) -> bool:
    """One process on one GPU, no communication NVTX range, and no string of the trace named like a
    communication kernel: what the full extraction would find to be no job, judged on the columns
    already loaded (the kernels' short names, read only here, cost a second pass over the table).
    """
    matches = getattr(trace.export, "any_string_matches", None)
    family = names.any_family  # None: no one pattern to ask the string table with
    if matches is None or family is None or matches(family) or _nccl_ranges(trace, names):
        return False
    kernels = trace.frame("kernels", ["pid", "device_id"])
    return _one_value(_ints(kernels["pid"])) and _one_value(_ints(kernels["device_id"]))


def _one_value(values: np.ndarray) -> bool:
    return not len(values) or int(values.min()) == int(values.max())


def _ints(series: pd.Series) -> np.ndarray:
    """An id column as int64, NULL as -1 (damaged exports leave ids empty)."""
    return series.fillna(-1).to_numpy(np.int64) if series.hasnans else series.to_numpy(np.int64)


def _units(pid: np.ndarray, device: np.ndarray, duration: np.ndarray,
           comm: np.ndarray) -> tuple[list[tuple[int, int]], np.ndarray]:
    """(pid, device) pairs that are ranks (those with communication, else those with real kernel
    time), and each kernel row's index among them (-1: not a rank's)."""
    if _one_value(pid) and _one_value(device):
        pairs, inverse = np.zeros(1, np.int64), np.zeros(len(pid), np.int64)  # the usual case: no sort
    else:
        pairs, inverse = np.unique((pid.astype(np.int64) << 20) | (device & 0xFFFFF), return_inverse=True)
    ns = np.bincount(inverse, weights=duration.astype(float), minlength=len(pairs))
    talks = np.bincount(inverse, weights=comm, minlength=len(pairs)) > 0
    keep = talks if talks.any() else np.ones(len(pairs), bool)
    keep &= ns >= MIN_UNIT_SHARE * ns[keep].max()
    index = np.full(len(pairs), -1, np.int64)
    index[keep] = np.arange(int(keep.sum()))
    first = np.full(len(pairs), -1, np.int64)
    first[inverse[::-1]] = np.arange(len(inverse))[::-1]  # a row of each pair, to read its pid and device back
    units = [(int(pid[first[i]]), int(device[first[i]])) for i in np.flatnonzero(keep)]
    return units, index[inverse]


def _candidates(code: np.ndarray, n_codes: int, comm: np.ndarray, unit_of: np.ndarray, n_units: int,
                duration: np.ndarray) -> np.ndarray:
    """Name codes for the behaviour test: the heaviest non-communication names that repeat on every
    rank of the trace, at least 3 and at most BEHAVIOUR_MAX_INSTANCES times."""
    sel = ~comm & (unit_of >= 0)
    if not sel.any():
        return np.zeros(0, np.int64)
    counts = np.bincount(code[sel] * n_units + unit_of[sel], minlength=n_codes * n_units).reshape(n_codes, n_units)
    time_by = np.bincount(code[sel], weights=duration[sel].astype(float), minlength=n_codes)
    ok = np.flatnonzero((counts.min(axis=1) >= 3) & (counts.max(axis=1) <= BEHAVIOUR_MAX_INSTANCES))
    return ok[np.argsort(-time_by[ok], kind="stable")[:BEHAVIOUR_NAMES]]


def _copy_busy(trace: Trace, device: int) -> Coverage:
    starts, ends = [], []
    for table in ("memcpy", "memset"):
        if trace.has(table):
            f = trace.frame(table, ["start", "end", "device_id"])
            mask = _ints(f["device_id"]) == device
            starts.append(f["start"].to_numpy(np.int64)[mask])
            ends.append(f["end"].to_numpy(np.int64)[mask])
    if not starts:
        return Coverage.empty()
    return coverage(np.concatenate(starts), np.concatenate(ends))


def _host_activity(trace: Trace) -> dict[int, tuple[Coverage, Coverage]]:
    """Per process: time its threads spent in blocking synchronization, and in allocation calls."""
    if not trace.has("api"):
        return {}
    api = trace.frame("api", ["start", "end", "pid", "name"])
    names = trace.api_names()
    is_sync = in_set(names, SYNC_APIS)
    is_alloc = in_set(names, ALLOC_APIS)
    pid = _ints(api["pid"])
    start, end = api["start"].to_numpy(np.int64), api["end"].to_numpy(np.int64)
    out: dict[int, tuple[Coverage, Coverage]] = {}
    for p in np.unique(pid[is_sync | is_alloc]):
        mine = pid == p
        out[int(p)] = (coverage(start[mine & is_sync], end[mine & is_sync]),
                       coverage(start[mine & is_alloc], end[mine & is_alloc]))
    return out


def _nccl_ranges(trace: Trace, names: CommNames) -> bool:
    """Whether any NVTX range is named like a communication call (judged on the distinct names only)."""
    if not trace.has("nvtx") or not names.nvtx_ranges:
        return False
    labels = trace.frame("nvtx", ["name"])["name"]
    cats = labels.cat.categories if isinstance(labels.dtype, pd.CategoricalDtype) else labels.dropna().unique()
    return any(names.is_comm_range(str(c)) for c in cats)


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
    from nsys_rules.model.launches import launching_rows

    api = trace.frame("api", ["start", "correlation_id", "pid", "tid"])
    rows, found = launching_rows(trace, _ints(kernels["pid"]), _ints(kernels["correlation_id"]))
    launch = api["start"].to_numpy(np.int64)[rows]
    thread = _thread_ids(_ints(api["pid"])[rows], _ints(api["tid"])[rows])
    r_thread = _thread_ids(_ints(ranges["pid"]), _ints(ranges["tid"]))
    inside = np.zeros(len(kernels), bool)
    for t in np.unique(r_thread):
        mask = r_thread == t
        spans = coverage(ranges["start"].to_numpy(np.int64)[mask], ranges["end"].to_numpy(np.int64)[mask])
        mine = found & (thread == t)
        if mine.any():
            i = np.searchsorted(spans.starts, launch[mine], side="right") - 1
            inside[mine] = (i >= 0) & (launch[mine] < spans.ends[i.clip(0)])
    return inside


def _thread_ids(pid: np.ndarray, tid: np.ndarray) -> np.ndarray:
    return (pid.astype(np.int64) << 24) ^ (tid.astype(np.int64) & 0xFFFFFF)
