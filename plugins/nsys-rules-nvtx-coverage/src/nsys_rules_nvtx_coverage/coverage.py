"""nvtx-coverage: the share of GPU time launched while no NVTX range was open.

The numbers are module-level pure functions over DataFrames (testable without the engine);
the :class:`NvtxCoverage` rule only turns them into a finding.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np
import pandas as pd

from nsys_rules.api import (Finding, Location, metric, MissingData, nvtx_range_advice, Renamed, Rule, RuleContext,
                            Severity)
from nsys_rules.api.analysis import key_int, merge_intervals, point_in

#: NVTX_EVENTS.eventType of a push/pop range: bound to the thread that pushed it.
PUSH_POP = 59
#: NVTX_EVENTS.eventType of a start/end range: not bound to a thread (it may end on another one).
START_END = 60
#: Thread id used for ranges that cover every thread of their process.
ANY_THREAD = -1
_OPEN = np.iinfo(np.int64).max
#: Launches judged per chunk: the per-row temporaries of a chunk take a few MB, not a few per row of the frame.
CHUNK_ROWS = 1 << 18

GPU_FRAMES = ("kernels", "memcpy", "memset")
_GPU_COLUMNS = ("start", "end", "pid", "correlation_id")


@dataclass(frozen=True)
class Options:
    """Options of nvtx-coverage."""

    min_uncovered_pct: float = field(default=20.0, metadata={
        "help": "report when at least this percent of GPU time was launched outside every NVTX range"})
    min_gpu_time_ns: int = field(default=1_000_000, metadata={
        "help": "ignore traces with less GPU time than this (ns) in the window: too little to annotate"})
    top_kernels: int = field(default=3, metadata={"help": "how many unannotated kernels to name in the message"})
    window: str = field(default="full", metadata={
        "help": "`full` (default: coverage of the whole capture, warm-up included) or `steady`"})


def nvtx_ranges(nvtx: pd.DataFrame) -> pd.DataFrame:
    """The NVTX ranges as ``pid, tid, start, end`` (marks dropped).

    Push/pop ranges keep their thread; start/end ranges get ``tid = ANY_THREAD`` because
    they are process-wide (nsys lets them end on another thread). A range still open when
    the capture stopped (``raw_end`` NULL, stored as a negative value) runs to the end.
    """
    kind = nvtx["event_type"].to_numpy()
    keep = np.isin(kind, (PUSH_POP, START_END))
    sub = nvtx.loc[keep]
    end = sub["end"].to_numpy(dtype=np.int64, na_value=-1)
    if "raw_end" in sub:
        raw_end = sub["raw_end"].to_numpy(dtype=np.int64, na_value=-1)
        end = np.where(raw_end < 0, _OPEN, end)
    tid = np.where(kind[keep] == START_END, ANY_THREAD, sub["tid"].to_numpy(dtype=np.int64, na_value=ANY_THREAD))
    return pd.DataFrame({"pid": sub["pid"].to_numpy(dtype=np.int64, na_value=-1), "tid": tid,
                         "start": sub["start"].to_numpy(dtype=np.int64), "end": end})


def launching_threads(calls: pd.DataFrame, gpu: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """For each GPU row: the thread and start time of the API call that launched it.

    ``calls`` is ``ctx.launch_calls(table, columns=("api_start", "api_tid"))`` of the GPU frame
    ``gpu`` (the engine's shared launch join, nothing joined again here). Rows with no launching
    call in the trace (correlationId 0: unified-memory migrations; or API rows not captured) get
    thread ``ANY_THREAD`` and their own GPU start.
    """
    times = calls["api_start"].to_numpy(dtype=np.int64)
    lost = times < 0
    if lost.any():
        times = np.where(lost, gpu["start"].to_numpy(dtype=np.int64), times)
    # launch_calls writes -1 (ANY_THREAD) as the thread of a row without a call, and of a call whose thread is
    # NULL: both cover like an unknown thread, with no patch here.
    return calls["api_tid"].to_numpy(), times


def covered(pids: np.ndarray, tids: np.ndarray, times: np.ndarray, ranges: pd.DataFrame) -> np.ndarray:
    """Whether each launch (pid, tid, time) happened inside an NVTX range.

    A launch is covered by a push/pop range of its own thread or by a start/end range of its
    process. A launch whose thread is unknown (``ANY_THREAD``) is covered by a range of any
    thread of its process. Work is per thread (few), vectorized over launches and ranges.
    """
    return _covered(pids, tids, times, _spans(ranges))


def _spans(ranges: pd.DataFrame) -> list[tuple[int, int, np.ndarray, np.ndarray]]:
    """Per (pid, tid) of the ranges: the union of their spans (nested and overlapping ranges of a thread
    cover the union), merged once for every chunk of launches."""
    return [(key_int(pid), key_int(tid), *merge_intervals(group["start"].to_numpy(), group["end"].to_numpy()))
            for (pid, tid), group in ranges.groupby(["pid", "tid"], sort=False)] if len(ranges) else []


def _covered(pids: np.ndarray, tids: np.ndarray, times: np.ndarray,
             spans: list[tuple[int, int, np.ndarray, np.ndarray]]) -> np.ndarray:
    out = np.zeros(len(times), bool)
    if not len(times):
        return out
    for pid, tid, starts, ends in spans:
        rows = pids == pid
        if tid != ANY_THREAD:
            rows &= (tids == tid) | (tids == ANY_THREAD)
        if rows.all():  # one process and thread launched everything (the usual trace): no selected copies
            out |= point_in(times, starts, ends) >= 0
        elif rows.any():
            out[rows] |= point_in(times[rows], starts, ends) >= 0
    return out


@dataclass(frozen=True)
class Coverage:
    """The numbers of one trace (times in ns)."""

    gpu_time: int
    uncovered_time: int
    gpu_ops: int
    uncovered_ops: int
    unlinked_ops: int
    ranges: int
    top_uncovered: tuple[tuple[str, int], ...]
    first_uncovered: int | None
    last_uncovered: int | None

    @property
    def uncovered_share(self) -> float:
        """Unannotated GPU time over all GPU time (0 when there is none)."""
        return self.uncovered_time / self.gpu_time if self.gpu_time else 0.0


def coverage(frames: Sequence[tuple[pd.DataFrame, pd.DataFrame]], ranges: pd.DataFrame, top: int = 3) -> Coverage:
    """NVTX coverage of GPU rows: ``frames`` holds each GPU frame (``start, end, pid``; kernels also ``name``)
    with its launching calls (see :func:`launching_threads`).

    One frame at a time and no concatenation: on a million-kernel trace the rule stays within a
    few arrays of the kernel count. Kernel names stay categorical (time per name by code).
    """
    gpu_time = uncovered_time = ops = uncovered_ops = unlinked = 0
    first: list[int] = []
    last: list[int] = []
    per_name: dict[str, int] = {}
    spans = _spans(ranges)
    for gpu, calls in frames:
        tids, times = launching_threads(calls, gpu)
        pids = gpu["pid"].to_numpy()
        if isinstance(gpu["pid"].dtype, pd.api.extensions.ExtensionDtype) or pids.dtype.kind not in "iu":
            pids = gpu["pid"].to_numpy(dtype=np.int64, na_value=-1)
        starts, ends = gpu["start"].to_numpy(dtype=np.int64), gpu["end"].to_numpy(dtype=np.int64)
        names = gpu["name"] if "name" in gpu and isinstance(gpu["name"].dtype, pd.CategoricalDtype) else None
        codes = names.cat.codes.to_numpy() if names is not None else None
        sums = np.zeros(len(names.cat.categories) if names is not None else 0)
        ops += len(gpu)
        unlinked += int(np.count_nonzero(tids == ANY_THREAD))
        # A chunk of rows at a time: the per-row temporaries stay a few MB on a million-kernel frame.
        for at in range(0, len(gpu), CHUNK_ROWS):
            rows = slice(at, at + CHUNK_ROWS)
            outside = ~_covered(pids[rows], tids[rows], times[rows], spans)
            duration = ends[rows] - starts[rows]
            np.maximum(duration, 0, out=duration)  # in place: one chunk-length array, not two
            gpu_time += int(duration.sum())
            if not outside.any():
                continue
            uncovered_time += int(duration[outside].sum())
            uncovered_ops += int(np.count_nonzero(outside))
            when = times[rows][outside]
            first.append(int(when.min()))
            last.append(int(when.max()))
            if codes is not None:
                pick = outside & (codes[rows] >= 0)
                sums += np.bincount(codes[rows][pick], weights=duration[pick], minlength=len(sums))
        if names is not None and sums.any():  # the names as one array: a lookup per name cost 25 us x 100k names
            categories = np.asarray(names.cat.categories, dtype=object)
            for code in np.flatnonzero(sums):
                name = str(categories[code])
                per_name[name] = per_name.get(name, 0) + int(sums[code])
    ranked = sorted(per_name.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    return Coverage(gpu_time=gpu_time, uncovered_time=uncovered_time, gpu_ops=ops, uncovered_ops=uncovered_ops,
                    unlinked_ops=unlinked, ranges=len(ranges), top_uncovered=tuple(ranked),
                    first_uncovered=min(first) if first else None, last_uncovered=max(last) if last else None)


class NvtxCoverage(Rule):
    """GPU work launched while no NVTX range was open.

    What it detects: the share of GPU time (kernels, memcpy, memset) whose launching CUDA
    call ran outside every NVTX range: no push/pop range open on the launching thread and no
    start/end range open in the process. A capture that traced NVTX but recorded no range at
    all counts as 0 % covered.
    Why it hurts: NVTX ranges are how a trace maps GPU time back to the program's phases
    (step, layer, request). Unannotated GPU time cannot be filtered with `--filter-nvtx`,
    does not show in `nvtx_sum`/`nvtx_gpu_proj_sum`, and cannot be split per step by the
    other rules, so its cost stays anonymous.
    Evidence: GPU time and the unannotated part, its share, op counts, the kernels with the
    most unannotated time, and the launch-time span in which they ran.
    Next optimizations: wrap the code that launches the named kernels in a range, in the
    program's framework (`nsys_rules.api.nvtx_range_advice`: PyTorch `torch.cuda.nvtx.range("name")`,
    JAX, TensorFlow and other Python `nvtx.annotate("name")` from the `nvtx` package, C/C++
    `nvtxRangePushA`/`nvtxRangePop`), at least one range per step or request, and capture with
    `nsys profile --trace=cuda,nvtx`.
    Options: `min_uncovered_pct`, `min_gpu_time_ns`, `top_kernels`, `window`.
    Requires: CUDA kernels and the CUDA API table (to find the launching thread); NVTX
    events, or capture metadata that shows NVTX was traced.
    False positives: work launched by a library thread the program cannot annotate (for
    example NCCL's proxy threads or a framework's own worker pool) counts as uncovered; GPU
    rows with no launching call in the trace are judged against ranges of any thread of the
    process.
    """

    name = "nvtx-coverage"
    title = "GPU time launched outside NVTX ranges"
    default_severity = Severity.INFO
    requires = ("kernels", "api")
    optional = ("nvtx", "memcpy", "memset")
    columns = {"kernels": (*_GPU_COLUMNS, "name"), "memcpy": _GPU_COLUMNS, "memset": _GPU_COLUMNS,
               "api": ("start", "correlation_id", "pid", "tid"),
               "nvtx": ("start", "end", "raw_end", "event_type", "pid", "tid")}
    window = "full"
    Options = Options
    #: The option was a fraction before it became a percent; the old name works for one release.
    renamed_options = {"min_uncovered_share": Renamed("min_uncovered_pct", 100)}

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        trace = ctx.trace
        if trace.has("nvtx"):
            ranges = nvtx_ranges(trace.frame("nvtx", self.columns["nvtx"]))
        elif "NvtxEvents" in trace.capture.traced:
            # NVTX was traced and nsys wrote no NVTX_EVENTS table: the program emitted none.
            ranges = pd.DataFrame({"pid": [], "tid": [], "start": [], "end": []}, dtype=np.int64)
        else:
            raise MissingData("the trace has no NVTX_EVENTS table and its metadata does not say NVTX was traced",
                              "annotate the program with NVTX ranges and capture with `nsys profile --trace=cuda,nvtx`")
        # The launching calls come from the engine's shared launch join (the same rows as ctx.frame's).
        frames = [(ctx.frame(name, self.columns[name]), ctx.launch_calls(name, columns=("api_start", "api_tid")))
                  for name in GPU_FRAMES if trace.has(name)]
        opts = ctx.options
        result = coverage(frames, ranges, opts.top_kernels)
        if result.gpu_time < opts.min_gpu_time_ns or result.uncovered_share < opts.min_uncovered_pct / 100:
            return
        share = result.uncovered_share
        metrics = {"gpu_time": metric(result.gpu_time, "ns"), "uncovered_gpu_time": metric(result.uncovered_time, "ns"),
                   "uncovered_share": metric(share, "ratio"), "gpu_ops": metric(result.gpu_ops, "count"),
                   "uncovered_ops": metric(result.uncovered_ops, "count"),
                   "unlinked_ops": metric(result.unlinked_ops, "count"), "nvtx_ranges": metric(result.ranges, "count")}
        named = ", ".join(f"`{_short(n)}` {t / 1e6:.2f} ms" for n, t in result.top_uncovered) or "memory copies/sets"
        what = "no NVTX range was recorded" if result.ranges == 0 else f"{result.ranges} NVTX ranges leave it out"
        top_kernel = result.top_uncovered[0][0] if result.top_uncovered else None
        yield ctx.finding(
            f"{share * 100:.1f} % of GPU time ({result.uncovered_time / 1e6:.2f} of {result.gpu_time / 1e6:.2f} ms, "
            f"{result.uncovered_ops} of {result.gpu_ops} GPU ops) was launched outside every NVTX range ({what}); "
            f"most unannotated: {named}.",
            f"Wrap the code that launches {('`' + _short(top_kernel) + '`') if top_kernel else 'this work'} in an NVTX "
            f"range ({nvtx_range_advice(ctx.framework)}), one range per step or request at least, and capture "
            "with `nsys profile --trace=cuda,nvtx`.",
            # No kernel in the location: the fingerprint stays one per trace even when the top kernel changes.
            metrics=metrics, location=Location(start_ns=result.first_uncovered, end_ns=result.last_uncovered),
            # Annotation makes traces easier to read but the program no faster: nothing to gain, so the
            # finding sits under the noise floor ("minor") unless the user raises it.
            estimated_savings_ns=0)


def _short(name: str, limit: int = 80) -> str:
    # Shown between backticks: a backtick in a kernel name would close the span early and turn the
    # rest of the name into what reads as a command to copy.
    name = name.replace("`", "'")
    return name if len(name) <= limit else name[: limit - 3] + "..."
