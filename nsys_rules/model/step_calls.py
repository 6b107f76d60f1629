"""A step marked by a call the program makes once per iteration that neither waits nor launches.

An engine without NVTX ranges, graphs or a per-step sync still often makes one bookkeeping call
per iteration: a stream-ordered allocation and its free (``cudaMallocAsync``/``cudaFreeAsync``),
an event record, an input copy. When such a call recurs with the same amount of GPU work between
two occurrences, it marks the loop's steps (see :mod:`.step_detectors` for the stronger marks
tried first, and :mod:`.steps` for the model).
"""

from __future__ import annotations

import numpy as np

from nsys_rules.analysis.names import ALLOC_APIS, in_set
from nsys_rules.model.activity import KERNEL, GpuOps
from nsys_rules.model.step_runs import Bound, Found, per_step
from nsys_rules.model.trace import Trace

#: Calls a loop makes once per iteration without waiting for the GPU: allocations and frees (stream
#: ordered or not), event records, asynchronous copies and memsets of its inputs.
PER_STEP_CALLS = frozenset(ALLOC_APIS) | frozenset({
    "cudaEventRecord", "cudaEventRecordWithFlags", "cuEventRecord", "cuEventRecordWithFlags",
    "cudaMemcpyAsync", "cudaMemcpy2DAsync", "cudaMemcpyToSymbolAsync", "cuMemcpyHtoDAsync", "cuMemcpyAsync",
    "cudaMemsetAsync", "cuMemsetD8Async", "cuMemsetD32Async",
})

#: A call marks steps only when the steps it cuts hold at least this share of the loop's launches:
#: a bookkeeping call is weaker evidence than a sync, so it must explain most of the work.
MIN_COVERAGE = 0.6


def call_steps(trace: Trace, ops: GpuOps, bound: Bound) -> Found | str:
    """Steps cut at a recurring non-blocking call (:data:`PER_STEP_CALLS`) of one thread.

    A call qualifies as the markers do (:func:`~nsys_rules.model.step_runs.per_step`: about the
    same number of kernel launches between occurrences, a cluster of a few calls per step allowed)
    and when its steps hold :data:`MIN_COVERAGE` of the kernel launches; the call covering the most
    launches wins, then the one with fewer occurrences per step.
    """
    if not trace.has("api"):
        return "no API calls traced"
    api = trace.frame("api", ["start", "end", "pid", "tid", "name"])
    names = trace.api_names()
    starts = api["start"].to_numpy(np.int64)
    mask = in_set(names, PER_STEP_CALLS) & (starts >= bound.lo) & (api["end"].to_numpy(np.int64) <= bound.hi)
    if not mask.any():
        return "no per-step call (allocation, event record, input copy) repeats"
    launches = np.sort(ops.launch[(ops.launch >= bound.lo) & (ops.launch <= bound.hi) & (ops.kind == KERNEL)])
    if not len(launches):
        return "no kernel launches between the calls"
    calls = api.loc[mask, ["start", "pid", "tid"]].assign(api=names[mask].astype(str).to_numpy())
    best: tuple[tuple[int, int], Found] | None = None
    for (pid, _tid, api_name), grp in calls.groupby(["pid", "tid", "api"], sort=False):
        times = np.sort(grp["start"].to_numpy(np.int64))
        if len(times) < bound.min_repeats + 1:
            continue
        grouped = per_step(times, launches, bound.min_repeats, chain=False)
        if grouped is None:
            continue
        boundaries, calls_per_step, coverage = grouped
        if coverage < MIN_COVERAGE * len(launches):
            continue
        label = str(api_name) if calls_per_step == 1 else f"group of {calls_per_step} ({api_name})"
        score = (coverage, -calls_per_step)
        if best is None or score > best[0]:
            host = np.stack([boundaries[:-1], boundaries[1:]], axis=1)
            best = (score, Found("call", label, host, int(pid)))
    if best is None:
        return "no per-step call (allocation, event record, input copy) recurs once per step"
    return best[1]
