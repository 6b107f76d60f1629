"""Tails of repeated durations: how much time slow invocations cost above the usual one, and whether
the spread follows a position in the workload's sequence (shape variation) rather than chance.

The numbers behind kernel-tail (and its host API tails): per group percentiles and the time
above the median (:func:`tail_table`), the tail measured against each step position's median
(:func:`positional_tail`) or against a period of the group's own launches (:func:`periodic_tail`),
and where the slowest instances ran (:func:`nvtx_path`). No judgement: thresholds stay in the rule.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from nsys_rules.api.analysis import (group_ids, group_quantiles, packed_lexsort, packed_sort, point_in, quantiles,
                                     segment_sums)


def tail_table(group: np.ndarray, durations: np.ndarray) -> pd.DataFrame:
    """Per group: count, total, p50/p95/p99/max, max/p50, p99/p50, tail cost (time above p50), tail score.

    Tail score is pegainfer's: max_us * log2(count + 1) * max(1, max/p50): a long max weighs more
    when it comes from a kernel called often and far above its median.
    """
    sums = _sums_from_packed(group, durations)
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


def _sums_from_packed(group: np.ndarray, durations: np.ndarray) -> tuple | None:
    """tail_table's counts, quantiles, totals and tails from one packed sort; None when the durations do not pack.

    No row-length temporary besides the key: the sum of a group is a segment sum of its sorted
    values, and its time above the median is the sum of the values above floor(p50) (a suffix
    of the group) minus their count times p50. Whole ns with p50 on a half ns make every one
    of these sums exact, so the numbers equal the row-by-row float sums.
    """
    n_groups = int(group.max()) + 1 if len(group) else 0
    packed = packed_sort(group, durations)
    if packed is None:
        return None
    counts, first = packed.bounds(n_groups)
    present = counts > 0
    end = first + counts
    p50, p95, p99, mx = quantiles(packed.key, first, counts, (0.5, 0.95, 0.99, 1.0), packed)
    # First row of each group above floor(p50), by a search in the packed key.
    floor = np.where(present, np.floor(np.where(present, p50, 0)), 0).astype(np.int64)
    floor -= packed.low
    np.clip(floor, 0, packed.mask, out=floor)
    above_from = np.searchsorted(packed.key, (np.arange(n_groups, dtype=np.int64) << packed.shift) | floor, side="right")
    key = packed.values()  # the key is now the sorted values
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
    pos = point_in(launch, starts, ends)
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
    # Every row-length temporary counts on a million kernels: rows are gathered once (not at all
    # when every launch is inside a step), sorted by one packed key, and the rest runs in place.
    if inside.all():
        sort = packed_lexsort((step, group) if order is None else (order, step, group))  # stable: row order breaks ties
        g, s, d = group[sort], step[sort], durations[sort]
    else:
        sort = packed_lexsort((step[inside], group[inside]) if order is None else
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
        # (group, rank) as one id without a hash table (a factorize of every row): ids of absent
        # pairs stay unused, and only the medians of present ones are read.
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
    # int64 copy of the group ids that each bincount makes.
    exact = d.dtype.kind in "iu"
    bounds = np.searchsorted(g, np.arange(n_groups + 1)) if exact else None
    positional = segment_sums(above, bounds) if bounds is not None else np.bincount(g, weights=above, minlength=n_groups)
    np.take(p50, g, out=above)
    np.subtract(d, above, out=above)
    np.maximum(above, 0, out=above)
    plain = segment_sums(above, bounds) if bounds is not None else np.bincount(g, weights=above, minlength=n_groups)
    del above
    steps_seen = np.bincount(g[run_start], minlength=n_groups)
    in_steps = np.diff(bounds) if bounds is not None else np.bincount(g, minlength=n_groups)
    return pd.DataFrame({"in_steps": in_steps, "plain_in_steps": plain,
                         "positional": positional, "steps_seen": steps_seen})


def _position_medians(durations: np.ndarray, position: np.ndarray, period: int) -> np.ndarray:
    """Median duration of each position 0..period-1 (NaN where a position has no sample)."""
    counts, (medians,) = group_quantiles(position, durations, (0.5,), n_groups=period)
    return np.where(counts > 0, medians, np.nan)


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
