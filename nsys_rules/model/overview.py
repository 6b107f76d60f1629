"""The profile of a trace's steady state: the numbers the markdown/HTML reports and ``diff`` show.

Formatters never compute metrics, so everything a report draws comes from here:

- GPU time by kernel class (``gemv``, ``gemm``, ``attention``, ``norm``, ``elementwise``, ...,
  plus ``memcpy``/``memset`` for copy-engine work) and by kernel, in total and per step;
- per step: its wall time on the GPU clock, the GPU busy time (union of the GPU work launched in the step,
  so overlapping streams are not counted twice) and the idle rest;
- for the kernels findings point at, the duration distribution (quantiles and a
  log-spaced histogram) so a reader sees the tail.

GPU work belongs to a step by the time of the API call that launched it (the design's
rule), so a kernel that runs after its step's NVTX range closed still counts for that step.
The work is vectorized and runs once per trace; the engine only calls it when an output
format needs it (``Report.profile``), so plain ``check`` runs pay nothing.
"""

from __future__ import annotations

import re
from typing import Any, Iterable

import numpy as np
import pandas as pd

from nsys_rules.analysis.intervals import busy_by_group, busy_ns, point_in
from nsys_rules.model.launches import launch_times
from nsys_rules.model.trace import Trace
from nsys_rules.model.windows import Window

#: How many kernels the per-kernel table keeps (by total time); ``diff`` uses its own, larger cut.
TOP_KERNELS = 25
#: Histogram bins for the duration distribution of a flagged kernel.
HISTOGRAM_BINS = 24
#: Per-step rows kept for the timeline (evenly thinned beyond this).
MAX_STEPS = 400
#: GPU operations kept for the close-up of the typical step.
MAX_OPS = 4000

_FALLBACK = (
    ("attention", r"flash|fmha|attention|attn|sdpa"),
    ("gemv", r"gemv|matvec"),
    ("gemm", r"gemm|nvjet|cutlass|matmul|wgmma|xmma"),
    ("norm", r"norm"),
    ("reduce", r"reduce|softmax|argmax|topk"),
    ("memory", r"copy|fill|transpose|gather|scatter|cat"),
    ("elementwise", r"elementwise|silu|gelu|relu|rotary|mul|add"),
)


def classify_kernels(names: pd.Series) -> pd.Series:
    """Kernel class per name: :func:`nsys_rules.analysis.taxonomy.classify` when present, else a small regex fallback."""
    try:
        from nsys_rules.analysis.taxonomy import classify
    except ImportError:  # the taxonomy module is optional for plugins that vendor an older core
        return _fallback_classify(names)
    return classify(names).astype(str)


def _fallback_classify(names: pd.Series) -> pd.Series:
    def one(name: object) -> str:
        text = str(name)
        for label, pattern in _FALLBACK:
            if re.search(pattern, text, re.IGNORECASE):
                return label
        return "other"

    uniq = {u: one(u) for u in pd.unique(names.astype(object))}
    return names.astype(object).map(uniq).astype(str)


def gpu_activity(trace: Trace, window: Window) -> pd.DataFrame:
    """Kernels, memcpy and memset launched inside ``window``: start, end, launch, name, class.

    Copies and memsets carry the class ``memcpy``/``memset`` and a name saying their kind, so
    the per-class table shows copy-engine time next to kernel time. Names and classes stay
    categorical (a 1M-kernel trace has a few hundred distinct names).
    """
    parts: list[pd.DataFrame] = []

    def add(frame: pd.DataFrame, names: pd.Categorical[Any], classes: pd.Categorical[Any]) -> None:
        # Plain object categories everywhere, so the parts' categoricals can be unioned.
        names, classes = (pd.Categorical.from_codes(c.codes, pd.Index(c.categories.astype(str), dtype=object))
                          for c in (names, classes))
        launch = launch_times(trace, frame)
        keep = window.mask(launch) & (frame["end"].to_numpy() >= frame["start"].to_numpy())
        parts.append(pd.DataFrame({"start": frame["start"].to_numpy(np.int64)[keep],
                                   "end": frame["end"].to_numpy(np.int64)[keep], "launch": launch[keep],
                                   "name": names[keep], "cls": classes[keep]}))

    if trace.has("kernels"):
        k = trace.frame("kernels", ["start", "end", "name", "correlation_id", "pid"])
        if len(k):
            kernel_names = k["name"].astype("category")
            if kernel_names.isna().any():
                kernel_names = kernel_names.cat.add_categories(["<unnamed kernel>"]).fillna("<unnamed kernel>")
            add(k, pd.Categorical(kernel_names), pd.Categorical(classify_kernels(k["name"])))
    if trace.has("graph_trace") and (not parts or trace.capture.graph_trace_mode == "Graph"):
        # Graph-level capture: no kernel rows, only whole graph replays. Count those as one
        # opaque class so GPU time is not reported as zero (graph-trace-hidden says why).
        g = trace.frame("graph_trace", ["start", "end", "correlation_id", "pid"])
        if len(g):
            add(g, pd.Categorical(["[CUDA graph replay]"] * len(g)), pd.Categorical(["cuda-graph"] * len(g)))
    for table in ("memcpy", "memset"):
        if not trace.has(table):
            continue
        f = trace.frame(table, ["start", "end", "correlation_id", "pid"] + (["copy_kind"] if table == "memcpy" else []))
        if not len(f):
            continue
        names: pd.Categorical[Any]
        if table == "memcpy" and "copy_kind" in f:
            kinds = f["copy_kind"].map(_COPY_KINDS).fillna("copy").astype(object)
            names = pd.Categorical("[memcpy " + kinds + "]")
        else:
            names = pd.Categorical([f"[{table}]"] * len(f))
        add(f, names, pd.Categorical([table] * len(f)))
    if not parts:
        return pd.DataFrame({"start": np.array([], np.int64), "end": np.array([], np.int64),
                             "launch": np.array([], np.int64), "name": pd.Categorical([]), "cls": pd.Categorical([])})
    if len(parts) == 1:
        return parts[0]
    from pandas.api.types import union_categoricals

    return pd.DataFrame({
        "start": np.concatenate([p["start"].to_numpy() for p in parts]),
        "end": np.concatenate([p["end"].to_numpy() for p in parts]),
        "launch": np.concatenate([p["launch"].to_numpy() for p in parts]),
        "name": union_categoricals([p["name"] for p in parts]),
        "cls": union_categoricals([p["cls"] for p in parts]),
    })


# CUPTI memcpy kinds (copyKind): the ones that matter for reading a report.
_COPY_KINDS = {1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA", 8: "DtoD", 9: "HtoH",
               10: "PtoP"}


def step_index(launch: np.ndarray, steps: tuple[tuple[int, int], ...]) -> np.ndarray:
    """Index of the step each launch time falls in, -1 outside every step."""
    if not steps:
        return np.full(len(launch), -1, np.int64)
    return point_in(launch, np.array([a for a, _ in steps], np.int64), np.array([b for _, b in steps], np.int64))


def build_profile(trace: Trace, window: Window, flagged: Iterable[str] = (), top: int = TOP_KERNELS) -> dict[str, Any]:
    """The ``profile`` of one trace (see the module docstring); JSON-ready, deterministic."""
    gpu = gpu_activity(trace, window)
    steps = tuple(window.steps)
    if steps and len(gpu):
        # Per-step numbers count the work launched inside the steps only (not the odd
        # launch between two steps or after the last), so classes add up to the step total.
        idx = step_index(gpu["launch"].to_numpy(np.int64), steps)
        gpu = gpu[idx >= 0].assign(step=idx[idx >= 0]).reset_index(drop=True)
    dur = (gpu["end"] - gpu["start"]).to_numpy(np.int64)
    gpu_total = int(dur.sum())
    n_steps = len(steps)
    per = n_steps or 1

    by_class = (pd.DataFrame({"cls": gpu["cls"], "dur": dur}).groupby("cls", sort=False, observed=True)["dur"]
                .agg(["sum", "count"])
                if len(gpu) else pd.DataFrame({"sum": [], "count": []}))
    classes: list[dict[str, Any]] = [
        {"class": str(c), "total_ns": int(r["sum"]), "count": int(r["count"]), "per_step_ns": float(r["sum"]) / per,
         "share": float(r["sum"]) / gpu_total if gpu_total else 0.0}
        for c, r in by_class.iterrows()]
    classes.sort(key=lambda row: (-row["total_ns"], row["class"]))

    kernels = _kernel_table(gpu, dur, per, gpu_total, top)

    profile: dict[str, Any] = {
        "window": window.source,
        "step_range": window.step_name,
        "steps": n_steps,
        "gpu_time_ns": gpu_total,
        "gpu_time_per_step_ns": gpu_total / per,
        "classes": classes,
        "kernels": kernels,
        "timeline": _timeline(gpu, steps),
        "distributions": _distributions(gpu, dur, flagged),
    }
    span = _span(gpu, window)
    busy_total = busy_ns(gpu["start"].to_numpy(np.int64), gpu["end"].to_numpy(np.int64))
    profile["span_ns"] = span
    profile["busy_ns"] = busy_total
    if n_steps:
        profile["step_time_ns"] = profile["timeline"]["wall_total_ns"] / n_steps
        profile["busy_per_step_ns"] = profile["timeline"]["busy_total_ns"] / n_steps
    else:
        profile["step_time_ns"] = float(span)
        profile["busy_per_step_ns"] = float(busy_total)
    profile["idle_per_step_ns"] = max(0.0, profile["step_time_ns"] - profile["busy_per_step_ns"])
    profile["busy_share"] = profile["busy_per_step_ns"] / profile["step_time_ns"] if profile["step_time_ns"] else 0.0
    return profile


def _kernel_table(gpu: pd.DataFrame, dur: np.ndarray, per: int, gpu_total: int, top: int) -> list[dict[str, Any]]:
    if not len(gpu):
        return []
    frame = pd.DataFrame({"name": gpu["name"], "cls": gpu["cls"], "dur": dur})
    grouped = frame.groupby("name", sort=False, observed=True)
    stats = grouped["dur"].agg(["sum", "count", "median", "max"])
    stats["cls"] = grouped["cls"].first()
    stats = stats.reset_index().sort_values(["sum", "name"], ascending=[False, True], kind="stable")
    if top:
        stats = stats.head(top)
    return [{"name": str(r["name"]), "class": str(r["cls"]), "total_ns": int(r["sum"]), "count": int(r["count"]),
             "per_step_ns": float(r["sum"]) / per, "median_ns": float(r["median"]), "max_ns": int(r["max"]),
             "share": float(r["sum"]) / gpu_total if gpu_total else 0.0}
            for _, r in stats.iterrows()]


def _timeline(gpu: pd.DataFrame, steps: tuple[tuple[int, int], ...]) -> dict[str, Any]:
    """Per step: start (relative to the first step), wall, busy and idle ns, as the GPU saw them.

    A step's wall time is its period on the GPU: from its first GPU operation to the next
    step's first one (the last step ends at its last operation). The host's NVTX range is the
    wrong clock when the host runs ahead (CUDA graphs, async launches: a 0.4 ms host step can
    feed 1.3 ms of GPU work); a step without GPU work keeps its host duration.
    """
    n = len(steps)
    if not n:
        return {"rows": [], "complete": True, "busy_total_ns": 0, "wall_total_ns": 0, "typical": None}
    idx = gpu["step"].to_numpy(np.int64) if len(gpu) else np.array([], np.int64)
    starts, ends = gpu["start"].to_numpy(np.int64), gpu["end"].to_numpy(np.int64)
    busy = busy_by_group(starts, ends, idx).reindex(range(n), fill_value=0).to_numpy(np.int64) if len(gpu) \
        else np.zeros(n, np.int64)
    kernel = np.bincount(idx, weights=(ends - starts), minlength=n).astype(np.int64) if len(gpu) else np.zeros(n, np.int64)
    host_start = np.array([s for s, _ in steps], np.int64)
    host_wall = np.array([e - s for s, e in steps], np.int64)
    first = np.full(n, -1, np.int64)
    last = np.full(n, -1, np.int64)
    if len(gpu):
        grouped = pd.DataFrame({"i": idx, "s": starts, "e": ends}).groupby("i")
        first[grouped["s"].min().index.to_numpy()] = grouped["s"].min().to_numpy()
        last[grouped["e"].max().index.to_numpy()] = grouped["e"].max().to_numpy()
    has = first >= 0
    wall = host_wall.copy()
    nxt = np.append(first[1:], -1)
    follow = has & (nxt >= 0)
    wall[follow] = nxt[follow] - first[follow]
    tail = has & ~follow
    wall[tail] = last[tail] - first[tail]
    wall = np.maximum(wall, busy)
    begin = np.where(has, first, host_start)
    origin = int(begin.min())
    keep: list[int] = list(range(n))
    complete = n <= MAX_STEPS
    if not complete:
        keep = sorted(set(np.linspace(0, n - 1, MAX_STEPS).round().astype(int).tolist()))
    # "index" addresses per-step arrays (0-based); "step" is the number shown, 1-based as in every text
    # format ("step 7" of step-outliers is the seventh bar).
    rows = [{"index": i, "step": i + 1, "start_ns": int(begin[i] - origin), "wall_ns": int(wall[i]), "host_ns": int(host_wall[i]),
             "busy_ns": int(busy[i]), "gpu_time_ns": int(kernel[i]), "idle_ns": int(wall[i] - busy[i])} for i in keep]
    typical = int(np.argsort(wall, kind="stable")[(n - 1) // 2])  # the median step by wall time
    return {"rows": rows, "complete": complete, "busy_total_ns": int(busy.sum()), "wall_total_ns": int(wall.sum()),
            "typical_step": typical + 1, "typical": _step_detail(gpu, typical, int(begin[typical]), int(wall[typical]))}


def _step_detail(gpu: pd.DataFrame, step: int, begin: int, wall: int) -> dict[str, Any]:
    """The GPU operations of step index ``step`` (numbered ``step + 1`` in the result) as (offset from the
    step's start, duration, class), capped at MAX_OPS."""
    if not len(gpu):
        return {"index": step, "step": step + 1, "wall_ns": wall, "ops": [], "truncated": False}
    mine = gpu[gpu["step"].to_numpy() == step].sort_values("start", kind="stable")
    ops = [[int(s - begin), int(e - s), str(c)] for s, e, c in
           zip(mine["start"].to_numpy()[:MAX_OPS].tolist(), mine["end"].to_numpy()[:MAX_OPS].tolist(),
               mine["cls"].astype(object).to_numpy()[:MAX_OPS].tolist(), strict=True)]
    return {"index": step, "step": step + 1, "wall_ns": wall, "ops": ops, "truncated": len(mine) > MAX_OPS}


def _distributions(gpu: pd.DataFrame, dur: np.ndarray, flagged: Iterable[str]) -> list[dict[str, Any]]:
    """Quantiles and a log-spaced histogram of each flagged kernel's durations (name match, demangled or short)."""
    out: list[dict[str, Any]] = []
    if not len(gpu):
        return out
    names = gpu["name"]
    cats = pd.Series(names.cat.categories.astype(str))
    for kernel in dict.fromkeys(k for k in flagged if k):
        mask = (names == kernel).to_numpy()
        if not mask.any():
            # A short name: every demangled name that contains it.
            mask = names.isin(cats[cats.str.contains(re.escape(kernel), regex=True)]).to_numpy()
        values = np.sort(dur[mask])
        if not len(values):
            continue
        q = np.quantile(values, [0.0, 0.5, 0.9, 0.99, 1.0])
        lo, hi = max(float(values[0]), 1.0), max(float(values[-1]), 1.0)
        edges = np.geomspace(lo, hi * 1.0001, HISTOGRAM_BINS + 1) if hi > lo else np.array([lo, lo + 1.0])
        counts, _ = np.histogram(values, bins=edges)
        out.append({"kernel": kernel, "count": int(len(values)),
                    "min_ns": float(q[0]), "p50_ns": float(q[1]), "p90_ns": float(q[2]), "p99_ns": float(q[3]),
                    "max_ns": float(q[4]), "edges_ns": [float(x) for x in edges], "counts": [int(c) for c in counts]})
    return out


def _span(gpu: pd.DataFrame, window: Window) -> int:
    if not len(gpu):
        return 0
    return int(gpu["end"].max() - gpu["start"].min())
