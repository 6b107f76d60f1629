"""pageable-memcpy: built scenarios (firing, quiet, thresholds, report modes)."""

from __future__ import annotations

import pytest

from nsys_rules.findings import Severity
from nsys_rules.testing import TraceBuilder, run_rule, run_rules
from nsys_rules.testing import metric_values as values
from tests.rules.scenarios import copies, foreign_words, program

T0 = 100_000_000




def test_pageable_async_copies_are_one_finding_per_direction_and_stream(tmp_path):
    b = TraceBuilder()
    copies(b, 3, src="pageable", api="cudaMemcpyAsync_v3020")
    [f] = run_rule("pageable-memcpy", b.write(tmp_path / "t.sqlite"))  # one cause, one finding
    assert f.rule == "pageable-memcpy" and values(f)["copies"] == 3 and values(f)["bytes"] == 3 * 4096
    assert (f.location.start_ns, f.location.end_ns) == (T0, T0 + 2_000_000 + 20_000)
    assert f.location.stream == 7 and f.location.api == "cudaMemcpyAsync_v3020"


def test_auto_report_lists_few_copies_one_by_one(tmp_path):
    b = TraceBuilder()
    copies(b, 3, src="pageable", api="cudaMemcpyAsync_v3020")
    found = run_rule("pageable-memcpy", b.write(tmp_path / "t.sqlite"), options={"report": "auto"})
    assert {f.location.start_ns for f in found} == {T0, T0 + 1_000_000, T0 + 2_000_000}
    assert all(f.location.end_ns == f.location.start_ns + 20_000 for f in found)


def test_pinned_or_synchronous_copies_are_not_pageable_async(tmp_path):
    b = TraceBuilder()
    copies(b, 3, src="pinned", api="cudaMemcpyAsync_v3020")
    copies(b, 2, src="pageable", api="cudaMemcpy_v3020")
    assert run_rule("pageable-memcpy", b.write(tmp_path / "t.sqlite")) == []


def test_driver_async_copy_is_ours_not_nvidias(tmp_path):
    b = TraceBuilder()
    copies(b, 2, dst="pageable", src="device", kind="DtoH", api="cuMemcpyDtoHAsync_v2")
    path = b.write(tmp_path / "t.sqlite")
    [f] = run_rule("pageable-memcpy", path)
    assert values(f)["copies"] == 2 and f.location.api == "cuMemcpyDtoHAsync_v2"
    assert run_rule("pageable-memcpy", path, options={"include_driver_api": False}) == []


def test_report_modes_group_many_copies_but_cover_them_all(tmp_path):
    b = TraceBuilder()
    copies(b, 8, src="pageable", api="cudaMemcpyAsync_v3020")
    path = b.write(tmp_path / "t.sqlite")
    grouped = run_rule("pageable-memcpy", path)  # the default: one finding for the group
    assert len(grouped) == 1
    assert values(grouped[0])["copies"] == 8
    assert (grouped[0].location.start_ns, grouped[0].location.end_ns) == (T0, T0 + 7_000_000 + 20_000)
    assert len(run_rule("pageable-memcpy", path, options={"report": "all"})) == 8
    assert len(run_rule("pageable-memcpy", path, options={"report": "auto", "max_findings": 8})) == 8
    assert len(run_rule("pageable-memcpy", path, options={"report": "auto", "max_findings": 7})) == 1


def test_min_bytes_boundary(tmp_path):
    b = TraceBuilder()
    copies(b, 1, src="pageable", nbytes=1000)
    path = b.write(tmp_path / "t.sqlite")
    assert len(run_rule("pageable-memcpy", path, options={"min_bytes": 1000})) == 1
    assert run_rule("pageable-memcpy", path, options={"min_bytes": 1001}) == []


def stepped_copies(b: TraceBuilder, steps: int = 8, *, call_ns: int = 400_000) -> None:
    """A loop whose steps each copy a pageable input (the call blocks ``call_ns``) and run a kernel."""
    period = 2_000_000
    for i in range(steps):
        s = T0 + i * period
        b.nvtx("step", s, s + period - 10_000)
        b.memcpy(s + call_ns + 10_000, 5_000, 4096, src="pageable", launch_at=s + 10_000)
        b.kernel("k", start=s + call_ns + 20_000, duration=1_000_000, launch_at=s + call_ns + 15_000)


def test_copies_in_the_loop_save_step_time_and_warn_by_share(tmp_path):
    b = TraceBuilder(launch_duration=400_000)
    stepped_copies(b)
    path = b.write(tmp_path / "t.sqlite")
    [f] = run_rule("pageable-memcpy", path)
    # The host blocks 0.4 ms per step in the staging call while the GPU waits: launch wait, 20 % of a step.
    assert f.severity == Severity.WARNING and f.budget_part == "launch_wait"
    assert 0 < f.estimated_savings_ns <= 8 * 400_000
    [f] = run_rule("pageable-memcpy", path, options={"warn_share_pct": 90.0})
    assert f.severity == Severity.INFO


def load_then_loop(b: TraceBuilder, *, start: int = 50_000_000, step_copies: bool = False) -> None:
    """Two pageable weight copies at load (each call blocks 0.4 ms with launch_duration), then six steps."""
    copies(b, 2, src="pageable")
    for i in range(6):
        s = T0 + start + i * 1_000_000
        b.nvtx("step", s, s + 900_000)
        if step_copies:
            b.memcpy(s + 20_000, 5_000, 4096, src="pageable", launch_at=s + 2_000)
        b.kernel("k", start=s + 30_000, duration=800_000, launch_at=s + 5_000)


def test_loading_copies_are_information_without_step_savings(tmp_path):
    b = TraceBuilder(launch_duration=400_000)  # each call blocks 0.4 ms, long before the loop
    load_then_loop(b)
    [f] = run_rule("pageable-memcpy", b.write(tmp_path / "t.sqlite"))
    # Start-up, not step time: nothing the steady state gains (minor) when no capture-scope finding holds it.
    assert f.severity == Severity.INFO and f.estimated_savings_ns == 0 and f.minor
    assert "start-up" in (f.savings_note or "")


def test_loading_copies_fold_into_capture_scope(tmp_path):
    b = TraceBuilder(launch_duration=400_000)
    load_then_loop(b, start=3_000_000_000)  # three seconds of loading before the steps: capture-scope reports it
    result = run_rules(["pageable-memcpy", "capture-scope"], b.write(tmp_path / "t.sqlite"))
    scope = next(f for f in result.findings if f.rule == "capture-scope")
    [copy] = [f for f in result.findings if f.rule == "pageable-memcpy"]
    assert copy.folded_into == scope.fingerprint and copy.estimated_savings_ns is None


def test_loading_and_per_step_copies_are_two_findings(tmp_path):
    # The weight load and the per-step inputs share a direction but not a cost: the loop's copies save
    # step time, the load's shorten start-up (and fold into capture-scope).
    b = TraceBuilder(launch_duration=100_000)
    load_then_loop(b, step_copies=True)
    found = sorted(run_rule("pageable-memcpy", b.write(tmp_path / "t.sqlite")), key=lambda f: f.key)
    assert [(f.key, values(f)["copies"]) for f in found] == [("HtoD", 6), ("HtoD/outside-steps", 2)]
    assert found[0].budget_part == "launch_wait" and found[0].estimated_savings_ns
    assert not found[1].estimated_savings_ns


@pytest.mark.parametrize("kind,word", [("pytorch", "pin_memory()"), ("jax", "pinned_host"), ("cuda", "cudaMallocHost")])
def test_pinning_is_advised_in_the_programs_framework(tmp_path, kind, word):
    b = program(kind)
    copies(b, 3, src="pageable")
    [f] = run_rule("pageable-memcpy", b.write(tmp_path / "t.sqlite"))
    assert word in f.recommendation and not foreign_words(kind, f.recommendation)


def test_findings_per_copy_have_distinct_stable_fingerprints(tmp_path):
    b = TraceBuilder()
    copies(b, 3, src="pageable")
    path = b.write(tmp_path / "t.sqlite")
    first = [f.fingerprint for f in run_rule("pageable-memcpy", path, options={"report": "all"})]
    assert len(set(first)) == 3
    assert first == [f.fingerprint for f in run_rule("pageable-memcpy", path, options={"report": "all"})]
