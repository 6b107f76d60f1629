"""Verdicts on our own held-out H200 captures (committed in tests/data/holdout).

They were captured after the rules were first written, with shapes and flags none of the
shared traces has (no NVTX at all, a profiler-API engine capture, a small debug build, a
big-hidden release build, CUDA_LAUNCH_BLOCKING on the engine), and their expectations were
written before looking at our output. The judgement is the same as ../shared/tools/verdicts.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.capture_verdicts import check_json, verdict_problems

HERE = Path(__file__).resolve().parents[1] / "data" / "holdout"
SPEC = json.loads((HERE / "expected.json").read_text())["traces"]


@pytest.mark.parametrize("name", sorted(SPEC))
def test_holdout_verdicts(name):
    assert verdict_problems(check_json(HERE / name)["findings"], SPEC[name]) == []


def test_steady_state_without_nvtx_comes_from_the_per_step_readback():
    from nsys_rules.loaders.sqlite import SqliteExport
    from nsys_rules.model.trace import Trace
    from nsys_rules.model.windows import steady_state_window

    trace = Trace(SqliteExport(HERE / "ho_engine_nonvtx_sync.sqlite"))
    assert not trace.has("nvtx")
    window = steady_state_window(trace)
    first_kernel = int(trace.frame("kernels", ["start"])["start"].min())
    # The engine reads the token back once per step: 3 warm-up steps, a barrier sync, 64 measured steps.
    assert window.kind == "marker" and "device-to-host copy" in window.source
    assert len(window.steps) == 64
    assert window.start is not None and window.start > first_kernel
