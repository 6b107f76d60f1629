"""sync-memset: built scenarios; missing tables skip; NVIDIA rule names are aliases."""

from __future__ import annotations


from nsys_rules.testing import TraceBuilder, run_rule
from nsys_rules.testing import metric_values as values

T0 = 100_000_000




def test_sync_memset_on_pinned_memory_is_flagged(tmp_path):
    b = TraceBuilder()
    for i in range(2):
        b.memset(T0 + i * 1_000_000, 5_000, 1 << 16, memory="pinned", api="cudaMemset_v3020")
    [f] = run_rule("sync-memset", b.write(tmp_path / "t.sqlite"))  # one finding per memory kind and stream
    assert values(f)["memsets"] == 2 and values(f)["bytes"] == 2 << 16


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
    assert {s.rule for s in result.skipped} == {"pageable-memcpy", "sync-memcpy", "sync-memset"}


def test_nvidia_names_are_aliases():
    from nsys_rules.plugin_manager import build_registry

    aliases = build_registry(autoload=True).aliases()
    assert aliases["cuda_memcpy_async"] == "pageable-memcpy"
    assert aliases["cuda_memcpy_sync"] == "sync-memcpy"
    assert aliases["cuda_memset_sync"] == "sync-memset"
    assert aliases["gpu_gaps"] == "gpu-idle-gaps"
    assert aliases["gpu_time_util"] == "gpu-low-utilization"
