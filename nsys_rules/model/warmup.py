"""Where the loop starts: leading steps of an earlier run, and warm-up steps, left out of the steady ones.

Warm-up ends after the last leading step that pays a one-time cost (module loads, first-use
allocations, graph captures), or after a lone synchronization a benchmark puts between warm-up
and measured steps. Steps before the last long break in the first half belong to an earlier run
of the loop (a warm-up call). See :mod:`.steps` for the model these feed.
"""

from __future__ import annotations

import re

import numpy as np

from nsys_rules.analysis.intervals import point_in
from nsys_rules.analysis.names import ALLOC_APIS, MODULE_LOADS, SYNC_APIS, in_set
from nsys_rules.model.regime_causes import GRAPH_CAPTURE_APIS
from nsys_rules.model.step_runs import Found
from nsys_rules.model.trace import Trace

#: Allocation calls whose first use in the loop is warm-up (frees are not: they follow allocations).
_ALLOCATING = frozenset(name for name in ALLOC_APIS if "Free" not in name and "Destroy" not in name
                        and "Release" not in name and "Unregister" not in name and "Unmap" not in name)


#: Calls whose cost in a leading step marks it as warm-up: code loads, first allocations, graph captures.
_COSTLY = MODULE_LOADS | _ALLOCATING | GRAPH_CAPTURE_APIS


def earlier_runs(host: np.ndarray, source: str, launches: np.ndarray) -> int:
    """Leading steps that belong to an earlier run of the loop (a warm-up call), cut at the last long break.

    Between ranges, a pause of more than four typical steps separates two runs. Markers tile the
    loop, so the break is inside a step: one that lasts more than four typical steps and holds
    other work than a step (a different number of launches: the next call's prefill, set-up); a
    step that is only slow (lazy loading) is not a break. The steps up to the last break in the
    first half are the earlier run.
    """
    n = len(host)
    if n < 4:
        return 0
    durations = host[:, 1] - host[:, 0]
    typical = float(np.median(durations))
    if source == "nvtx":
        long = np.append(host[1:, 0] - host[:-1, 1] > 4 * max(typical, 1), False)  # pause after step i
    else:
        usual = float(np.median(launches))
        long = (durations > 4 * max(typical, 1)) & (np.abs(launches - usual) > 0.25 * max(usual, 1))
    breaks = np.flatnonzero(long[: n // 2])
    return int(breaks[-1]) + 1 if len(breaks) else 0


def warmup_steps(trace: Trace, found: Found, host: np.ndarray, min_repeats: int) -> tuple[int, str]:
    """How many leading steps are warm-up, and the evidence.

    Warm-up is a leading step that pays a one-time cost worth 10 % of a typical step in module
    loads or first-use allocations (lazy loading, allocator growth), or the steps before a lone
    synchronization that a benchmark puts between warm-up and measured steps. A step that is
    merely slow stays: it is an iteration of the loop (step-outliers judges it).
    """
    n = len(host)
    limit = max(0, min(n // 2, n - max(min_repeats, 1)))
    if not limit:
        return 0, ""
    declared = declared_warmup(trace, found, host)
    if declared is not None:
        # The program marks its own warm-up: the steps after that range are its measured ones, whatever
        # they cost (a compile there is a recompile inside the loop, recompile's to name, not warm-up).
        return min(declared[0], limit), declared[1]
    if not trace.has("api"):
        return 0, ""
    api = trace.frame("api", ["start", "end", "name", "pid", "tid"])
    names = trace.api_names()
    pid = api["pid"].to_numpy()
    # The process's calls; None: all of them (one process, a one-value column: no mask over every call).
    mine = None if found.pid is None or (pid.strides == (0,) and len(pid) and int(pid[0]) == found.pid) \
        else pid == found.pid
    starts, ends = api["start"].to_numpy(np.int64), api["end"].to_numpy(np.int64)
    votes: list[tuple[int, str]] = [(0, "")]
    costly = in_set(names, _COSTLY) if mine is None else in_set(names, _COSTLY) & mine
    cost = _time_per_step(starts[costly], ends[costly], host)
    typical = float(np.median(host[:, 1] - host[:, 0]))
    early = max(2, n // 10)
    # A load in most steps is the loop's own pattern: only a cost well above the usual step's
    # counts as one-time (a first decode step loading 37 modules among steps that load one small one).
    heavy = np.flatnonzero(cost[:early] >= max(0.1 * typical, 10 * float(np.median(cost))))
    if len(heavy):
        votes.append((int(heavy[-1]) + 1, "module loading, first allocations or graph captures"))
    sync = in_set(names, SYNC_APIS) if mine is None else in_set(names, SYNC_APIS) & mine
    barrier = _barrier(starts[sync], ends[sync], host, found.source)
    if barrier:
        votes.append((barrier, "a synchronization between warm-up and measured steps"))
    dropped, why = max(votes)
    return min(dropped, limit), why


#: A user's NVTX range that says it is warm-up: ``warmup``, ``warm_up``, ``Warm-up 3``.
_WARMUP_NAME = re.compile(r"(?i)(?<![a-z])warm[-_ ]?up(?![a-z_])")


def declared_warmup(trace: Trace, found: Found, host: np.ndarray) -> tuple[int, str] | None:
    """Steps the program itself marks as warm-up with an NVTX range named so, or None without such a range.

    A ``warmup`` range of the loop's process that starts before the first step and ends before the
    middle step is the program's own word: the steps that start before it ends are warm-up
    (0 when the range ends before the first step: every step is measured). Ranges named per step
    (``warmup_step``) are not the warm-up's bound and are passed over.
    """
    if not trace.has("nvtx") or not len(host):
        return None
    nvtx = trace.frame("nvtx", ["start", "end", "name", "pid"])
    if not len(nvtx):
        return None
    names = nvtx["name"]
    warm = names.notna().to_numpy() & names.astype(str).str.contains(_WARMUP_NAME).to_numpy()
    if found.pid is not None:
        warm &= nvtx["pid"].to_numpy() == found.pid
    starts, ends = nvtx["start"].to_numpy(np.int64)[warm], nvtx["end"].to_numpy(np.int64)[warm]
    middle = int(host[len(host) // 2, 0])  # by steps, not time: a long compiling step does not move it
    held = (ends > starts) & (starts <= host[0, 0]) & (ends <= middle)
    if not held.any():
        return None
    end = int(ends[held].max())
    count = int(np.count_nonzero(host[:, 0] < end))
    label = str(names[warm].to_numpy()[held][int(np.argmax(ends[held]))])
    return count, f"the program's own NVTX range '{label}'"


def _time_per_step(starts: np.ndarray, ends: np.ndarray, host: np.ndarray) -> np.ndarray:
    """Summed duration of the calls starting inside each step."""
    index = point_in(starts, host[:, 0], host[:, 1])
    held = index >= 0
    return np.bincount(index[held], weights=(ends - starts)[held], minlength=len(host))


def _steps_holding(times: np.ndarray, host: np.ndarray) -> np.ndarray:
    held = np.zeros(len(host), bool)
    index = point_in(times, host[:, 0], host[:, 1])
    held[index[index >= 0]] = True
    return held


def _barrier(sync_starts: np.ndarray, sync_ends: np.ndarray, host: np.ndarray, source: str) -> int:
    """Steps before a benchmark's end-of-warm-up barrier: a lone synchronization in the first half.

    Harnesses run warm-up steps, wait for the GPU, then measure; warm-up steps after the first
    often take exactly as long as measured ones, so durations alone keep them. A sync in every
    step (or between every two) is the loop's own pattern, not a barrier. Per-step markers (the
    syncs that end each step) are not barriers.
    """
    if len(host) < 2 or not len(sync_starts):
        return 0
    boundary = np.isin(sync_ends, host[:, 1]) if source == "marker" else np.zeros(len(sync_ends), bool)
    starts = sync_starts[~boundary]
    starts = starts[(starts >= host[0, 0]) & (starts <= host[-1, 1])]
    if not len(starts):
        return 0
    pos = np.searchsorted(host[:, 0], starts, side="right") - 1
    between = (pos >= 0) & (starts > host[pos.clip(0), 1])
    if source == "nvtx":  # inside a user's step range a sync is the step's own business
        pos, between = pos[between], between[between]
    owner = np.where(between, pos + 1, pos)  # a sync between steps k and k+1 opens step k+1
    owners = np.unique(owner[owner > 0])
    if len(owners) != 1 or owners[0] > len(host) // 2:
        return 0
    return int(owners[0])
