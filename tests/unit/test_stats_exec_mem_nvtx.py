"""cuda_kern_exec_sum, the two memory-op summaries and nvtx_sum on built traces."""

from __future__ import annotations

from nsys_rules.testing import TraceBuilder
from tests.unit._stats_helpers import add_memcpy_enum, add_nvtx_rows, run_stats


def _exec_trace(tmp_path):
    b = TraceBuilder(launch_duration=3_000)
    # k1: queued 2000 ns the first time; the second time it starts before its launch call returns.
    b.kernel("k1", 5_000, 1_000, launch_at=0)
    b.kernel("k1", 11_000, 4_000, launch_at=10_000)
    # k2 never waits in the queue.
    b.kernel("k2", 21_000, 500, launch_at=20_000)
    # k1 launched from a worker thread: its own row.
    b.kernel("k1", 40_000, 1_000, launch_at=30_000, tid=77)
    # A kernel whose launch call is not in the trace is left out (nsys joins kernels to their call).
    b.kernel("orphan", 60_000, 1_000, api=None)
    return b.write(tmp_path / "exec.sqlite")


def test_kern_exec_phases(capsys, tmp_path):
    code, rows, _ = run_stats(capsys, _exec_trace(tmp_path), "cuda_kern_exec_sum")
    assert code == 0
    assert list(rows[0])[:5] == ["PID", "TID", "DevId", "Count", "QCount"]
    assert list(rows[0])[-2:] == ["API Name", "Kernel Name"]
    by_key = {(r["TID"], r["Kernel Name"]): r for r in rows}
    assert set(by_key) == {(4242, "k1"), (4242, "k2"), (77, "k1")}
    k1 = by_key[(4242, "k1")]
    assert (k1["PID"], k1["DevId"], k1["Count"], k1["QCount"], k1["API Name"]) == (4242, 0, 2, 1, "cudaLaunchKernel")
    # Total = call start to the later of call end and kernel end: 6000 and 5000.
    assert (k1["TAvg (ns)"], k1["TMed (ns)"], k1["TMin (ns)"], k1["TMax (ns)"], k1["TStdDev (ns)"]) == (
        5500.0, 5500.0, 5000, 6000, 707.1)
    assert (k1["AAvg (ns)"], k1["AMin (ns)"], k1["AStdDev (ns)"]) == (3000.0, 3000, 0.0)
    assert (k1["QAvg (ns)"], k1["QMin (ns)"], k1["QMax (ns)"], k1["QStdDev (ns)"]) == (2000.0, 2000, 2000, 0.0)
    assert (k1["KAvg (ns)"], k1["KMin (ns)"], k1["KMax (ns)"]) == (2500.0, 1000, 4000)
    k2 = by_key[(4242, "k2")]
    # No queued launch: nsys prints empty queue statistics and a 0.0 deviation.
    assert (k2["QCount"], k2["QAvg (ns)"], k2["QMed (ns)"], k2["QMin (ns)"], k2["QMax (ns)"], k2["QStdDev (ns)"]) == (
        0, "", "", "", "", 0.0)
    worker = by_key[(77, "k1")]
    assert (worker["TAvg (ns)"], worker["QAvg (ns)"]) == (11000.0, 7000.0)
    # Ordered by TAvg, longest first.
    assert [r["TAvg (ns)"] for r in rows] == sorted((r["TAvg (ns)"] for r in rows), reverse=True)


def test_kern_exec_percentiles_per_phase(capsys, tmp_path):
    _, rows, _ = run_stats(capsys, _exec_trace(tmp_path), "cuda_kern_exec_sum", "--percentiles")
    cols = list(rows[0])
    assert cols[cols.index("TStdDev (ns)") + 1: cols.index("TStdDev (ns)") + 3] == ["TP95 (ns)", "TP99 (ns)"]
    k1 = next(r for r in rows if r["TID"] == 4242 and r["Kernel Name"] == "k1")
    assert k1["TP95 (ns)"] == 5950.0 and k1["KP99 (ns)"] == 3970.0


def _mem_trace(tmp_path):
    b = TraceBuilder()
    b.memcpy(10_000, 100, 1_000, kind="HtoD")
    b.memcpy(20_000, 300, 3_000, kind="HtoD")
    b.memcpy(30_000, 50, 2_000_000, kind="DtoH", src="device", dst="pinned")
    b.memset(40_000, 896, 25_344)
    b.memset(50_000, 768, 4)
    return b.write(tmp_path / "mem.sqlite")


def test_mem_time_sum(capsys, tmp_path):
    code, rows, _ = run_stats(capsys, _mem_trace(tmp_path), "cuda_gpu_mem_time_sum")
    assert code == 0
    assert [r["Operation"] for r in rows] == ["[CUDA memset]", "[CUDA memcpy Host-to-Device]",
                                              "[CUDA memcpy Device-to-Host]"]
    memset = rows[0]
    assert (memset["Total Time (ns)"], memset["Count"], memset["Avg (ns)"], memset["StdDev (ns)"]) == (1664, 2, 832.0, 90.5)
    assert rows[1]["Time (%)"] == 18.9  # 400 of 2114 ns


def test_mem_size_sum_in_decimal_megabytes(capsys, tmp_path):
    _, rows, _ = run_stats(capsys, _mem_trace(tmp_path), "cuda_gpu_mem_size_sum")
    assert list(rows[0]) == ["Total (MB)", "Count", "Avg (MB)", "Med (MB)", "Min (MB)", "Max (MB)", "StdDev (MB)",
                             "Operation"]
    assert [r["Operation"] for r in rows] == ["[CUDA memcpy Device-to-Host]", "[CUDA memset]",
                                              "[CUDA memcpy Host-to-Device]"]
    memset = rows[1]
    assert (memset["Total (MB)"], memset["Avg (MB)"], memset["Min (MB)"], memset["Max (MB)"], memset["StdDev (MB)"]) == (
        0.025, 0.013, 0.0, 0.025, 0.018)
    assert rows[0]["Total (MB)"] == 2.0


def test_mem_reports_use_the_exports_own_labels(capsys, tmp_path):
    path = _mem_trace(tmp_path)
    add_memcpy_enum(path, {1: "H2D (export label)"})  # no label for device-to-host: nsys's inner join drops them
    _, rows, _ = run_stats(capsys, path, "cuda_gpu_mem_time_sum")
    assert [r["Operation"] for r in rows] == ["[CUDA memset]", "[CUDA memcpy H2D (export label)]"]


def test_nvtx_sum_styles_domains_and_open_ranges(capsys, tmp_path):
    b = TraceBuilder()
    for i, d in enumerate((100, 300, 200)):
        b.nvtx("step", 1_000 + i * 1_000, 1_000 + i * 1_000 + d)
    b.nvtx("registered", 10_000, 10_050, registered=True)
    b.nvtx("a mark", 11_000, None)  # a mark, not a range
    path = b.write(tmp_path / "nvtx.sqlite")
    tid = TraceBuilder.global_tid()
    add_nvtx_rows(path, [
        (500, None, 75, "NCCL", tid, 1),               # nvtxDomainCreate("NCCL") as domain 1
        (20_000, 20_400, 59, "init", tid, 1),          # a push/pop range in that domain
        (30_000, 31_000, 60, "step", tid, 0),          # a start/end range with a push/pop name
        (40_000, None, 59, "open", tid, 0),            # still open at the end: runs to the last timestamp
        (50_000, 50_010, 59, None, tid, 0),            # no name at all
    ])
    code, rows, _ = run_stats(capsys, path, "nvtx_sum")
    assert code == 0
    assert list(rows[0])[-2:] == ["Style", "Range"]
    by_key = {(r["Style"], r["Range"]): r for r in rows}
    assert set(by_key) == {("PushPop", ":step"), ("PushPop", ":registered"), ("PushPop", "NCCL:init"),
                           ("StartEnd", ":step"), ("PushPop", ":open"), ("PushPop", ":")}
    step = by_key[("PushPop", ":step")]
    assert (step["Instances"], step["Total Time (ns)"], step["Med (ns)"], step["StdDev (ns)"]) == (3, 600, 200.0, 100.0)
    assert by_key[("PushPop", ":open")]["Total Time (ns)"] == 50_010 - 40_000
    assert by_key[("StartEnd", ":step")]["Total Time (ns)"] == 1_000
    assert [r["Total Time (ns)"] for r in rows] == sorted((r["Total Time (ns)"] for r in rows), reverse=True)
