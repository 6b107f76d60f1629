"""``diff``: the gate on the median step's interval, the verdict (kernels, gaps, step count), refusals.

Refused: a trace without steps, library ranges as steps, traces of different programs or steps.
"""

from __future__ import annotations

import pytest

from nsys_rules.diff import compare, run_of
from nsys_rules.errors import UsageError
from nsys_rules.inputs import open_trace
from nsys_rules.testing import TraceBuilder
from tests.unit.test_overview import GEMV, NORM, stepped_trace


def side(path):
    trace = open_trace(path)
    try:
        return run_of(trace)
    finally:
        trace.close()


def test_same_trace_passes_with_no_change(tmp_path):
    s = side(stepped_trace(tmp_path / "a.sqlite"))
    result = compare(s, s)
    assert result.step_change_pct == 0 and result.gpu_change_pct == 0
    assert not result.regressed
    assert result.verdict["kind"] == "none" and result.verdict["changed"] == []
    assert result.movers == []


def program(path, *, scale: float = 1.0, steps: int = 12):
    """A decode-like loop: per step 3 kernels with launch gaps between them; ``scale`` stretches it all."""
    b = TraceBuilder()
    t = 1_000_000
    for _ in range(steps):
        start = t
        for name, dur in ((GEMV, 100_000), (NORM, 10_000), ("silu_kernel", 20_000)):
            t += int(15_000 * scale)
            b.kernel(name, t, int(dur * scale))
            t += int(dur * scale)
        t += int(30_000 * scale)
        b.nvtx("step", start, t)
    return b.write(path)


def test_a_20_percent_slower_run_of_the_same_program_fails_the_gate(tmp_path):
    base, new = side(program(tmp_path / "a.sqlite")), side(program(tmp_path / "b.sqlite", scale=1.2))
    # Every step alike: no in-run noise; with no host spread assumed either, the interval is the point.
    result = compare(base, new, host_spread_pct=0)
    # A step (first kernel to the next step's first): 3 launch gaps of 15 us, 130 us of kernels, 30 us of host
    # work; everything 1.2x longer in NEW: the step too.
    assert (result.base["step_time_ns"], result.new["step_time_ns"]) == (205_000, 246_000)
    assert result.step_change_pct == pytest.approx(20.0)
    assert result.regressed
    assert result.verdict["kind"] == "kernel-time"  # 26 us more of kernels, 15 us more of gaps per step
    assert result.verdict["changed"] == ["kernels", "gaps"]
    assert (result.verdict["gpu_delta_per_step_ns"], result.verdict["idle_delta_per_step_ns"]) == (26_000, 15_000)
    assert result.step_verdict == "slower" and result.totals["step"].low_pct == pytest.approx(20.0)
    assert result.verdict["text"].startswith("slower: time per step +20.0 % (95 % interval +20.0 % to +20.0 %; "
                                             "median 205 us -> 246 us; runs 1 vs 1); gate 5 %: FAIL")
    assert "GPU kernel time per step +26 us (+20.0 %" in result.verdict["text"]
    # Faster passes whatever the gate; a gate above the change lets it pass.
    assert not compare(new, base, gate_pct=0, host_spread_pct=0).regressed
    assert not compare(base, new, gate_pct=25, host_spread_pct=0).regressed
    # One run per side of a loop whose steps are 40 % host time: the host time assumed to move 15 % between runs
    # widens the interval (+4.5 % .. +35.9 %): slower, but not surely past a 5 % gate.
    wide = compare(base, new)
    assert wide.step_verdict == "slower" and not wide.regressed
    assert 0 < wide.totals["step"].low_pct < 5 < 30 < wide.totals["step"].high_pct
    assert wide.said("gpu") == "slower" and wide.totals["gpu"].low_pct == pytest.approx(20.0)


def test_slower_kernels_fail_the_gate_and_blame_kernel_time(tmp_path):
    base = side(stepped_trace(tmp_path / "a.sqlite", gemv_ns=100_000))
    new = side(stepped_trace(tmp_path / "b.sqlite", gemv_ns=130_000, steps=9))
    result = compare(base, new, gate_pct=5, host_spread_pct=0)
    assert result.gpu_change_pct == pytest.approx(100 * 30_000 / 110_000)
    assert result.step_change_pct == pytest.approx(100 * 30_000 / 195_000)
    assert result.regressed
    assert result.verdict["kind"] == "kernel-time"
    assert result.verdict["changed"] == ["kernels", "step count"]
    assert "the step count differs (6 -> 9 steps" in result.verdict["text"]
    top = result.movers[0]
    assert top.name == GEMV and top.delta_ns == pytest.approx(30_000) and top.pct == pytest.approx(30.0)
    gemv = next(c for c in result.classes if c.name == "gemv")
    assert gemv.base_ns == pytest.approx(100_000) and gemv.new_ns == pytest.approx(130_000)
    part = next(c for c in result.parts if c.name == "gemv")
    assert part.kernel_class == "GEMV kernels" and part.delta_ns == pytest.approx(30_000)


def test_longer_gaps_fail_the_gate_and_blame_the_gaps(tmp_path):
    # The user waits for the step: host gaps that grow are a regression even with the same kernels.
    base = side(stepped_trace(tmp_path / "a.sqlite", host_gap_ns=50_000))
    new = side(stepped_trace(tmp_path / "b.sqlite", host_gap_ns=400_000, gap_ns=60_000))
    result = compare(base, new)  # +200 %: far beyond any host spread between runs
    assert abs(result.gpu_change_pct) < 0.01
    assert result.regressed
    assert result.verdict["kind"] == "gaps" and result.verdict["changed"] == ["gaps"]
    # Idle per step: 20 us launch gap + 5 + 50 us host + 10 us to the next GEMV (85 us), then 60 + 5 + 400 + 10.
    assert result.verdict["idle_delta_per_step_ns"] == 475_000 - 85_000
    assert result.step_change_pct == pytest.approx(100 * 390_000 / 195_000)


def test_faster_kernels_never_fail(tmp_path):
    base = side(stepped_trace(tmp_path / "a.sqlite", gemv_ns=200_000))
    new = side(stepped_trace(tmp_path / "b.sqlite", gemv_ns=100_000))
    result = compare(base, new, gate_pct=0)
    assert result.step_change_pct < -30
    assert not result.regressed and result.step_verdict == "faster"
    assert "GPU kernel time per step -100 us (-47.6 %" in result.verdict["text"]


def test_new_kernel_appears_as_new(tmp_path):
    base_path = stepped_trace(tmp_path / "a.sqlite")
    b = TraceBuilder()
    t = 1_000_000
    for _ in range(5):
        b.kernel(GEMV, t + 10_000, 100_000)
        b.kernel("extra_copy_kernel(float *)", t + 120_000, 50_000)
        b.nvtx("step", t, t + 180_000)
        t += 230_000
    result = compare(side(base_path), side(b.write(tmp_path / "b.sqlite")))
    extra = next(k for k in result.kernels if k.name.startswith("extra_copy_kernel"))
    assert extra.base_ns == 0 and extra.pct is None and extra.new_ns == pytest.approx(50_000)
    assert result.movers[0] == extra  # +50 us beats the removed 10 us RMSNorm
    assert result.to_json()["movers"][0]["change_pct"] is None


def test_a_trace_without_steps_is_refused(tmp_path):
    b = TraceBuilder()
    b.kernel(GEMV, 1_000_000, 100_000)  # one kernel: no loop, no step
    lone = side(b.write(tmp_path / "lone.sqlite"))
    assert lone.summary["steps"] == 0 and lone.summary["reason"]
    good = side(stepped_trace(tmp_path / "a.sqlite"))
    with pytest.raises(UsageError, match=r"NEW .*lone\.sqlite has no steps to compare: no step model fits"):
        compare(good, lone)
    with pytest.raises(UsageError, match="BASE"):
        compare(lone, good)


def test_library_ranges_are_never_steps_to_compare(tmp_path):
    # The only repeating ranges are NCCL's: they are not the program's steps, so there is nothing per step.
    b = TraceBuilder()
    t = 1_000_000
    for _ in range(8):
        b.nvtx("ncclAllReduce", t, t + 2_000)
        b.kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096>)", t + 5_000, 50_000)
        t += 400_000
    nccl = side(b.write(tmp_path / "nccl.sqlite"))
    assert nccl.summary["steps"] == 0
    with pytest.raises(UsageError, match="has no steps to compare"):
        compare(nccl, nccl)


def _with_command(path, command):
    """Give a synthetic trace the profiled command nsys records (META_DATA_CAPTURE)."""
    import sqlite3

    con = sqlite3.connect(path)
    try:
        con.execute("CREATE TABLE IF NOT EXISTS META_DATA_CAPTURE (name TEXT, value TEXT)")
        con.execute("INSERT INTO META_DATA_CAPTURE VALUES ('PROCESS_0:COMMAND', ?)", (command[0],))
        for i, arg in enumerate(command[1:]):
            con.execute("INSERT INTO META_DATA_CAPTURE VALUES (?, ?)", (f"PROCESS_0:ARGUMENT_{i}", arg))
        con.commit()
    finally:
        con.close()
    return path


def test_different_programs_are_refused_unless_forced(tmp_path):
    base = side(_with_command(stepped_trace(tmp_path / "a.sqlite"), ["python3", "serve.py", "--layers", "16"]))
    same = side(_with_command(stepped_trace(tmp_path / "b.sqlite"), ["/usr/bin/python3.12", "-u", "serve.py", "--x"]))
    other = side(_with_command(stepped_trace(tmp_path / "c.sqlite"), ["target/release/bench", "run"]))
    assert compare(base, same).forced == []  # arguments may differ: that is what a diff compares
    with pytest.raises(UsageError, match=r"different programs \('serve\.py' vs 'bench'\); pass --force"):
        compare(base, other)
    forced = compare(base, other, force=True)
    assert forced.forced and forced.notes[0].startswith("--force: NEW ")


def test_different_kernels_or_step_ranges_are_refused(tmp_path):
    base = side(program(tmp_path / "a.sqlite"))
    b = TraceBuilder()
    t = 1_000_000
    for _ in range(12):
        b.kernel("flash_fwd_kernel", t + 10_000, 150_000)
        b.nvtx("prefill", t, t + 200_000)
        t += 250_000
    other = side(b.write(tmp_path / "b.sqlite"))
    with pytest.raises(UsageError) as caught:
        compare(base, other)
    text = str(caught.value)
    assert "different NVTX ranges ('step' vs 'prefill')" in text and "only 0 % of one side's GPU time" in text
    assert "\n" not in text


def test_several_runs_per_side_measure_the_between_run_spread(tmp_path):
    runs = [side(program(tmp_path / f"b{i}.sqlite", scale=s)) for i, s in enumerate((1.0, 1.01, 0.99))]
    new = side(program(tmp_path / "n.sqlite", scale=1.2))
    result = compare(runs, new)
    assert result.runs == (3, 1) and result.base["runs"] == 3 and result.base["steps"] == 36
    step = result.totals["step"]
    assert step.between_measured and step.between_run > 0
    assert step.estimate_pct == pytest.approx(20.0, abs=0.5) and step.low_pct > 5 and result.regressed
    assert result.to_json()["change"]["step"]["noise"]["between_run"] == "measured"


def test_mover_names_cut_to_fit_stay_apart():
    from nsys_rules.formatters.short_names import distinct_names

    head = "void at::native::vectorized_elementwise_kernel<(int)8, at::native::"
    names = [f"{head}BinaryFunctor<c10::BFloat16, MulFunctor<float>>, std::array<char *, 3>>(int, T2, T3)",
             f"{head}CUDAFunctor_add<c10::BFloat16>, std::array<char *, 3>>(int, T2, T3)",
             f"{head}bfloat16_copy_kernel_cuda(at::TensorIteratorBase &), std::array<char *, 2>>(int, T2, T3)",
             "nvjet_sm90_tst_256x8_64x6_4x1_v_bz_TNT", "same\nname", "same name"]
    shown = distinct_names(names, 60)
    assert len(set(shown.values())) == len(names)
    assert all(len(text) <= 60 and "\n" not in text for text in shown.values())
    for name, token in zip(names[:3], ("BinaryFunctor", "CUDAFunctor_add", "bfloat16_copy"), strict=True):
        assert shown[name].startswith("vectorized_elementwise_kernel<…") and token in shown[name]
    assert shown[names[3]] == names[3]  # short names are left as they are
