"""The paths that replaced per-name and per-range loops give the answers of the plain ones.

``benchmarks/attacks.py`` measures the time of the traces that once blew up; these tests pin
the behaviour of the replacements (same classes, same windows), not their speed.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

from nsys_rules.analysis.taxonomy import CLASSES, DEFAULT, Taxonomy, _base_names, base_name, classify
from nsys_rules.testing import TraceBuilder, run_rules
from nsys_rules.analysis.intervals import merge_intervals
from nsys_rules.model.windows import Window, intersect


def _merge(starts: np.ndarray, ends: np.ndarray) -> tuple[tuple[int, int], ...]:
    merged_s, merged_e = merge_intervals(starts, ends)
    return tuple(zip(merged_s.tolist(), merged_e.tolist(), strict=True))


def _merge_reference(starts: np.ndarray, ends: np.ndarray) -> tuple[tuple[int, int], ...]:
    out: list[list[int]] = []
    for a, b in sorted(zip(starts.tolist(), ends.tolist(), strict=True)):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return tuple((a, b) for a, b in out)


def _intersect_reference(a: Window, b: Window) -> tuple[tuple[int, int], ...]:
    out = [(max(s1, s2), min(e1, e2)) for s1, e1 in a.intervals or () for s2, e2 in b.intervals or ()
           if max(s1, s2) <= min(e1, e2)]
    return tuple(out) or ((0, -1),)


def test_interval_merge_and_intersection_match_the_pairwise_definitions():
    rng = np.random.default_rng(7)
    for _ in range(2000):
        n, m = (int(x) for x in rng.integers(0, 25, 2))
        s1, s2 = rng.integers(0, 120, n), rng.integers(0, 120, m)
        e1, e2 = s1 + rng.integers(0, 15, n), s2 + rng.integers(0, 15, m)
        assert _merge(s1, e1) == _merge_reference(s1, e1)
        a, b = Window(_merge(s1, e1) or ((0, -1),), "a"), Window(_merge(s2, e2) or ((0, -1),), "b")
        assert intersect(a, b).intervals == _intersect_reference(a, b)


def test_filter_nvtx_over_thousands_of_ranges_keeps_every_step_inside(tmp_path):
    b = TraceBuilder()
    t0 = 1_000_000_000
    for i in range(3_000):
        s = t0 + i * 60_000
        b.nvtx("step", s, s + 50_000)
        for j in range(2):
            b.kernel(f"k{j}", s + 10_000 + j * 15_000, 5_000, launch_at=s + 5_000 + j * 15_000)
    b.nvtx("outside", t0 - 500_000, t0 - 100_000)
    result = run_rules(["gpu-idle-gaps"], b.write(tmp_path / "t.sqlite"), filter_nvtx="step")
    window = result.info.window["filter"]
    assert window["start_ns"] == t0 and window["end_ns"] == t0 + 2_999 * 60_000 + 50_000
    # gpu-idle-gaps judges the whole capture, cut by the filter: the user's window with every step inside it.
    judged = result.info.window["full"]
    assert judged["start_ns"] == window["start_ns"] and judged["end_ns"] == window["end_ns"]
    assert judged["steps"] == 3_000 and judged["step_range"] == "step"


def test_vectorized_classes_match_the_rules_one_name_at_a_time():
    """classify_names runs each pattern over all names; classify_one over one: the same classes."""
    names = ["nvjet_sm90_tst_256x8_64x6_4x1_v_bz_TNT", "void cutlass::Kernel2<cutlass_80_gemm_64x16_tn>(Params)",
             "void kernel<flash_fwd_splitkv>(int)", " void\u00a0ns::<unnamed>::rmsnorm<float>(float *)",
             "device_kernel", "", "gemm_" + "1_" * 3000, "k0_" + "gemm_1_" * 600 + "64x8_", "(x<y)", "<<a",
             "volta_sgemm_128x64_nn", "sm80_xmma_gemm_f32_tilesize64x8x64_execute", "ncclDevKernel_SendRecv"]
    one_by_one = [DEFAULT.classify_one(n) for n in names]
    assert DEFAULT.classify_names(names) == one_by_one
    assert one_by_one[:4] == ["gemv", "gemv", "attention", "norm"] and one_by_one[-3:] == ["gemm", "gemv",
                                                                                              "communication"]
    assert one_by_one[7] == "gemv"  # the tile at the end of a 4 KB name made of gemm_1_ repeats is still found
    assert _base_names(pa.array(names, pa.large_string())).to_pylist() == [base_name(n) for n in names]


def test_user_patterns_re2_cannot_run_still_work():
    tax = Taxonomy().extended({"gemv": [r"my_(?=matvec)"], "norm": ["special_norm"]})
    assert tax.classify_names(["my_matvec_kernel", "my_other", "special_norm_k", "flash_fwd"]) == [
        "gemv", "other", "norm", "attention"]


def test_classify_categorical_cached_table_follows_the_categories():
    first = pd.Series(pd.Categorical(["gemv_x", "flash_fwd", None, "gemv_x"]))
    assert classify(first).astype(str).tolist() == ["gemv", "attention", "other", "gemv"]
    again = classify(first)  # the cached table for the same categories
    assert again.astype(str).tolist() == ["gemv", "attention", "other", "gemv"]
    other = pd.Series(pd.Categorical(["rmsnorm", "gemv_x"]))
    assert classify(other).astype(str).tolist() == ["norm", "gemv"]
    assert classify(first, extra={"memory": ["flash"]}).astype(str).tolist()[1] == "memory"
    assert set(classify(first).cat.categories) == set(CLASSES)


def test_long_texts_are_cut_where_findings_are_made_and_names_stay_whole_in_json(tmp_path):
    from nsys_rules.findings import Finding, Location, Severity
    from nsys_rules.textsafe import TEXT_CHARS

    kernel = "k" * 20_000
    f = Finding("r", Severity.INFO, "t", "m" * 1_000_000, "x" * 5_000, location=Location(kernel=kernel))
    assert len(f.message) == TEXT_CHARS and f.message.endswith("[1000000 characters, cut]")
    assert len(f.recommendation) == TEXT_CHARS and f.location.kernel == kernel
    assert f.fingerprint == Finding("r", Severity.INFO, "t", "short", "short", location=Location(kernel=kernel)).fingerprint


def test_every_format_stays_small_with_a_4mb_command_and_a_huge_kernel_name(tmp_path):
    import contextlib
    import io
    import json

    from nsys_rules.cli import main

    huge = "void " + "gemv_" * 4_000 + "kernel(int)"  # 20 KB
    b = TraceBuilder(command=("target/debug/app", "--prompt", "x" * (4 << 20)))
    for i in range(200):
        b.kernel(huge if i % 2 else "gemv_kernel", 1_000_000_000 + i * 10_000, 4_000)
    path = b.write(tmp_path / "t.sqlite")
    sizes = {}
    for fmt in ("table", "markdown", "html", "json", "sarif"):
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            assert main(["check", str(path), "--format", fmt, "--fail-on", "never", "--no-plugins"]) == 0
        sizes[fmt] = len(out.getvalue())
        if fmt == "json":
            data = json.loads(out.getvalue())
    assert all(size < 300_000 for size in sizes.values()), sizes
    assert data["findings"] and len(data["traces"][0]["capture"]["command"]) <= 4000
    assert any(f["rule"] == "debug-build" for f in data["findings"])  # the run judged the command, cut or not
