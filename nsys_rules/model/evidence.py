"""Evidence that explains a budget beyond its parts: host overhead, fusion share, prefill vs decode.

- ``host``: per steady step, the launching thread's time outside any CUDA call (Python, the
  framework, the scheduler) next to its time inside CUDA calls: where eager frameworks spend
  most of a decode step;
- ``fusion``: the share of elementwise and reduction kernels, whatever part is largest, the
  memory round trips a compiler (torch.compile, XLA, a fused kernel) would remove;
- ``phases``: where the steps hold prefill and decode NVTX ranges, time to first token (the
  prefill on the GPU) against time per output token (a decode range over its tokens).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from nsys_rules.model.trace import Trace
from nsys_rules.model.activity import KERNEL, gpu_ops, kernel_symbols
from nsys_rules.model.budget_host import HostTimeline
from nsys_rules.analysis.intervals import point_in, union_coverage
from nsys_rules.analysis.names import flag_names
from nsys_rules.model.step_runs import periodic_run
from nsys_rules.model.steps import StepModel

#: NVTX range names of the two phases of a request.
PREFILL = re.compile(r"prefill|prompt|context_phase|encode", re.IGNORECASE)
DECODE = re.compile(r"decode|generat|token", re.IGNORECASE)

#: Share of busy time in elementwise and reduction kernels from which GEMM-heavy steps are a fusion candidate.
FUSION_SHARE = 0.15


def evidence(trace: Trace, model: StepModel, parts: dict[str, int], busy_ns: int,
             timelines: dict[tuple[int, int], HostTimeline] | None = None) -> dict[str, Any]:
    """The budget's evidence for ``model``'s steady steps (``parts``: part name -> ns; ``timelines``: the
    budget's host timelines, see :func:`host_overhead`)."""
    out: dict[str, Any] = {}
    host = host_overhead(trace, model, timelines)
    if host:
        out["host"] = host
    fusion = fusion_share(parts, busy_ns)
    if fusion:
        out["fusion"] = fusion
    phases = request_phases(trace, model)
    if phases:
        out["phases"] = phases
    return out


def host_overhead(trace: Trace, model: StepModel,
                  timelines: dict[tuple[int, int], HostTimeline] | None = None) -> dict[str, Any] | None:
    """The launching thread's time per host step inside and outside CUDA calls (medians over the steps).

    ``timelines``: the budget's host timelines; the thread's calls are taken from there when it has them
    (the same union, built once).
    """
    if not trace.has("api") or not model.count:
        return None
    ops = gpu_ops(trace)
    mine = (ops.api_row >= 0) & (ops.pid == model.pid) if model.pid is not None else ops.api_row >= 0
    if not mine.any():
        return None
    api = trace.frame("api", ["start", "end", "pid", "tid"])
    tid_column = api["tid"].to_numpy()
    if tid_column.strides == (0,):  # one thread made every call (loaders.columns.one_value)
        tid = tid_column[0]
    else:
        values, counts = np.unique(tid_column[ops.api_row[mine]], return_counts=True)
        tid = values[np.argmax(counts)]  # the thread that launched most of the work
    start, end = api["start"].to_numpy(), api["end"].to_numpy()
    known = timelines.get((int(model.pid), int(tid))) if timelines and model.pid is not None else None
    # The budget's union takes calls that never nest as they are; with a damaged call (end before
    # start) only a merged union is the same as before, so that case builds its own.
    if known is not None and bool((end >= start).all()):
        calls = known.any_call
    else:
        rows = (tid_column == tid) & (api["pid"].to_numpy() == model.pid if model.pid is not None else True)
        calls = union_coverage(start, end) if rows.all() else union_coverage(start[rows], end[rows])
        del rows
    a, b = model.host[:, 0], model.host[:, 1]
    inside = calls.within(a, b)
    length = np.maximum(b - a, 1)
    outside = length - inside
    return {"thread": int(tid), "outside_cuda_ns_p50": int(np.median(outside)),
            "inside_cuda_ns_p50": int(np.median(inside)),
            "outside_share_p50": round(float(np.median(outside / length)), 4)}


def fusion_share(parts: dict[str, int], busy_ns: int) -> dict[str, Any] | None:
    """Elementwise and reduction time in the steps, when it is a fusion candidate (whatever part is largest)."""
    kernel_parts = {k: v for k, v in parts.items() if k in ("gemv", "gemm", "attention", "norm", "elementwise",
                                                            "reduce", "memory", "communication", "other")}
    if not busy_ns or not kernel_parts:
        return None
    small = parts.get("elementwise", 0) + parts.get("reduce", 0)
    share = small / busy_ns
    if share < FUSION_SHARE:
        return None
    return {"elementwise_reduce_ns": int(small), "share_of_busy": round(share, 4)}


def request_phases(trace: Trace, model: StepModel) -> dict[str, Any] | None:
    """Prefill time (time to first token) and time per output token, from phase ranges inside the steps."""
    if not trace.has("nvtx") or model.host_span is None:  # no steps
        return None
    nvtx = trace.frame("nvtx", ["start", "end", "name", "pid"])
    lo, hi = model.host_span
    inside = (nvtx["start"].to_numpy() >= lo) & (nvtx["end"].to_numpy() <= hi) & nvtx["name"].notna().to_numpy()
    if not inside.any():
        return None
    ranges = nvtx.loc[inside, ["start", "end", "name"]]
    # Judged once per distinct name, not a regex per range (tens of thousands of ranges, a few names).
    is_prefill = flag_names(ranges["name"], lambda name: PREFILL.search(name) is not None)
    is_decode = flag_names(ranges["name"], lambda name: DECODE.search(name) is not None)
    prefill = ranges[is_prefill]
    decode = ranges[is_decode & ~is_prefill]
    if prefill.empty or decode.empty:
        return None
    ops = gpu_ops(trace)
    kernels = (ops.kind == KERNEL) & (ops.launch >= 0)
    first = _gpu_spans(ops, kernels, prefill)
    decode_spans = _gpu_spans(ops, kernels, decode)
    tokens = _tokens(trace, ops, kernels, decode)
    per_token = [d / t for d, t in zip(decode_spans, tokens, strict=True) if t > 0 and d > 0]
    if not first or not per_token:
        return None
    return {"prefill_ranges": len(prefill), "decode_ranges": len(decode),
            "time_to_first_token_ns_p50": int(np.median(first)),
            "time_per_output_token_ns_p50": int(np.median(per_token)),
            "tokens_per_decode_range_p50": int(np.median([t for t in tokens if t > 0]))}


def _gpu_spans(ops: Any, mask: np.ndarray, ranges: Any) -> list[int]:
    """GPU time from the first to the last kernel launched inside each range."""
    s, e = ranges["start"].to_numpy(np.int64), ranges["end"].to_numpy(np.int64)
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    index = np.full(len(ops), -1, np.int64)
    index[mask] = point_in(ops.launch[mask], s, e)
    held = index >= 0
    if not held.any():
        return []
    first = np.full(len(s), np.iinfo(np.int64).max)
    last = np.full(len(s), -1, np.int64)
    np.minimum.at(first, index[held], ops.start[held])
    np.maximum.at(last, index[held], ops.end[held])
    return [int(b - a) for a, b in zip(first, last, strict=True) if b >= 0]


def _tokens(trace: Trace, ops: Any, mask: np.ndarray, ranges: Any) -> list[int]:
    """Decode iterations inside each range: the repetitions of its kernel sequence."""
    symbols = kernel_symbols(trace)
    out = []
    for a, b in zip(ranges["start"].to_numpy(), ranges["end"].to_numpy(), strict=True):
        inside = mask & (ops.launch >= a) & (ops.launch <= b)
        seq = symbols[inside][np.argsort(ops.launch[inside], kind="stable")]
        run = periodic_run(seq, 2)
        out.append(len(seq) // run[0] if run is not None and run[0] > 0 else 0)
    return out
