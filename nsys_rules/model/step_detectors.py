"""Three of the ways a step shows in a trace (see :mod:`.steps` for the model and their order): a
user's NVTX range, a readback or sync once per step, a group of CUDA graph launches. A call made
once per step is in :mod:`.step_calls`, the period of the kernel sequence in :mod:`.step_period`.

Each detector looks inside ``bound`` (the profiler-API capture range, or the whole capture) and
returns a :class:`Found` (host intervals of the steps, in time order) or a one-line reason why
it does not apply. Steps tile the loop: a detector never returns overlapping steps.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from nsys_rules.model.trace import Trace
from nsys_rules.model.activity import KERNEL, GpuOps, graph_replays
from nsys_rules.analysis.grouped import key_int
from nsys_rules.analysis.host import blocking_calls, copy_directions
from nsys_rules.analysis.intervals import counts_in, point_in, rising, runs_in
from nsys_rules.analysis.names import LIBRARY_DOMAINS, is_library_range, range_family

#: NVTX event types that are ranges (push/pop, start/end) and the one that names a domain.
RANGE_EVENTS = (59, 60, 70, 71)
DOMAIN_CREATE = 75

#: A step range lasts at least this share of the spacing between its instances (on the host or the
#: GPU clock): a range around one operation of many per step is much shorter than its spacing.
TILE_SHARE = 0.25


@dataclass(frozen=True)
class Found:
    """Steps a detector found: host intervals (n x 2, int64) and what marks them."""

    source: str  # "nvtx", "marker", "graph", "call", "kernels"
    name: str
    host: np.ndarray
    pid: int | None
    note: str = ""


@dataclass(frozen=True)
class Bound:
    """Where steps are looked for, and the tuning that applies everywhere."""

    lo: int
    hi: int
    min_repeats: int = 3
    preferred: tuple[str, ...] = ()


# -- a. user NVTX ranges that behave like steps ----------------------------------------------
def nvtx_steps(trace: Trace, ops: GpuOps, bound: Bound) -> Found | str:
    """Repeating user ranges that tile the loop and hold its GPU launches.

    A candidate repeats at least ``min_repeats`` times without overlapping itself, typically lasts
    at least :data:`TILE_SHARE` of the spacing between instances (steps follow each other), and
    holds at least half of the GPU launches of that span; library ranges (CUB, NCCL, cuDNN,
    XLA thunks, ``aten::`` ...) never qualify, by name or by their NVTX domain. Among the
    qualifying names, preferred ones win, then the outermost, then the most instances.
    """
    if not trace.has("nvtx"):
        return "no NVTX ranges in the trace"
    nvtx = trace.frame("nvtx", ["start", "end", "name", "pid", "domain_id", "event_type"])
    if not len(nvtx):
        return "no NVTX ranges in the trace"
    library_domains = _library_domains(nvtx)
    kind = nvtx["event_type"].to_numpy()
    start, end = nvtx["start"].to_numpy(np.int64), nvtx["end"].to_numpy(np.int64)
    keep = np.isin(kind, RANGE_EVENTS) & (end > start) & (start >= bound.lo) & (end <= bound.hi)
    keep &= nvtx["name"].notna().to_numpy()
    if library_domains:
        pairs = zip(nvtx["pid"].to_numpy().tolist(), nvtx["domain_id"].fillna(-1).to_numpy().tolist(), strict=True)
        keep &= ~np.fromiter((p in library_domains for p in pairs), bool, len(nvtx))
    ranges = nvtx.loc[keep, ["start", "end", "name", "pid"]]
    if ranges.empty:
        return "no NVTX ranges inside the capture range"
    # In time order (nsys 2025.6 on may store rows in any order): candidates and the ranges passed over are then
    # met, listed and tie-broken the same way whatever the export's row order.
    ranges = ranges.sort_values(["start", "end", "pid"], kind="stable")
    ranges = ranges.assign(step_name=step_names(ranges))
    launches = _sorted_launches(ops)
    candidates: dict[str, tuple[np.ndarray, int]] = {}
    rejected: list[str] = []
    for (name, pid), grp in ranges.groupby(["step_name", "pid"], observed=True, sort=False):
        if len(grp) < bound.min_repeats:
            continue
        label = str(name)
        if is_library_range(label):
            rejected.append(f"'{_short(label)}' (a library's range)")
            continue
        s = grp["start"].to_numpy(np.int64)
        order = np.argsort(s, kind="stable")
        s, e = s[order], grp["end"].to_numpy(np.int64)[order]
        if np.mean(s[1:] >= e[:-1]) < 0.9:
            continue  # instances overlap: not a sequence of steps
        if not _tiles(s, e, ops):
            rejected.append(f"'{_short(label)}' (does not tile the loop)")
            continue
        inside_span = launches[np.searchsorted(launches, s[0], side="left"):np.searchsorted(launches, e[-1], side="right")]
        if len(inside_span):
            per_instance = counts_in(inside_span, s, e)
            if int(per_instance.sum()) / len(inside_span) < 0.5 or (per_instance > 0).mean() < 0.5:
                rejected.append(f"'{_short(label)}' (holds few of the GPU launches)")
                continue
        elif ops.launch.size:
            rejected.append(f"'{_short(label)}' (launches no GPU work)")
            continue
        key = label if label not in candidates else f"{label}\x00{pid}"
        candidates[key] = (np.stack([s, e], axis=1), int(pid))
    if not candidates:
        return "no NVTX range repeats like a step" + (f": {', '.join(rejected[:4])}" if rejected else "")
    names = list(candidates)
    outer = [n for n in names if not _mostly_nested(candidates[n][0], [candidates[o][0] for o in names if o != n])]
    preferred = [n for n in names if n.split("\x00")[0] in bound.preferred
                 or range_family(n.split("\x00")[0]) in {range_family(p) for p in bound.preferred}]
    pool = preferred or outer or names
    best = max(pool, key=lambda n: (len(candidates[n][0]), int(candidates[n][0][-1, 1])))
    host, pid = candidates[best]
    library = [r for r in rejected if "library" in r]
    return Found("nvtx", best.split("\x00")[0], host, pid,
                 ("; library ranges passed over: " + ", ".join(library[:3])) if library else "")


def step_names(ranges: pd.DataFrame) -> pd.Series:
    """Each range's name as a step candidate: its :func:`range_family` where the family is a counter.

    ``range_push(f"train_step {i}")`` names every iteration differently: such a family (most of
    its instances have a name of their own) is one candidate, ``train_step #``. A family whose
    names repeat (``layer 0`` .. ``layer 31`` in every step) numbers positions inside a step, not
    iterations: its names stay apart, as written.
    """
    names = pd.Categorical(ranges["name"].astype(str))  # distinct names once: a family per name, not per range
    raw = names.categories.to_numpy(object)
    family = np.array([range_family(n) for n in raw], object)
    counted = pd.DataFrame({"raw": names.codes, "family": pd.Categorical(family[names.codes]),
                            "pid": ranges["pid"].to_numpy()})
    sizes = counted.groupby(["family", "pid"], sort=False, observed=True)["raw"].agg(["size", "nunique"])
    counters = sizes[(sizes["nunique"] > 1) & (sizes["nunique"] >= 0.8 * sizes["size"])].index
    if not len(counters):
        return pd.Series(raw[names.codes], index=ranges.index)
    is_counter = pd.MultiIndex.from_arrays([counted["family"].astype(object), counted["pid"]]).isin(counters)
    return pd.Series(np.where(is_counter, family[names.codes], raw[names.codes]), index=ranges.index)


def _tiles(s: np.ndarray, e: np.ndarray, ops: GpuOps) -> bool:
    """Whether instances follow each other: a typical instance lasts at least a quarter of the spacing to the next.

    Judged per instance (its length over the spacing to the next one), on the host clock, or on
    the GPU clock (the work launched inside each instance), since a host that runs ahead of the GPU
    (graph replays, a debug build) opens and closes its ranges long before the work runs. The
    median of the per-instance shares keeps one long pause (a warm-up barrier) from deciding, and
    so do runs of steps at different paces (a slow regime, then a fast one).
    """
    if len(s) < 2:
        return False
    if _median_share(e[:-1] - s[:-1], np.diff(s)) >= TILE_SHARE:
        return True
    first, last = _work_in(ops, s, e)
    some = last >= 0
    if some.sum() < 2:
        return False
    first, last = first[some], last[some]
    return _median_share(last[:-1] - first[:-1], np.diff(first)) >= TILE_SHARE


def _median_share(lengths: np.ndarray, spacing: np.ndarray) -> float:
    """Median of each instance's length over the spacing to the next (instances at the same time: skipped)."""
    ok = spacing > 0
    return float(np.median(lengths[ok] / spacing[ok])) if ok.any() else 0.0


def _sorted_launches(ops: GpuOps) -> np.ndarray:
    """The operations' known launch times, sorted: a view when they already rise (one launching thread
    whose work runs in launch order), where unknown ones (-1) come first."""
    if rising(ops.launch):
        return ops.launch[int(np.searchsorted(ops.launch, 0, side="left")):]
    return np.sort(ops.launch[ops.launch >= 0])


def _work_in(ops: GpuOps, s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """First start and last end of the operations launched inside each [s, e] (max int64 and -1: none)."""
    first = np.full(len(s), np.iinfo(np.int64).max, np.int64)
    last = np.full(len(s), -1, np.int64)
    if rising(ops.launch):
        # Launch order is start order: each interval's operations are one run of rows, whose first row
        # starts first (rows are in start order); the last end is a reduction over the run.
        known = int(np.searchsorted(ops.launch, 0, side="left"))
        lo, hi = runs_in(ops.launch[known:], s, e)
        lo += known
        hi += known
        some = np.flatnonzero(hi > lo)
        if len(some):
            first[some] = ops.start[lo[some]]
            bounds = np.stack([lo[some], hi[some]], axis=1).ravel()
            if bounds[-1] == len(ops):
                bounds = bounds[:-1]  # the last run reaches the end: reduceat's last segment does
            last[some] = np.maximum.reduceat(ops.end, bounds)[::2]
        return first, last
    index = point_in(ops.launch, s, e)
    held = index >= 0
    np.minimum.at(first, index[held], ops.start[held])
    np.maximum.at(last, index[held], ops.end[held])
    return first, last


def _library_domains(nvtx: pd.DataFrame) -> set[tuple[int, int]]:
    """(pid, domain id) of the NVTX domains libraries create (the domain name is a create event's text)."""
    created = nvtx[nvtx["event_type"] == DOMAIN_CREATE]
    out = set()
    for pid, dom, name in zip(created["pid"].tolist(), created["domain_id"].tolist(), created["name"].tolist(),
                              strict=True):
        if name is not None and (str(name) in LIBRARY_DOMAINS or is_library_range(str(name))):
            out.add((pid, dom))
    return out


def _mostly_nested(inner: np.ndarray, outers: list[np.ndarray]) -> bool:
    s, e = inner[:, 0], inner[:, 1]
    nested = np.zeros(len(s), bool)
    for other in outers:
        os_, oe = other[:, 0], other[:, 1]
        pos = np.searchsorted(os_, s, side="right") - 1
        ok = pos >= 0
        idx = pos.clip(0)
        nested |= ok & (oe[idx] >= e) & ((oe[idx] - os_[idx]) > (e - s))
    return bool(nested.mean() > 0.5)


# -- b. one CUDA graph launch per step ---------------------------------------------------------
def graph_steps(trace: Trace, ops: GpuOps, bound: Bound) -> Found | str:
    """Repeated graph launches: the step starts at each launch of the graph that recurs once per step."""
    replays = graph_replays(trace, ops)
    if replays.empty:
        return "no CUDA graph launches"
    replays = replays[(replays["launch"] >= bound.lo) & (replays["launch"] <= bound.hi)]
    if len(replays) < bound.min_repeats + 1:
        return f"{len(replays)} CUDA graph launch(es): too few to be a loop"
    thread = replays.groupby(["pid", "tid"]).size().idxmax()
    mine = replays[(replays["pid"] == thread[0]) & (replays["tid"] == thread[1])]
    graphs = mine["graph"].to_numpy()
    run = periodic_run(graphs, bound.min_repeats)
    if run is None:
        return "CUDA graph launches do not repeat in a regular order"
    period, first, count = run
    starts = mine["launch"].to_numpy(np.int64)[first:first + (count + 1) * period:period]
    host = _tile(starts, bound.hi)
    note = "" if period == 1 else f" ({period} graph launches per step)"
    return Found("graph", "CUDA graph replay", host, int(thread[0]), note)


# -- c1. a host readback or synchronization once per step -----------------------------------
def marker_steps(trace: Trace, ops: GpuOps, bound: Bound) -> Found | str:
    """A blocking call that recurs once per step (the ``.item()``/``block_until_ready()`` pattern).

    Readbacks (a device-to-host copy waited on) are tried before plain synchronizations; a
    call qualifies when the GPU launches between two of its occurrences are about the same
    number every time (within 25 % of the median for 3 in 4 intervals).
    """
    if not trace.has("api"):
        return "no API calls traced"
    api = trace.frame("api", ["start", "end", "pid", "tid", "correlation_id", "name"])
    memcpy = trace.frame("memcpy", ["pid", "correlation_id", "copy_kind", "bytes"]) if trace.has("memcpy") else None
    names = trace.api_names()
    inside = (api["start"].to_numpy() >= bound.lo) & (api["end"].to_numpy() <= bound.hi)
    if not inside.any():
        return "no API calls inside the capture range"
    sub = api.loc[inside].reset_index(drop=True)
    copies = copy_directions(sub, memcpy) if memcpy is not None and len(memcpy) else None
    calls = blocking_calls(sub, names[inside].reset_index(drop=True), copies)
    if calls.empty:
        return "no synchronization or readback repeats"
    calls["key"] = np.where(calls["after_readback"] | (calls["kind"] == "readback"), "readback", "sync")
    launches = np.sort(ops.launch[(ops.launch >= bound.lo) & (ops.launch <= bound.hi) & (ops.kind == KERNEL)])
    best: tuple[tuple[int, int], Found] | None = None
    for (pid, _tid, key, api_name), grp in calls.groupby(["pid", "tid", "key", "api"], observed=True, sort=False):
        ends = grp["end"].to_numpy(np.int64)
        if len(ends) < bound.min_repeats + 1:
            continue
        grouped = per_step(ends, launches, bound.min_repeats)
        if grouped is None:
            continue
        boundaries, calls_per_step, coverage = grouped
        if coverage < 0.3 * len(launches):
            continue  # a thread's waits that cover little of the work are not the loop's rhythm
        # The work before the first boundary is not a step of this loop: a generate() loop's first
        # readback ends the prefill, an engine's first one ends a warm-up or set-up step.
        host = np.stack([boundaries[:-1], boundaries[1:]], axis=1)
        score = (1 if key == "readback" else 0, coverage)
        label = f"{api_name} after a device-to-host copy" if key == "readback" else str(api_name)
        if calls_per_step > 1:
            label = f"group of {calls_per_step} ({label})"
        if best is None or score > best[0]:
            best = (score, Found("marker", label, host, key_int(pid)))
    if best is None:
        return "no synchronization or readback recurs once per step"
    return best[1]


def per_step(ends: np.ndarray, launches: np.ndarray, min_repeats: int, chain: bool = True
             ) -> tuple[np.ndarray, int, int] | None:
    """Step boundaries among a marker's occurrences, occurrences per step, and the launches the steps cover.

    A loop may wait several times per step (a readback for the stop check, another for the
    token): every k-th occurrence ends a step, the one followed by the longest pause (the end of
    its cluster). For each k (1-4) the longest run of steps holding about the same number of
    launches is the loop; the smallest k whose run covers at least 80 % of the best coverage wins
    (merging steps in pairs can always absorb a stray launch or two).
    """
    found: list[tuple[int, int, np.ndarray]] = []  # (coverage, k, boundaries)
    for k in range(1, 5):
        if len(ends) < k * (min_repeats + 1):
            break
        phases = []
        for phase in range(k):
            boundaries = ends[phase::k]
            after = ends[phase + 1::k]
            n = min(len(after), len(boundaries))
            pause = float(np.median(after[:n] - boundaries[:n])) if n else 0.0
            phases.append((pause, phase))
        phase = max(phases)[1] if k > 1 else 0
        boundaries = ends[phase::k]
        counts = np.diff(np.searchsorted(launches, boundaries))
        run = _regular_run(counts, min_repeats, chain)
        if run is None:
            continue
        first, length = run
        found.append((int(counts[first:first + length].sum()), k, boundaries[first:first + length + 1]))
    if not found:
        return None
    top = max(c for c, _, _ in found)
    coverage, k, boundaries = next(f for f in found if f[0] >= 0.8 * top)
    return boundaries, k, coverage


def _regular_run(counts: np.ndarray, min_repeats: int, chain: bool = True) -> tuple[int, int] | None:
    """(first, length) of the run of intervals holding a regular number of launches that covers the most launches.

    Regular: within 25 % of the run's median count. A loop can change pace (a regime of steps that
    autotune or build kernels, then a steady one), so with ``chain`` consecutive regular stretches of
    at least ``min_repeats`` intervals each chain into one run, as long as every interval holds work.
    A weak mark (a bookkeeping call) does not chain: one regular stretch only.
    """
    if len(counts) < min_repeats or not (counts > 0).any():
        return None
    stretches = [(a, b) for a, b in _regular_stretches(counts) if b - a >= min_repeats and counts[a:b].min() > 0]
    if not stretches:
        return None
    chains: list[tuple[int, int]] = []
    for a, b in stretches:
        if chain and chains and chains[-1][1] == a:
            chains[-1] = (chains[-1][0], b)
        else:
            chains.append((a, b))
    first, stop = max(chains, key=lambda c: (int(counts[c[0]:c[1]].sum()), c[1] - c[0]))
    return first, stop - first


def _regular_stretches(counts: np.ndarray) -> list[tuple[int, int]]:
    """Consecutive intervals cut into maximal stretches whose counts stay within 25 % of the stretch's median."""
    out = []
    first, n = 0, len(counts)
    while first < n:
        stop = first + 1
        while stop < n:
            typical = float(np.median(counts[first:stop]))
            if abs(float(counts[stop]) - typical) > 0.25 * max(typical, 1.0):
                break
            stop += 1
        out.append((first, stop))
        first = stop
    return out


def periodic_run(symbols: np.ndarray, min_repeats: int) -> tuple[int, int, int] | None:
    """(period, first position, repetitions) of the longest evenly spaced run of one symbol.

    For each symbol, the most common spacing between its consecutive occurrences and the longest
    run of occurrences at that spacing; the run covering the most of the sequence wins (ties: the
    longer period, i.e. the rarer marker). Initialization kernels repeat evenly too (one weight fill
    per layer), but over a short stretch, so the loop's marker covers more.
    """
    n = len(symbols)
    if not n:
        return None
    order = np.argsort(symbols, kind="stable")  # positions grouped by symbol, each group in order
    sorted_symbols = symbols[order]
    bounds = np.flatnonzero(np.diff(sorted_symbols)) + 1
    starts = np.concatenate([[0], bounds])
    stops = np.concatenate([bounds, [n]])
    best: tuple[int, int, int, int] | None = None  # (coverage, period, first, repetitions)
    for lo, hi in zip(starts.tolist(), stops.tolist(), strict=True):
        if hi - lo < min_repeats + 1:
            continue
        positions = order[lo:hi]
        gaps = np.diff(positions)
        values, freq = np.unique(gaps, return_counts=True)
        period = int(values[np.argmax(freq)])
        if period < 1:
            continue
        run_len, run_end = longest_run(gaps == period)
        if run_len < min_repeats:
            continue
        first = int(positions[run_end - run_len])
        candidate = (run_len * period, period, first, run_len)
        if best is None or candidate[:2] > best[:2]:
            best = candidate
    return None if best is None else (best[1], best[2], best[3])


def longest_run(flags: np.ndarray) -> tuple[int, int]:
    """Length of the longest run of True and the index one past its end."""
    if not flags.any():
        return 0, 0
    padded = np.concatenate([[False], flags, [False]])
    edges = np.flatnonzero(np.diff(padded.astype(np.int8)))
    begins, ends = edges[::2], edges[1::2]
    i = int(np.argmax(ends - begins))
    return int(ends[i] - begins[i]), int(ends[i])


def _tile(starts: np.ndarray, hi: int) -> np.ndarray:
    """Steps from each start to the next; the last one runs one median step length (within ``hi``)."""
    period = int(np.median(np.diff(starts))) if len(starts) > 1 else 0
    ends = np.append(starts[1:], min(int(starts[-1]) + period, hi))
    return np.stack([starts, ends], axis=1).astype(np.int64)


def _short(name: str, limit: int = 48) -> str:
    return name if len(name) <= limit else name[: limit - 3] + "..."
