"""gemv-dominance: built decode/prefill scenarios, bandwidth bands and bytes sources, real H200 traces."""

from __future__ import annotations

import numpy as np
import pytest

from nsys_rules.testing import GpuSpec, TraceBuilder, run_rule
from nsys_rules.rules.gemv.bandwidth import achieved_bandwidth, per_step_time, weights_read_per_step
from nsys_rules.testing import metric_values as values

PEAK = 4_814_304_000_000  # TraceBuilder's H200
PERIOD = 1_000_000
T0 = 50_000_000
GEMV = "gemv_bf16(const __nv_bfloat16 *, const __nv_bfloat16 *, __nv_bfloat16 *, int, int)"
NORM = "rmsnorm(__nv_bfloat16 *, int)"
GEMM = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT"


def decode(b: TraceBuilder, steps: int = 10, *, gemv_ns: int = 100_000, other_ns: int = 25_000, gemv_name: str = GEMV,
           other_name: str = NORM, nvtx: bool = True, device: int = 0, t0: int = T0) -> None:
    """Per step: four GEMVs of ``gemv_ns / 4`` and one other kernel of ``other_ns``."""
    for i in range(steps):
        s = t0 + i * PERIOD
        if nvtx:
            b.nvtx("decode_step", s, s + PERIOD - 10_000)
        t = s + 20_000
        for _ in range(4):
            b.kernel(gemv_name, start=t, duration=gemv_ns // 4, device=device)
            t += gemv_ns // 4 + 1_000
        b.kernel(other_name, start=t, duration=other_ns, device=device)



def test_decode_without_bytes_is_info_with_share(tmp_path):
    b = TraceBuilder()
    decode(b)
    [f] = run_rule("gemv-dominance", b.write(tmp_path / "t.sqlite"))
    m = values(f)
    assert f.rule == "gemv-dominance" and f.severity.value == "info"
    assert m["gemv_time"] == 10 * 100_000 and m["kernel_time"] == 10 * 125_000
    assert m["gemv_share"] == pytest.approx(80.0)
    assert "achieved_bandwidth" not in m
    assert "weight_bytes" in f.recommendation and f.location.device == 0


def test_gemm_bound_work_is_silent(tmp_path):
    b = TraceBuilder()
    decode(b, gemv_name=GEMM, gemv_ns=400_000, other_name=GEMV, other_ns=20_000)  # prefill-like: GEMMs dominate
    assert run_rule("gemv-dominance", b.write(tmp_path / "t.sqlite")) == []


@pytest.mark.parametrize("other_ns,fires", [(100_000, True), (101_000, False)])
def test_min_share_boundary(tmp_path, other_ns, fires):
    b = TraceBuilder()
    decode(b, gemv_ns=100_000, other_ns=other_ns)  # share 0.5 exactly, then just under
    assert bool(run_rule("gemv-dominance", b.write(tmp_path / "t.sqlite"))) is fires


def test_bandwidth_from_option_at_roofline(tmp_path):
    b = TraceBuilder()
    decode(b)
    weight = 400_000_000  # 400 MB in 100 us per step = 4.0 TB/s = 83 % of peak
    [f] = run_rule("gemv-dominance", b.write(tmp_path / "t.sqlite"), options={"weight_bytes": weight})
    m = values(f)
    assert m["achieved_bandwidth"] == pytest.approx(4.0e12)
    assert m["bandwidth_fraction"] == pytest.approx(100 * 4.0e12 / PEAK, rel=1e-6)
    assert m["steps"] == 10 and m["gemv_time_per_step"] == 100_000
    assert f.severity.value == "info" and "quantization" in f.recommendation
    assert f.estimated_savings_ns == 10 * 100_000 // 2


def test_low_bandwidth_is_a_warning_with_savings(tmp_path):
    b = TraceBuilder()
    decode(b)
    [f] = run_rule("gemv-dominance", b.write(tmp_path / "t.sqlite"), options={"weight_bytes": "200M"})
    m = values(f)
    weight = 200 * 1024**2
    frac = weight / 100e-6 / PEAK
    assert m["weight_bytes"] == weight and m["bandwidth_fraction"] == pytest.approx(100 * frac, rel=1e-6)
    assert f.severity.value == "warning" and "Custom GEMV kernels" in f.recommendation
    # Saving: per step from 100 us down to the time at 85 % of peak, over 10 steps.
    assert f.estimated_savings_ns == pytest.approx(10 * (100_000 - 100_000 * frac / 0.85), abs=2)


def test_library_gemv_tiles_get_kernel_replacement_advice(tmp_path):
    b = TraceBuilder()
    decode(b, gemv_name="nvjet_sm90_tst_256x8_64x6_4x1_v_bz_TNT")  # cuBLASLt tile with N = 8
    [f] = run_rule("gemv-dominance", b.write(tmp_path / "t.sqlite"), options={"weight_bytes": 200_000_000})
    assert f.severity.value == "warning" and "library GEMM tiles" in f.recommendation


def test_low_bandwidth_with_small_savings_stays_info(tmp_path):
    b = TraceBuilder()
    decode(b, gemv_ns=100_000, other_ns=25_000)
    # 68 % of peak: saving to 85 % is 20 us of 125 us per step (16 %): warning; raise the bar above it.
    weight = int(0.68 * PEAK * 100e-6)
    path = b.write(tmp_path / "t.sqlite")
    [f] = run_rule("gemv-dominance", path, options={"weight_bytes": weight})
    assert f.severity.value == "warning"
    [f] = run_rule("gemv-dominance", path, options={"weight_bytes": weight, "min_savings_pct": 20.0})
    assert f.severity.value == "info"


@pytest.mark.parametrize("fraction,advice", [(0.80, "close to what large GEMVs achieve"),
                                             (0.70, "close to what large GEMVs achieve"),
                                             (0.805, "memory roofline"), (0.695, "Custom GEMV kernels")])
def test_band_boundaries(tmp_path, fraction, advice):
    b = TraceBuilder()
    decode(b)
    weight = int(round(fraction * PEAK * 100e-6))
    [f] = run_rule("gemv-dominance", b.write(tmp_path / "t.sqlite"), options={"weight_bytes": weight})
    assert advice in f.recommendation


def test_bytes_from_the_model_load(tmp_path):
    b = TraceBuilder()
    for i in range(8):  # 8 x 50 MB host-to-device before the first step: the model load
        b.memcpy(1_000_000 + i * 2_000_000, 1_500_000, 50_000_000, kind="HtoD")
    b.memcpy(T0 + 5 * PERIOD + 1_000, 2_000, 4_096, kind="HtoD")  # a per-step input copy: not weights
    decode(b)
    [f] = run_rule("gemv-dominance", b.write(tmp_path / "t.sqlite"))
    m = values(f)
    assert m["weight_bytes"] == 400_000_000
    assert m["achieved_bandwidth"] == pytest.approx(4.0e12)
    assert "model load" in f.message


def test_small_load_is_not_taken_for_weights(tmp_path):
    b = TraceBuilder()
    b.memcpy(1_000_000, 10_000, 8 * 1024**2, kind="HtoD")  # 8 MiB < min_load_bytes (16 MiB)
    decode(b)
    path = b.write(tmp_path / "t.sqlite")
    [f] = run_rule("gemv-dominance", path)
    assert "achieved_bandwidth" not in values(f)
    [f] = run_rule("gemv-dominance", path, options={"min_load_bytes": 8 * 1024**2})
    assert values(f)["weight_bytes"] == 8 * 1024**2


def test_load_implying_more_than_peak_is_rejected(tmp_path):
    b = TraceBuilder()
    b.memcpy(1_000_000, 10_000_000, 2_000_000_000, kind="HtoD")  # 2 GB per 100 us would be 20 TB/s
    decode(b)
    [f] = run_rule("gemv-dominance", b.write(tmp_path / "t.sqlite"))
    assert "achieved_bandwidth" not in values(f)
    assert "above the" in f.message and "peak" in f.message


def test_given_bytes_above_peak_are_refused(tmp_path):
    b = TraceBuilder()
    decode(b)
    [f] = run_rule("gemv-dominance", b.write(tmp_path / "t.sqlite"), options={"weight_bytes": 1_000_000_000})
    assert "achieved_bandwidth" not in values(f) and "10.00 TB/s" in f.message and "steps=N" in f.message


def test_peak_missing_from_export(tmp_path):
    b = TraceBuilder(gpus=(GpuSpec(memory_bandwidth=None),))
    decode(b)
    path = b.write(tmp_path / "t.sqlite")
    [f] = run_rule("gemv-dominance", path, options={"weight_bytes": 400_000_000})
    m = values(f)
    assert m["achieved_bandwidth"] == pytest.approx(4.0e12) and "bandwidth_fraction" not in m
    assert "memoryBandwidth" in f.message and "peak_bandwidth" in f.recommendation
    [f] = run_rule("gemv-dominance", path, options={"weight_bytes": 400_000_000, "peak_bandwidth": 5e12})
    assert values(f)["bandwidth_fraction"] == pytest.approx(80.0)


def test_peak_of_the_kernels_device(tmp_path):
    b = TraceBuilder(gpus=(GpuSpec(id=0, memory_bandwidth=1_000_000_000_000),
                           GpuSpec(id=1, memory_bandwidth=8_000_000_000_000)))
    decode(b, device=1)
    [f] = run_rule("gemv-dominance", b.write(tmp_path / "t.sqlite"), options={"weight_bytes": 400_000_000})
    assert f.location.device == 1
    assert values(f)["bandwidth_fraction"] == pytest.approx(50.0)


def test_steps_option_without_step_ranges(tmp_path):
    b = TraceBuilder()
    t = T0
    for count in (4, 5, 3, 4, 5, 3, 4, 5, 3, 4):  # uneven launches: no NVTX and no marker kernel gives steps
        for _ in range(count):
            b.kernel(GEMV, start=t, duration=25_000)
            t += 26_000
        b.kernel(NORM, start=t, duration=25_000)
        t += 500_000
    path = b.write(tmp_path / "t.sqlite")
    [f] = run_rule("gemv-dominance", path, options={"weight_bytes": 400_000_000})
    assert "achieved_bandwidth" not in values(f) and "steps=N" in f.message
    [f] = run_rule("gemv-dominance", path, options={"weight_bytes": 400_000_000, "steps": 10})
    assert values(f)["gemv_time_per_step"] == pytest.approx(100_000)


def test_extra_gemv_patterns(tmp_path):
    b = TraceBuilder()
    decode(b, gemv_name="w4a16_decode_kernel(int)")
    path = b.write(tmp_path / "t.sqlite")
    assert run_rule("gemv-dominance", path) == []
    [f] = run_rule("gemv-dominance", path, options={"extra_gemv_patterns": ("w4a16_decode",)})
    assert values(f)["gemv_share"] == pytest.approx(80.0)


LLAMA_7B = {"hidden_size": 4096, "num_hidden_layers": 32, "vocab_size": 32000, "num_attention_heads": 32,
            "num_key_value_heads": 32, "intermediate_size": 11008, "hidden_act": "silu", "torch_dtype": "float16"}


def test_weights_read_per_step_from_configs():
    # Llama-2-7B: 6.74 B parameters, of which the 131 M embedding rows are not read per step.
    size, how = weights_read_per_step(LLAMA_7B)
    assert size == 2 * (32 * (4 * 4096 * 4096 + 3 * 4096 * 11008) + 32000 * 4096)
    assert size / 2 == pytest.approx(6.61e9, rel=0.01) and "dense MLP" in how
    # Mixtral-8x7B: only 2 of 8 experts are read per token (about 12.75 B active weights).
    mixtral = dict(LLAMA_7B, num_key_value_heads=8, intermediate_size=14336, num_local_experts=8,
                   num_experts_per_tok=2, torch_dtype="bfloat16")
    size, how = weights_read_per_step(mixtral)
    assert size / 2 == pytest.approx(12.75e9, rel=0.01) and "2 active experts" in how
    assert weights_read_per_step(LLAMA_7B, dtype_bytes=0.5)[0] == weights_read_per_step(LLAMA_7B)[0] // 4  # int4
    with pytest.raises(ValueError, match="hidden_size"):
        weights_read_per_step({"num_hidden_layers": 2})
    # An MoE config without its experts' size is a bad config (a usage error), not a TypeError from int(None).
    sizeless = {k: v for k, v in mixtral.items() if k != "intermediate_size"}
    with pytest.raises(ValueError, match="moe_intermediate_size"):
        weights_read_per_step(sizeless)


def test_bytes_from_model_config(tmp_path):
    import json

    config = {"hidden_size": 1024, "num_hidden_layers": 8, "vocab_size": 32000, "num_attention_heads": 16,
              "intermediate_size": 2816, "torch_dtype": "bfloat16"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    expected = weights_read_per_step(config)[0]
    b = TraceBuilder()
    decode(b)
    [f] = run_rule("gemv-dominance", b.write(tmp_path / "t.sqlite"), options={"model_config": str(path)})
    assert values(f)["weight_bytes"] == expected and str(path) in f.message
    assert values(f)["achieved_bandwidth"] == pytest.approx(expected / 100e-6)


def test_bad_model_config_is_a_usage_error(tmp_path):
    from nsys_rules.errors import UsageError

    b = TraceBuilder()
    decode(b)
    with pytest.raises(UsageError, match="model_config"):
        run_rule("gemv-dominance", b.write(tmp_path / "t.sqlite"), options={"model_config": str(tmp_path / "no.json")})


def test_bad_weight_bytes_is_a_usage_error(tmp_path):
    from nsys_rules.errors import UsageError

    b = TraceBuilder()
    decode(b)
    with pytest.raises(UsageError):
        run_rule("gemv-dominance", b.write(tmp_path / "t.sqlite"), options={"weight_bytes": "lots"})


def test_pure_functions():
    assert achieved_bandwidth(1_000_000_000, 1_000_000) == pytest.approx(1e12)
    launch = np.array([5, 15, 16, 35, 99])
    dur = np.array([1.0, 2.0, 3.0, 4.0, 100.0])
    per_step, used = per_step_time(launch, dur, ((0, 10), (10, 20), (30, 40), (50, 60)))
    assert used == 3 and per_step == pytest.approx(10 / 3)


def test_real_decode_and_prefill(h200):
    [f] = run_rule("gemv-dominance", h200 / "decode_graph_profilerapi.sqlite")
    m = values(f)
    assert f.severity.value == "info" and 65 < m["gemv_share"] < 80
    assert run_rule("gemv-dominance", h200 / "prefill_2048.sqlite") == []
    [f] = run_rule("gemv-dominance", h200 / "rust_release_build.sqlite", options={"weight_bytes": 7_000_000_000})
    m = values(f)
    # 109.1 ms of GEMV over 63 steps = 1.732 ms per step; 7 GB / 1.732 ms = 4.04 TB/s = 84 % of peak.
    assert m["gemv_time_per_step"] == pytest.approx(1.732e6, rel=0.01)
    assert m["bandwidth_fraction"] == pytest.approx(84, abs=1.5)


# -- measured by the GPU metrics (nsys --gpu-metrics-devices) ---------------------------------------
def measured(b: TraceBuilder, dram: float, steps: int = 10, name: str = GEMV) -> None:
    """Samples for ``decode``: the GEMVs at ``dram`` % of DRAM peak (plus 2 % writes), the norm at 20 %."""
    b.sample_gpu_metrics({name: {"dram_read": dram, "dram_write": 2, "sm_issue": 8},
                          NORM: {"dram_read": 20, "dram_write": 4, "sm_issue": 30}},
                         T0 - PERIOD, T0 + (steps + 1) * PERIOD, idle={"dram_read": 0, "dram_write": 0, "sm_issue": 0})


def jittered(b: TraceBuilder, steps: int = 10, gemv_name: str = GEMV) -> None:
    """``decode``'s kernels, the norm placed differently each step (so samples mix the two in many ways)."""
    rng = np.random.default_rng(11)
    for i in range(steps):
        s = T0 + i * PERIOD
        b.nvtx("decode_step", s, s + PERIOD - 10_000)
        t = s + 20_000 + int(rng.integers(0, 300_000))
        for _ in range(4):
            b.kernel(gemv_name, start=t, duration=25_000)
            t += 26_000 + int(rng.integers(0, 40_000))
        b.kernel(NORM, start=t + int(rng.integers(0, 200_000)), duration=25_000)


def test_measured_bandwidth_needs_no_bytes(tmp_path):
    b = TraceBuilder()
    jittered(b)
    measured(b, dram=84)
    [f] = run_rule("gemv-dominance", b.write(tmp_path / "t.sqlite"))
    m = values(f)
    assert m["measured_read_pct"] == pytest.approx(84, abs=1.5)
    assert m["measured_fraction"] == pytest.approx(86, abs=2)  # reads and writes: the roofline's measure
    assert m["measured_bandwidth"] == pytest.approx(m["measured_read_pct"] / 100 * PEAK, rel=1e-6)
    assert m["measured_dram_bytes_per_step"] == pytest.approx(m["measured_bandwidth"] * 100_000 / 1e9, rel=1e-6)
    assert "GEMV kernels read DRAM at" in f.message and "measured" in f.message
    assert "not computed" not in f.message and "weight_bytes" not in f.recommendation
    assert "memory roofline" in f.recommendation and f.severity.value == "info"


def test_measured_low_bandwidth_is_a_kernel_to_tune(tmp_path):
    b = TraceBuilder()
    jittered(b)
    measured(b, dram=45)
    [f] = run_rule("gemv-dominance", b.write(tmp_path / "t.sqlite"))
    assert f.severity.value == "warning" and "Custom GEMV kernels have room" in f.recommendation
    assert values(f)["measured_fraction"] < 70


def test_weight_bytes_that_agree_with_the_measurement(tmp_path):
    b = TraceBuilder()
    jittered(b)
    measured(b, dram=80)
    weight = int(0.80 * PEAK * 100_000 / 1e9)  # the bytes 80 % of peak reads in 100 us of GEMV per step
    [f] = run_rule("gemv-dominance", b.write(tmp_path / "t.sqlite"), options={"weight_bytes": weight})
    m = values(f)
    assert m["weight_bytes"] == weight and m["bandwidth_fraction"] == pytest.approx(80, rel=1e-3)
    assert "the measurement agrees (within 15 %)" in f.message


def test_weight_bytes_that_disagree_are_named_with_the_likely_cause(tmp_path):
    b = TraceBuilder()
    jittered(b)
    measured(b, dram=80)
    weight = int(0.20 * PEAK * 100_000 / 1e9)  # a quarter of what the GEMVs read: four tokens a step, say
    [f] = run_rule("gemv-dominance", b.write(tmp_path / "t.sqlite"), options={"weight_bytes": weight})
    assert "they disagree" in f.message and "several tokens per step" in f.message
    assert "4.0" in f.message.split("x the weight bytes")[0][-6:]
    assert "disagrees with the measurement" in f.recommendation


def test_extra_gemv_patterns_are_measured_as_their_own_kernels(tmp_path):
    b = TraceBuilder()
    jittered(b, gemv_name="my_matvec_kernel(int)")
    measured(b, dram=78, name="my_matvec_kernel(int)")
    [f] = run_rule("gemv-dominance", b.write(tmp_path / "t.sqlite"), options={"extra_gemv_patterns": ["my_matvec"]})
    assert values(f)["measured_read_pct"] == pytest.approx(78, abs=1.5)


def test_a_copy_bound_step_keeps_low_gemv_bandwidth_at_info(tmp_path):
    # Weights copied to the GPU before every step's GEMVs (offloaded): the copies take 2 ms of each step,
    # the GEMVs 0.1 ms; faster GEMVs would win a few percent of the GPU's time, not a warning's worth.
    b = TraceBuilder()
    for i in range(10):
        s = T0 + i * 4 * PERIOD
        b.nvtx("decode_step", s, s + 4 * PERIOD - 10_000)
        for j in range(4):
            b.memcpy(s + 10_000 + j * 500_000, 500_000, 50 << 20, launch_at=s + 1_000 + j)
        t = s + 2_100_000
        for _ in range(4):
            b.kernel(GEMV, start=t, duration=25_000, launch_at=s + 2_000_000)
            t += 26_000
        b.kernel(NORM, start=t, duration=25_000, launch_at=s + 2_000_000)
    [f] = run_rule("gemv-dominance", b.write(tmp_path / "t.sqlite"), options={"weight_bytes": "200M"})
    assert f.severity.value == "info" and "step-uploads" in f.message
    assert f.estimated_savings_ns > 0.05 * values(f)["kernel_time"]  # a warning against kernel time alone
