"""Shortcuts that skip work must give what the full computation gives."""

from __future__ import annotations

import pytest

from nsys_rules.inputs import open_trace
from nsys_rules.job.extract import collect_ranks
from nsys_rules.testing import TraceBuilder


def _one_gpu(tmp_path, names):
    b = TraceBuilder()
    t = 1_000
    for i in range(40):
        b.kernel(names[i % len(names)], t, 2_000)
        t += 5_000
    return b.write(tmp_path / "one.sqlite")


def test_one_gpu_trace_without_communication_names_is_no_job_and_reads_no_short_names(tmp_path):
    trace = open_trace(_one_gpu(tmp_path, ["gemv", "rms_norm"]))
    try:
        trace.preload({"kernels": ["start", "end", "pid", "device_id", "name"]})
        assert collect_ranks(trace, several=False) == []
        assert "short_name" not in trace.frame("kernels", ["pid"]).columns  # nothing more was read
    finally:
        trace.close()


@pytest.mark.parametrize("name", ["ncclDevKernel_AllReduce_Sum_f32_RING_LL", "cross_device_reduce_1stage"])
def test_one_gpu_trace_with_a_communication_kernel_is_still_a_rank(tmp_path, name):
    trace = open_trace(_one_gpu(tmp_path, ["gemv", name]))
    try:
        trace.preload({"kernels": ["start", "end", "pid", "device_id", "name"]})
        ranks = collect_ranks(trace, several=False)
        assert len(ranks) == 1 and ranks[0].instances == 20
    finally:
        trace.close()


def test_a_name_only_in_the_string_table_takes_the_full_path(tmp_path):
    b = TraceBuilder()
    b.string("ncclDevKernel_Broadcast_RING_LL")  # in StringIds, but no kernel carries it
    for i in range(10):
        b.kernel("gemv", 1_000 + 5_000 * i, 2_000)
    trace = open_trace(b.write(tmp_path / "t.sqlite"))
    try:
        assert collect_ranks(trace, several=False) == []
        assert "short_name" in trace.frame("kernels", ["pid"]).columns  # judged on the real names
    finally:
        trace.close()
