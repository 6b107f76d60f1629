"""cuda_gpu_kern_sum and cuda_api_sum on built traces: exact statistics, ordering, naming."""

from __future__ import annotations

import pytest

from nsys_rules.testing import TraceBuilder
from tests.unit._stats_helpers import run_stats

KERN_COLUMNS = ["Time (%)", "Total Time (ns)", "Instances", "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)",
                "StdDev (ns)", "Name"]


@pytest.fixture
def kernels_trace(tmp_path):
    b = TraceBuilder()
    # Four names tie at 100 ns total: nsys orders by total desc, then instances asc, then name.
    kernels = [("gemv", d, None) for d in (10, 20, 30, 40)] + [("add", 100, None)]
    kernels += [("b_norm", d, None) for d in (60, 40)] + [("a_norm", d, None) for d in (50, 50)]
    kernels += [("big", 1_000, None), ("void k<1>(int)", 7, "k"), ("void k<2>(int)", 9, "k")]
    for i, (name, duration, short) in enumerate(kernels):
        b.kernel(name, 1_000_000 + i * 100_000, duration, short_name=short)
    return b.write(tmp_path / "k.sqlite")


def test_kernel_summary_numbers_and_order(capsys, kernels_trace):
    code, rows, _ = run_stats(capsys, kernels_trace, "cuda_gpu_kern_sum")
    assert code == 0
    assert list(rows[0]) == KERN_COLUMNS
    assert [r["Name"] for r in rows] == ["big", "add", "a_norm", "b_norm", "gemv", "void k<2>(int)", "void k<1>(int)"]
    gemv = rows[4]
    assert gemv == {"Time (%)": 7.1, "Total Time (ns)": 100, "Instances": 4, "Avg (ns)": 25.0, "Med (ns)": 25.0,
                    "Min (ns)": 10, "Max (ns)": 40, "StdDev (ns)": 12.9, "Name": "gemv"}
    assert rows[0]["Time (%)"] == 70.6  # 1000 of 1416 ns
    assert isinstance(rows[0]["Total Time (ns)"], int) and isinstance(rows[0]["Avg (ns)"], float)


def test_kernel_summary_base_variant_merges_templates(capsys, kernels_trace):
    _, rows, _ = run_stats(capsys, kernels_trace, "cuda_gpu_kern_sum:base")
    k = next(r for r in rows if r["Name"] == "k")
    assert (k["Instances"], k["Total Time (ns)"], k["Med (ns)"]) == (2, 16, 8.0)
    assert not any(r["Name"].startswith("void k<") for r in rows)


def test_kernel_summary_mangled_falls_back_to_demangled(capsys, kernels_trace):
    _, rows, _ = run_stats(capsys, kernels_trace, "cuda_gpu_kern_sum:mangled")
    assert {r["Name"] for r in rows} >= {"gemv", "void k<1>(int)"}


def test_percentiles_add_p95_p99(capsys, kernels_trace):
    _, rows, _ = run_stats(capsys, kernels_trace, "cuda_gpu_kern_sum", "--percentiles")
    gemv = next(r for r in rows if r["Name"] == "gemv")
    assert list(gemv)[-3:] == ["P95 (ns)", "P99 (ns)", "Name"]
    assert gemv["P95 (ns)"] == 38.5  # 30 + 0.85 * 10
    assert gemv["P99 (ns)"] == 39.7


def test_api_names_as_nsys_prints_them(capsys, tmp_path):
    b = TraceBuilder()
    for i, d in enumerate((300, 100, 200)):
        b.api("cudaLaunchKernel_v7000", 1_000 + i * 10_000, d)
    b.api("cudaGraphLaunch_v10000", 100_000, 50)
    b.api("cuMemcpyDtoHAsync_v2", 200_000, 40)
    b.api("cudaStreamSynchronize_v3020", 300_000, 5_000)
    # Two stored names that print alike stay two rows (nsys groups before stripping).
    b.api("cudaFree_v3020", 400_000, 30)
    b.api("cudaFree", 500_000, 20)
    code, rows, _ = run_stats(capsys, b.write(tmp_path / "a.sqlite"), "cuda_api_sum")
    assert code == 0
    assert list(rows[0])[2] == "Num Calls"
    assert [r["Name"] for r in rows] == ["cudaStreamSynchronize", "cudaLaunchKernel", "cudaGraphLaunch_v10000",
                                         "cuMemcpyDtoHAsync_v2", "cudaFree", "cudaFree"]
    launch = rows[1]
    assert (launch["Num Calls"], launch["Total Time (ns)"], launch["Avg (ns)"], launch["Med (ns)"],
            launch["StdDev (ns)"]) == (3, 600, 200.0, 200.0, 100.0)
    assert [r["Total Time (ns)"] for r in rows[-2:]] == [30, 20]


def test_no_kernels_prints_empty_array_and_exits_0(capsys, tmp_path):
    b = TraceBuilder()
    b.api("cudaMalloc_v3020", 1_000, 500)
    path = b.write(tmp_path / "nok.sqlite")
    code, rows, err = run_stats(capsys, path, "cuda_gpu_kern_sum")
    assert (code, rows) == (0, [])
    assert "CUDA kernel data" in err
    code, text, err = run_stats(capsys, path, "nvtx_sum", fmt="table")
    assert (code, text) == (0, "") and "NVTX" in err
