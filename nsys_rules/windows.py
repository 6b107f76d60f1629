"""Time windows: which part of the capture a rule judges.

The steady state skips model loading and warm-up, found in this order:
1. a ``cudaProfilerStart``/``cuProfilerStart`` row: the capture was limited with
   ``-c cudaProfilerApi``, so it is steady as captured;
2. a repeating NVTX range (the step or request range: repeats, instances never overlap,
   not nested in another repeating range), minus its first instances while they still
   differ from the rest (warm-up), and minus the steps before a lone synchronize between
   two steps in the first half (a harness's end-of-warm-up barrier);
3. the repeating kernel pattern: start after the last kernel whose name never recurs in
   the second half of the capture (initialization kernels such as random weight fills);
4. else the whole capture.

GPU work belongs to a window by the time of the API call that launched it (see
:func:`launch_times`), on any thread of the process.
"""

from __future__ import annotations

import re
import weakref
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .errors import UsageError
from .trace import Trace

PROFILER_START_APIS = ("cudaProfilerStart", "cuProfilerStart")
PROFILER_STOP_APIS = ("cudaProfilerStop", "cuProfilerStop")


@dataclass(frozen=True)
class Window:
    """A set of time intervals (ns) and a sentence saying where it came from.

    ``steps`` are the instances of the step range inside the window, when one was found:
    rules use them for per-step numbers.
    """

    intervals: tuple[tuple[int, int], ...] | None  # None: the whole capture
    source: str
    steps: tuple[tuple[int, int], ...] = ()
    step_name: str | None = None

    @property
    def start(self) -> int | None:
        """First instant in the window, or None for the whole capture."""
        return self.intervals[0][0] if self.intervals else None

    @property
    def end(self) -> int | None:
        """Last instant in the window, or None for the whole capture."""
        return self.intervals[-1][1] if self.intervals else None

    def mask(self, times: np.ndarray) -> np.ndarray:
        """Which of ``times`` fall inside the window."""
        times = np.asarray(times)
        if self.intervals is None:
            return np.ones(len(times), bool)
        if len(self.intervals) == 1:  # the usual window: two comparisons beat a search per row
            lo, hi = self.intervals[0]
            return (times >= lo) & (times <= hi)
        starts = np.array([a for a, _ in self.intervals], np.int64)
        ends = np.array([b for _, b in self.intervals], np.int64)
        pos = np.searchsorted(starts, times, side="right") - 1
        inside = pos >= 0
        inside[inside] = times[inside] <= ends[pos[inside]]
        return inside

    def duration_ns(self, trace_span: tuple[int, int]) -> int:
        """Total length of the window; the whole capture uses ``trace_span``."""
        if self.intervals is None:
            return max(0, trace_span[1] - trace_span[0])
        return int(sum(b - a for a, b in self.intervals))

    def to_json(self) -> dict[str, object]:
        """How the window is reported in the JSON envelope."""
        return {"source": self.source, "start_ns": self.start, "end_ns": self.end,
                "steps": len(self.steps), "step_range": self.step_name}


FULL = Window(None, "whole capture")


# -- launch time ---------------------------------------------------------------------------
def launch_times(trace: Trace, gpu: pd.DataFrame) -> np.ndarray:
    """For each GPU row, the start of the API call that launched it (same pid + correlationId).

    Falls back to the GPU start when no launching call is in the trace (API not traced).
    The result is cached per trace and frame (every rule's ``ctx.frame`` asks for it): treat
    it as read-only.
    """
    cache = _LAUNCH_CACHE.setdefault(trace, {})
    hit = cache.get(id(gpu))
    if hit is not None and hit[0] is gpu:
        return hit[1]
    result = _launch_times(trace, gpu)
    if any(gpu is f for f in getattr(trace, "_frames", {}).values()):
        # Only the trace's own frames are cached (a rule's temporary subset would pin memory).
        # Keyed by id() with the frame kept alongside, so a recycled id can never match.
        result.flags.writeable = False
        cache[id(gpu)] = (gpu, result)
    return result


#: trace -> {id(frame): (frame, launch times)}; weak on the trace so closing it frees the arrays.
_LAUNCH_CACHE: "weakref.WeakKeyDictionary[Trace, dict[int, tuple[pd.DataFrame, np.ndarray]]]" = (
    weakref.WeakKeyDictionary())


def api_key_index(trace: Trace) -> tuple[np.ndarray, np.ndarray | None]:
    """The API table's (pid << 32 | correlationId) keys sorted, and the row order (None: already in order).

    Computed once per trace and shared by every launch join (``launch_times``, rules that need
    the launching call's end or name): 2.2M keys are 18 MB and a sort.
    """
    api = trace.frame("api", ["start", "correlation_id", "pid"])
    hit = _API_INDEX.get(trace)
    if hit is not None and hit[0] is api:
        return hit[1], hit[2]
    api_key = _key(api["pid"].to_numpy(), api["correlation_id"].to_numpy())
    order: np.ndarray | None = None
    # The API table is in call order and correlation ids grow with calls, so the keys are
    # usually sorted already: skip the 2M-row argsort (0.3 s) when they are.
    if len(api_key) > 1 and not bool((api_key[1:] >= api_key[:-1]).all()):
        order = np.argsort(api_key, kind="stable")
        api_key = api_key[order]
    api_key.flags.writeable = False
    _API_INDEX[trace] = (api, api_key, order)
    return api_key, order


def launching_rows(trace: Trace, pid: np.ndarray, corr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row of the API frame (``trace.frame("api")``) with the same (pid, correlationId) as each GPU row, and where one is.

    ``rows`` is only meaningful where ``found``. The first matching API row wins.

    One process whose correlation ids rise row by row (the usual nsys export) needs no key array:
    the id column itself is the sorted index, so nothing is built or kept (the (pid << 32 | id)
    keys of 2.2M API rows are 18 MB held for the whole run).
    """
    api = trace.frame("api", ["start", "correlation_id", "pid"])
    single = _single_pid(trace, api)
    if single is not None:
        api_corr = api["correlation_id"].to_numpy()
        rows = np.searchsorted(api_corr, corr)
        np.minimum(rows, len(api_corr) - 1, out=rows)
        found = api_corr[rows] == corr
        found &= corr > 0
        found &= pid == single
        return rows, found
    sorted_key, order = api_key_index(trace)
    gpu_key = _key(pid, corr)
    pos = np.searchsorted(sorted_key, gpu_key).clip(0, len(sorted_key) - 1)
    found = (sorted_key[pos] == gpu_key) & (corr > 0)
    del gpu_key
    return (pos if order is None else order[pos]), found


def _single_pid(trace: Trace, api: pd.DataFrame) -> int | None:
    """The API table's one pid when there is one and its correlation ids never decrease; else None."""
    hit = _SINGLE_PID.get(trace)
    if hit is not None and hit[0] is api:
        return hit[1]
    pid, corr = api["pid"].to_numpy(), api["correlation_id"].to_numpy()
    single = None
    if len(pid) and corr.dtype.kind in "iu" and int(pid.min()) == int(pid.max()) and \
            (len(corr) < 2 or bool((corr[1:] >= corr[:-1]).all())):
        single = int(pid[0])
    _SINGLE_PID[trace] = (api, single)
    return single


_API_INDEX: "weakref.WeakKeyDictionary[Trace, tuple[pd.DataFrame, np.ndarray, np.ndarray | None]]" = (
    weakref.WeakKeyDictionary())

_SINGLE_PID: "weakref.WeakKeyDictionary[Trace, tuple[pd.DataFrame, int | None]]" = weakref.WeakKeyDictionary()


def _launch_times(trace: Trace, gpu: pd.DataFrame) -> np.ndarray:
    starts = gpu["start"].to_numpy()
    if not len(gpu) or not trace.has("api") or "correlation_id" not in gpu:
        return starts.copy()
    api_start = trace.frame("api", ["start", "correlation_id", "pid"])["start"].to_numpy()
    if not len(api_start):
        return starts.copy()
    rows, found = launching_rows(trace, gpu["pid"].to_numpy(), gpu["correlation_id"].to_numpy())
    return np.where(found, api_start[rows], starts)


def _key(pid: np.ndarray, corr: np.ndarray) -> np.ndarray:
    return (pid.astype(np.int64) << 32) | (corr.astype(np.int64) & 0xFFFFFFFF)


# -- user filters --------------------------------------------------------------------------
_UNITS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000, "m": 60_000_000_000, "h": 3_600_000_000_000}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|ms|s|m|h)?")


def parse_time(text: str) -> int:
    """nsys time syntax: ``5s``, ``1s2ms``, ``1500`` (ns), ``2.5ms``."""
    text = text.strip()
    pos, total = 0, 0.0
    if not text:
        raise UsageError("empty time value")
    while pos < len(text):
        m = _PART.match(text, pos)
        if not m or m.end() == pos:
            raise UsageError(f"bad time {text!r}: use a number with ns, us, ms, s, m or h (e.g. 5s, 1s2ms)")
        total += float(m.group(1)) * _UNITS[m.group(2) or "ns"]
        pos = m.end()
    return int(round(total))


def filter_time_window(spec: str, origin: int) -> Window:
    """``--filter-time START/END``: times relative to the capture start ``origin``; either side may be empty."""
    if "/" not in spec:
        raise UsageError(f"bad --filter-time {spec!r}: use START/END, e.g. 5s/7s or 1s2ms/")
    a, b = spec.split("/", 1)
    start = origin + parse_time(a) if a.strip() else -(2**62)
    end = origin + parse_time(b) if b.strip() else 2**62
    if end < start:
        raise UsageError(f"bad --filter-time {spec!r}: END before START")
    return Window(((start, end),), f"--filter-time {spec}")


def parse_nvtx_filter(spec: str) -> tuple[str, str | None, int | None]:
    """``RANGE[@DOMAIN][/INDEX]`` -> (range, domain, index)."""
    index: int | None = None
    body = spec
    if "/" in spec:
        body, _, tail = spec.rpartition("/")
        if not tail.isdigit():
            raise UsageError(f"bad --filter-nvtx {spec!r}: INDEX after '/' must be a whole number")
        index = int(tail)
    name, _, domain = body.partition("@")
    if not name:
        raise UsageError(f"bad --filter-nvtx {spec!r}: give a range name")
    return name, (domain or None), index


def nvtx_filter_window(trace: Trace, spec: str) -> Window:
    """``--filter-nvtx``: the time of that range's instances (all of them without an index), all threads."""
    name, domain, index = parse_nvtx_filter(spec)
    if not trace.has("nvtx"):
        raise UsageError(f"--filter-nvtx {spec}: the trace has no NVTX events (capture with --trace=nvtx)")
    nvtx = trace.frame("nvtx", ["start", "end", "name", "domain_id", "event_type", "pid"])
    rows = nvtx[(nvtx["name"] == name) & (nvtx["end"] > nvtx["start"])]
    if domain is not None:
        # A number is the domain id; a name is the domain's nvtxDomainCreate event (eventType 75)
        # in the same process, the only place the export records it.
        if domain.isdigit():
            rows = rows[rows["domain_id"] == int(domain)]
        else:
            created = nvtx[(nvtx["event_type"] == 75) & (nvtx["name"] == domain)]
            keys = set(zip(created["pid"].tolist(), created["domain_id"].tolist(), strict=True))
            pairs = zip(rows["pid"].tolist(), rows["domain_id"].tolist(), strict=True)
            rows = rows[np.array([k in keys for k in pairs], dtype=bool)]
    rows = rows.sort_values("start", kind="stable")
    if rows.empty:
        where = f" in domain {domain!r}" if domain is not None else ""
        raise UsageError(f"--filter-nvtx {spec}: no NVTX range named {name!r}{where} in the trace")
    if index is not None:
        if index >= len(rows):
            raise UsageError(f"--filter-nvtx {spec}: the range has {len(rows)} instance(s), index {index} is out of range")
        rows = rows.iloc[[index]]
    return Window(_merge(rows["start"].to_numpy(), rows["end"].to_numpy()), f"--filter-nvtx {spec}")


#: nsys exports store times relative to the session start, so ``--filter-time 5s/7s`` starts at 5e9.
SESSION_ORIGIN_NS = 0


def intersect(a: Window, b: Window) -> Window:
    """The instants inside both windows (each a sorted list of disjoint intervals).

    One sweep over both lists, so 20k NVTX ranges against a time filter cost 20k steps, not
    the product of the two lists.
    """
    left, right = sorted(a.intervals or ()), sorted(b.intervals or ())
    out = []
    i = j = 0
    while i < len(left) and j < len(right):
        (s1, e1), (s2, e2) = left[i], right[j]
        lo, hi = max(s1, s2), min(e1, e2)
        if lo <= hi:
            out.append((lo, hi))
        if e1 < e2:
            i += 1
        else:
            j += 1
    return Window(tuple(out) or ((0, -1),), f"{a.source} and {b.source}")


def user_window(trace: Trace, filter_time: str | None, filter_nvtx: str | None) -> Window | None:
    """The window ``--filter-time`` and ``--filter-nvtx`` select together, or None without filters."""
    window: Window | None = None
    if filter_time:
        window = filter_time_window(filter_time, SESSION_ORIGIN_NS)
    if filter_nvtx:
        nvtx = nvtx_filter_window(trace, filter_nvtx)
        window = nvtx if window is None else intersect(window, nvtx)
    return window


def _merge(starts: np.ndarray, ends: np.ndarray) -> tuple[tuple[int, int], ...]:
    """Union of ``[start, end]`` intervals (touching ones joined), sorted: one sort and one sweep."""
    if not len(starts):
        return ()
    order = np.lexsort((ends, starts))
    s, e = np.asarray(starts, np.int64)[order], np.asarray(ends, np.int64)[order]
    reach = np.maximum.accumulate(e)  # the furthest end so far
    first = np.r_[True, s[1:] > reach[:-1]]  # a new interval starts past everything before it
    at = np.flatnonzero(first)
    return tuple(zip(s[at].tolist(), np.maximum.reduceat(e, at).tolist(), strict=True))


# -- steady state --------------------------------------------------------------------------
@dataclass(frozen=True)
class SteadyOptions:
    """Knobs of steady-state detection (``[tool.nsys-rules] steady-ranges``)."""

    range_names: tuple[str, ...] = ()  # preferred step range names, tried first
    min_repeats: int = 3
    warmup_tolerance: float = 0.25  # a leading instance differing by more than this from the median is warm-up


def steady_state_window(trace: Trace, options: SteadyOptions = SteadyOptions()) -> Window:
    """The steady-state window of ``trace`` (see the module docstring for the order).

    Computed once per trace and options (the engine and several rules ask; the frames it reads
    never change once loaded).
    """
    cache = _STEADY_CACHE.setdefault(trace, {})
    if options not in cache:
        cache[options] = _steady_state_window(trace, options)
    return cache[options]


#: trace -> {options: window}; weak on the trace so closing it frees the entry.
_STEADY_CACHE: "weakref.WeakKeyDictionary[Trace, dict[SteadyOptions, Window]]" = weakref.WeakKeyDictionary()


def _steady_state_window(trace: Trace, options: SteadyOptions) -> Window:
    steps = step_ranges(trace, options)
    if trace.has("api"):
        api = trace.frame("api", ["start", "end", "name"])
        names = trace.api_names()
        starts = api["start"].to_numpy()[names.isin(PROFILER_START_APIS).to_numpy()]
        if len(starts):
            stops = api["start"].to_numpy()[names.isin(PROFILER_STOP_APIS).to_numpy()]
            begin = int(starts.min())
            later = stops[stops > begin]
            end = int(later.max()) if len(later) else 2**62
            inside = tuple(s for s in (steps[1] if steps else ()) if s[0] >= begin)
            return Window(((begin, end),), "profiler API capture range (cudaProfilerStart)", inside,
                          steps[0] if steps else None)
    if steps:
        name, instances, dropped = steps
        note = f"NVTX range '{name}', {len(instances)} instances" + (
            f" after {dropped} warm-up instance(s)" if dropped else "")
        return Window(((instances[0][0], instances[-1][1]),), note, instances, name)
    pattern = kernel_steps(trace, options)
    if pattern is not None:
        marker, instances, dropped = pattern
        note = (f"repeating kernel pattern: {len(instances)} steps marked by kernel '{_short(marker)}'"
                + (f" after {dropped} warm-up step(s)" if dropped else ""))
        # The marker may run once per layer rather than once per step (a model whose steps
        # launch nothing but layers): name the steps after it so per-step numbers say so.
        return Window(((instances[0][0], 2**62),), note, instances, f"kernel:{_short(marker)}")
    kernel_start = _kernel_pattern_start(trace)
    if kernel_start is not None:
        return Window(((kernel_start, 2**62),), "repeating kernel pattern (after one-off initialization kernels)")
    return FULL


def _short(name: str, limit: int = 60) -> str:
    return name if len(name) <= limit else name[: limit - 3] + "..."


def kernel_steps(trace: Trace, options: SteadyOptions = SteadyOptions()) -> tuple[str, tuple[tuple[int, int], ...], int] | None:
    """Steps found from the kernels alone, for traces without a step NVTX range.

    A step marker is a kernel that runs exactly once per step: its launches are evenly spaced
    in the kernel sequence (the same number of kernels between two of them every time), which
    per-layer kernels are not (their spacing jumps at the step boundary). Among exactly regular
    names the rarest wins (one launch per step rather than one per layer of a one-layer model).
    Steps are the intervals between consecutive marker launches; leading steps that differ from
    the rest are warm-up, as for NVTX steps.
    """
    if not trace.has("kernels"):
        return None
    kernels = trace.frame("kernels", ["start", "name", "correlation_id", "pid"])
    if len(kernels) < 2 * options.min_repeats:
        return None
    launch = launch_times(trace, kernels)
    order = np.argsort(launch, kind="stable")
    codes = kernels["name"].cat.codes.to_numpy()[order]
    launch = launch[order]
    counts = np.bincount(codes[codes >= 0])
    best: tuple[int, int] | None = None  # (count, code)
    for code in np.flatnonzero(counts >= options.min_repeats + 1):
        positions = np.flatnonzero(codes == code)
        gaps = np.diff(positions)
        # Allow the first gap to differ (a cold first step may launch extra kernels).
        steady_gaps = gaps[1:] if len(gaps) > 2 else gaps
        if steady_gaps.min() == steady_gaps.max() and (best is None or len(positions) < best[0]):
            best = (len(positions), int(code))
    if best is None:
        return None
    positions = np.flatnonzero(codes == best[1])
    starts = launch[positions]
    if len(starts) < options.min_repeats + 1:
        return None
    steps = np.stack([starts[:-1], starts[1:]], axis=1)
    dropped = _warmup_count(steps[:, 1] - steps[:, 0], options.warmup_tolerance)
    name = str(kernels["name"].cat.categories[best[1]])
    return name, tuple((int(a), int(b)) for a, b in steps[dropped:]), dropped


def step_ranges(trace: Trace, options: SteadyOptions = SteadyOptions()) -> tuple[str, tuple[tuple[int, int], ...], int] | None:
    """The step range: (name, steady instances, number of warm-up instances dropped), or None."""
    if not trace.has("nvtx"):
        return None
    nvtx = trace.frame("nvtx", ["start", "end", "name"])
    ranges = nvtx[(nvtx["end"] > nvtx["start"]) & nvtx["name"].notna()]
    if ranges.empty:
        return None
    groups: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for name, grp in ranges.groupby("name", observed=True, sort=False):
        if len(grp) < options.min_repeats:
            continue
        order = np.argsort(grp["start"].to_numpy(), kind="stable")
        s, e = grp["start"].to_numpy()[order], grp["end"].to_numpy()[order]
        if np.mean(s[1:] >= e[:-1]) < 0.9:  # instances overlap: not a sequence of steps
            continue
        groups[str(name)] = (s, e)
    if not groups:
        return None
    top = [n for n in groups if not _mostly_nested(groups[n], [groups[o] for o in groups if o != n])]
    preferred = [n for n in options.range_names if n in groups]
    candidates = preferred or top or list(groups)
    best = max(candidates, key=lambda n: (len(groups[n][0]), groups[n][1][-1]))
    s, e = groups[best]
    dropped = _warmup_count(e - s, options.warmup_tolerance)
    dropped += _barrier_count(trace, s[dropped:], e[dropped:], options.min_repeats)
    return best, tuple(zip(s[dropped:].tolist(), e[dropped:].tolist(), strict=True)), dropped


#: Host calls that wait for the GPU (base names); one alone between two steps is an end-of-warm-up barrier.
HOST_SYNC_APIS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cuStreamSynchronize",
                  "cuCtxSynchronize", "cuEventSynchronize")


def _barrier_count(trace: Trace, s: np.ndarray, e: np.ndarray, min_repeats: int) -> int:
    """Steps before a warm-up barrier: a synchronize outside the steps, in the only gap between steps that holds one,
    in the first half.

    Benchmark harnesses run a few warm-up steps, wait for the GPU, then start measuring; warm-up steps after the
    first often take exactly as long as measured ones, so durations alone keep them. A sync between every pair of
    steps is the loop's own pattern, not a barrier, and is left alone.
    """
    if len(s) < 2 or not trace.has("api"):
        return 0
    api = trace.frame("api", ["start"])
    starts = api["start"].to_numpy()[trace.api_names().isin(HOST_SYNC_APIS).to_numpy()]
    if not len(starts):
        return 0
    pos = np.searchsorted(s, starts, side="right") - 1
    between = (pos >= 0) & (pos < len(s) - 1)
    between[between] &= starts[between] > e[pos[between]]
    gaps = np.unique(pos[between])
    if len(gaps) != 1 or gaps[0] >= len(s) // 2 or len(s) - int(gaps[0]) - 1 < min_repeats:
        return 0
    return int(gaps[0]) + 1


def _mostly_nested(inner: tuple[np.ndarray, np.ndarray], outers: list[tuple[np.ndarray, np.ndarray]]) -> bool:
    s, e = inner
    nested = np.zeros(len(s), bool)
    for os_, oe in outers:
        pos = np.searchsorted(os_, s, side="right") - 1
        ok = pos >= 0
        idx = pos.clip(0)
        longer = (oe[idx] - os_[idx]) > (e - s)
        nested |= ok & (oe[idx] >= e) & longer
    return bool(nested.mean() > 0.5)


def _warmup_count(durations: np.ndarray, tolerance: float) -> int:
    """Leading instances outside the spread of the later half (widened by ``tolerance``) are warm-up.

    Judging against the later half's range, not its median, keeps steps that legitimately
    vary (MoE routing, periodic side work) while still dropping a cold first step.
    """
    n = len(durations)
    later = durations[n // 2:]
    low, high = float(later.min()) * (1 - tolerance), float(later.max()) * (1 + tolerance)
    dropped = 0
    while dropped < n // 2 and not (low <= durations[dropped] <= high):
        dropped += 1
    return dropped


def _kernel_pattern_start(trace: Trace) -> int | None:
    if not trace.has("kernels"):
        return None
    kernels = trace.frame("kernels", ["start", "name", "correlation_id", "pid"])
    if len(kernels) < 20:
        return None
    launch = launch_times(trace, kernels)
    order = np.argsort(launch, kind="stable")
    codes = kernels["name"].cat.codes.to_numpy()[order]
    half = len(codes) // 2
    recurring = np.zeros(int(codes.max()) + 2, bool)
    recurring[codes[half:] + 1] = True
    one_off = np.flatnonzero(~recurring[codes[:half] + 1])
    if not len(one_off):
        return None
    last = int(one_off[-1]) + 1
    return int(launch[order][last]) if last < len(order) else None
