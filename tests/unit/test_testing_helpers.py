"""nsys_rules.testing, as plugin authors use it: TraceBuilder eras and the assertion helpers."""

from __future__ import annotations

import pytest

from nsys_rules.findings import Severity
from nsys_rules.loaders.sqlite import SqliteExport
from nsys_rules.testing import TraceBuilder, metric_values, only_finding, run_rule, skip_reason
from nsys_rules.model.trace import Trace


def _open(path):
    return Trace(SqliteExport(path))


def test_legacy_metadata_is_read_like_nsys_2022(tmp_path):
    b = TraceBuilder(legacy_metadata=True, nsys_version="2022.4.2.1", schema_version="3.0.0")
    b.kernel("k", start=10_000, duration=1_000)
    path = b.write(tmp_path / "t.sqlite")
    trace = _open(path)
    try:
        assert "EXPORT_META_DATA" in trace.export.table_names and "META_DATA_CAPTURE" not in trace.export.table_names
        assert (trace.export_info.nsys_version, trace.export_info.schema_version) == ("2022.4.2.1", "3.0.0")
        assert trace.export_info.inferred is None
        assert trace.capture.traced == () and trace.capture.graph_trace_mode is None
    finally:
        trace.close()


def test_no_metadata_gives_unknown_version_with_an_inference(tmp_path):
    b = TraceBuilder(write_metadata=False)
    b.kernel("k", start=10_000, duration=1_000)
    trace = _open(b.write(tmp_path / "t.sqlite"))
    try:
        assert trace.export_info.nsys_version is None and trace.export_info.schema_version is None
        assert trace.export_info.inferred == "older than 2022.1: no export metadata"
    finally:
        trace.close()


def test_install_path_in_strings_names_the_version(tmp_path):
    b = TraceBuilder(write_metadata=False)
    b.string("/opt/nvidia/nsight-systems/2021.3.3/target-linux-x64/libToolsInjection64.so")
    b.kernel("k", start=10_000, duration=1_000)
    trace = _open(b.write(tmp_path / "t.sqlite"))
    try:
        assert trace.export_info.inferred.startswith("2021.3.3 ")
    finally:
        trace.close()


def test_process_wide_range_is_a_start_end_range(tmp_path):
    b = TraceBuilder()
    b.nvtx("request", 0, 100, process_wide=True)
    b.nvtx("step", 10, 20)
    b.nvtx("mark", 30, None)
    trace = _open(b.write(tmp_path / "t.sqlite"))
    try:
        nvtx = trace.frame("nvtx", ["name", "event_type"])
        assert dict(zip(nvtx["name"].astype(str), nvtx["event_type"].astype(int), strict=True)) == {
            "request": 60, "step": 59, "mark": 34}
    finally:
        trace.close()


@pytest.fixture
def graph_trace(tmp_path):
    b = TraceBuilder(graph_trace_mode="Graph")
    for i in range(3):
        b.graph_launch(i * 1_000_000, 500_000)
    return b.write(tmp_path / "g.sqlite")


def test_only_finding_and_metric_values(graph_trace):
    finding = only_finding(run_rule("graph-trace-hidden", graph_trace), "graph-trace-hidden")
    assert finding.severity is Severity.ERROR
    assert metric_values(finding)["graph_launches"] == 3


def test_only_finding_lists_what_it_got():
    with pytest.raises(AssertionError, match="got 0: none"):
        only_finding([])


def test_skip_reason_fails_when_the_rule_ran(graph_trace):
    with pytest.raises(AssertionError, match="instead of being skipped"):
        skip_reason("graph-trace-hidden", graph_trace)
