"""Graph replays traced as whole graphs are GPU activity: no idle gap inside one, full utilization."""

from __future__ import annotations

from pathlib import Path

from nsys_rules.testing import TraceBuilder, run_rule
from nsys_rules.testing import metric_values as values

T0 = 100_000_000
REPLAY_NS = 2_000_000
SAMPLER_NS = 100_000
SHORT_GAP, LONG_GAP = 150_000, 400_000


def replay_loop(path: Path, *, replays: bool) -> tuple[Path, list[tuple[int, int]]]:
    """40 steps of a 2 ms graph replay and a sampler kernel, idle 150/400 us between steps.

    Returns the trace and the true idle intervals between steps. Without ``replays`` the
    GRAPH_TRACE rows are left out, so the GPU looks idle for the replays' 2 ms as well.
    """
    b = TraceBuilder(graph_trace_mode="Graph")
    t = T0
    idle: list[tuple[int, int]] = []
    for i in range(40):
        b.nvtx("step", t - 20_000, t + REPLAY_NS + 600_000)
        b.graph_launch(t, REPLAY_NS, launch_at=t - 10_000, traced_as_graph=replays)
        sampler_end = t + REPLAY_NS + 5_000 + SAMPLER_NS
        b.kernel("sampler", start=t + REPLAY_NS + 5_000, duration=SAMPLER_NS)
        t = sampler_end + (LONG_GAP if i % 2 else SHORT_GAP)
        if i < 39:
            idle.append((sampler_end, t))
    return b.write(path), idle


def test_no_idle_gap_is_reported_inside_a_graph_replay(tmp_path):
    trace, idle = replay_loop(tmp_path / "graph.sqlite", replays=True)
    (finding,) = run_rule("gpu-idle-gaps", trace)
    got = values(finding)
    assert got["longest_gap"] == LONG_GAP
    assert got["gaps"] == len(idle)
    assert got["idle_time"] == sum(end - start for start, end in idle)
    # The longest gaps the message names start where a sampler ends, never inside a replay.
    assert "0.400 ms at 0.104360 s" in finding.message


def test_a_graph_replay_loop_is_not_low_utilization(tmp_path):
    trace, _ = replay_loop(tmp_path / "graph.sqlite", replays=True)
    assert run_rule("gpu-low-utilization", trace) == []


def test_without_the_replay_rows_the_gpu_looks_idle(tmp_path):
    # The control: the same loop with the replays untraced shows the 2 ms holes the
    # replays fill, so the two tests above depend on replays being counted.
    trace, _ = replay_loop(tmp_path / "bare.sqlite", replays=False)
    (finding,) = run_rule("gpu-idle-gaps", trace)
    assert values(finding)["longest_gap"] > REPLAY_NS
