"""Python call sites: the function and ``file:line`` where the host spends its time, and the line of each CUDA call.

A trace captured with nsys's Python sampling (``--python-sampling=true``) holds the Python stack of
each sampled thread every sampling period (1 ms by default); one captured with
``--python-backtrace=cuda`` (which nsys honours only with ``--cudabacktrace`` and CPU sampling)
holds the stack at each CUDA call it took a backtrace of. :mod:`.python_stacks` decodes both
(once per trace); this module turns them into places in the user's code:

- :func:`host_sites`: the samples inside given host intervals (the GPU-idle host block before a
  step's first launch, say), grouped by their *site*: the innermost frame of the user's own code,
  or the innermost frame when the stack holds none (library frames: ``site-packages``, the
  standard library, ``<frozen ...>``, framework source trees; :func:`is_library_file`).
- :func:`call_site`: the site of given CUDA calls (the blocking syncs, say): the Python backtrace
  taken at the call when there is one, else a sample taken while the call ran (a blocking call
  of a millisecond or more gets one), else the thread's last sample before the call. Each site also
  names the innermost frame under it, the library line that made the call (``.item()`` deep in a
  generation loop).

A site is a fact about the capture, like the step model: no threshold, no advice. A trace without
Python stacks gives empty answers and says why (:attr:`PythonStacks.reason`, with the capture or
export that would record them).
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np
import pandas as pd

from nsys_rules.analysis.intervals import merge_intervals
from nsys_rules.analysis.points import point_in
from nsys_rules.model.python_stacks import (PythonFrame, PythonSite, PythonStacks, StackSet, is_library_file,
                                            python_stacks)
from nsys_rules.model.trace import Trace

__all__ = ["BACKTRACE_LEAD_NS", "PythonFrame", "PythonSite", "PythonStacks", "call_site", "call_site_rows",
           "host_sites", "is_library_file", "python_stacks"]

#: A backtrace mark and the CUDA call it was taken at: nsys writes the mark at the start of its
#: backtrace record, which wraps the call (about 1 us before the call's own start).
BACKTRACE_LEAD_NS = 50_000


def _intervals(intervals: Any) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) from a frame with start/end columns, a pair of arrays, or (start, end) pairs."""
    if isinstance(intervals, pd.DataFrame):
        return intervals["start"].to_numpy(np.int64), intervals["end"].to_numpy(np.int64)
    if isinstance(intervals, tuple) and len(intervals) == 2 and np.ndim(intervals[0]) == 1:
        return np.asarray(intervals[0], np.int64), np.asarray(intervals[1], np.int64)
    pairs = np.asarray(list(intervals), np.int64).reshape(-1, 2)
    return pairs[:, 0], pairs[:, 1]


def host_sites(trace: Trace, intervals: Any, tid: int | Iterable[int] | None = None, top: int = 5,
               by: str = "line", innermost: bool = False) -> list[PythonSite]:
    """The sites of the Python samples taken inside ``intervals`` on thread ``tid`` (or threads; None: any).

    ``intervals``: a frame with ``start``/``end`` columns, ``(starts, ends)`` arrays, or (start, end)
    pairs (ns, end excluded; overlaps are counted once). The ``top`` sites by samples, each with its share of the
    samples in the intervals; ``by="function"`` adds up a function's lines (its ``line``: the one
    seen most). ``innermost``: group by the innermost frame, the code actually running (a library's
    hot line inside one user call such as ``model.generate(...)``), not the user's frame above it.
    Empty when the trace has no samples there.
    """
    data = python_stacks(trace)
    samples = data.samples
    if samples is None:
        return []
    starts, ends = merge_intervals(*_intervals(intervals))
    stacks = samples.stacks
    inside = point_in(stacks.time, starts, ends - 1) >= 0  # [start, end): a sample at the end is the next block's
    if tid is not None:
        inside &= np.isin(stacks.tid, [tid] if isinstance(tid, (int, np.integer)) else list(tid))
    rows = np.flatnonzero(inside & (samples.site >= 0))
    return _merge_sites([(samples, rows, np.full(len(rows), data.period_ns, np.int64), "samples")],
                        int(inside.sum()), top, by, innermost)


def call_site_rows(trace: Trace, api_rows: pd.DataFrame) -> pd.DataFrame:
    """Per given CUDA call (``api_rows``: ``start``, ``end``, ``tid`` columns), the stack that made it.

    Columns, aligned with ``api_rows``: ``stack`` (where the stack comes from: ``backtraces``,
    ``samples``, ``nearby samples`` or None) and ``row`` (its index in :attr:`PythonStacks.backtraces`
    or :attr:`PythonStacks.samples`, -1 when none). In that order of trust: the backtrace nsys took
    at the call (its mark starts at most :data:`BACKTRACE_LEAD_NS` before the call, and the call
    is the first of its thread after the mark); else the first sample of its thread taken while the
    call ran (a blocking call of a sampling period or more has one); else the last sample of its
    thread taken at most half a period before the call: its user frame is as good (the call is
    made somewhere under it), its innermost frame only nearby.
    """
    data = python_stacks(trace)
    n = len(api_rows)
    stack = np.full(n, None, object)
    row = np.full(n, -1, np.int64)
    if not n or not data.available:
        return pd.DataFrame({"stack": pd.Series(stack, dtype=object, index=api_rows.index), "row": row},
                            index=api_rows.index)
    calls = pd.DataFrame({"start": api_rows["start"].to_numpy(np.int64), "end": api_rows["end"].to_numpy(np.int64),
                          "tid": np.asarray(api_rows["tid"].to_numpy(), np.int64), "at": np.arange(n)})
    if data.backtraces is not None:
        linked = _backtrace_of_calls(trace, data.backtraces, calls)
        hit = linked >= 0
        stack[hit], row[hit] = "backtraces", linked[hit]
    if data.samples is not None:
        for kind, slack in (("samples", 0), ("nearby samples", max(data.period_ns // 2, 1))):
            rest = calls[row < 0]
            if not len(rest):
                break
            found = _sample_in_calls(data.samples, rest, slack)
            hit = found >= 0
            at = rest["at"].to_numpy()[hit]
            stack[at], row[at] = kind, found[hit]
    return pd.DataFrame({"stack": pd.Series(stack, dtype=object, index=api_rows.index), "row": row},
                        index=api_rows.index)


def call_site(trace: Trace, api_rows: pd.DataFrame, top: int = 5, by: str = "line") -> list[PythonSite]:
    """The sites that made the given CUDA calls (``api_rows``: ``start``, ``end``, ``tid``), ``top`` by calls.

    Each site's ``share`` is of all given calls (calls whose stack is unknown count in none), its
    ``time_ns`` the calls' summed duration, ``inner`` the library line that made the call;
    ``by="function"`` as in :func:`host_sites`.
    """
    data = python_stacks(trace)
    found = call_site_rows(trace, api_rows)
    durations = (api_rows["end"].to_numpy(np.int64) - api_rows["start"].to_numpy(np.int64))
    parts = []
    for name, stacks in (("backtraces", data.backtraces), ("samples", data.samples), ("nearby samples", data.samples)):
        if stacks is None:
            continue
        mine = (found["stack"] == name).to_numpy()
        rows = found["row"].to_numpy()[mine]
        keep = stacks.site[rows] >= 0
        parts.append((stacks, rows[keep], durations[mine][keep], name))
    return _merge_sites(parts, len(api_rows), top, by)


def _backtrace_of_calls(trace: Trace, backtraces: StackSet, calls: pd.DataFrame) -> np.ndarray:
    """For each call, the index of its backtrace mark (-1: none)."""
    stacks = backtraces.stacks
    api = trace.frame("api", ["start", "tid"])
    every = pd.DataFrame({"start": api["start"].to_numpy(np.int64), "tid": np.asarray(api["tid"].to_numpy(), np.int64)})
    marks = pd.DataFrame({"time": stacks.time, "tid": stacks.tid.astype(np.int64), "mark": np.arange(len(stacks))})
    # Each mark's call: the first call of its thread that starts at or after it, within the lead.
    linked = pd.merge_asof(marks.sort_values("time"), every.sort_values("start"), left_on="time", right_on="start",
                           by="tid", direction="forward", tolerance=BACKTRACE_LEAD_NS)
    linked = linked.dropna(subset=["start"])
    linked = linked.assign(start=linked["start"].astype(np.int64)).drop_duplicates(["tid", "start"], keep="last")
    joined = calls.merge(linked[["tid", "start", "mark"]], on=["tid", "start"], how="left")
    out = np.full(len(calls), -1, np.int64)
    hit = joined["mark"].notna().to_numpy()
    out[joined["at"].to_numpy()[hit]] = joined["mark"].to_numpy()[hit].astype(np.int64)
    return out


def _sample_in_calls(samples: StackSet, calls: pd.DataFrame, slack: int) -> np.ndarray:
    """For each call, the first sample of its thread taken while it ran, or, with ``slack``, the last sample of
    its thread taken at most ``slack`` ns before it started (-1: none)."""
    stacks = samples.stacks
    table = pd.DataFrame({"time": stacks.time, "tid": stacks.tid.astype(np.int64), "sample": np.arange(len(stacks))})
    order = calls.sort_values("start")
    if slack:
        joined = pd.merge_asof(order, table.sort_values("time"), left_on="start", right_on="time", by="tid",
                               direction="backward", tolerance=slack)
        ok = joined["time"].notna().to_numpy()
    else:
        joined = pd.merge_asof(order, table.sort_values("time"), left_on="start", right_on="time", by="tid",
                               direction="forward")
        ok = joined["time"].notna().to_numpy() & (joined["time"].fillna(0).to_numpy() <= joined["end"].to_numpy())
    out = np.full(len(calls), -1, np.int64)
    position = pd.Series(np.arange(len(calls)), index=calls["at"].to_numpy())
    where = position.loc[joined["at"].to_numpy()[ok]].to_numpy()
    out[where] = joined["sample"].to_numpy()[ok].astype(np.int64)
    return out


def _most_common(table: pd.DataFrame, key: list[str], value: list[str]) -> pd.DataFrame:
    """Per ``key`` group, the ``value`` columns' most frequent combination (ties: the first in sort order)."""
    counted = table.groupby(key + value, sort=False).size().rename("_n").reset_index()
    ordered = counted.sort_values(["_n", *value], ascending=[False] + [True] * len(value), kind="stable")
    return ordered.drop_duplicates(key).set_index(key)[value]


def _merge_sites(parts: list[tuple[StackSet, np.ndarray, np.ndarray, str]], total: int, top: int,
                 by: str = "line", innermost: bool = False) -> list[PythonSite]:
    """Stacks grouped by their site (or innermost frame) across stack sets: by function, file and line
    (``by="line"``), or by function and file (``by="function"``: the line is the one seen most)."""
    if by not in ("line", "function"):
        raise ValueError(f"by={by!r}: group sites by 'line' or 'function'")
    frames = []
    for stacks, rows, durations, source in parts:
        if not len(rows):
            continue
        inner = stacks.stacks.first[rows]
        site = inner if innermost else stacks.site[rows]
        user = stacks.user[rows] & (site == stacks.site[rows])
        frames.append(pd.DataFrame({
            "function": stacks.functions[stacks.function_code[site]], "file": stacks.files[stacks.file_code[site]],
            "line": stacks.stacks.line[site], "user": user,
            "inner_function": stacks.functions[stacks.function_code[inner]],
            "inner_file": stacks.files[stacks.file_code[inner]], "inner_line": stacks.stacks.line[inner],
            "ns": durations, "source": source}))
    if not frames or not total:
        return []
    table = pd.concat(frames, ignore_index=True)
    key = ["function", "file", "line"] if by == "line" else ["function", "file"]
    summary = table.groupby(key, sort=False).agg(count=("ns", "size"), ns=("ns", "sum"), user=("user", "first"),
                                                 sources=("source", lambda v: "+".join(sorted(set(v)))))
    if by == "function":
        summary = summary.join(_most_common(table, key, ["line"]))
    summary = summary.reset_index().sort_values(["count", "ns", "function", "file", "line"],
                                                ascending=[False, False, True, True, True], kind="stable").head(top)
    inner = _most_common(table, key, ["inner_function", "inner_file", "inner_line"])
    out = []
    for r in summary.itertuples(index=False):
        frame = PythonFrame(str(r.function), str(r.file), int(r.line))
        below = inner.loc[tuple(getattr(r, k) for k in key)] if len(key) > 1 else inner.loc[r.function]
        under = PythonFrame(str(below["inner_function"]), str(below["inner_file"]), int(below["inner_line"]))
        out.append(PythonSite(frame, bool(r.user), int(r.count), int(r.count) / total, int(r.ns),
                              None if under == frame else under, str(r.sources)))
    return out
