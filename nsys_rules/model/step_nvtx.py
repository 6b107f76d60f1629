"""The first way a step shows (see :mod:`.steps` for the model and the order of the ways): a user's NVTX
range that behaves like a step: it repeats, tiles the loop and holds the GPU launches between its instances.

Looks inside ``bound`` (the profiler-API capture range, or the whole capture) and returns a
:class:`~.step_runs.Found` (host intervals of the steps, in time order) or a one-line reason why
no range applies. Library ranges (NCCL, cuDNN, the framework's own) are never steps.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from nsys_rules.model.trace import Trace
from nsys_rules.model.activity import GpuOps
from nsys_rules.analysis.intervals import counts_in, point_in, rising, runs_in
from nsys_rules.analysis.names import LIBRARY_DOMAINS, is_library_range, range_family
from nsys_rules.model.step_runs import Bound, Found

#: NVTX event types that are ranges (push/pop, start/end) and the one that names a domain.
RANGE_EVENTS = (59, 60, 70, 71)
DOMAIN_CREATE = 75

#: A step range lasts at least this share of the spacing between its instances (on the host or the
#: GPU clock): a range around one operation of many per step is much shorter than its spacing.
TILE_SHARE = 0.25


def _no_ranges_left(trace: Trace) -> str:
    """Why no NVTX range is left: none in the trace, or every one dropped as damage (times past 2^53 ns,
    ends before starts): then the trace has ranges, and saying it has none would send the user to add them."""
    stored = int(trace.row_count("nvtx"))
    if stored <= 0:
        return "no NVTX ranges in the trace"
    return f"every one of the trace's {stored:,} NVTX rows was dropped as damage (see the damage notes)"


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
        return _no_ranges_left(trace)
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


def _short(name: str, limit: int = 48) -> str:
    return name if len(name) <= limit else name[: limit - 3] + "..."
