"""Graph-heavy steps (issue 37, item 5): a JAX token loop that launches one command buffer several times a token
and reads each token back is cut into tokens, not into single launches; without the readback it is not."""

from __future__ import annotations

import pytest

from nsys_rules.inputs import open_trace
from nsys_rules.model.windows import steady_state_window
from nsys_rules.testing import TraceBuilder

T0 = 50_000_000
TOKEN_PAUSE = 3_000_000


def _tokens(b: TraceBuilder, tokens: int = 40, per_token: int = 6, readback: bool = True) -> None:
    """``per_token`` launches of one graph (100 us on the GPU each), then a 4-byte readback and a host wait."""
    t = T0
    for _ in range(tokens):
        for _ in range(per_token):
            b.graph_launch(t + 30_000, 100_000, launch_at=t, api="cuGraphLaunch")
            t += 110_000
        if readback:
            b.memcpy(t + 10_000, 2_000, 4, kind="DtoH", src="device", dst="pinned", launch_at=t,
                     api="cuMemcpyDtoHAsync_v2")
        t += TOKEN_PAUSE


def _window(path):
    trace = open_trace(path)
    try:
        window = steady_state_window(trace)
        model = window.model
        return len(window.steps), window.source, model.gpu_durations
    finally:
        trace.close()


def test_one_token_per_step_when_each_pause_holds_a_readback(tmp_path):
    b = TraceBuilder()
    _tokens(b)
    count, source, durations = _window(b.write(tmp_path / "t.sqlite"))
    assert "6 CUDA graph launches per step" in source
    assert count >= 38  # 40 tokens: the first may be warm-up, the last ends the loop
    token = 6 * 110_000 + TOKEN_PAUSE
    assert float(sorted(durations)[len(durations) // 2]) == pytest.approx(token, rel=0.05)


def test_without_a_readback_each_launch_stays_a_step(tmp_path):
    b = TraceBuilder()
    _tokens(b, readback=False)
    count, source, _ = _window(b.write(tmp_path / "t.sqlite"))
    assert "graph launches per step" not in source and count > 200
