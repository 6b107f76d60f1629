"""capture-scope: loading and warm-up in the capture (firing), profiler-API captures and tight captures (quiet)."""

from __future__ import annotations

import pytest

from nsys_rules.findings import Severity
from nsys_rules.testing import TraceBuilder, run_rule
from nsys_rules.testing import metric_values as values
from tests.rules import scenarios

S = 1_000_000_000


def program(b: TraceBuilder, *, steady_at: int, steps: int = 10, step_ns: int = 10_000_000) -> int:
    """Start-up at 0.1 s, weights copied at 0.2 s, steps from ``steady_at``; returns the end."""
    b.api("cudaFree_v3020", S // 10, 100_000_000)
    for i in range(4):
        b.memcpy(S // 5 + i * 1_000_000, 500_000, 256 << 20, kind="HtoD", src="pinned")
    for i in range(steps):
        s = steady_at + i * step_ns
        b.nvtx("decode_step", s, s + step_ns - 100_000)
        b.kernel("gemv", start=s + 100_000, duration=step_ns // 2)
    return steady_at + steps * step_ns



def test_loading_before_the_steps_is_reported_with_the_numbers(tmp_path):
    b = TraceBuilder()
    program(b, steady_at=3 * S)
    (f,) = run_rule("capture-scope", b.write(tmp_path / "t.sqlite"))
    v = values(f)
    assert f.severity == Severity.INFO
    assert v["time_before_steady_state"] == 3 * S
    assert v["htod_bytes_before_steady_state"] == 4 * (256 << 20)
    assert v["first_kernel_at"] == 3 * S + 100_000
    last_kernel_end = 3 * S + 9 * 10_000_000 + 100_000 + 5_000_000
    assert (f.location.start_ns, f.location.end_ns) == (3 * S, last_kernel_end)
    assert "--delay=3" in f.recommendation and "-c cudaProfilerApi" in f.recommendation
    # Microseconds, rounded outward: the last kernel ends at 3095.1 ms, which 3095ms would cut.
    assert "--filter-time 3000000us/3095100us" in f.recommendation


def test_filter_bounds_round_outward():
    from nsys_rules.rules.capture_scope import filter_time_bounds

    assert filter_time_bounds(6_181_651_784, 6_290_129_037) == "6181651us/6290130us"
    assert filter_time_bounds(3_000_000_000, 3_095_100_000) == "3000000us/3095100us"
    assert filter_time_bounds(-5, 999) == "0us/1us"


def test_the_suggested_filter_is_not_suggested_again(tmp_path):
    b = TraceBuilder()
    program(b, steady_at=3 * S + 600_123)  # off a millisecond: 3001ms would have cut the first step
    path = b.write(tmp_path / "t.sqlite")
    (f,) = run_rule("capture-scope", path)
    spec = f.recommendation.split("--filter-time ")[1].split()[0]
    assert run_rule("capture-scope", path, filter_time=spec) == []


def test_a_filter_that_keeps_the_start_up_is_told_the_steady_part(tmp_path):
    b = TraceBuilder()
    program(b, steady_at=3 * S)
    (f,) = run_rule("capture-scope", b.write(tmp_path / "t.sqlite"), filter_time="1s/")
    v = values(f)
    assert v["time_before_steady_state"] == 2 * S  # from the filter's start, not the session's
    assert "--filter-time 3000000us/3095100us" in f.recommendation


def test_profiler_api_capture_is_quiet(tmp_path):
    b = TraceBuilder()
    b.profiler_start(2 * S)
    program(b, steady_at=3 * S)
    assert run_rule("capture-scope", b.write(tmp_path / "t.sqlite")) == []


@pytest.mark.parametrize("share,fires", [(0.7, False), (0.6, True)])
def test_outside_share_threshold(tmp_path, share, fires):
    b = TraceBuilder()
    program(b, steady_at=S // 2 + 100_000_000, steps=20, step_ns=20_000_000)  # 0.6 s before, 0.4 s steady
    found = run_rule("capture-scope", b.write(tmp_path / "t.sqlite"), options={"min_outside_pct": 100 * share})
    assert bool(found) is fires


@pytest.mark.parametrize("kind,word", [("pytorch", "torch.cuda.profiler.start()"),
                                       ("jax", "cuda.bindings.runtime.cudaProfilerStart()"),
                                       ("cuda", "cuda_profiler_api.h")])
def test_the_profiler_range_is_marked_in_the_programs_framework(tmp_path, kind, word):
    b = scenarios.program(kind)
    program(b, steady_at=3 * S)
    (f,) = run_rule("capture-scope", b.write(tmp_path / "t.sqlite"))
    assert word in f.recommendation and not scenarios.foreign_words(kind, f.recommendation)


def test_a_serving_engine_is_told_its_own_switch(tmp_path):
    b = TraceBuilder(command=["trtllm-serve", "model"])
    program(b, steady_at=3 * S)
    (f,) = run_rule("capture-scope", b.write(tmp_path / "t.sqlite"))
    assert "TLLM_PROFILE_START_STOP" in f.recommendation and "torch.cuda.profiler" not in f.recommendation
