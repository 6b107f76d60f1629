"""graph-trace-hidden: graph-mode captures of graph replays, node mode, unrecorded mode, real traces."""

from __future__ import annotations

import pytest

from nsys_rules.testing import TraceBuilder, run_rule, run_rules
from nsys_rules.testing import metric_values as values

STEP = 1_000_000


def replays(b: TraceBuilder, n: int = 5, *, api: str = "cudaGraphLaunch_v10000", node_kernels: int = 0,
            traced_as_graph: bool = True) -> None:
    """``n`` graph replays of 800 us each; in node mode ``node_kernels`` kernels per replay carry a graph node id."""
    for i in range(n):
        s = 10_000_000 + i * STEP
        b.nvtx("decode_step", s, s + STEP - 10_000)
        b.graph_launch(s + 20_000, 800_000, api=api, traced_as_graph=traced_as_graph, launch_at=s + 1_000)
        for k in range(node_kernels):
            b.kernel("gemv", start=s + 20_000 + k * 100_000, duration=90_000, launch_at=s + 1_000,
                     graph_node_id=k + 1, api=None)



def test_graph_mode_with_launches_is_an_error(tmp_path):
    b = TraceBuilder(graph_trace_mode="Graph", command=["python3", "serve.py", "--graphs"])
    replays(b, 5)
    b.kernel("eager_kernel", start=50_000_000, duration=200_000)  # some non-graph work is still traced
    [f] = run_rule("graph-trace-hidden", b.write(tmp_path / "t.sqlite"))
    m = values(f)
    assert f.rule == "graph-trace-hidden" and f.severity.value == "error"
    assert m["graph_launches"] == 5 and m["graph_trace_rows"] == 5 and m["graph_node_kernels"] == 0
    assert m["hidden_graph_time"] == 5 * 800_000
    assert m["hidden_share_of_gpu_time"] == pytest.approx(100 * 4_000_000 / 4_200_000)
    assert "--cuda-graph-trace=node" in f.recommendation and "python3 serve.py --graphs" in f.recommendation
    assert f.location.api == "cudaGraphLaunch"


def test_graph_mode_without_any_kernel_table(tmp_path):
    # A graph-mode capture around graph replays only has no kernel table at all.
    b = TraceBuilder(graph_trace_mode="Graph")
    replays(b, 4)
    [f] = run_rule("graph-trace-hidden", b.write(tmp_path / "t.sqlite"))
    assert f.severity.value == "error" and values(f)["hidden_share_of_gpu_time"] == 100


def test_driver_launches_and_profiler_range_shape_the_recapture(tmp_path):
    b = TraceBuilder(graph_trace_mode="Graph")
    b.profiler_start(9_000_000)
    replays(b, 4, api="cuGraphLaunch")
    [f] = run_rule("graph-trace-hidden", b.write(tmp_path / "t.sqlite"))
    assert f.location.api == "cuGraphLaunch"
    assert "--capture-range=cudaProfilerApi" in f.recommendation


def test_graph_mode_without_launches_is_quiet(tmp_path):
    b = TraceBuilder(graph_trace_mode="Graph")
    for i in range(5):
        b.kernel("gemv", start=10_000_000 + i * STEP, duration=500_000)
    assert run_rule("graph-trace-hidden", b.write(tmp_path / "t.sqlite")) == []


def test_node_mode_is_an_info_note(tmp_path):
    b = TraceBuilder(graph_trace_mode="Node")
    replays(b, 5, node_kernels=6, traced_as_graph=False)
    [f] = run_rule("graph-trace-hidden", b.write(tmp_path / "t.sqlite"))
    m = values(f)
    assert f.severity.value == "info" and m["graph_launches"] == 5 and m["graph_node_kernels"] == 30
    assert m["launch_call_p50"] == b.launch_duration
    assert "node" in f.title.lower()


def test_unrecorded_mode_with_graph_trace_rows_is_an_error(tmp_path):
    # Older exports do not record the mode; graph-trace rows and no per-node kernels mean graph mode.
    b = TraceBuilder(graph_trace_mode=None)
    replays(b, 5)
    [f] = run_rule("graph-trace-hidden", b.write(tmp_path / "t.sqlite"))
    assert f.severity.value == "error" and "unrecorded" in f.message


def test_unrecorded_mode_with_node_kernels_is_quiet(tmp_path):
    b = TraceBuilder(graph_trace_mode=None)
    replays(b, 5, node_kernels=3, traced_as_graph=False)
    assert run_rule("graph-trace-hidden", b.write(tmp_path / "t.sqlite")) == []


def test_min_launches_boundary(tmp_path):
    b = TraceBuilder(graph_trace_mode="Graph")
    replays(b, 3)
    path = b.write(tmp_path / "t.sqlite")
    assert run_rule("graph-trace-hidden", path, options={"min_launches": 3})[0].severity.value == "error"
    assert run_rule("graph-trace-hidden", path, options={"min_launches": 4}) == []


# -- real traces -------------------------------------------------------------------------------
def _findings(path):
    result = run_rules(["graph-trace-hidden"], path)
    assert not result.errors and not result.skipped
    return result.findings


def test_default_graph_capture_hides_kernels(h200):
    [f] = _findings(h200 / "decode_graph_default.sqlite")
    assert f.severity.value == "error" and values(f)["graph_launches"] == 67
    assert values(f)["hidden_share_of_gpu_time"] > 80


@pytest.mark.parametrize("name", ["decode_graph_node.sqlite", "decode_graph_profilerapi.sqlite"])
def test_node_captures_get_only_the_note(h200, name):
    [f] = _findings(h200 / name)
    assert f.severity.value == "info" and values(f)["graph_node_kernels"] > 10_000


def test_eager_trace_has_no_graphs(h200):
    assert _findings(h200 / "decode_eager.sqlite") == []
