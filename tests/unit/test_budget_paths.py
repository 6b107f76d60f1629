"""The budget's idle shortcuts against the plain computations they replace."""

from __future__ import annotations

import numpy as np
import pytest

from nsys_rules.model import budget as budget_module
from nsys_rules.model import budget_idle
from nsys_rules.model.budget_idle import _cut, _holding, _run_sums, _runs
from nsys_rules.analysis.intervals import Coverage, merge_intervals
from nsys_rules.model.steps import step_model
from nsys_rules.inputs import open_trace
from nsys_rules.testing import MAIN_TID, TraceBuilder


def _disjoint(rng, n, span=10_000):
    cuts = np.sort(rng.integers(0, span, 2 * n))
    a, b = cuts[0::2].astype(np.int64), cuts[1::2].astype(np.int64)
    return a, np.maximum(b, a)


def _plain_pieces(starts, ends, cuts):
    """Each interval cut at every cut strictly inside it, piece by piece."""
    first_e, more = [], []
    for i, (s, e) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True)):
        inside = [c for c in cuts.tolist() if s < c < e]
        first_e.append(inside[0] if inside else e)
        for k, c in enumerate(inside):
            more.append((c, inside[k + 1] if k + 1 < len(inside) else e, i))
    return first_e, more


@pytest.mark.parametrize("seed", range(20))
def test_cut_equals_piece_by_piece(seed):
    rng = np.random.default_rng(seed)
    for _ in range(100):
        starts, ends = _disjoint(rng, int(rng.integers(1, 30)))
        cuts = np.sort(rng.integers(-100, 10_100, int(rng.integers(0, 40))))
        if len(cuts) > 2:
            cuts[1] = cuts[2]  # equal step starts (an empty step)
        first_e, more_s, more_e, owner = _cut(starts, ends, cuts)
        want_first, want_more = _plain_pieces(starts, ends, cuts)
        assert first_e.tolist() == want_first
        assert list(zip(more_s.tolist(), more_e.tolist(), owner.tolist(), strict=True)) == want_more


@pytest.mark.parametrize("seed", range(10))
def test_touching_holds_every_query_that_overlaps(seed):
    rng = np.random.default_rng(seed)
    for _ in range(100):
        n = int(rng.integers(0, 20))
        s = np.sort(rng.integers(0, 10_000, n))
        cover = Coverage(*merge_intervals(s, s + rng.integers(0, 300, n)))
        a, b = _disjoint(rng, int(rng.integers(1, 500)))
        touched = np.zeros(len(a), bool)
        touched[cover.touching(a, b)] = True
        assert (cover.within(a, b)[~touched] == 0).all()


@pytest.mark.parametrize("seed", range(10))
def test_holding_finds_the_pieces_with_a_time_inside(seed):
    rng = np.random.default_rng(seed)
    for _ in range(100):
        a, b = _disjoint(rng, int(rng.integers(1, 50)))
        times = np.sort(rng.integers(-10, 10_010, int(rng.integers(0, 20))))
        want = [i for i in range(len(a)) if ((times > a[i]) & (times <= b[i])).any()]
        assert _holding(a, b, times).tolist() == want


@pytest.mark.parametrize("seed", range(10))
def test_run_sums_equal_a_sum_per_step(seed):
    rng = np.random.default_rng(seed)
    steps_start = np.sort(rng.integers(0, 10_000, 12))
    steps = np.stack([steps_start, np.append(steps_start[1:], 10_000)], axis=1)
    a = np.sort(rng.integers(int(steps_start[0]), 10_000, 300))
    values = rng.integers(0, 1_000_000, len(a))
    step = np.searchsorted(steps[:, 0], a, side="right") - 1
    want = np.bincount(step, weights=values, minlength=len(steps)).astype(np.int64)
    assert _run_sums(values, _runs(a, steps)).tolist() == want.tolist()


def _eager_trace(path):
    """An eager loop launched from two threads, with allocations, module loads and syncs between kernels,
    work on a second stream overlapping the loop's, and GPU gaps that cross step boundaries."""
    b = TraceBuilder(launch_duration=3_000)
    rng = np.random.default_rng(7)
    t0 = 100_000_000
    for i in range(8):
        s = t0 + i * 1_000_000
        b.nvtx("step", s, s + 900_000)
        t = s + 20_000
        for j in range(12):
            tid = 1 if j % 5 == 0 else None
            at = t - int(rng.integers(2_000, 30_000))
            if j == 3 and i % 2 and i > 2:
                b.api("cudaMalloc_v3020", at - 40_000, 20_000)
            if j == 6 and i in (4, 6):
                b.api("cuLibraryLoadData", t - 8_000, 2_000)
            if j == 9:
                b.sync(at - 60_000, 50_000)
            kwargs = {"tid": MAIN_TID + tid} if tid else {}
            b.kernel("k", start=t, duration=int(rng.integers(5_000, 40_000)), launch_at=at, **kwargs)
            if j % 4 == 1:  # work on a second stream overlapping the loop's: busy periods of several operations
                b.kernel("side", start=t + 2_000, duration=int(rng.integers(5_000, 60_000)), launch_at=at + 500,
                         stream=9)
            t += int(rng.integers(30_000, 90_000))
    return b.write(path)


def test_budget_the_same_for_any_gap_batch(tmp_path, monkeypatch):
    path = _eager_trace(tmp_path / "t.sqlite")
    results = []
    for batch in (1, 2, 3, 7, 1 << 20):
        monkeypatch.setattr(budget_idle, "GAP_BATCH", batch)
        trace = open_trace(path)
        try:
            budget = budget_module._budget(trace, step_model(trace))
        finally:
            trace.close()
        results.append({k: v.tolist() for k, v in budget.per_step.items()})
    assert results[0]["launch_wait"] and sum(results[0]["launch_wait"]) > 0
    assert all(r == results[0] for r in results[1:])


# -- the step model's shortcuts for launches in start order ---------------------------------------


def _ops(launch, start, end):
    from nsys_rules.model.activity import _FIELDS, GpuOps

    n = len(start)
    fields = {name: np.zeros(n, np.int32) for name in _FIELDS}
    fields.update(start=start, end=end, launch=launch, by_graph=np.zeros(n, bool))
    return GpuOps(**fields)


@pytest.mark.parametrize("seed", range(10))
def test_work_in_rising_launches_equals_point_in(seed):
    from nsys_rules.analysis.intervals import point_in
    from nsys_rules.model.step_nvtx import _sorted_launches, _work_in

    rng = np.random.default_rng(seed)
    for _ in range(100):
        n = int(rng.integers(1, 200))
        start = np.sort(rng.integers(0, 10_000, n)).astype(np.int64)
        end = start + rng.integers(0, 500, n)
        launch = np.sort(start - rng.integers(0, 300, n))  # in start order, as one thread launches
        launch[: int(rng.integers(0, 3))] = -1  # untraced launches come first
        ops = _ops(launch, start, end)
        s, e = _disjoint(rng, int(rng.integers(1, 20)))
        if rng.random() < 0.3:
            s = s.copy()
            s[-1] = e[-1] = 20_000  # the last interval holds nothing
            s, e = np.sort(s), np.sort(e)
        index = point_in(launch, s, e)
        held = index >= 0
        first = np.full(len(s), np.iinfo(np.int64).max, np.int64)
        last = np.full(len(s), -1, np.int64)
        np.minimum.at(first, index[held], start[held])
        np.maximum.at(last, index[held], end[held])
        got = _work_in(ops, s, e)
        assert got[0].tolist() == first.tolist() and got[1].tolist() == last.tolist()
        assert _sorted_launches(ops).tolist() == np.sort(launch[launch >= 0]).tolist()


@pytest.mark.parametrize("seed", range(10))
def test_search_near_equals_searchsorted_for_any_guess(seed):
    from nsys_rules.analysis.intervals import search_near

    rng = np.random.default_rng(seed)
    for _ in range(100):
        values = np.sort(rng.integers(0, 1_000, int(rng.integers(0, 60))))  # repeated values too
        t = np.sort(rng.integers(-20, 1_020, int(rng.integers(0, 80))))
        for side in ("left", "right"):
            want = np.searchsorted(values, t, side=side)
            for guess in (want, want + rng.integers(-2, 3, len(t)), rng.integers(-5, len(values) + 5, len(t))):
                assert search_near(values, t, guess, side=side).tolist() == want.tolist()


@pytest.mark.parametrize("seed", range(5))
def test_within_with_guesses_equals_within(seed):
    rng = np.random.default_rng(seed)
    s = np.sort(rng.integers(0, 10_000, 300))
    cover = Coverage(s, s + 10)  # the calls of one thread, one after another
    a, b = _disjoint(rng, 200)
    ga = np.searchsorted(s, a, side="right") + rng.integers(-1, 2, len(a))
    gb = np.searchsorted(s, b, side="right") + rng.integers(-1, 2, len(b))
    assert cover.within(a, b, ga, gb).tolist() == cover.within(a, b).tolist()


# -- the GPU activity table's merge of a few copies into a million kernels --------------------------


def _part(rng, n, kind, constant=False):
    from nsys_rules.model.activity import _FIELDS
    from nsys_rules.loaders.columns import one_value

    start = np.sort(rng.integers(0, 1_000_000, n)).astype(np.int64)
    part = {name: rng.integers(-1, 5, n).astype(np.int32) for name in _FIELDS}
    part.update(start=start, end=start + 10, kind=np.full(n, kind, np.int8), by_graph=rng.random(n) < 0.1)
    if constant:  # one process on one device: zero-stride columns, as the loader keeps them
        part.update(pid=one_value(np.full(n, 7, np.int32)), device=one_value(np.zeros(n, np.int32)))
    return part


@pytest.mark.parametrize("seed", range(6))
def test_merge_of_a_few_rows_equals_the_masked_merge(seed, monkeypatch):
    from nsys_rules.model import activity, activity_merge

    rng = np.random.default_rng(seed)
    big = _part(rng, 5_000, 0, constant=True)
    for small_rows in (1, 3, 40):
        parts = [big, _part(rng, small_rows, 1, constant=seed % 2 == 0)]
        few = activity_merge.merge_parts(parts, activity._FIELDS)
        monkeypatch.setattr(activity_merge, "_FEW_SMALL", -1)
        masked = activity_merge.merge_parts(parts, activity._FIELDS)
        monkeypatch.undo()
        for name, values in masked.items():
            assert few[name].dtype == values.dtype and few[name].tolist() == values.tolist(), name
            kept = activity.one_value(values)
            assert (few[name].strides == (0,)) == (kept.strides == (0,)), name


@pytest.mark.parametrize("seed", range(10))
def test_step_index_of_rising_launches_equals_point_in(seed):
    from nsys_rules.analysis.intervals import point_in
    from nsys_rules.model.steps import _step_index
    from nsys_rules.loaders.columns import ONE_VALUE_ROWS, one_value

    rng = np.random.default_rng(seed)
    for _ in range(20):
        n = ONE_VALUE_ROWS + int(rng.integers(0, 500))
        start = np.sort(rng.integers(0, 1_000_000, n)).astype(np.int64)
        launch = np.sort(start - rng.integers(0, 300, n))
        launch[: int(rng.integers(0, 3))] = -1
        ops = _ops(launch, start, start + 5)
        ops = type(ops)(**{**ops.__dict__, "pid": one_value(np.full(n, 3, np.int32))})
        host = np.stack(_disjoint(rng, int(rng.integers(1, 40)), span=1_000_000), axis=1)
        want = np.full(n, -1, np.int64)
        known = launch >= 0
        want[known] = point_in(launch[known], host[:, 0], host[:, 1])
        assert _step_index(ops, host, 3).tolist() == want.tolist()
        assert _step_index(ops, host, None).tolist() == want.tolist()
        assert (_step_index(ops, host, 4) == -1).all()  # another process launched nothing here


# -- the budget's busy parts: only the crowded operations need unions ------------------------------


def _plain_busy_parts(ops, own, a, b):
    """Unions of the loop's classes in priority order, over every operation (work one operation after
    another: each class's own operations, which are disjoint already)."""
    from nsys_rules.model.activity import BUSY_CLASSES
    from nsys_rules.model.budget import BUSY_PRIORITY, CLASS_PART, _serial

    serial = _serial(ops.start[own], ops.end[own])
    parts, before, grown = {}, np.zeros(len(a), np.int64), np.zeros(len(ops), bool)
    for cls in BUSY_PRIORITY:
        mine = own & (ops.cls == BUSY_CLASSES.index(cls))
        if serial:
            parts[CLASS_PART[cls]] = Coverage(ops.start[mine], ops.end[mine]).within(a, b)
            before = before + parts[CLASS_PART[cls]]
            continue
        grown |= mine
        cover = Coverage(*merge_intervals(ops.start[grown], ops.end[grown])).within(a, b) if grown.any() \
            else np.zeros(len(a), np.int64)
        parts[CLASS_PART[cls]] = cover - before
        before = cover
    return parts, before


@pytest.mark.parametrize("seed", range(10))
def test_busy_parts_equal_the_unions_in_priority_order(seed):
    from nsys_rules.model.activity import BUSY_CLASSES
    from nsys_rules.model.budget import _busy_parts

    rng = np.random.default_rng(seed)
    for trial in range(150):
        n = int(rng.integers(1, 60))
        start = np.sort(rng.integers(0, 2_000, n)).astype(np.int64)
        end = start + rng.integers(0, 80, n)
        if trial % 3 == 1:  # mostly one after another, a few overlapping
            end = np.minimum(end, np.append(start[1:], end[-1]) + 3 * (rng.random(n) < 0.1))
        elif trial % 3 == 2:  # a damaged row (end before start) among overlapping ones: all through the unions
            end = start + 300
            k = int(rng.integers(0, n))
            end[k] = start[k] - 5
        ops = _ops(np.zeros(n, np.int64), start, end)
        ops = type(ops)(**{**ops.__dict__, "cls": rng.integers(0, len(BUSY_CLASSES), n).astype(np.int8)})
        own = rng.random(n) < (0.8 if trial % 2 else 1.01)
        cuts = np.sort(rng.integers(-50, 2_100, int(rng.integers(2, 12))))
        a, b = cuts[:-1], cuts[1:]
        got, total = _busy_parts(ops, own, a, b)
        want, want_total = _plain_busy_parts(ops, own, a, b)
        assert total.tolist() == want_total.tolist()
        assert {k: v.tolist() for k, v in got.items()} == {k: v.tolist() for k, v in want.items()}
