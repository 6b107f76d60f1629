"""Two of the ways a step shows in a trace (see :mod:`.steps` for the model and their order): a group of
CUDA graph launches, a readback or sync once per step. A user's NVTX range is in :mod:`.step_nvtx`, a
call made once per step in :mod:`.step_calls`, the period of the kernel sequence in :mod:`.step_period`.

Each detector looks inside ``bound`` (the profiler-API capture range, or the whole capture) and
returns a :class:`~.step_runs.Found` (host intervals of the steps, in time order) or a one-line reason
why it does not apply. Steps tile the loop: a detector never returns overlapping steps.
"""

from __future__ import annotations

import numpy as np

from nsys_rules.model.trace import Trace
from nsys_rules.model.activity import KERNEL, MEMCPY, GpuOps, graph_replays
from nsys_rules.analysis.grouped import key_int
from nsys_rules.analysis.host import blocking_calls, copy_directions
from nsys_rules.model.step_runs import Bound, Found, per_step, periodic_run


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
    if period == 1:
        # One graph launched over and over: several launches may make one token, each token ended by a readback.
        grouped = _readback_groups(trace, ops, starts, int(thread[0]), bound.min_repeats)
        if grouped is not None:
            starts, period = grouped
    host = _tile(starts, bound.hi)
    note = "" if period == 1 else f" ({period} graph launches per step)"
    return Found("graph", "CUDA graph replay", host, int(thread[0]), note)


#: A pause between two launches of one graph this many times the usual one may end a token.
TOKEN_GAP = 4.0


def _readback_groups(trace: Trace, ops: GpuOps, launches: np.ndarray, pid: int,
                     min_repeats: int) -> tuple[np.ndarray, int] | None:
    """The first launch of each token and the launches per token, when one graph is launched several times a token.

    A JAX token loop replays one command buffer per jitted call, several calls a token, and reads
    the token back: the launches come in groups of the same size, and every long pause between two
    groups (over :data:`TOKEN_GAP` usual pauses) holds a device-to-host copy of the process (the
    readback), pauses inside a group none. Without that evidence: None (a step per launch).
    """
    gaps = np.diff(launches)
    if len(gaps) < 2 * min_repeats or not trace.has("memcpy"):
        return None
    long = np.flatnonzero(gaps > TOKEN_GAP * max(float(np.median(gaps)), 1.0))
    cuts = long + 1  # the first launch of each token after the first
    sizes = np.diff(cuts)
    if len(sizes) < min_repeats:
        return None
    size = int(np.median(sizes))
    if size < 2 or np.mean(sizes == size) < 0.75:
        return None
    copies = (ops.kind == MEMCPY) & (ops.pid == pid)
    kinds = trace.frame("memcpy", ["copy_kind"])["copy_kind"].to_numpy()
    readbacks = np.sort(ops.launch[copies][kinds[ops.table_row[copies]] == 2])
    if not len(readbacks):
        return None
    # Readbacks launched inside each pause: every long pause has one, pauses inside a token mostly none.
    held = np.searchsorted(readbacks, launches[1:], side="left") > np.searchsorted(readbacks, launches[:-1], side="right")
    if np.mean(held[long]) < 0.75 or np.mean(np.delete(held, long)) > 0.1:
        return None
    first = int(cuts[0]) - size if cuts[0] >= size else int(cuts[0])
    return np.append(launches[first:cuts[0]:size][:1], launches[cuts]), size


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


def _tile(starts: np.ndarray, hi: int) -> np.ndarray:
    """Steps from each start to the next; the last one runs one median step length (within ``hi``)."""
    period = int(np.median(np.diff(starts))) if len(starts) > 1 else 0
    ends = np.append(starts[1:], min(int(starts[-1]) + period, hi))
    return np.stack([starts, ends], axis=1).astype(np.int64)
