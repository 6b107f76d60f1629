"""``nsys-rules stats``: formats, filters (launch-time membership on any thread) and usage errors."""

from __future__ import annotations

import csv
import io
import json

import pytest

from nsys_rules.cli import main
from nsys_rules.testing import TraceBuilder
from tests.unit._stats_helpers import add_nvtx_rows, run_stats


@pytest.fixture
def worker_trace(tmp_path):
    """Two instances of the range ``serve`` on the main thread; every kernel is launched from a worker."""
    b = TraceBuilder()
    b.nvtx("serve", 0, 1_000_000)
    b.nvtx("serve", 3_000_000, 4_000_000)
    b.kernel("gemv", 120_000, 1_000, launch_at=100_000, tid=77)
    b.kernel("gemv", 520_000, 3_000, launch_at=500_000, tid=77)
    # Launched inside the first instance, runs after it ended: still in (membership by launch time).
    b.kernel("late", 1_500_000, 2_000, launch_at=990_000, tid=77)
    b.kernel("between", 2_000_000, 5_000, launch_at=1_990_000, tid=77)
    b.kernel("gemv", 3_500_000, 7_000, launch_at=3_400_000, tid=78)
    return b.write(tmp_path / "worker.sqlite")


def _instances(rows):
    return {r["Name"]: r["Instances"] for r in rows}


def test_filter_nvtx_selects_all_threads_and_all_instances(capsys, worker_trace):
    code, rows, _ = run_stats(capsys, worker_trace, "cuda_gpu_kern_sum", "--filter-nvtx", "serve")
    assert code == 0
    assert _instances(rows) == {"gemv": 3, "late": 1}


def test_filter_nvtx_index_picks_one_instance(capsys, worker_trace):
    _, rows, _ = run_stats(capsys, worker_trace, "cuda_gpu_kern_sum", "--filter-nvtx", "serve/1")
    assert _instances(rows) == {"gemv": 1}
    assert rows[0]["Total Time (ns)"] == 7_000


def test_filter_applies_to_api_and_exec_reports(capsys, worker_trace):
    _, api, _ = run_stats(capsys, worker_trace, "cuda_api_sum", "--filter-nvtx", "serve/0")
    assert [(r["Name"], r["Num Calls"]) for r in api] == [("cudaLaunchKernel", 3)]
    _, ex, _ = run_stats(capsys, worker_trace, "cuda_kern_exec_sum", "--filter-nvtx", "serve/0")
    assert sorted((r["TID"], r["Kernel Name"], r["Count"]) for r in ex) == [(77, "gemv", 2), (77, "late", 1)]


def test_filter_time_uses_launch_time_and_nsys_units(capsys, worker_trace):
    # "between" runs at 2.0 ms but was launched at 1.99 ms: outside 2ms/; the 3.4 ms launch is inside.
    _, rows, _ = run_stats(capsys, worker_trace, "cuda_gpu_kern_sum", "--filter-time", "2ms/")
    assert _instances(rows) == {"gemv": 1}
    _, rows, _ = run_stats(capsys, worker_trace, "cuda_gpu_kern_sum", "--filter-time", "1ms/3ms")
    assert _instances(rows) == {"between": 1}


def test_filter_with_nothing_inside_is_an_empty_report(capsys, worker_trace):
    code, rows, err = run_stats(capsys, worker_trace, "cuda_gpu_kern_sum", "--filter-time", "10s/11s")
    assert (code, rows) == (0, [])
    assert "selected time range" in err


@pytest.mark.parametrize("flags", [["--filter-time", "5s"], ["--filter-nvtx", "no_such_range"],
                                   ["--filter-time", "3s/1s"]])
def test_bad_filters_exit_2(capsys, worker_trace, flags):
    code, _, err = run_stats(capsys, worker_trace, "cuda_gpu_kern_sum", *flags)
    assert code == 2 and err.startswith("nsys-rules:")


@pytest.mark.parametrize("report", ["no_such_report", "cuda_api_sum:base", "cuda_gpu_kern_sum:shortest"])
def test_unknown_report_or_variant_exits_2(capsys, worker_trace, report):
    code, _, err = run_stats(capsys, worker_trace, report)
    assert code == 2 and "report" in err


def test_unreadable_trace_exits_3(capsys, tmp_path):
    bad = tmp_path / "bad.sqlite"
    bad.write_text("not a database")
    code, _, err = run_stats(capsys, bad, "cuda_gpu_kern_sum")
    assert code == 3 and err.count("\n") == 1


def test_csv_format(capsys, worker_trace):
    code, text, _ = run_stats(capsys, worker_trace, "cuda_gpu_kern_sum", fmt="csv")
    assert code == 0
    lines = text.splitlines()
    assert lines[0] == "Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name"
    rows = list(csv.DictReader(io.StringIO(text)))
    gemv = next(r for r in rows if r["Name"] == "gemv")
    assert (gemv["Total Time (ns)"], gemv["Instances"], gemv["Med (ns)"]) == ("11000", "3", "3000.0")


def test_table_format(capsys, worker_trace, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # nsys's one-line rows (piped without COLUMNS: 80 columns, one block per row)
    code, text, _ = run_stats(capsys, worker_trace, "cuda_gpu_kern_sum", fmt="table")
    assert code == 0
    header, rule, first = text.splitlines()[:3]
    assert header.split() == ["Time", "(%)", "Total", "Time", "(ns)", "Instances", "Avg", "(ns)", "Med", "(ns)",
                              "Min", "(ns)", "Max", "(ns)", "StdDev", "(ns)", "Name"]
    assert set(rule.replace(" ", "")) == {"-"}
    assert "11,000" in first and first.rstrip().endswith("gemv")


def test_table_shortens_long_names_like_nsys(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    b = TraceBuilder()
    b.kernel("k" * 150, 10_000, 100)
    b.kernel("add(int, float)", 20_000, 50)
    path = b.write(tmp_path / "long.sqlite")
    _, text, _ = run_stats(capsys, path, "cuda_gpu_kern_sum", fmt="table")
    assert ("k" * 99 + "…") in text and "k" * 100 not in text
    _, rows, _ = run_stats(capsys, path, "cuda_gpu_kern_sum")
    assert rows[0]["Name"] == "k" * 150  # json keeps the whole name
    _, text, _ = run_stats(capsys, path, "cuda_gpu_kern_sum", fmt="csv")
    assert text.splitlines()[2].endswith(',"add(int, float)"')  # quoted only where needed, as nsys


def test_filter_nvtx_domain_by_name(capsys, tmp_path):
    b = TraceBuilder()
    b.kernel("in_nccl_init", 150_000, 1_000, launch_at=120_000)
    b.kernel("in_default_init", 550_000, 1_000, launch_at=520_000)
    b.nvtx("other", 900_000, 950_000)
    path = b.write(tmp_path / "domains.sqlite")
    tid = TraceBuilder.global_tid()
    add_nvtx_rows(path, [(50, None, 75, "NCCL", tid, 1), (100_000, 200_000, 59, "init", tid, 1),
                         (500_000, 600_000, 59, "init", tid, 0)])
    _, rows, _ = run_stats(capsys, path, "cuda_gpu_kern_sum", "--filter-nvtx", "init@NCCL")
    assert [r["Name"] for r in rows] == ["in_nccl_init"]
    _, rows, _ = run_stats(capsys, path, "cuda_gpu_kern_sum", "--filter-nvtx", "init")
    assert sorted(r["Name"] for r in rows) == ["in_default_init", "in_nccl_init"]
    code, _, err = run_stats(capsys, path, "cuda_gpu_kern_sum", "--filter-nvtx", "init@NOPE")
    assert code == 2 and "domain 'NOPE'" in err


# -- nsys stats habits: -r lists, the default set, --timeunit, -o ---------------------------------
def _main(capsys, *args):
    code = main(["stats", *map(str, args)])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_reports_repeated_or_comma_separated_print_one_section_each(capsys, worker_trace):
    code, text, _ = _main(capsys, "-r", "cuda_gpu_kern_sum,cuda_api_sum", "-r", "nvtx_sum", worker_trace)
    assert code == 0
    heads = [line for line in text.splitlines() if line.startswith(" ** ")]
    assert heads == [" ** CUDA GPU Kernel Summary (cuda_gpu_kern_sum):", " ** CUDA API Summary (cuda_api_sum):",
                     " ** NVTX Range Summary (nvtx_sum):"]
    kern = text[text.index("(cuda_gpu_kern_sum)"):text.index("(cuda_api_sum)")]
    assert "11,000" in kern and "gemv" in kern  # gemv: 3 runs of 1 + 3 + 7 us
    # One report alone keeps nsys's bare output (the array for json), no heading.
    code, one, _ = _main(capsys, "-r", "cuda_gpu_kern_sum", "-f", "json", worker_trace)
    assert json.loads(one)[0]["Name"] == "gemv"


def test_no_report_runs_the_nsys_default_set(capsys, worker_trace):
    code, text, err = _main(capsys, worker_trace)
    assert code == 0
    heads = [line.split("(")[-1].rstrip("):") for line in text.splitlines() if line.startswith(" ** ")]
    # No copies in this trace: both memory reports are empty (said on stderr, as nsys skips them).
    assert heads == ["nvtx_sum", "cuda_api_sum", "cuda_gpu_kern_sum"]
    assert "cuda_gpu_mem_time_sum: no data" in err and "cuda_gpu_mem_size_sum: no data" in err


def test_timeunit_converts_the_time_columns(capsys, worker_trace):
    _, ns, _ = _main(capsys, "-r", "cuda_gpu_kern_sum", "-f", "json", worker_trace)
    _, us, _ = _main(capsys, "-r", "cuda_gpu_kern_sum", "-f", "json", "--timeunit", "usec", worker_trace)
    _, ms, _ = _main(capsys, "-r", "cuda_gpu_kern_sum", "-f", "json", "--timeunit", "msec", worker_trace)
    gemv_ns, gemv_us, gemv_ms = (next(r for r in json.loads(t) if r["Name"] == "gemv") for t in (ns, us, ms))
    assert gemv_ns["Total Time (ns)"] == 11_000 and gemv_us["Total Time (us)"] == 11.0
    assert gemv_ms["Med (ms)"] == 0.003 and gemv_ms["Time (%)"] == gemv_ns["Time (%)"]
    assert "Avg (ns)" not in gemv_us
    _, table, _ = _main(capsys, "-r", "cuda_gpu_kern_sum", "--timeunit", "usec", worker_trace)
    assert "Total Time (us)" in table and "11.000" in table


def test_output_files_one_per_report_never_over_an_input(capsys, worker_trace, tmp_path):
    base = tmp_path / "out"
    code, text, err = _main(capsys, "-r", "cuda_gpu_kern_sum,cuda_api_sum", "-f", "csv", "-o", base, worker_trace)
    assert code == 0 and text == ""
    kern = (tmp_path / "out_cuda_gpu_kern_sum.csv").read_text()
    assert kern.startswith("Time (%),Total Time (ns),Instances,")
    assert (tmp_path / "out_cuda_api_sum.csv").read_text().splitlines()[1].endswith(",cudaLaunchKernel")
    # nsys's rule: an existing file is replaced only when asked.
    code, _, err = _main(capsys, "-r", "cuda_gpu_kern_sum", "-f", "csv", "-o", base, worker_trace)
    assert code == 2 and "exists; use --force-overwrite true" in err
    code, _, _ = _main(capsys, "-r", "cuda_gpu_kern_sum", "-f", "csv", "-o", base, "--force-overwrite", "true", worker_trace)
    assert code == 0
    # '.' names the files after the trace, beside it.
    code, _, _ = _main(capsys, "-r", "nvtx_sum", "-f", "json", "-o", ".", worker_trace)
    assert json.loads((worker_trace.parent / "worker_nvtx_sum.json").read_text())[0]["Range"] == ":serve"
    # A report file that would be the trace itself is refused before anything is read or written.
    trace = tmp_path / "t_cuda_gpu_kern_sum.json"
    trace.write_bytes(worker_trace.read_bytes())
    before = trace.read_bytes()
    code, _, err = _main(capsys, "-r", "cuda_gpu_kern_sum", "-f", "json", "-o", tmp_path / "t", "--force-overwrite",
                         "true", trace)
    assert code == 2 and "is an input" in err and err.count("\n") == 1
    assert trace.read_bytes() == before


# -- gpu_metric_sum (nsys-rules' own report) --------------------------------------------------------
@pytest.fixture
def metrics_trace(tmp_path):
    b = TraceBuilder()
    b.nvtx("decode", 1_000_000, 2_000_000)
    b.kernel("gemv", 1_100_000, 500_000)
    for t in range(0, 3_000_000, 100_000):
        b.gpu_metric("dram_read", t, 80 if 1_000_000 <= t < 2_000_000 else 0)
        b.gpu_metric("gpc_clock", t, 1_980_000_000)
    return b.write(tmp_path / "gm.sqlite")


def test_gpu_metric_sum_summarizes_each_metric(capsys, metrics_trace):
    code, rows, _ = run_stats(capsys, metrics_trace, "gpu_metric_sum")
    assert code == 0
    assert [(r["GPU"], r["Metric"], r["Unit"], r["Samples"]) for r in rows] == [
        (0, "DRAM Read Bandwidth", "Throughput %", 30), (0, "GPC Clock Frequency", "MHz", 30)]
    dram, clock = rows
    assert dram["Avg"] == pytest.approx(80 * 10 / 30, abs=1e-3) and dram["Max"] == 80 and dram["Med"] == 0.0
    assert clock["Avg"] == 1980.0 and clock["Min"] == 1980.0  # stored in Hz, shown in MHz as named


def test_gpu_metric_sum_keeps_the_window(capsys, metrics_trace):
    code, rows, _ = run_stats(capsys, metrics_trace, "gpu_metric_sum", "--filter-nvtx", "decode")
    dram = rows[0]
    assert code == 0 and dram["Samples"] == 11 and dram["Min"] == 0 and dram["Med"] == 80.0


def test_gpu_metric_sum_without_metrics_says_how_to_capture_them(capsys, worker_trace):
    assert main(["stats", "-r", "gpu_metric_sum", "-f", "json", str(worker_trace)]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out) == [] and "--gpu-metrics-devices=all" in err
