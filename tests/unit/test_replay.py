"""The what-if replay of one step (nsys_rules.analysis.replay, replay_edits): hand-made steps with known answers."""

from __future__ import annotations

import dataclasses

import numpy as np

from nsys_rules.analysis import replay_edits as edits
from nsys_rules.analysis.replay import (CALL_LAUNCH, CALL_SYNC, OP_KERNEL, StepTemplate, critical_gpu_ns,
                                        event_order, replay)

US = 1_000


def _step(gaps: list[int], durs: list[int], kernels: list[int], sync_waits_for: int | None = None,
          tail: int = 0, lat: int = 4 * US) -> StepTemplate:
    """One thread launching one kernel per call (the last call a sync waiting for kernel ``sync_waits_for``)."""
    n_calls = len(durs)
    launches = n_calls - (1 if sync_waits_for is not None else 0)
    starts, ends, t = [], [], 0
    for g, d in zip(gaps, durs, strict=True):
        t += g
        starts.append(t)
        t += d
        ends.append(t)
    op_start = np.array([starts[k] + lat for k in range(launches)], np.int64)
    wait = np.full(n_calls, -1, np.int64)
    kind = np.full(n_calls, CALL_LAUNCH, np.int64)
    ret = np.zeros(n_calls, np.int64)
    if sync_waits_for is not None:
        wait[-1], kind[-1], ret[-1] = sync_waits_for, CALL_SYNC, 2 * US
    return StepTemplate(
        call_thread=np.zeros(n_calls, np.int64), call_gap=np.array(gaps, np.int64),
        call_offset=np.array(starts, np.int64), call_dur=np.array(durs, np.int64), call_wait=wait,
        call_wait_prev=np.zeros(n_calls, bool), call_ret=ret, tail_ns=tail,
        op_call=np.arange(launches, dtype=np.int64), op_lat=np.full(launches, lat, np.int64),
        op_dur=np.array(kernels, np.int64), op_gap=np.full(launches, US, np.int64),
        op_stream=np.zeros(launches, np.int64), op_dep=np.full(launches, -1, np.int64),
        op_dep_prev=np.zeros(launches, bool), op_step=np.ones(launches, bool), call_kind=kind,
        op_kind=np.full(launches, OP_KERNEL, np.int64), op_class=np.zeros(launches, np.int64),
        op_bytes=np.full(launches, -1, np.int64), op_copy_kind=np.full(launches, -1, np.int64),
        op_engine=np.full(launches, -1, np.int64),
        order=event_order(np.array(starts, np.int64), np.array(ends, np.int64), op_start))


def test_host_bound_step_is_the_host_loop() -> None:
    # 10 launches of 5 us with 20 us of host between them, 2 us kernels: the host sets the pace.
    t = _step([20 * US] * 10, [5 * US] * 10, [2 * US] * 10, tail=30 * US)
    assert t.host_ns == 280 * US
    assert replay(t).period_ns == 280 * US


def test_gpu_bound_step_is_the_kernels_and_their_gaps() -> None:
    # 100 us kernels launched every 6 us: the queue grows and the GPU sets the pace (10 x (100 + 1 us gap)).
    t = _step([1 * US] * 10, [5 * US] * 10, [100 * US] * 10)
    assert replay(t).period_ns == 10 * 101 * US
    assert critical_gpu_ns(t) == 1000 * US


def test_a_sync_waits_for_the_gpu_and_removing_it_overlaps_host_and_gpu() -> None:
    # 4 launches then a sync on the last kernel: host 4 x 10 us, GPU 4 x 50 us behind it, 30 us of host after.
    t = _step([5 * US] * 5, [5 * US] * 4 + [1 * US], [50 * US] * 4, sync_waits_for=3, tail=30 * US)
    synced = replay(t).period_ns
    # The last kernel starts at 4 us (launch) + 3 x 51 us and ends 50 us later; the sync returns 2 us after; then
    # 30 us of host: 15 + 4 ... checked as the sum of the chain.
    first_start = 5 * US + 4 * US
    gpu_end = first_start + 4 * 50 * US + 3 * US
    assert synced == gpu_end + 2 * US + 30 * US
    free = replay(edits.without_syncs(t)).period_ns
    assert free == 4 * 51 * US  # without the sync the GPU's own work paces the loop
    assert synced - free > 0


def test_graphs_remove_launching_host_time_but_keep_long_host_work() -> None:
    # 20 launches with 15 us of dispatch between them and one 300 us block of host work in the middle.
    gaps = [15 * US] * 20
    gaps[10] = 300 * US
    t = _step(gaps, [6 * US] * 20, [2 * US] * 20, tail=10 * US)
    eager = replay(t).period_ns
    assert eager == t.host_ns
    graphed = replay(edits.as_graphs(t, launch_ns=10 * US, graph_gap_ns=US, keep_gap_ns=200 * US)).period_ns
    # Left: the first gap, the graph launch, the 300 us block, the tail (the kernels run under the block).
    assert graphed == 15 * US + 10 * US + 300 * US + 10 * US
    assert graphed < eager


def test_prep_moved_to_a_worker_never_goes_below_the_worker() -> None:
    t = _step([2_000 * US] + [10 * US] * 4, [5 * US] * 5, [100 * US] * 5)
    moved_t, moved = edits.prep_to_worker(t, 1_000 * US)
    assert moved == 2_000 * US
    period = replay(moved_t).period_ns
    assert period < 2_000 * US  # the launching thread alone would now run at the GPU's pace
    assert edits.floor_ns(moved, period) == 2_000 * US


def test_cross_stream_dependency_and_copy_engine_order() -> None:
    t = _step([1 * US] * 3, [2 * US] * 3, [40 * US, 40 * US, 10 * US])
    # Kernel 2 runs on stream 1 after kernel 0 (an event wait); kernel 1 on stream 0 after kernel 0.
    t = dataclasses.replace(t, op_stream=np.array([0, 0, 1], np.int64), op_dep=np.array([-1, -1, 0], np.int64),
                            op_gap=np.zeros(3, np.int64))
    r = replay(t)
    assert r.op_start[2] == r.op_end[0]  # waited for kernel 0, not for its own launch
    assert r.op_start[1] == r.op_end[0]
    serial = dataclasses.replace(t, op_engine=np.array([-1, 5, 5], np.int64))
    r = replay(serial)
    assert r.op_start[2] >= r.op_end[1]  # one engine: kernel 2 waits for kernel 1 as well


def test_scaled_kernels_and_cached_allocations() -> None:
    t = _step([1 * US] * 4, [5 * US] * 4, [100 * US] * 4)
    faster = edits.scaled_kernels(t, np.array([0]), 0.5)
    assert replay(faster).period_ns == 4 * 51 * US
    assert (edits.cached_allocations(t).call_dur == t.call_dur).all()  # no allocations: nothing changes
