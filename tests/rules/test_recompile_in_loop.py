"""recompile (issue 37, item 4): compiles in the first measured steps after the program's own warm-up are named,
not absorbed as warm-up; the program's warm-up compile and the steps inside its warm-up range are not."""

from __future__ import annotations

import pytest

from nsys_rules.api import Severity
from nsys_rules.inputs import open_trace
from nsys_rules.model.windows import steady_state_window
from nsys_rules.testing import TraceBuilder, metric_values, only_finding, run_rule, run_rules

T0 = 100_000_000
STEP = 1_000_000
COMPILE = 2_000_000_000  # a torch.compile recompile: seconds


def _rotate(b: TraceBuilder, steps: int = 24, compile_at: tuple[int, ...] = (0, 1, 2), name: str = "step={i}",
            warmup_range: tuple[int, int] | None = (T0 - 3 * COMPILE, T0 - 1_000)) -> None:
    """A torch.compile training loop of ``steps`` NVTX steps after a ``warmup`` range; ``compile_at`` steps compile."""
    if warmup_range:
        b.api("cuModuleLoadData", warmup_range[0] + 1_000_000, 150_000)  # the first compile, inside the warm-up
        b.nvtx("warmup", *warmup_range)
    t = T0
    for i in range(steps):
        start = t
        if i in compile_at:
            b.api("cuModuleLoadData", t + COMPILE - 200_000, 150_000)
            t += COMPILE
        for k in range(4):
            launch = t + k * 20_000
            b.kernel("triton_poi_fused_add_mul_0", start=launch + 10_000, duration=150_000, launch_at=launch)
        t += STEP
        b.nvtx(name.format(i=i), start, t - 1_000)


def _window(path):
    trace = open_trace(path)
    try:
        window = steady_state_window(trace)
        return len(window.steps), window.model.warmup, window.source
    finally:
        trace.close()


def test_recompiles_in_the_first_measured_steps_are_named_per_step(tmp_path):
    b = TraceBuilder()
    _rotate(b)
    path = b.write(tmp_path / "t.sqlite")
    count, warmup, source = _window(path)
    assert (count, warmup) == (24, 0), source  # the program's warm-up range ends before step=0: all 24 are measured
    findings = run_rules(["recompile", "module-loading"], path).findings
    f = only_finding(findings, "recompile")
    assert f.severity is Severity.WARNING
    m = metric_values(f)
    assert m["steps"] == 3 and m["module_loads"] == 3
    assert m["extra_time"] == pytest.approx(3 * COMPILE, rel=0.01)
    assert "steps 1-3 of the 24 steady steps" in f.message
    assert "2000." in f.message and "ms per step" in f.message  # the cost of each occurrence
    assert "mark_dynamic" in f.recommendation
    # a few multi-second compiles are recompile's, one by one; module-loading's per-step pattern is not there
    assert [x for x in findings if x.rule == "module-loading"] == []


def test_without_a_warmup_range_the_first_compile_is_warmup_and_no_recompile(tmp_path):
    b = TraceBuilder()
    _rotate(b, compile_at=(0,), warmup_range=None)
    path = b.write(tmp_path / "t.sqlite")
    count, warmup, _ = _window(path)
    assert (count, warmup) == (23, 1)
    assert run_rule("recompile", path) == []


def test_steps_inside_the_programs_warmup_range_are_its_warmup(tmp_path):
    b = TraceBuilder()
    # The program runs 3 warm-up steps (compiling in the first) inside its `warmup` range, same step name.
    _rotate(b, compile_at=(0,), name="train_step", warmup_range=None)
    b.nvtx("warmup", T0 - 1_000, T0 + COMPILE + 3 * STEP - 500)
    path = b.write(tmp_path / "t.sqlite")
    count, warmup, source = _window(path)
    assert (count, warmup) == (21, 3) and "warmup" in source
    assert run_rule("recompile", path) == []
