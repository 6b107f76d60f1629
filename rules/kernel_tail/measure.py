"""What kernel-tail measures: the window's kernels (and host API calls) as groups with tail statistics.

The statistics themselves are :mod:`.tails`; this module reads the window into them and keeps
what a finding then needs: which rows a group holds, in launch order, and where its slowest
invocations ran. No judgement: ``judge`` picks the groups and weighs them, ``phrase`` says it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from nsys_rules.api import RuleContext
from nsys_rules.api.analysis import (category_codes, code_durations, column_codes, first_rows, group_ids,
                                     is_waiting_call, masked_durations, rows_with_codes)
from nsys_rules.rules.kernel_tail.tails import nvtx_path, positional_tail, step_index, tail_table

#: A kernel group: one device, name and launch configuration (a name often covers several shapes).
KERNEL_KEYS = ("device_id", "name", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")


@dataclass(frozen=True)
class KernelGroups:
    """The window's kernels grouped by :data:`KERNEL_KEYS`, with each group's tail statistics."""

    group: np.ndarray  # each kernel's group id (row of ``table``)
    durations: np.ndarray  # each kernel's duration (ns)
    sequence: np.ndarray | None  # each kernel's rank in launch order; None when the rows come in launch order
    launch: np.ndarray  # each kernel's launch time
    #: Per group: tail_table's columns, ``device``, ``gpu_time`` (the device's kernel time) and
    #: ``share`` (the tail cost's share of it).
    table: pd.DataFrame

    def rows_of(self, gid: int) -> np.ndarray:
        """The kernels of group ``gid``, in launch order."""
        rows = np.flatnonzero(self.group == gid)
        if self.sequence is not None:
            rows = rows[np.argsort(self.sequence[rows], kind="stable")]  # launch order
        return rows

    def with_positions(self, chosen: np.ndarray, steps: tuple[tuple[int, int], ...]) -> pd.DataFrame:
        """``table`` with the positional tail (:func:`.tails.positional_tail`) of the ``chosen`` groups."""
        # The position tests judge only the groups that can be reported: each group's numbers come
        # from its own invocations, so the others' rows are left out of the sort.
        picked = np.zeros(len(self.table) + 1, bool)
        picked[np.flatnonzero(chosen)] = True
        rows = np.flatnonzero(picked[self.group]) if chosen.any() else np.zeros(0, np.int64)
        pos = positional_tail(self.group[rows], step_index(self.launch[rows], steps),
                              None if self.sequence is None else self.sequence[rows], self.durations[rows],
                              self.table["p50"].to_numpy())
        return self.table.join(pos)


def kernel_groups(kernels: pd.DataFrame) -> KernelGroups:
    """Group the window's ``kernels`` and measure each group's tail."""
    group = group_ids([column_codes(kernels[c]) for c in KERNEL_KEYS])
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
    device = kernels["device_id"].to_numpy()
    if device.dtype.kind in "iu" and device.min() == device.max():  # one GPU: a sum, not a 1M-row group-by
        device_time = pd.Series([durations.sum()], index=pd.Index(device[:1]))
    else:
        device_time = pd.Series(durations).groupby(device).sum()
    # One GPU (a one-value column): its id for every group, without a scan for the groups' first rows.
    table["device"] = np.full(len(table), device[0]) if device.strides == (0,) and len(device) else \
        device[first_rows(group)]
    table["gpu_time"] = device_time.reindex(table["device"]).to_numpy()
    table["share"] = table["tail_cost"] / table["gpu_time"]
    return KernelGroups(group, durations, sequence, launch, table)


@dataclass(frozen=True)
class Instance:
    """One of a group's slowest invocations."""

    duration: float  # ns
    start: int  # ns
    step: int  # index of the step it was launched in, -1 outside every step
    nvtx: tuple[str, ...]  # NVTX ranges open on the launching thread at launch, outermost first


@dataclass(frozen=True)
class Slowest:
    """A group's slowest invocations, slowest first, and the slowest one's time range and stream."""

    instances: list[Instance]
    start: int
    end: int
    stream: int


def slowest(ctx: RuleContext, kernels: pd.DataFrame, rows: np.ndarray, durations: np.ndarray, count: int) -> Slowest:
    """The ``count`` slowest of the kernels ``rows`` (at least one), with their step and NVTX ranges."""
    pick = rows[np.argsort(-durations[rows], kind="stable")[:max(1, count)]]
    step_of = step_index(kernels["launch_start"].to_numpy()[pick], ctx.window.steps)
    threads = launch_threads(ctx, kernels.iloc[pick])
    nvtx = ctx.trace.frame("nvtx", ["start", "end", "name", "pid", "tid"]) if ctx.trace.has("nvtx") else None
    if nvtx is not None:
        nvtx = nvtx[nvtx["end"].notna()]
    instances = []
    for i, r in enumerate(pick):
        k = kernels.iloc[r]
        pid, tid = threads[i]
        instances.append(Instance(durations[r], int(k["start"]), int(step_of[i]),
                                  nvtx_path(nvtx, pid, tid, int(k["launch_start"]))))
    top = kernels.iloc[pick[0]]
    return Slowest(instances, int(top["start"]), int(top["end"]), int(top["stream_id"]))


def launch_threads(ctx: RuleContext, gpu_rows: pd.DataFrame) -> list[tuple[int | None, int | None]]:
    """(pid, tid) of the API call that launched each GPU row (same pid + correlationId), None when unknown."""
    if not ctx.trace.has("api"):
        return [(None, None)] * len(gpu_rows)
    api = ctx.trace.frame("api", ["start", "correlation_id", "pid", "tid"])
    rows, found = ctx.launching_rows(gpu_rows["pid"].to_numpy(), gpu_rows["correlation_id"].to_numpy())
    pid, tid = api["pid"].to_numpy()[rows], api["tid"].to_numpy()[rows]
    return [(int(p), int(t)) if ok else (None, None) for p, t, ok in zip(pid, tid, found, strict=True)]


def api_groups(ctx: RuleContext, min_share_pct: float, min_count: int) -> tuple[pd.DataFrame, float] | None:
    """Tail statistics per host API name (``api`` column, ``share`` of the window), and the window's length.

    Names whose calls add up to less than ``min_share_pct`` of the window (a tail is at most the
    calls' whole time) or number fewer than ``min_count`` cannot be reported and are left out
    before the sort, as are calls that wait by design (synchronization); None when none is left.
    """
    api = ctx.frame("api")
    if api.empty:
        return None
    # Judge each distinct name once, then map by category code: never a regex per call.
    names = ctx.api_base_names()
    codes = category_codes(names)  # a view: ``.cat.codes`` copies 2.2M codes
    uniques = names.cat.categories
    waiting = np.array([is_waiting_call(str(n)) for n in uniques] + [True], bool)  # last: NULL
    lo, hi = ctx.window_bounds()
    window_ns = float(max(hi - lo, 1))
    start, end = api["start"].to_numpy(), api["end"].to_numpy()
    count, total = code_durations(codes, start, end, len(uniques))
    reportable = ~waiting[:-1] & (total / window_ns >= min_share_pct / 100) & (count >= min_count)
    if not reportable.any():
        return None
    # Only the reportable calls, as int64 ns (exact; tail_table's sums and quantiles come out the
    # same as from float64) and their name codes: the smallest arrays that hold them.
    sub = rows_with_codes(codes, np.flatnonzero(reportable), np.append(reportable, False))
    durations = masked_durations(start, end, sub)
    if int(np.count_nonzero(reportable)) == 1 and len(durations):  # one name (usual): one group, no factorize
        group, first = np.zeros(len(durations), np.int32), np.flatnonzero(reportable)
    else:
        picked = codes[sub]
        group, first = pd.factorize(picked)  # first: the name code of each group
        group = group.astype(np.int32)
        del picked
    del sub
    table = tail_table(group, durations)
    del group, durations
    table["api"] = [str(uniques[c]) for c in first.tolist()]
    table["share"] = table["tail_cost"] / window_ns
    return table, window_ns


def copy_call_sizes(ctx: RuleContext, name: str) -> tuple[np.ndarray, np.ndarray] | None:
    """Durations and bytes of the window's calls of copy API ``name`` (base name), matched to their memcpy rows by
    process and correlation id; None when the trace has no copy rows for them."""
    if "Memcpy" not in name or not ctx.trace.has("memcpy"):
        return None
    api = ctx.frame("api")
    if "correlation_id" not in api.columns:
        return None
    mine = (ctx.api_base_names() == name).to_numpy()
    calls = api.loc[mine, ["start", "end", "pid", "correlation_id"]]
    copies = ctx.frame("memcpy", ["pid", "correlation_id", "bytes"])
    if calls.empty or copies.empty:
        return None
    sizes = copies.groupby(["pid", "correlation_id"], sort=False)["bytes"].sum()
    key = pd.MultiIndex.from_arrays([calls["pid"].to_numpy(), calls["correlation_id"].to_numpy()])
    nbytes = sizes.reindex(key).to_numpy()
    known = ~np.isnan(nbytes.astype(float))
    if known.sum() < 2:
        return None
    durations = (calls["end"] - calls["start"]).to_numpy(np.int64)[known]
    return durations, nbytes[known].astype(np.int64)
