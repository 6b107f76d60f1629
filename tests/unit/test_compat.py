"""Why a table is missing: not traced, none happened, or GPU activity lost (nsys writes no empty tables)."""

from __future__ import annotations

import pytest

from nsys_rules.model.compat import missing_table
from nsys_rules.loaders.sqlite import SqliteExport
from nsys_rules.rule import Rule
from nsys_rules.testing import TraceBuilder, run_rules
from nsys_rules.model.trace import Trace


@pytest.fixture
def open_built(tmp_path):
    opened = []

    def build(builder: TraceBuilder) -> Trace:
        trace = Trace(SqliteExport(builder.write(tmp_path / f"t{len(opened)}.sqlite")))
        opened.append(trace)
        return trace

    yield build
    for trace in opened:
        trace.close()


def test_cuda_traced_but_no_memset_happened(open_built):
    b = TraceBuilder()
    b.kernel("k", start=10_000, duration=1_000)
    reason, fix = missing_table(open_built(b), "memset")
    assert "made no memset" in reason and fix.startswith("nothing to fix")


def test_launches_without_kernel_rows_mean_lost_gpu_activity(open_built):
    b = TraceBuilder()
    for i in range(3):
        b.api("cudaLaunchKernel_v7000", i * 10_000, 2_000)
    trace = open_built(b)
    for table in ("kernels", "memcpy", "sync"):
        reason, fix = missing_table(trace, table)
        assert "3 kernel launches" in reason and "no GPU activity" in reason and "--trace=cuda" in fix


def test_api_without_launches_means_no_kernel_ran(open_built):
    b = TraceBuilder()
    b.api("cudaMalloc_v3020", 0, 1_000)
    assert "launched no kernel" in missing_table(open_built(b), "kernels")[0]


def test_cuda_not_traced_keeps_the_capture_hint(open_built):
    b = TraceBuilder()
    b.nvtx("step", 0, 1_000)
    reason, fix = missing_table(open_built(b), "kernels")
    assert reason == "the trace has no CUPTI_ACTIVITY_KIND_KERNEL table" and "--trace=cuda" in fix


def test_nvtx_traced_but_never_emitted(open_built):
    b = TraceBuilder()
    b.kernel("k", start=10_000, duration=1_000)
    assert "emitted no NVTX" in missing_table(open_built(b), "nvtx")[0]
    legacy = TraceBuilder(legacy_metadata=True)  # 2022-era export: whether NVTX was traced is unknown
    legacy.kernel("k", start=10_000, duration=1_000)
    assert "--trace=cuda,nvtx" in missing_table(open_built(legacy), "nvtx")[1]


def test_graph_trace_reasons(open_built):
    b = TraceBuilder()
    b.kernel("k", start=10_000, duration=1_000)
    assert "launched no CUDA graph" in missing_table(open_built(b), "graph_trace")[0]
    node = TraceBuilder(graph_trace_mode="Node")
    node.graph_launch(0, 1_000, traced_as_graph=False)
    node.kernel("k", start=2_000, duration=500, api=None, graph_node_id=1)
    assert "traced per node" in missing_table(open_built(node), "graph_trace")[0]


class _NeedsMemset(Rule):
    """Reads memsets."""

    name = "needs-memset"
    title = "needs memset"
    requires = ("memset",)

    def check(self, ctx):
        return iter(())


class _ReadsMemset(_NeedsMemset):
    """Reads memsets through the context only."""

    name = "reads-memset"
    requires = ()

    def check(self, ctx):
        ctx.frame("memset")
        return iter(())


def test_engine_and_context_skips_use_the_specific_reason(tmp_path):
    b = TraceBuilder()
    b.kernel("k", start=10_000, duration=1_000)
    result = run_rules([_NeedsMemset, _ReadsMemset], b.write(tmp_path / "t.sqlite"))
    assert [s.rule for s in result.skipped] == ["needs-memset", "reads-memset"] and not result.errors
    assert all("made no memset" in s.reason and s.fix for s in result.skipped)
