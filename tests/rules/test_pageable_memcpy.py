"""pageable-memcpy: built scenarios (firing, quiet, thresholds, report modes)."""

from __future__ import annotations


from nsys_rules.findings import Severity
from nsys_rules.testing import TraceBuilder, run_rule
from nsys_rules.testing import metric_values as values
from tests.rules.scenarios import copies

T0 = 100_000_000




def test_pageable_async_copy_is_flagged_with_its_range(tmp_path):
    b = TraceBuilder()
    copies(b, 3, src="pageable", api="cudaMemcpyAsync_v3020")
    found = run_rule("pageable-memcpy", b.write(tmp_path / "t.sqlite"))
    assert len(found) == 3  # auto: few copies, one finding each
    assert {f.location.start_ns for f in found} == {T0, T0 + 1_000_000, T0 + 2_000_000}
    assert all(f.rule == "pageable-memcpy" and f.location.end_ns == f.location.start_ns + 20_000 for f in found)
    assert values(found[0])["bytes"] == 4096


def test_pinned_or_synchronous_copies_are_not_pageable_async(tmp_path):
    b = TraceBuilder()
    copies(b, 3, src="pinned", api="cudaMemcpyAsync_v3020")
    copies(b, 2, src="pageable", api="cudaMemcpy_v3020")
    assert run_rule("pageable-memcpy", b.write(tmp_path / "t.sqlite")) == []


def test_driver_async_copy_is_ours_not_nvidias(tmp_path):
    b = TraceBuilder()
    copies(b, 2, dst="pageable", src="device", kind="DtoH", api="cuMemcpyDtoHAsync_v2")
    path = b.write(tmp_path / "t.sqlite")
    assert len(run_rule("pageable-memcpy", path)) == 2
    assert run_rule("pageable-memcpy", path, options={"include_driver_api": False}) == []


def test_report_modes_group_many_copies_but_cover_them_all(tmp_path):
    b = TraceBuilder()
    copies(b, 8, src="pageable", api="cudaMemcpyAsync_v3020")
    path = b.write(tmp_path / "t.sqlite")
    grouped = run_rule("pageable-memcpy", path)  # 8 > max_findings: one finding for the group
    assert len(grouped) == 1
    assert values(grouped[0])["copies"] == 8
    assert (grouped[0].location.start_ns, grouped[0].location.end_ns) == (T0, T0 + 7_000_000 + 20_000)
    assert len(run_rule("pageable-memcpy", path, options={"report": "all"})) == 8
    assert len(run_rule("pageable-memcpy", path, options={"max_findings": 8})) == 8


def test_min_bytes_boundary(tmp_path):
    b = TraceBuilder()
    copies(b, 1, src="pageable", nbytes=1000)
    path = b.write(tmp_path / "t.sqlite")
    assert len(run_rule("pageable-memcpy", path, options={"min_bytes": 1000})) == 1
    assert run_rule("pageable-memcpy", path, options={"min_bytes": 1001}) == []


def test_severity_follows_host_time_share(tmp_path):
    b = TraceBuilder(launch_duration=400_000)  # each call blocks the host 0.4 ms of a ~2 ms capture
    copies(b, 2, src="pageable")
    path = b.write(tmp_path / "t.sqlite")
    (f, g) = run_rule("pageable-memcpy", path)
    assert f.severity == Severity.WARNING and f.estimated_savings_ns == 400_000
    (f, g) = run_rule("pageable-memcpy", path, options={"warning_share": 0.9})
    assert f.severity == Severity.INFO


def test_findings_per_copy_have_distinct_stable_fingerprints(tmp_path):
    b = TraceBuilder()
    copies(b, 3, src="pageable")
    path = b.write(tmp_path / "t.sqlite")
    first = [f.fingerprint for f in run_rule("pageable-memcpy", path)]
    assert len(set(first)) == 3
    assert first == [f.fingerprint for f in run_rule("pageable-memcpy", path)]
