"""Steady state: a lone synchronize between two early steps is the harness's end-of-warm-up barrier."""

from __future__ import annotations

from nsys_rules.inputs import open_trace
from nsys_rules.testing import TraceBuilder
from nsys_rules.model.windows import steady_state_window

STEP = 1_000_000


def steps_of(path) -> tuple[int, str]:
    trace = open_trace(path)
    try:
        window = steady_state_window(trace)
        return len(window.steps), window.source
    finally:
        trace.close()


def loop(b: TraceBuilder, n: int = 12) -> None:
    for i in range(n):
        s = 10_000_000 + i * STEP
        b.nvtx("decode_step", s, s + STEP - 100_000)
        b.kernel("gemv", start=s + 20_000, duration=500_000, launch_at=s + 1_000)


def test_barrier_after_warmup_steps_drops_them(tmp_path):
    b = TraceBuilder()
    loop(b)
    b.sync(10_000_000 + 3 * STEP - 80_000, 20_000)  # after the third step, before the fourth
    count, source = steps_of(b.write(tmp_path / "t.sqlite"))
    assert count == 9 and "3 warm-up" in source


def test_sync_between_every_step_is_the_loop_not_a_barrier(tmp_path):
    b = TraceBuilder()
    loop(b)
    for i in range(11):
        b.sync(10_000_000 + (i + 1) * STEP - 80_000, 20_000)
    assert steps_of(b.write(tmp_path / "t.sqlite"))[0] == 12


def test_lone_sync_in_the_second_half_is_not_a_barrier(tmp_path):
    b = TraceBuilder()
    loop(b)
    b.sync(10_000_000 + 8 * STEP - 80_000, 20_000)
    assert steps_of(b.write(tmp_path / "t.sqlite"))[0] == 12


def test_sync_inside_steps_is_not_a_barrier(tmp_path):
    b = TraceBuilder()
    loop(b)
    b.sync(10_000_000 + 2 * STEP + 600_000, 20_000)
    assert steps_of(b.write(tmp_path / "t.sqlite"))[0] == 12
