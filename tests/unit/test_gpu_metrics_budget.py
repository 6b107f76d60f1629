"""The budget's measured activity (model/gpu_metrics.py): per part, unmixed from built GPU metrics samples."""

from __future__ import annotations

import numpy as np
import pytest

from nsys_rules.model.gpu_metric_set import kind_of
from nsys_rules.model.gpu_metrics import measure_kernels
from nsys_rules.model.metric_levels import bound_of
from nsys_rules.testing import GpuSpec, TraceBuilder, run_rules
from tests.conftest import run_cli, validate_report
from tests.unit._folders import folder_from_sqlite

PERIOD = 1_000_000
T0 = 50_000_000
GEMV = "gemv_bf16(const __nv_bfloat16 *, int)"
GEMV_LM = "gemv_lm_head(const __nv_bfloat16 *, int)"
NORM = "rmsnorm(__nv_bfloat16 *, int)"
LEVELS = {GEMV: {"dram_read": 80, "dram_write": 2, "sm_issue": 10, "tensor_active": 1},
          GEMV_LM: {"dram_read": 80, "dram_write": 2, "sm_issue": 10, "tensor_active": 1},
          NORM: {"dram_read": 20, "dram_write": 5, "sm_issue": 30, "tensor_active": 0}}
IDLE = {"dram_read": 0, "dram_write": 0, "sm_issue": 0, "tensor_active": 0, "pcie_rx": 3, "pcie_tx": 1}


def decode(b: TraceBuilder, steps: int = 30, *, jitter: bool = True) -> None:
    """Per step: four GEMVs, an lm-head GEMV and a norm, under NVTX; the gaps vary so samples mix differently."""
    rng = np.random.default_rng(5)
    for i in range(steps):
        s = T0 + i * PERIOD
        b.nvtx("decode_step", s, s + PERIOD - 10_000)
        t = s + 20_000 + (int(rng.integers(0, 60_000)) if jitter else 0)
        for _ in range(4):
            b.kernel(GEMV, start=t, duration=110_000)
            t += 111_000 + (int(rng.integers(0, 20_000)) if jitter else 0)
        b.kernel(GEMV_LM, start=t, duration=60_000)
        t += 61_000
        b.kernel(NORM, start=t, duration=45_000)


ONE_GPU = (GpuSpec(),)


def built(tmp_path, *, metrics: bool = True, steps: int = 30, gpu: int = 0, gpus=ONE_GPU, name="t.sqlite",
          until: int | None = None):
    b = TraceBuilder(gpus=gpus)
    decode(b, steps)
    if metrics:
        b.sample_gpu_metrics(LEVELS, T0 - PERIOD, until or T0 + (steps + 1) * PERIOD, idle=IDLE, gpu=gpu,
                             metrics=["dram_read", "dram_write", "sm_issue", "tensor_active", "pcie_rx", "pcie_tx"])
    return b.write(tmp_path / name)


def budget_of(path, **kw):
    return run_rules(["gemv-dominance"], path, **kw).info.budget


def parts(budget) -> dict:
    return {p["name"]: p for p in budget["metrics"]["parts"]}


def test_each_part_measured_at_its_own_level(tmp_path):
    budget = budget_of(built(tmp_path))
    m = budget["metrics"]
    assert m["measured"] and m["gpu"] == 0 and m["frequency_hz"] == 10_000 and m["samples"] >= 250
    gemv, norm, idle = parts(budget)["gemv"], parts(budget)["norm"], parts(budget)["idle"]
    # Rounded to whole percents per sample, as nsys stores them: within a point.
    assert gemv["pct"]["dram_read"] == pytest.approx(80, abs=1.0) and norm["pct"]["dram_read"] == pytest.approx(20, abs=1.5)
    assert norm["pct"]["sm_issue"] == pytest.approx(30, abs=1.5) and idle["pct"]["pcie_rx"] == pytest.approx(3, abs=0.5)
    assert gemv["dram_read_bytes_per_s"] == pytest.approx(gemv["pct"]["dram_read"] / 100 * 4_814_304_000_000, rel=1e-3)
    assert gemv["bound"] == "memory" and "memory-bound (DRAM 82 % of peak" in gemv["bound_words"]
    assert norm["bound"] == "latency"
    assert "bound" not in idle
    # The mean over the steps mixes every part and the idle time: far below the GEMVs' own level.
    assert m["step_mean"]["dram_read"] < 60


def test_without_metrics_the_budget_is_as_before(tmp_path):
    budget = budget_of(built(tmp_path, metrics=False))
    assert "metrics" not in budget


def test_no_gpu_metrics_flag_leaves_them_unread(tmp_path):
    path = built(tmp_path)
    proc = run_cli("check", "--format", "json", "--no-gpu-metrics", "--fail-on", "never", str(path))
    assert "metrics" not in validate_report(proc.stdout)["traces"][0]["budget"]
    proc = run_cli("check", "--format", "json", "--fail-on", "never", str(path))
    assert validate_report(proc.stdout)["traces"][0]["budget"]["metrics"]["measured"]


def test_another_gpu_sampled_says_why(tmp_path):
    path = built(tmp_path, gpu=1, gpus=(GpuSpec(), GpuSpec(id=1)))
    m = budget_of(path)["metrics"]
    assert m == {"measured": False, "reason": "the GPU metrics sample GPU(s) 1, not the loop's GPU 0"}


def test_one_gpu_sampled_under_another_index_is_that_gpu(tmp_path):
    # On a host of one GPU, nsys's index of the sampled GPU may differ from the kernels' deviceId.
    assert budget_of(built(tmp_path, gpu=3))["metrics"]["measured"]


def test_too_few_samples_in_the_steps(tmp_path):
    path = built(tmp_path, until=T0 + 300_000)
    m = budget_of(path)["metrics"]
    assert not m["measured"] and "sample(s) fall inside the steady steps" in m["reason"]


def test_a_read_over_the_memory_limit_is_left_out_with_the_reason(tmp_path, monkeypatch):
    from nsys_rules.loaders import gpu_metrics as store

    monkeypatch.setattr(store, "READ_BYTES_PER_ROW", 10**9)  # every sample priced at a GB
    from nsys_rules.engine import analyze_trace
    from nsys_rules.inputs import open_trace
    from nsys_rules.settings import Settings

    trace = open_trace(built(tmp_path), max_memory=2 * 1024**3)  # the limit is given when the trace opens
    try:
        result = analyze_trace(trace, [], Settings(max_memory=2 * 1024**3))  # the rest of the run fits
    finally:
        trace.close()
    m = result.info.budget["metrics"]
    assert not m["measured"] and m["reason"].startswith("not read:") and "GPU metrics" in m["reason"]


def test_measure_kernels_splits_a_subset_out_of_its_part(tmp_path):
    from nsys_rules.engine import analyze_trace
    from nsys_rules.inputs import open_trace
    from nsys_rules.model.budget import step_budget
    from nsys_rules.model.gpu_metrics import with_gpu_metrics
    from nsys_rules.model.windows import SteadyOptions, steady_state_window
    from nsys_rules.settings import Settings

    trace = open_trace(built(tmp_path))
    try:
        analyze_trace(trace, [], Settings())
        model = steady_state_window(trace, SteadyOptions(())).model
        budget = with_gpu_metrics(trace, model, step_budget(trace, model))
        lm = measure_kernels(trace, budget, [GEMV_LM], "lm head")
        assert lm is not None and lm.name == "lm head" and lm.level("dram_read") == pytest.approx(80, abs=2.0)
        assert measure_kernels(trace, budget, ["no such kernel"]) is None
        assert measure_kernels(trace, None, [GEMV]) is None
    finally:
        trace.close()


@pytest.mark.parametrize("kind", ["parquet", "arrow"])
def test_export_folders_measure_the_same(tmp_path, kind):
    path = built(tmp_path)
    folder = folder_from_sqlite(path, tmp_path / f"t.{kind}dir", kind)
    a, b = parts(budget_of(path)), parts(budget_of(folder))
    assert a["gemv"]["pct"] == b["gemv"]["pct"] and a["idle"]["pct"] == b["idle"]["pct"]


def test_human_formats_show_the_measured_parts(tmp_path):
    path = built(tmp_path)
    table = run_cli("check", "--fail-on", "never", str(path), env={"COLUMNS": "200"}).stdout
    assert "measured while each part runs (GPU metrics" in table
    row = next(line for line in table.splitlines() if line.strip().startswith("GEMV kernels") and "%" in line
               and "bound" in line)
    assert "memory-bound" in row
    compact = run_cli("check", "--fail-on", "never", str(path), env={"COLUMNS": "90"}).stdout
    assert "DRAM rd  tensor  bound" in compact
    markdown = run_cli("check", "--format", "markdown", "--fail-on", "never", str(path)).stdout
    assert "| part | DRAM rd | DRAM wr | issue | tensor | PCIe rx | PCIe tx | bound |" in markdown
    html = run_cli("check", "--format", "html", "--fail-on", "never", str(path)).stdout
    assert "Measured while each part runs" in html and "GPU metrics per step (measured)" in html
    assert html.count("DRAM read ") >= 2  # the strip's bars carry their values


def test_metric_names_and_bounds():
    assert kind_of("DRAM Read Bandwidth [Throughput %]") == "dram_read"
    assert kind_of("SMs Active [Throughput %]") == "sm_active" and kind_of("SM Active [Throughput %]") == "sm_active"
    assert kind_of("Tensor Active [Throughput %]") == "tensor_active"
    assert kind_of("GPC Clock Frequency [MHz]") is None and kind_of("Compute Warps in Flight [Avg]") is None
    assert bound_of(85, 10) == "memory" and bound_of(57, 10) == "memory"  # the unit clearly nearest its peak
    assert bound_of(18, 83) == "compute" and bound_of(70, 75) == "memory+compute"
    assert bound_of(20, 30) == "latency" and bound_of(None, 5) is None and bound_of(None, 70) == "compute"
