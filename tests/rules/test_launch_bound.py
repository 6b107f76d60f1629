"""launch-bound: built scenarios (firing, quiet, thresholds) and the real H200 verdicts."""

from __future__ import annotations

import pytest

from nsys_rules.findings import Severity
from nsys_rules.testing import TraceBuilder, run_rule, run_rules
from nsys_rules.testing import metric_values as values
from tests.rules.scenarios import eager_steps, foreign_words, program

T0 = 100_000_000
LEVEL = {"info": 0, "warning": 1, "error": 2}




def test_small_kernels_with_launch_gaps_are_launch_bound(tmp_path):
    b = TraceBuilder()
    eager_steps(b)
    (f,) = run_rule("launch-bound", b.write(tmp_path / "t.sqlite"))
    v = values(f)
    assert f.severity == Severity.WARNING
    assert v["kernels"] == 500 and v["median_kernel_duration"] == 2_000
    assert v["gpu_busy_share"] == pytest.approx(100 * 1_000_000 / (10 * 550_000 - 10_000 - 10_000 - 8_000), rel=0.05)
    assert v["launch_api_time_per_kernel"] == 3_000
    # 49 gaps of 8 us per step plus 9 step boundaries (58 us): all launch gaps; graphs leave 1 us each.
    assert v["launch_gaps"] == 10 * 49 + 9
    # The saving is the step replayed with CUDA graphs (run_rule applies it as check does): each step's 49 gaps
    # of 8 us and its boundary shrink to graph-launch gaps, never below the 100 us of kernels a step holds.
    replay = f.savings_replay
    assert replay is not None and replay["steps"] == 10
    assert f.estimated_savings_ns == pytest.approx(replay["per_step_ns"] * 10, rel=0.02)  # over the steady steps
    assert 10 * 49 * 7_000 + 9 * 57_000 <= f.estimated_savings_ns <= 10 * (550_000 - 100_000)


def test_busy_gpu_is_not_launch_bound(tmp_path):
    b = TraceBuilder()
    eager_steps(b, kernel_ns=9_000)  # 90 % busy
    assert run_rule("launch-bound", b.write(tmp_path / "t.sqlite")) == []


@pytest.mark.parametrize("busy_limit,fires", [(0.2, False), (0.3, True)])
def test_busy_share_threshold(tmp_path, busy_limit, fires):
    b = TraceBuilder()
    eager_steps(b, kernel_ns=2_500)  # ~25 % busy
    found = run_rule("launch-bound", b.write(tmp_path / "t.sqlite"), options={"max_busy_pct": 100 * busy_limit})
    assert bool(found) is fires


@pytest.mark.parametrize("median_limit,fires", [(1_999, False), (2_000, True)])
def test_median_kernel_threshold(tmp_path, median_limit, fires):
    b = TraceBuilder()
    eager_steps(b)
    found = run_rule("launch-bound", b.write(tmp_path / "t.sqlite"), options={"max_median_kernel_ns": median_limit})
    assert bool(found) is fires


def test_gpu_queue_full_is_not_launch_bound(tmp_path):
    """Kernels launched long before they run (deep queue): gaps are not the host's fault."""
    b = TraceBuilder()
    for j in range(300):
        k = T0 + j * 10_000
        b.kernel("k", start=k, duration=2_000, launch_at=T0 - 5_000_000 + j * 4_000)
    assert run_rule("launch-bound", b.write(tmp_path / "t.sqlite")) == []


def test_small_saving_is_info(tmp_path):
    b = TraceBuilder()
    # 0.3 us gaps, 87 % busy; the launch call (3 us) returns 0.1 us after the GPU ran dry
    eager_steps(b, steps=1, per_step=500, period_ns=2_300, kernel_ns=2_000, lead_ns=3_200)
    found = run_rule("launch-bound", b.write(tmp_path / "t.sqlite"), options={"max_busy_pct": 95.0,
                                                                               "graph_gap_ns": 250})
    assert len(found) == 1 and found[0].severity == Severity.INFO



def test_h200_verdicts_of_launch_rules(h200):
    import json

    expected = json.loads((h200 / "expected.json").read_text())["traces"]
    for name, spec in expected.items():
        result = run_rules(["launch-bound"], h200 / name)
        worst = {}
        for f in result.findings:
            worst[f.rule] = max(worst.get(f.rule, -1), LEVEL[f.severity.value])
        for rule in ("launch-bound",):
            if rule in spec["must"]:
                assert worst.get(rule, -1) >= LEVEL[spec["must"][rule]], (name, rule)
            if rule in spec["must_not"]:
                assert worst.get(rule, -1) <= LEVEL["info"], (name, rule)


def test_each_gpu_is_judged_with_its_own_launches(tmp_path):
    from nsys_rules.testing import GpuSpec

    b = TraceBuilder(gpus=(GpuSpec(id=0), GpuSpec(id=1)))
    for i in range(10):
        s = T0 + i * 600_000
        b.nvtx("decode_step", s, s + 590_000)
        for j in range(50):
            k = s + 10_000 + j * 10_000
            b.kernel("small", start=k, duration=2_000, launch_at=k - 5_000, device=0)
            if j % 5 == 0:  # GPU 1 runs a fifth as many kernels, each 8 us
                b.kernel("other", start=k + 1_000, duration=8_000, launch_at=k - 4_000, device=1, stream=9)
    found = {f.location.device: values(f) for f in run_rule("launch-bound", b.write(tmp_path / "t.sqlite"))}
    assert found[0]["launch_calls"] == 500 and found[0]["kernels"] == 500
    assert found[1]["launch_calls"] == 100 and found[1]["launch_api_time_per_kernel"] == 3_000


@pytest.mark.parametrize("kind,word", [("pytorch", "torch.cuda.CUDAGraph"), ("jax", "jax.jit"),
                                       ("cuda", "cudaStreamBeginCapture")])
def test_the_graph_is_advised_in_the_programs_framework(tmp_path, kind, word):
    b = program(kind)
    eager_steps(b)
    (f,) = run_rule("launch-bound", b.write(tmp_path / "t.sqlite"))
    assert word in f.recommendation and not foreign_words(kind, f.recommendation)


def test_a_compiled_pytorch_program_gets_reduce_overhead(tmp_path):
    b = program("pytorch")
    eager_steps(b)
    b.kernel("triton_poi_fused_mul_0", start=T0 - 1_000_000, duration=1_000)  # Inductor's kernels: torch.compile
    (f,) = run_rule("launch-bound", b.write(tmp_path / "t.sqlite"))
    assert 'mode="reduce-overhead"' in f.recommendation and "torch.cuda.graph(g)" not in f.recommendation
