"""pageable-memcpy, sync-memcpy, sync-memset: built scenarios, thresholds and report modes."""

from __future__ import annotations

import pytest

from nsys_rules.findings import Severity
from nsys_rules.testing import TraceBuilder, run_rule

T0 = 100_000_000


def values(finding) -> dict[str, float]:
    return {k: m.value for k, m in finding.metrics.items()}


def copies(b: TraceBuilder, n: int, nbytes: int = 4096, **kw) -> None:
    """``n`` copies 1 ms apart (20 us each) and a kernel after them."""
    for i in range(n):
        b.memcpy(T0 + i * 1_000_000, 20_000, nbytes, **kw)
    b.kernel("k", start=T0 + n * 1_000_000 + 10_000, duration=10_000)


# -- pageable-memcpy ----------------------------------------------------------------------------
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


# -- sync-memcpy --------------------------------------------------------------------------------
def test_sync_copy_back_is_flagged(tmp_path):
    b = TraceBuilder()
    copies(b, 2, kind="DtoH", src="device", dst="pinned", api="cudaMemcpy_v3020", nbytes=1 << 20)
    found = run_rule("sync-memcpy", b.write(tmp_path / "t.sqlite"))
    assert len(found) == 2 and all(values(f)["bytes"] == 1 << 20 for f in found)


@pytest.mark.parametrize("nbytes,flagged", [(64_000, False), (64_001, True)])
def test_small_host_to_device_copies_are_exempt(tmp_path, nbytes, flagged):
    b = TraceBuilder()
    copies(b, 1, kind="HtoD", src="pinned", api="cudaMemcpy_v3020", nbytes=nbytes)
    assert bool(run_rule("sync-memcpy", b.write(tmp_path / "t.sqlite"))) is flagged


def test_in_device_and_async_copies_are_not_sync_copies(tmp_path):
    b = TraceBuilder()
    copies(b, 2, kind="DtoD", src="device", api="cudaMemcpy_v3020", nbytes=1 << 20)
    copies(b, 2, kind="DtoH", src="device", dst="pinned", api="cudaMemcpyAsync_v3020", nbytes=1 << 20)
    assert run_rule("sync-memcpy", b.write(tmp_path / "t.sqlite")) == []


def test_driver_sync_copy_is_ours_not_nvidias(tmp_path):
    b = TraceBuilder()
    copies(b, 1, kind="DtoH", src="device", dst="pageable", api="cuMemcpyDtoH_v2", nbytes=1 << 20)
    path = b.write(tmp_path / "t.sqlite")
    assert len(run_rule("sync-memcpy", path)) == 1
    assert run_rule("sync-memcpy", path, options={"include_driver_api": False}) == []


# -- sync-memset --------------------------------------------------------------------------------
def test_sync_memset_on_pinned_memory_is_flagged(tmp_path):
    b = TraceBuilder()
    for i in range(2):
        b.memset(T0 + i * 1_000_000, 5_000, 1 << 16, memory="pinned", api="cudaMemset_v3020")
    found = run_rule("sync-memset", b.write(tmp_path / "t.sqlite"))
    assert len(found) == 2 and values(found[0])["bytes"] == 1 << 16


def test_device_or_async_memsets_are_quiet(tmp_path):
    b = TraceBuilder()
    b.memset(T0, 5_000, 1 << 16, memory="device", api="cudaMemset_v3020")
    b.memset(T0 + 1_000_000, 5_000, 1 << 16, memory="pinned", api="cudaMemsetAsync_v3020")
    path = b.write(tmp_path / "t.sqlite")
    assert run_rule("sync-memset", path) == []
    assert len(run_rule("sync-memset", path, options={"memory_kinds": (2,)})) == 1


def test_missing_tables_skip_the_rule(tmp_path):
    from nsys_rules.testing import run_rules

    b = TraceBuilder()
    b.kernel("k", start=T0, duration=10_000)
    result = run_rules(["pageable-memcpy", "sync-memcpy", "sync-memset"], b.write(tmp_path / "t.sqlite"))
    assert {s["rule"] for s in result.skipped} == {"pageable-memcpy", "sync-memcpy", "sync-memset"}


def test_nvidia_names_are_aliases():
    from nsys_rules.plugins import build_registry

    aliases = build_registry(autoload=True).aliases()
    assert aliases["cuda_memcpy_async"] == "pageable-memcpy"
    assert aliases["cuda_memcpy_sync"] == "sync-memcpy"
    assert aliases["cuda_memset_sync"] == "sync-memset"
    assert aliases["gpu_gaps"] == "gpu-idle-gaps"
    assert aliases["gpu_time_util"] == "gpu-low-utilization"
