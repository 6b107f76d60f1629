"""Per-step kernel counts and times (regime causes, recompile) counted a chunk of operations at a time."""

from __future__ import annotations

import numpy as np

from nsys_rules.inputs import open_trace
from nsys_rules.model import regime_causes
from nsys_rules.model.activity import gpu_ops
from nsys_rules.model.steps import step_model
from nsys_rules.testing import TraceBuilder
from tests.rules.scenarios import sync_loop


def test_kernels_per_step_are_the_same_whatever_the_chunk(tmp_path, monkeypatch):
    # Issue 39: a long capture's kernels are counted into steps a chunk at a time (not 40 bytes per kernel at
    # once); the counts and summed times must be the one-pass ones, including steps cut by a chunk's edge.
    b = TraceBuilder()
    sync_loop(b, steps=30, slower={11: 3_000_000, 12: 2_000_000})
    trace = open_trace(b.write(tmp_path / "loop.sqlite"))
    try:
        model = step_model(trace)
        ops = gpu_ops(trace)
        assert model.count >= 20 and len(ops) > 20
        whole = regime_causes._kernels_per_step(ops, model.host, model.pid)
        monkeypatch.setattr(regime_causes, "OPS_CHUNK", 7)
        chunked = regime_causes._kernels_per_step(ops, model.host, model.pid)
        assert whole[0].tolist() == chunked[0].tolist() and whole[1].tolist() == chunked[1].tolist()
        assert int(whole[0].sum()) == model.count  # one kernel launched in each steady step
        slow = int(np.argmax(whole[1]))
        assert whole[1][slow] > 2 * np.median(whole[1])  # the slower step's kernel time stands out
        empty = regime_causes._kernels_per_step(ops, model.host[:0], model.pid)
        assert empty[0].tolist() == [] and empty[1].dtype == np.int64
    finally:
        trace.close()
