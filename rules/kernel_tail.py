"""kernel-tail: kernels (and host API calls) whose slow invocations cost real time."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np
import pandas as pd

from nsys_rules.findings import Finding, Location, Severity
from nsys_rules.analysis.budget import part_of_class, require_visible_kernels
from nsys_rules.rule import Rule, RuleContext, metric
from nsys_rules.taxonomy import DEFAULT as DEFAULT_TAXONOMY
from nsys_rules.taxonomy import base_name

from ._common import pct

KERNEL_KEYS = ("device_id", "name", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")

# Host calls whose duration is the GPU's, not the host's: they wait for queued work, so their
# spread is the GPU's schedule (sync-stall judges them), not a host-side tail.
_WAITING_APIS = re.compile(r"Synchronize|cudaMemcpy$|cudaMemcpy2D$|cudaMemcpy3D$|cuMemcpy(DtoH|HtoD|DtoD)?$|"
                           r"cudaMemcpyToSymbol$|cudaMemcpyFromSymbol$|cudaMemset$|cuMemsetD\d+$|cudaEventQuery|"
                           r"cudaStreamQuery|cudaProfilerStart|cudaProfilerStop|cuProfilerStart|cuProfilerStop|"
                           r"cudaStreamWaitEvent|cuStreamWaitEvent")
_LAUNCH_APIS = re.compile(r"Launch")


@dataclass(frozen=True)
class Options:
    """Options of kernel-tail."""

    outlier_ratio: float = field(default=2.0, metadata={"help": "max/p50 above this: outlier invocations"})
    tail_ratio: float = field(default=1.5, metadata={"help": "p99/p50 above this: a systematic tail"})
    min_share: float = field(default=0.01, metadata={
        "help": "a tail costing less than this fraction of steady-state GPU time is not reported"})
    warn_share: float = field(default=0.05, metadata={
        "help": "a tail costing at least this fraction of steady-state GPU time is a warning"})
    min_count: int = field(default=10, metadata={"help": "invocations a kernel group needs before its p99 means anything"})
    min_steps: int = field(default=3, metadata={"help": "step instances needed to test for shape variation by position"})
    shape_explained: float = field(default=0.25, metadata={
        "help": "when the tail measured against each step position's own median is at most this fraction of the "
                "plain tail, the spread is shape variation, not a tail"})
    max_period: int = field(default=64, metadata={
        "help": "without step ranges, longest launch period (in invocations of the group) tried for shape variation"})
    worst_instances: int = field(default=3, metadata={"help": "slowest invocations listed per finding"})
    max_findings: int = field(default=5, metadata={"help": "kernel groups reported per trace, costliest first"})
    api: bool = field(default=True, metadata={"help": "also judge host API calls (info only)"})
    api_min_share: float = field(default=0.05, metadata={
        "help": "an API tail is reported when it costs at least this fraction of the steady-state window"})


# -- numbers -------------------------------------------------------------------------------
def group_quantiles(group: np.ndarray, values: np.ndarray, qs: Iterable[float]) -> tuple[np.ndarray, np.ndarray]:
    """Per-group counts and quantiles (linear interpolation, as numpy) of ``values``; groups are 0..G-1.

    Vectorized: one sort by (group, value), then index arithmetic, no Python loop per group.
    """
    n_groups = int(group.max()) + 1 if len(group) else 0
    key = _sorted_key(group, values)
    if key is not None:
        counts, first = _key_bounds(key, n_groups)
        return counts, _quantiles(key, first, counts, qs, n_groups, _VALUE_MASK)
    sorted_values = values[np.lexsort((values, group))].astype(np.float64)
    counts = np.bincount(group, minlength=n_groups)
    first = np.concatenate(([0], np.cumsum(counts)[:-1]))
    return counts, _quantiles(sorted_values, first, counts, qs, n_groups, None)


def _quantiles(sorted_values: np.ndarray, first: np.ndarray, counts: np.ndarray, qs: Iterable[float], n_groups: int,
               mask: int | None) -> np.ndarray:
    """Quantiles per group from values sorted by (group, value); ``mask`` keeps the value bits of a packed key."""
    out = []
    for q in qs:
        pos = q * (counts - 1)
        lo = np.floor(pos).astype(np.int64)
        hi = np.ceil(pos).astype(np.int64)
        a = sorted_values[first + lo]
        b = sorted_values[first + hi]
        if mask is not None:
            a, b = a & mask, b & mask
        out.append(a + (b - a) * (pos - lo))
    return np.vstack(out) if out else np.empty((0, n_groups))


#: Bits of a packed (group << 40 | value) key that hold the value.
_VALUE_BITS = 40
_VALUE_MASK = (1 << _VALUE_BITS) - 1


def _sorted_key(group: np.ndarray, values: np.ndarray) -> np.ndarray | None:
    """``group << 40 | value`` sorted, when values are whole ns in [0, 2**40) and groups below 2**22; else None.

    Durations are whole nanoseconds, so group and value fit one int64 key (group above bit
    40, value below: 18 minutes of ns) and a plain sort of that key replaces a two-key lexsort
    (0.2 s instead of 1.5 s on 3.2M rows of the 1M-kernel trace). Built in place: the API part
    sorts 2.2M rows, 18 MB per temporary.
    """
    if not len(values) or int(group.max()) >= (1 << 22):
        return None
    ints = values.astype(np.int64, copy=False)
    if not (ints is values or np.array_equal(ints, values)) or ints.min() < 0 or ints.max() > _VALUE_MASK:
        return None
    key = np.left_shift(group, _VALUE_BITS, dtype=np.int64)
    key |= ints
    del ints
    key.sort()
    return key


def _key_bounds(key: np.ndarray, n_groups: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows per group and each group's first row in a sorted packed key (a search, not a bincount of every row)."""
    bounds = np.searchsorted(key, np.arange(n_groups + 1, dtype=np.int64) << _VALUE_BITS)
    return np.diff(bounds), bounds[:-1]


def group_ids(columns: list[np.ndarray]) -> np.ndarray:
    """Dense ids 0..G-1 of the distinct rows of ``columns`` (integer arrays), in order of first appearance.

    Folds the columns into one int64 key by their value ranges (re-factorizing only if the key
    would grow past 2**40) and factorizes once: 0.1 s for 1M kernels x 8 keys, where a pandas
    group-by over eight columns takes 0.5 s.
    """
    n = len(columns[0]) if columns else 0
    ids = np.zeros(n, np.int64)
    if not n:
        return ids
    for col in columns:
        low = int(col.min())
        span = int(col.max()) - low + 1
        if int(ids.max()) * span >= (1 << 40):
            ids = pd.factorize(ids)[0].astype(np.int64)
            if int(ids.max()) * span >= (1 << 62):
                codes = pd.factorize(col)[0].astype(np.int64)
                col, low, span = codes, 0, int(codes.max()) + 1
        # In place: on 1M kernels each temporary is 8 MB, and there are eight keys.
        ids *= span
        ids += col
        if low:
            ids -= low
    return pd.factorize(ids)[0].astype(np.int64, copy=False)


def _codes(column: pd.Series) -> np.ndarray:
    """Integer values of a key column: category codes for names (NULL = -1), -1 for missing numbers."""
    if isinstance(column.dtype, pd.CategoricalDtype):  # int8/16/32 codes: group_ids widens as it folds
        return column.cat.codes.to_numpy()
    if column.dtype.kind in "iu":  # plain numpy integers: no NULLs to fill, no copy
        return column.to_numpy()
    return column.fillna(-1).to_numpy().astype(np.int64)


def _lexsort(keys: tuple[np.ndarray, ...]) -> np.ndarray:
    """``np.lexsort(keys)`` (last key first), by one stable sort of a packed key when they fit.

    Non-negative whole-number keys whose bit widths add up to 62 or less pack into one int64:
    a single sort instead of one pass per key (about 2x faster on the 1M-kernel trace).
    """
    widths = []
    for key in keys:
        arr = np.asarray(key)
        if arr.dtype.kind not in "iuf" or not len(arr):
            return np.lexsort(keys)
        if arr.dtype.kind == "f" and not np.array_equal(arr.astype(np.int64), arr):
            return np.lexsort(keys)
        if arr.min() < 0:
            return np.lexsort(keys)
        widths.append(int(arr.max()).bit_length())
    if sum(widths) > 62:
        return np.lexsort(keys)
    # One key at a time into the packed key: no int64 copy of every key held at once (8 MB each on 1M rows).
    packed = np.zeros(len(np.asarray(keys[0])), np.int64)
    shift = 0
    for key, width in zip(keys, widths, strict=True):
        arr = np.asarray(key)
        packed |= np.left_shift(arr.astype(np.int64) if arr.dtype.kind == "f" else arr, shift, dtype=np.int64)
        shift += width
    return np.argsort(packed, kind="stable")


def _sorted_by_group(group: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``values`` ordered by (group, value): int64 when they are whole ns (the packed-key path), else float64."""
    key = _sorted_key(group, values)
    if key is not None:
        key &= _VALUE_MASK
        return key
    return values[np.lexsort((values, group))].astype(np.float64)


def tail_table(group: np.ndarray, durations: np.ndarray) -> pd.DataFrame:
    """Per group: count, total, p50/p95/p99/max, max/p50, p99/p50, tail cost (time above p50), tail score.

    Tail score is pegainfer's: max_us * log2(count + 1) * max(1, max/p50): a long max weighs more
    when it comes from a kernel called often and far above its median.
    """
    sums = _sums_from_key(group, durations)
    if sums is not None:
        counts, (p50, p95, p99, mx), total, tail = sums
    else:
        counts, (p50, p95, p99, mx) = group_quantiles(group, durations, (0.5, 0.95, 0.99, 1.0))
        above = p50[group]  # durations - p50 of the row's group, clipped at 0, in one buffer
        np.subtract(durations, above, out=above)
        np.maximum(above, 0, out=above)
        tail = np.bincount(group, weights=above, minlength=len(counts))
        del above
        total = np.bincount(group, weights=durations, minlength=len(counts))
    safe = np.where(p50 > 0, p50, np.nan)
    max_ratio = mx / safe
    return pd.DataFrame({"count": counts, "total": total, "p50": p50, "p95": p95, "p99": p99, "max": mx,
                         "max_p50": max_ratio, "p99_p50": p99 / safe, "tail_cost": tail,
                         "tail_score": mx / 1e3 * np.log2(counts + 1) * np.fmax(1.0, np.nan_to_num(max_ratio, nan=1.0))})


def _sums_from_key(group: np.ndarray, durations: np.ndarray) -> tuple | None:
    """tail_table's counts, quantiles, totals and tails from one sorted packed key; None off the packed-key path.

    No row-length temporary besides the key: the sum of a group is a segment sum of its sorted
    values, and its time above the median is the sum of the values above floor(p50) (a suffix
    of the group) minus their count times p50. Whole ns with p50 on a half ns make every one
    of these sums exact, so the numbers equal the row-by-row float sums.
    """
    n_groups = int(group.max()) + 1 if len(group) else 0
    key = _sorted_key(group, durations)
    if key is None:
        return None
    counts, first = _key_bounds(key, n_groups)
    p50, p95, p99, mx = _quantiles(key, first, counts, (0.5, 0.95, 0.99, 1.0), n_groups, _VALUE_MASK)
    present = counts > 0
    end = first + counts
    # First row of each group above floor(p50), by a search in the packed key.
    floor = np.where(present, np.floor(np.where(present, p50, 0)), 0).astype(np.int64).clip(0, _VALUE_MASK)
    above_from = np.searchsorted(key, (np.arange(n_groups, dtype=np.int64) << _VALUE_BITS) | floor, side="right")
    key &= _VALUE_MASK  # now the sorted values
    n = len(key)
    # Segment sums: an empty group's first row is the next group's (never n: the last group has rows),
    # and reduceat gives it one stray value, zeroed below.
    total = np.add.reduceat(key, first)
    total[~present] = 0
    cuts = np.empty(2 * n_groups, np.int64)  # segments [first, above_from) (even) of each group
    cuts[0::2] = first
    cuts[1::2] = np.minimum(above_from, n - 1)
    below = np.add.reduceat(key, cuts)[0::2]
    none_above = above_from >= end
    below[none_above] = total[none_above]
    below[~present] = 0
    n_above = np.where(present, end - above_from, 0)
    tail = (total - below).astype(np.float64) - n_above * np.where(present, p50, 0.0)
    tail[n_above == 0] = 0.0
    return counts, (p50, p95, p99, mx), total.astype(np.float64), tail


def step_index(launch: np.ndarray, steps: tuple[tuple[int, int], ...]) -> np.ndarray:
    """Index of the step each launch falls in, -1 outside every step (int32: 4 bytes per kernel)."""
    if not steps:
        return np.full(len(launch), -1, np.int32)
    starts = np.array([a for a, _ in steps], np.int64)
    ends = np.array([b for _, b in steps], np.int64)
    pos = np.searchsorted(starts, launch, side="right")
    pos -= 1
    inside = pos >= 0
    inside[inside] = launch[inside] <= ends[pos[inside]]
    pos[~inside] = -1
    return pos.astype(np.int32) if len(steps) < 2**31 else pos


def positional_tail(group: np.ndarray, step: np.ndarray, order: np.ndarray | None, durations: np.ndarray,
                    p50: np.ndarray) -> pd.DataFrame:
    """Per group, over invocations inside steps: the plain tail and the tail against each step position's median.

    ``order`` sorts the invocations in launch order (launch times, or their rank); None when
    the rows already come in launch order.

    The position of an invocation is its rank among the same group's launches within its step
    (the 3rd ``gemv`` of the step). When every step runs the same sequence, the same position
    multiplies the same matrix: if durations follow the position, the spread is different
    shapes sharing a name and launch configuration (o_proj vs down_proj), not a tail.
    """
    n_groups = len(p50)
    inside = step >= 0
    empty = pd.DataFrame({"in_steps": np.zeros(n_groups, np.int64), "plain_in_steps": np.zeros(n_groups),
                          "positional": np.zeros(n_groups), "steps_seen": np.zeros(n_groups, np.int64)})
    if not inside.any():
        return empty
    # Memory on 1M kernels: every row-length temporary is 8 MB, so rows are gathered once (not at
    # all when every launch is inside a step), sorted by one packed key, and the rest runs in place.
    if inside.all():
        sort = _lexsort((step, group) if order is None else (order, step, group))  # stable: row order breaks ties
        g, s, d = group[sort], step[sort], durations[sort]
    else:
        sort = _lexsort((step[inside], group[inside]) if order is None else
                        (order[inside], step[inside], group[inside]))
        sort = np.flatnonzero(inside)[sort]
        g, s, d = group[sort], step[sort], durations[sort]
    del sort, inside
    n = len(g)
    run_start = np.ones(n, bool)
    run_start[1:] = (g[1:] != g[:-1]) | (s[1:] != s[:-1])
    del s
    run_id = np.cumsum(run_start)
    run_id -= 1
    ordinal = np.flatnonzero(run_start)[run_id]  # first row of the invocation's run ...
    del run_id
    np.subtract(np.arange(n), ordinal, out=ordinal)  # ... makes its rank within the run
    span = int(ordinal.max()) + 1
    if n_groups * span <= n:
        # (group, rank) as one id without a hash table (factorizing 1M keys took 20+ MB): ids of
        # absent pairs stay unused, and only the medians of present ones are read.
        position = g.astype(np.int64)
        position *= span
        position += ordinal
    else:
        position = group_ids([g, ordinal])
    del ordinal
    _, (medians,) = group_quantiles(position, d, (0.5,))
    above = medians[position]
    del position
    np.subtract(d, above, out=above)
    np.maximum(above, 0, out=above)
    # Rows are sorted by group: whole-ns sums (exact in any order) are segment sums, without the
    # int64 copy of the group ids that each bincount makes (8 MB per 1M kernels).
    exact = d.dtype.kind in "iu"
    bounds = np.searchsorted(g, np.arange(n_groups + 1)) if exact else None
    positional = _segment_sums(above, bounds) if exact else np.bincount(g, weights=above, minlength=n_groups)
    np.take(p50, g, out=above)
    np.subtract(d, above, out=above)
    np.maximum(above, 0, out=above)
    plain = _segment_sums(above, bounds) if exact else np.bincount(g, weights=above, minlength=n_groups)
    del above
    steps_seen = np.bincount(g[run_start], minlength=n_groups)
    in_steps = np.diff(bounds) if exact else np.bincount(g, minlength=n_groups)
    return pd.DataFrame({"in_steps": in_steps, "plain_in_steps": plain,
                         "positional": positional, "steps_seen": steps_seen})


def _segment_sums(values: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """Sum of ``values[bounds[i]:bounds[i + 1]]`` for each i (0 for empty segments)."""
    counts = np.diff(bounds)
    out = np.zeros(len(counts))
    present = counts > 0
    if present.any():
        out[present] = np.add.reduceat(values, bounds[:-1][present])
    return out


def _position_medians(durations: np.ndarray, position: np.ndarray, period: int) -> np.ndarray:
    """Median duration of each position 0..period-1 (NaN where a position has no sample)."""
    order = _lexsort((durations, position))
    counts = np.bincount(position, minlength=period)
    first = np.concatenate(([0], np.cumsum(counts)[:-1]))
    sorted_d = durations[order].astype(np.float64)
    lo, hi = np.maximum(counts - 1, 0) // 2, np.maximum(counts, 1) // 2
    idx_lo = np.minimum(first + lo, len(sorted_d) - 1)
    idx_hi = np.minimum(first + hi, len(sorted_d) - 1)
    return np.where(counts > 0, (sorted_d[idx_lo] + sorted_d[idx_hi]) / 2, np.nan)


def periodic_tail(durations: np.ndarray, max_period: int, min_per_position: int = 4) -> tuple[float, int, float]:
    """Tail against the median of each position modulo the best period: (tail, period, held-out ratio).

    ``durations`` are one group's invocations in launch order. Without step ranges, a program
    that runs the same sequence over and over still launches the same shape every ``P``
    invocations (o_proj, down_proj, o_proj, ...); measured against the median of its position
    modulo ``P``, shape variation leaves no tail, while a real tail (a hot expert at a varying
    position, a slow phase) stays. Trying many periods could explain noise by chance, so each
    period is judged out of sample: medians from the first half, tail measured on the second
    half, as a fraction of the second half's plain tail (the held-out ratio; 1 = explains
    nothing). Returns period 0 and NaNs when no period can be tried.
    """
    n = len(durations)
    half = n // 2
    if half < 2 * min_per_position:
        return float("nan"), 0, float("nan")
    overall = float(np.median(durations))
    second = durations[half:].astype(np.float64)
    plain_second = float(np.clip(second - overall, 0, None).sum())
    if plain_second <= 0:
        return float("nan"), 0, float("nan")
    index = np.arange(n)
    best_ratio, best_period = float("inf"), 0
    for period in range(2, min(max_period, half // min_per_position) + 1):
        medians = _position_medians(durations[:half], index[:half] % period, period)
        expected = medians[index[half:] % period]
        expected = np.where(np.isnan(expected), overall, expected)
        ratio = float(np.clip(second - expected, 0, None).sum()) / plain_second
        if ratio < best_ratio - 1e-12:
            best_ratio, best_period = ratio, period
    if not best_period:
        return float("nan"), 0, float("nan")
    position = index % best_period
    medians = _position_medians(durations, position, best_period)
    tail = float(np.clip(durations - medians[position], 0, None).sum())
    return tail, best_period, best_ratio


def slow_runs(is_slow: np.ndarray) -> int:
    """Number of maximal runs of consecutive slow invocations (in launch order)."""
    if not is_slow.any():
        return 0
    starts = is_slow & ~np.concatenate(([False], is_slow[:-1]))
    return int(starts.sum())


_PYTORCH_RANGE_NOISE = re.compile(r",\s*(seq|op_id|sizes|input_dims|input_op_ids)\s*=.*$")


def clean_range_name(name: str, limit: int = 48) -> str:
    """An NVTX range name for a message: PyTorch's ``, seq = N, op_id = M`` suffix dropped, long names cut."""
    text = _PYTORCH_RANGE_NOISE.sub("", name).strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


def nvtx_path(nvtx: pd.DataFrame | None, pid: int | None, tid: int | None, at: int) -> tuple[str, ...]:
    """Names of the NVTX ranges open at ``at`` on thread (pid, tid), outermost first."""
    if nvtx is None or nvtx.empty or tid is None:
        return ()
    rows = nvtx[(nvtx["start"] <= at) & (nvtx["end"] >= at) & (nvtx["tid"] == tid)]
    if pid is not None:
        rows = rows[rows["pid"] == pid]
    rows = rows.sort_values(["start", "end"], ascending=[True, False], kind="stable")
    return tuple(str(n) for n in rows["name"] if pd.notna(n))


# -- the rule ------------------------------------------------------------------------------
class KernelTail(Rule):
    """Kernels whose slow invocations (the tail above the median) cost GPU time.

    What it detects: per kernel grouped by device, name and launch configuration (grid,
    block), in the steady state: p50/p95/p99/max, max/p50 above `outlier_ratio` (outlier
    invocations) or p99/p50 above `tail_ratio` (a systematic tail), with the tail cost (time
    above the p50) and pegainfer's tail score (max_us * log2(count+1) * max(1, max/p50)).
    Each invocation is also compared with the median of its position in the step (NVTX or
    kernel-pattern steps) and, judged out of sample, of its position in a repeating sequence
    of the group's own launches: durations that follow the position are shape variation,
    reported as such (info). Slow invocations that come in one or a few consecutive runs are
    named a phase (other sizes, clock throttling, competing work).
    With `api`, host API calls get the same statistics (info only).
    Why it hurts: a tail is time spent above what the kernel usually takes: MoE route
    imbalance (hot experts), rank skew, stream contention, allocator stalls or variable work.
    One name often covers several shapes or template instances, which is why groups are
    split by launch configuration before judging.
    Evidence: the percentiles, ratios, tail cost and its share of steady-state GPU time, the
    positional tail, and the slowest invocations with their time, step and NVTX ranges.
    Next optimizations: open the slowest instances in the timeline and look at what overlaps
    them; for MoE experts balance the routing or use one grouped GEMM over experts; for
    contention move the competing work to a lower-priority stream; for variable work bucket
    the shapes. The recommendation names the case.
    Options: `outlier_ratio`, `tail_ratio`, `min_share`, `warn_share`, `min_count`, `min_steps`,
    `shape_explained`, `max_period`, `worst_instances`, `max_findings`, `api`, `api_min_share`.
    Requires: the kernel table; the API table (launching thread, API tails) and NVTX (steps,
    ranges of the slowest instances) when present.
    False positives: tiny kernels with a noisy max are not reported (tail cost under
    `min_share`); shapes sharing a name and grid are recognized only when they repeat in a
    fixed order (per step, or with a period of at most `max_period` launches); shapes chosen
    by data (variable sequence lengths) read as a tail. Launch calls block when the
    launch queue is full, so a launch-call tail is often the GPU being behind.
    """

    name = "kernel-tail"
    title = "Kernel tail: slow invocations cost GPU time"
    default_severity = Severity.WARNING
    requires = ("kernels",)
    optional = ("api", "nvtx")
    columns = {"kernels": ("start", "end", "name", "device_id", "stream_id", "correlation_id", "pid", "grid_x", "grid_y",
                           "grid_z", "block_x", "block_y", "block_z"),
               "api": ("start", "end", "name", "correlation_id", "pid", "tid"),
               "nvtx": ("start", "end", "name", "pid", "tid")}
    window = "steady"
    Options = Options

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        require_visible_kernels(ctx.budget)
        kernels = ctx.frame("kernels")
        if len(kernels):
            yield from self._kernel_findings(ctx, kernels)
        if ctx.options.api and ctx.trace.has("api"):
            yield from self._api_findings(ctx)

    # -- kernels ---------------------------------------------------------------------------
    def _kernel_findings(self, ctx: RuleContext, kernels: pd.DataFrame) -> Iterable[Finding]:
        opts = ctx.options
        group = group_ids([_codes(kernels[c]) for c in KERNEL_KEYS])
        if len(group) and int(group.max()) < 2**31:
            group = group.astype(np.int32)  # 4 bytes per kernel: held, and gathered, for the whole rule
        end, start = kernels["end"].to_numpy(), kernels["start"].to_numpy()
        # Whole ns as int64 (the loader's times): the quantiles and sums come out as from float64
        # (exact below 2**53 ns), without the float copy the sort needed.
        durations = np.subtract(end, start) if end.dtype.kind in "iu" and start.dtype.kind in "iu" else \
            np.subtract(end, start, dtype=np.float64)
        launch = kernels["launch_start"].to_numpy()
        # Launch order, GPU start breaking ties: the kernels of one graph replay share their
        # launch call (cudaGraphLaunch), so its time alone does not order them.
        start = kernels["start"].to_numpy()
        in_order = len(launch) < 2 or bool(((launch[1:] > launch[:-1]) |
                                            ((launch[1:] == launch[:-1]) & (start[1:] >= start[:-1]))).all())
        sequence = None  # rows already in launch order (eager launches, one stream): no sort, no ranks
        if not in_order:
            sequence = np.empty(len(launch), np.int64)
            sequence[np.lexsort((start, launch))] = np.arange(len(launch))
        table = tail_table(group, durations)
        steps = ctx.window.steps
        device = kernels["device_id"].to_numpy()
        if device.dtype.kind in "iu" and device.min() == device.max():  # one GPU: a sum, not a 1M-row group-by
            device_time = pd.Series([durations.sum()], index=pd.Index(device[:1]))
        else:
            device_time = pd.Series(durations).groupby(device).sum()
        # Group ids number groups in order of first appearance (group_ids), so a group's first row
        # is where the id first exceeds every id before it.
        opens = np.empty(len(group), bool)
        opens[0] = True
        np.greater(group[1:], np.maximum.accumulate(group)[:-1], out=opens[1:])
        table["device"] = device[np.flatnonzero(opens)]
        del opens
        table["gpu_time"] = device_time.reindex(table["device"]).to_numpy()
        table["share"] = table["tail_cost"] / table["gpu_time"]
        gated = ((table["max_p50"] > opts.outlier_ratio) | (table["p99_p50"] > opts.tail_ratio)) & \
            (table["count"] >= opts.min_count) & (table["share"] >= opts.min_share)
        # The position tests judge only the groups that can be reported: each group's numbers come
        # from its own invocations, so the others' rows are left out of the sort.
        chosen = np.zeros(len(table) + 1, bool)
        chosen[np.flatnonzero(gated.to_numpy())] = True
        rows = np.flatnonzero(chosen[group]) if gated.any() else np.zeros(0, np.int64)
        pos = positional_tail(group[rows], step_index(launch[rows], steps), None if sequence is None else sequence[rows],
                              durations[rows], table["p50"].to_numpy())
        table = table.join(pos)
        candidates = table[gated].sort_values("tail_cost", ascending=False, kind="stable")
        reported = 0
        for gid, row in candidates.iterrows():
            if reported >= opts.max_findings:
                break
            reported += 1
            rows = np.flatnonzero(group == gid)
            if sequence is not None:
                rows = rows[np.argsort(sequence[rows], kind="stable")]  # launch order
            yield self._kernel_finding(ctx, kernels, rows, row, durations, len(steps), len(candidates))

    def _kernel_finding(self, ctx: RuleContext, kernels: pd.DataFrame, rows: np.ndarray, row: pd.Series,
                        durations: np.ndarray, n_steps: int, n_candidates: int) -> Finding:
        opts = ctx.options
        first = kernels.iloc[rows[0]]
        full_name = str(first["name"])
        grid = (int(first["grid_x"]), int(first["grid_y"]), int(first["grid_z"]))
        block = (int(first["block_x"]), int(first["block_y"]), int(first["block_z"]))
        label = f"{base_name(full_name)} grid {grid} block {block}"
        gpu_time = float(row["gpu_time"])
        plain_cost = float(row["tail_cost"])
        # Two position tests, the better explanation wins: the rank within each step (needs
        # steps with several invocations of the group), and a period in the group's own launch
        # sequence (works without step ranges, and when each step holds one invocation).
        testable = n_steps >= opts.min_steps and row["steps_seen"] >= opts.min_steps and \
            row["in_steps"] >= 0.8 * row["count"] and row["in_steps"] > row["steps_seen"]
        positional_cost = float(row["positional"]) + max(0.0, plain_cost - float(row["plain_in_steps"]))
        explained_by = f"each position in the step ({int(row['steps_seen'])} steps)"
        plain_tested, positional_tested = float(row["plain_in_steps"]), float(row["positional"])
        in_order = durations[rows]  # rows come in launch order
        cost_p, period, held_out = periodic_tail(in_order, opts.max_period)
        if period and held_out <= opts.shape_explained and (not testable or cost_p < positional_cost):
            testable, positional_cost, plain_tested, positional_tested = True, cost_p, plain_cost, cost_p
            explained_by = f"each position in a repeating sequence of {period} launches"
        shape_variation = testable and (positional_tested <= opts.shape_explained * plain_tested
                                        or positional_cost < opts.min_share * gpu_time)
        cost = min(plain_cost, positional_cost) if testable else plain_cost
        share = cost / gpu_time if gpu_time else 0.0
        metrics = {
            "count": metric(int(row["count"]), "count"), "total_time": metric(float(row["total"]), "ns"),
            "p50": metric(float(row["p50"]), "ns"), "p95": metric(float(row["p95"]), "ns"),
            "p99": metric(float(row["p99"]), "ns"), "max": metric(float(row["max"]), "ns"),
            "max_over_p50": metric(float(row["max_p50"]), "ratio"), "p99_over_p50": metric(float(row["p99_p50"]), "ratio"),
            "tail_cost": metric(plain_cost, "ns"), "tail_share_of_gpu_time": metric(100 * plain_cost / gpu_time, "%"),
            "tail_score": metric(float(row["tail_score"]), "ratio")}
        if testable:
            metrics["positional_tail_cost"] = metric(positional_cost, "ns")
        worst = self._worst(ctx, kernels, rows, durations)
        stats = (f"{label}: {int(row['count'])} invocations, p50 {row['p50'] / 1e3:.1f} us, p95 {row['p95'] / 1e3:.1f} us, "
                 f"p99 {row['p99'] / 1e3:.1f} us, max {row['max'] / 1e3:.1f} us (max/p50 {row['max_p50']:.2f}, "
                 f"p99/p50 {row['p99_p50']:.2f}, tail score {row['tail_score']:.0f}); time above p50 "
                 f"{plain_cost / 1e6:.2f} ms = {pct(plain_cost, gpu_time):.1f} % of steady-state GPU time "
                 f"({gpu_time / 1e6:.1f} ms).")
        slowest = "; ".join(worst["text"])
        location = Location(device=int(row["device"]), kernel=full_name, stream=worst["stream"],
                            start_ns=worst["start"], end_ns=worst["end"])
        key = f"grid={grid} block={block}"
        if shape_variation:
            message = (stats + f" Measured against the median of {explained_by}, the tail is only "
                       f"{positional_cost / 1e6:.3f} ms ({pct(positional_cost, gpu_time):.2f} %): durations follow the "
                       "position in the sequence, so this is shape variation (different matrices "
                       f"sharing one kernel and launch configuration), not a tail. Slowest: {slowest}.")
            recommendation = ("Nothing to fix as a tail. To see each shape separately, give the call sites their own "
                              "NVTX ranges (e.g. `nvtx.range('o_proj')` / `nvtxRangePush(\"down_proj\")`) or launch "
                              "configurations; judge each shape's speed with gemv-dominance's bandwidth numbers.")
            return ctx.finding(message, recommendation, severity=Severity.INFO, metrics=metrics, location=location,
                               title="Kernel duration spread is shape variation, not a tail", key=key,
                               estimated_savings_ns=0)  # nothing to gain: under the noise floor
        severity = Severity.WARNING if share >= opts.warn_share else Severity.INFO
        group_d = durations[rows]
        slow = group_d > opts.tail_ratio * row["p50"]
        slow_count = int(slow.sum())
        # The playbook's labels: p99/p50 over tail_ratio is a systematic tail, max/p50 over
        # outlier_ratio alone means outliers. With few invocations p99 is the second-largest
        # value, so a "systematic" tail needs at least 3 slow invocations and 1 % of them.
        systematic = row["p99_p50"] > opts.tail_ratio and slow_count >= max(3, 0.01 * row["count"])
        kind = "systematic tail" if systematic else "outlier invocations"
        runs = slow_runs(slow)
        what = (f"A systematic tail: {slow_count} invocations ({pct(slow_count, row['count']):.1f} %) run over "
                f"{opts.tail_ratio:g}x the median" if systematic else
                f"Outlier invocations: {slow_count} of {int(row['count'])} run over {opts.tail_ratio:g}x the median")
        message = stats + f" {what}. Slowest: {slowest}."
        phase = systematic and runs <= 3 and slow_count >= 10
        if phase:
            message += (f" The slow invocations are {'consecutive' if runs == 1 else f'in {runs} consecutive runs'}: "
                        "a phase of the run (other input sizes, clock throttling, or competing work during that "
                        "period), not scattered noise.")
        if testable:
            message += (f" Judged against the median of {explained_by}, the tail stays at "
                        f"{positional_cost / 1e6:.2f} ms, so it is not shape variation.")
        more = n_candidates - opts.max_findings
        if more > 0:
            message += f" ({more} more kernel group(s) with smaller tails not listed.)"
        return ctx.finding(message, self._advice(full_name, kind, row, cost, phase), severity=severity, metrics=metrics,
                           location=location, estimated_savings_ns=cost, key=key,
                           budget_part=part_of_class(DEFAULT_TAXONOMY.classify_one(full_name)))

    @staticmethod
    def _advice(name: str, kind: str, row: pd.Series, cost: float, phase: bool = False) -> str:
        lower = name.lower()
        gain = f"Removing the tail saves up to {cost / 1e6:.2f} ms of GPU time over the window."
        if phase and not ("moe" in lower or "expert" in lower):
            return ("Open the trace at the start of the slow phase (first listed timestamps) and compare it with the "
                    "fast part: a change of problem size or arguments, GPU clocks dropping (check with "
                    "`nsys profile --gpu-metrics-devices=all` or `nvidia-smi -q -d CLOCK`), or another process/stream "
                    "competing from then on. " + gain)
        if "moe" in lower or "expert" in lower:
            return ("MoE route imbalance: a few hot experts get most tokens, and their launches run "
                    f"{row['p99'] / max(row['p50'], 1):.0f}x the median. Balance the routing (capacity factor / "
                    "auxiliary load-balancing loss, or expert-parallel replication of hot experts) and replace the "
                    "per-expert launches with one grouped GEMM over all experts sized by the per-expert token counts, "
                    "so one hot expert no longer serializes the step. " + gain)
        if "nccl" in lower or "allreduce" in lower or "all_reduce" in lower:
            return ("Collective tail: the slow invocations wait for the slowest rank (rank skew). Compare the ranks' "
                    "traces at the listed timestamps and balance the work before the collective. " + gain)
        if kind == "systematic tail":
            return ("A steady fraction of invocations run slow: variable work per call (input sizes, sequence "
                    "lengths) or another stream competing for SMs or memory bandwidth. Check what overlaps the listed "
                    "instances in the timeline; if it is another stream, give this stream higher priority "
                    "(`cudaStreamCreateWithPriority`) or serialize the competing work; if the work varies, bucket "
                    "the shapes. " + gain)
        return ("Rare outlier invocations: check what overlaps the listed instances in the timeline (a concurrent "
                "kernel or memcpy on another stream, an allocation or host sync, clock throttling); move one-off work "
                "(allocations, copies) out of the steady loop. " + gain)

    @staticmethod
    def _worst(ctx: RuleContext, kernels: pd.DataFrame, rows: np.ndarray, durations: np.ndarray) -> dict:
        count = max(1, ctx.options.worst_instances)
        pick = rows[np.argsort(-durations[rows], kind="stable")[:count]]
        steps = ctx.window.steps
        step_of = step_index(kernels["launch_start"].to_numpy()[pick], steps)
        threads = _launch_threads(ctx, kernels.iloc[pick])
        nvtx = ctx.trace.frame("nvtx", ["start", "end", "name", "pid", "tid"]) if ctx.trace.has("nvtx") else None
        if nvtx is not None:
            nvtx = nvtx[nvtx["end"].notna()]
        text = []
        for i, r in enumerate(pick):
            k = kernels.iloc[r]
            pid, tid = threads[i]
            path = nvtx_path(nvtx, pid, tid, int(k["launch_start"]))
            where = f" in step {int(step_of[i]) + 1}/{len(steps)}" if step_of[i] >= 0 else ""
            shown = [clean_range_name(p) for p in path[-3:]]  # innermost three: enough to place it
            ranges = f", NVTX {' > '.join(shown)}" if path else ""
            text.append(f"{durations[r] / 1e3:.1f} us at {int(k['start']) / 1e6:.3f} ms{where}{ranges}")
        top = kernels.iloc[pick[0]]
        return {"text": text, "start": int(top["start"]), "end": int(top["end"]), "stream": int(top["stream_id"])}

    # -- host API calls --------------------------------------------------------------------
    def _api_findings(self, ctx: RuleContext) -> Iterable[Finding]:
        opts = ctx.options
        api = ctx.frame("api")
        if api.empty:
            return
        # Judge each distinct name once, then map by category code: a regex per row took 2 s on 2.2M calls.
        names = ctx.api_base_names()
        codes = names.cat.codes.to_numpy()
        uniques = names.cat.categories
        waiting = np.array([bool(_WAITING_APIS.search(str(n))) for n in uniques] + [True], bool)  # last: NULL
        lo, hi = ctx.window_bounds()
        window_ns = float(max(hi - lo, 1))
        sub = ~waiting[codes]
        sub &= codes >= 0
        if not sub.any():
            return
        # Only the judged calls, as int64 ns (exact; tail_table's sums and quantiles come out the
        # same as from float64) and int32 group ids: 2.2M calls make each temporary 9-18 MB.
        durations = api["end"].to_numpy()[sub]
        durations -= api["start"].to_numpy()[sub]
        picked = codes[sub]
        del sub
        # Names whose calls add up to less than the share a tail must reach (a tail is at most the
        # calls' whole time), or too few calls, cannot be reported: left out before the sort.
        reportable = (np.bincount(picked, weights=durations, minlength=len(uniques)) / window_ns >= opts.api_min_share
                      ) & (np.bincount(picked, minlength=len(uniques)) >= opts.min_count)
        if not reportable.any():
            return
        if not reportable[picked].all():
            keep = reportable[picked]
            durations, picked = durations[keep], picked[keep]
            del keep
        group, first = pd.factorize(picked)  # first: the name code of each group
        group = group.astype(np.int32)
        del picked
        table = tail_table(group, durations)
        del group, durations
        table["api"] = [str(uniques[c]) for c in first]
        table["share"] = table["tail_cost"] / window_ns
        gated = ((table["max_p50"] > opts.outlier_ratio) | (table["p99_p50"] > opts.tail_ratio)) & \
            (table["count"] >= opts.min_count) & (table["share"] >= opts.api_min_share)
        for _, row in table[gated].sort_values("tail_cost", ascending=False, kind="stable").head(opts.max_findings).iterrows():
            name = row["api"]
            blocked = bool(_LAUNCH_APIS.search(name))
            message = (f"Host API {name}: {int(row['count'])} calls, p50 {row['p50'] / 1e3:.1f} us, p99 "
                       f"{row['p99'] / 1e3:.1f} us, max {row['max'] / 1e3:.1f} us (max/p50 {row['max_p50']:.1f}, p99/p50 "
                       f"{row['p99_p50']:.1f}); time above p50 {row['tail_cost'] / 1e6:.2f} ms = "
                       f"{100 * row['share']:.1f} % of the steady-state window ({window_ns / 1e6:.1f} ms).")
            if blocked:
                message += (" Launch calls block when the device's launch queue is full, so this tail usually means "
                            "the GPU is behind the host (GPU-bound), not a slow host.")
                recommendation = ("Treat it as a symptom: the GPU work is the bottleneck; fix the kernel-side findings "
                                  "(kernel tails, GEMV bandwidth) first. If the GPU is idle while these calls block, "
                                  "look for lazy module loading (`CUDA_MODULE_LOADING=EAGER`) or a host lock.")
            else:
                recommendation = ("Check the slow calls in the timeline: a tail in allocation/free calls points to "
                                  "the allocator (use a caching or stream-ordered pool allocator, `cudaMallocAsync`), "
                                  "one in other calls to host contention (locks, another thread, page faults).")
            yield ctx.finding(message, recommendation, severity=Severity.INFO, metrics={
                "count": metric(int(row["count"]), "count"), "p50": metric(float(row["p50"]), "ns"),
                "p99": metric(float(row["p99"]), "ns"), "max": metric(float(row["max"]), "ns"),
                "max_over_p50": metric(float(row["max_p50"]), "ratio"), "p99_over_p50": metric(float(row["p99_p50"]), "ratio"),
                "tail_cost": metric(float(row["tail_cost"]), "ns"),
                "tail_share_of_window": metric(100 * float(row["share"]), "%"),
                "tail_score": metric(float(row["tail_score"]), "ratio")},
                title="Host API tail", location=Location(api=name), key="api",
                # A launch call waiting on a full queue is the GPU being the bottleneck: nothing to gain here.
                estimated_savings_ns=0 if blocked else None)


def _launch_threads(ctx: RuleContext, gpu_rows: pd.DataFrame) -> list[tuple[int | None, int | None]]:
    """(pid, tid) of the API call that launched each GPU row (same pid + correlationId), None when unknown."""
    if not ctx.trace.has("api"):
        return [(None, None)] * len(gpu_rows)
    api = ctx.trace.frame("api", ["start", "correlation_id", "pid", "tid"])
    out: list[tuple[int | None, int | None]] = []
    for _, r in gpu_rows.iterrows():  # a handful of rows: the slowest instances only
        hit = api[(api["correlation_id"] == r["correlation_id"]) & (api["pid"] == r["pid"])]
        out.append((int(hit["pid"].iloc[0]), int(hit["tid"].iloc[0])) if len(hit) else (None, None))
    return out


RULE = KernelTail
