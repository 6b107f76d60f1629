"""What launch-bound measures: per device, how busy the kernels launched one by one keep the GPU, and the gaps
where it waited for the next launch.

No judgement here: :class:`DeviceLaunches` holds one device's numbers; ``judge`` weighs them
and ``phrase`` says them. The kernel columns are million-row arrays, so the launch calls'
starts are freed before the per-device profiles are taken.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np
import pandas as pd

from nsys_rules.api import MissingData, RuleContext
from nsys_rules.api.analysis import GRAPH_LAUNCH_APIS, busy_ns, duration_sum, first_of_each_call, in_set, key_int


@dataclass(frozen=True)
class LaunchProfile:
    """The numbers launch-bound judges, for one device in the judged window."""

    kernels: int
    judged_ns: int
    busy_ns: int
    median_kernel_ns: float
    launch_calls: int
    launch_api_ns: int
    starved_gaps: int
    starved_ns: int
    savings_ns: int

    @property
    def busy_share(self) -> float:
        """Share of the judged time with at least one kernel running."""
        return self.busy_ns / self.judged_ns if self.judged_ns else 0.0

    @property
    def launch_api_per_kernel(self) -> float:
        """Launch API time per kernel (ns)."""
        return self.launch_api_ns / max(self.kernels, 1)


@dataclass(frozen=True)
class DeviceLaunches:
    """One device's launch profile in the judged window ``[lo, hi]``, and what the loop replays as graphs."""

    device: int
    profile: LaunchProfile
    lo: int
    hi: int
    graph_loop: bool  # the loop replays CUDA graphs: what runs between replays is host work, not launches
    graph_launches: int  # graph launch calls in the window
    #: Of the profile's kernels, those replayed from graphs (kept when the GPU waits between replays).
    replayed: int = 0


def launch_profile(kernels: pd.DataFrame, api_end: np.ndarray, lo: int, hi: int, launch_api_ns: int,
                   launch_calls: int, max_launch_gap_ns: int, graph_gap_ns: int) -> LaunchProfile:
    """Busy share, kernel sizes and the idle gaps the host caused (one device).

    A gap before a kernel is a launch gap when the GPU had run dry (every earlier kernel had
    ended) before the call launching this kernel returned, i.e. the GPU waited for the host,
    and the gap is at most ``max_launch_gap_ns``. With a CUDA graph ``graph_gap_ns`` per
    kernel remains, so the saving is the rest of each launch gap.
    """
    s = kernels["start"].to_numpy()
    e = kernels["end"].to_numpy()
    launched = np.asarray(api_end)
    if len(s) > 1 and not bool((s[1:] >= s[:-1]).all()):  # kernels usually come in start order: no sort
        order = np.argsort(s, kind="stable")
        s, e, launched = s[order], e[order], launched[order]
    median = float(np.median(e - s, overwrite_input=True)) if len(s) else 0.0  # partitions its own temporary
    if len(s) > 1:
        # Ends in order need no running max (a view), and the masks are combined in place: no
        # temporary as long as the kernels beyond the ones needed.
        prev_end = (e if len(e) < 2 or bool((e[1:] >= e[:-1]).all()) else np.maximum.accumulate(e))[:-1]
        gap = s[1:] - prev_end
        starved = launched[1:] >= prev_end  # the GPU waited for the launch call
        starved &= launched[1:] >= 0
        starved &= gap > 0
        starved &= gap <= max_launch_gap_ns
        starved &= prev_end >= lo
        starved &= s[1:] <= hi
        del prev_end
        # Sums over the starved gaps in place (``where=``): no gathered copy of them.
        starved_ns = int(np.sum(gap, where=starved))
        gap -= graph_gap_ns
        np.maximum(gap, 0, out=gap)
        savings = int(np.sum(gap, where=starved))
        n_starved = int(np.count_nonzero(starved))
        del gap, starved
    else:
        starved_ns = savings = n_starved = 0
    return LaunchProfile(len(s), max(0, hi - lo), busy_ns(s, e, lo, hi), median,
                         launch_calls, launch_api_ns, n_starved, starved_ns, savings)


def judged_bounds(ctx: RuleContext, kernels: pd.DataFrame) -> tuple[int, int]:
    """The steady window, clipped to the kernels launched in it."""
    k_lo, k_hi = int(kernels["start"].min()), int(kernels["end"].max())
    bounds = ctx.window.bounds
    if bounds is None:
        return k_lo, k_hi
    lo = max(int(bounds[0]), int(kernels["launch_start"].min()))
    return lo, min(max(int(bounds[1]), k_lo), k_hi)


def launch_calls_per_device(kernels: pd.DataFrame, first_of_call: np.ndarray, api_start: np.ndarray,
                            api_end: np.ndarray) -> list[tuple[int, slice | np.ndarray, int, int]]:
    """Per device: its id, its kernels' rows, and the time and number of the calls that launched them.

    ``first_of_call`` marks the first kernel of each launch call (a call counts once).
    """
    device = kernels["device_id"].to_numpy()
    by_device: dict[int, slice | np.ndarray]
    if len(device) and device.dtype.kind in "iu" and int(device.min()) == int(device.max()):
        by_device = {int(device[0]): slice(None)}  # one device (the usual case): no row index of every kernel
    else:
        by_device = {key_int(dev): np.asarray(idx) for dev, idx in kernels.groupby("device_id", sort=True).groups.items()}
    out: list[tuple[int, slice | np.ndarray, int, int]] = []
    for dev, sel in by_device.items():
        if not isinstance(sel, slice) and len(sel) == len(kernels):  # one device: the frame itself, no copies
            sel = slice(None)
        launching = first_of_call[sel]
        out.append((dev, sel, duration_sum(api_start[sel], api_end[sel], launching), int(launching.sum())))
    return out


def device_launches(ctx: RuleContext, min_kernels: int, max_launch_gap_ns: int, graph_gap_ns: int
                    ) -> Iterator[DeviceLaunches]:
    """Each device's launch profile of the window's kernels launched one by one (none under ``min_kernels``)."""
    kernels = ctx.frame("kernels")
    api = ctx.launch_calls("kernels", columns=("api_start", "api_end", "api_name"))
    # Kernels replayed from a CUDA graph are already launched as one: only kernels launched one
    # by one can be launch-bound, and a graph replay loop is never told to use CUDA graphs.
    by_graph = in_set(api["api_name"], GRAPH_LAUNCH_APIS)
    graph_loop = (ctx.steps is not None and ctx.steps.source == "graph") or by_graph.mean() >= 0.5 if len(
        kernels) else False
    # A replay loop whose GPU still waits a tenth of the steady state for the host between launches (the
    # work between replays, a scan replayed as many graphs per step) keeps its replays in the profile:
    # that wait is this rule's to own, whatever few kernels are launched one by one.
    budget = ctx.budget
    between = bool(graph_loop and budget is not None and budget.total_ns
                   and budget.ns("launch_wait") >= 0.1 * budget.total_ns)
    if by_graph.any() and not (between and int((~by_graph).sum()) < min_kernels):
        kernels = kernels.loc[~by_graph].reset_index(drop=True)
        api = api.loc[~by_graph].reset_index(drop=True)
        by_graph = np.zeros(len(kernels), bool)
    replayed = np.asarray(by_graph, bool)
    if len(kernels) < min_kernels:
        return
    lo, hi = judged_bounds(ctx, kernels)
    if hi <= lo:
        raise MissingData("the steady state holds no kernel time", "capture more steps")
    graphs = int(in_set(ctx.api_base_names(), GRAPH_LAUNCH_APIS).sum())
    first_of_call = first_of_each_call(kernels["pid"].to_numpy(), kernels["correlation_id"].to_numpy())
    api_start = api["api_start"].to_numpy()
    first_of_call &= api_start >= 0
    api_end = api["api_end"].to_numpy()
    del api
    # The launch calls' time per device first: the calls' starts are then freed before the profiles.
    devices = launch_calls_per_device(kernels, first_of_call, api_start, api_end)
    del api_start, first_of_call
    for dev, sel, call_ns, calls in devices:
        prof = launch_profile(kernels.iloc[sel], api_end[sel], lo, hi, call_ns, calls, max_launch_gap_ns, graph_gap_ns)
        yield DeviceLaunches(int(dev), prof, lo, hi, bool(graph_loop), graphs, int(replayed[sel].sum()))
