"""Tests of nvtx-coverage, written the way any plugin author tests a rule.

Scenarios are built with ``nsys_rules.testing.TraceBuilder`` (a real nsys-schema SQLite
file) and run through the real engine with ``run_rule``; ``assert_rule_conventions`` checks the
docstring, names and options as nsys-rules checks its built-in rules.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from nsys_rules.api import Severity
from nsys_rules.testing import (TraceBuilder, assert_rule_conventions, metric_values, only_finding, run_rule, run_rules,
                                skip_reason)

# The core's test run collects these too (pyproject testpaths); without the plugin installed they skip, saying how.
pytest.importorskip("nsys_rules_nvtx_coverage", reason="the example plugin is not installed: "
                    "`pip install -e plugins/nsys-rules-nvtx-coverage` (the README's test setup does)")

from nsys_rules_nvtx_coverage.coverage import ANY_THREAD, NvtxCoverage, covered, nvtx_ranges  # noqa: E402

MS = 1_000_000
WORKER = 5001


def _steps(b: TraceBuilder, steps: int, annotated: int, *, kernel_ns: int = MS) -> TraceBuilder:
    """``steps`` kernels of ``kernel_ns``, 10 ms apart; the first ``annotated`` run inside a ``step`` range."""
    for i in range(steps):
        t = i * 10 * MS
        if i < annotated:
            b.nvtx("step", t, t + 5 * MS)
        b.kernel("gemm_kernel" if i < annotated else "init_kernel", start=t + 100_000, duration=kernel_ns)
    return b


def test_follows_the_rule_conventions():
    assert_rule_conventions(NvtxCoverage)


def test_fires_with_exact_share(tmp_path):
    path = _steps(TraceBuilder(), steps=10, annotated=2).write(tmp_path / "t.sqlite")
    finding = only_finding(run_rule("nvtx-coverage", path))
    assert finding.rule == "nvtx-coverage" and finding.severity is Severity.INFO
    values = metric_values(finding)
    assert values["gpu_time"] == 10 * MS
    assert values["uncovered_gpu_time"] == 8 * MS
    assert values["uncovered_share"] == pytest.approx(0.8)
    assert values["uncovered_ops"] == 8 and values["gpu_ops"] == 10 and values["nvtx_ranges"] == 2
    assert "init_kernel" in finding.message


def test_quiet_when_everything_is_annotated(tmp_path):
    path = _steps(TraceBuilder(), steps=10, annotated=10).write(tmp_path / "t.sqlite")
    assert run_rule("nvtx-coverage", path) == []


@pytest.mark.parametrize(("threshold", "fires"), [(50.0, True), (50.00001, False)])
def test_min_uncovered_pct_boundary(tmp_path, threshold, fires):
    path = _steps(TraceBuilder(), steps=10, annotated=5).write(tmp_path / "t.sqlite")  # exactly 50 % uncovered
    findings = run_rule("nvtx-coverage", path, options={"min_uncovered_pct": threshold})
    assert bool(findings) is fires


@pytest.mark.parametrize(("minimum", "fires"), [(10 * MS, True), (10 * MS + 1, False)])
def test_min_gpu_time_boundary(tmp_path, minimum, fires):
    path = _steps(TraceBuilder(), steps=10, annotated=0).write(tmp_path / "t.sqlite")  # 10 ms of GPU time
    assert bool(run_rule("nvtx-coverage", path, options={"min_gpu_time_ns": minimum})) is fires


def test_launch_time_counts_not_gpu_time(tmp_path):
    # Launched inside the range, executed after it closed (asynchronous launch): covered.
    b = TraceBuilder()
    for i in range(4):
        t = i * 10 * MS
        b.nvtx("step", t, t + MS)
        b.kernel("late_kernel", start=t + 3 * MS, duration=MS, launch_at=t + 500_000)
    assert run_rule("nvtx-coverage", b.write(tmp_path / "t.sqlite")) == []


def test_range_on_another_thread_does_not_cover(tmp_path):
    # The main thread is inside "step" while a worker thread launches: push/pop ranges are per thread.
    b = TraceBuilder()
    for i in range(4):
        t = i * 10 * MS
        b.nvtx("step", t, t + 9 * MS)
        b.kernel("worker_kernel", start=t + 2 * MS, duration=MS, tid=WORKER)
    values = metric_values(only_finding(run_rule("nvtx-coverage", b.write(tmp_path / "t.sqlite"))))
    assert values["uncovered_share"] == pytest.approx(1.0)


def test_start_end_range_covers_every_thread(tmp_path):
    b = TraceBuilder()
    for i in range(4):
        t = i * 10 * MS
        b.nvtx("request", t, t + 9 * MS, process_wide=True)
        b.kernel("worker_kernel", start=t + 2 * MS, duration=MS, tid=WORKER)
    assert run_rule("nvtx-coverage", b.write(tmp_path / "t.sqlite")) == []


def test_memcpy_time_counts(tmp_path):
    b = _steps(TraceBuilder(), steps=4, annotated=4)
    b.memcpy(50 * MS, 4 * MS, 1 << 20)  # unannotated upload, as long as all kernels together
    values = metric_values(only_finding(run_rule("nvtx-coverage", b.write(tmp_path / "t.sqlite"))))
    assert values["uncovered_gpu_time"] == 4 * MS and values["uncovered_share"] == pytest.approx(0.5)


def test_nvtx_traced_but_never_emitted_is_zero_coverage(tmp_path):
    # TraceBuilder's metadata says NVTX was traced; with no range nsys writes no NVTX_EVENTS table.
    path = _steps(TraceBuilder(), steps=5, annotated=0).write(tmp_path / "t.sqlite")
    finding = only_finding(run_rule("nvtx-coverage", path))
    assert metric_values(finding)["nvtx_ranges"] == 0 and "no NVTX range" in finding.message


def test_skipped_when_nvtx_was_not_captured(tmp_path):
    path = _steps(TraceBuilder(write_metadata=False), steps=5, annotated=0).write(tmp_path / "t.sqlite")
    assert "--trace=cuda,nvtx" in skip_reason("nvtx-coverage", path)


def test_2022_export_without_ranges_is_skipped(tmp_path):
    # nsys 2022.1-2023.2 recorded no capture options: no NVTX table may mean NVTX was not traced.
    path = _steps(TraceBuilder(legacy_metadata=True), steps=5, annotated=0).write(tmp_path / "t.sqlite")
    assert "does not say NVTX was traced" in skip_reason("nvtx-coverage", path)


def test_2022_export_with_ranges_runs(tmp_path):
    path = _steps(TraceBuilder(legacy_metadata=True), steps=10, annotated=4).write(tmp_path / "t.sqlite")
    assert metric_values(only_finding(run_rule("nvtx-coverage", path)))["uncovered_share"] == pytest.approx(0.6)


def test_skipped_without_kernels(tmp_path):
    b = TraceBuilder()
    b.nvtx("step", 0, MS)
    result = run_rules(["nvtx-coverage"], b.write(tmp_path / "t.sqlite"))
    assert [s.rule for s in result.skipped] == ["nvtx-coverage"] and not result.findings


def test_rule_class_runs_without_installing(tmp_path):
    # run_rule accepts the class itself: tests work before the plugin is pip-installed.
    path = _steps(TraceBuilder(), steps=10, annotated=2).write(tmp_path / "t.sqlite")
    assert metric_values(only_finding(run_rule(NvtxCoverage, path)))["uncovered_ops"] == 8


# -- the pure functions ------------------------------------------------------------------------
def test_open_range_runs_to_the_end():
    nvtx = pd.DataFrame({"start": [100, 500], "end": [100, 600], "raw_end": [-1, 600], "event_type": [59, 34],
                         "pid": [1, 1], "tid": [7, 7]})
    ranges = nvtx_ranges(nvtx)
    assert len(ranges) == 1  # the mark is dropped
    hit = covered(np.array([1, 1, 1]), np.array([7, 7, 8]), np.array([50, 10**15, 10**15]), ranges)
    assert hit.tolist() == [False, True, False]


def test_nested_ranges_cover_the_gap_after_an_inner_range():
    # outer [0, 100] with inner [10, 20]: t=50 lies after the inner range but inside the outer one.
    ranges = pd.DataFrame({"pid": [1, 1], "tid": [7, 7], "start": [0, 10], "end": [100, 20]})
    hit = covered(np.array([1, 1, 1]), np.array([7, 7, 7]), np.array([50, 100, 101]), ranges)
    assert hit.tolist() == [True, True, False]


def test_unknown_launch_thread_uses_any_thread_of_the_process():
    ranges = pd.DataFrame({"pid": [1], "tid": [7], "start": [0], "end": [100]})
    hit = covered(np.array([1, 2]), np.array([ANY_THREAD, ANY_THREAD]), np.array([50, 50]), ranges)
    assert hit.tolist() == [True, False]  # another process's range never covers


@pytest.mark.parametrize("seed", range(20))
def test_covered_matches_a_naive_check(seed):
    # Random nested/overlapping ranges on a few threads of two processes, some process-wide.
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 40))
    start = rng.integers(0, 1_000, n)
    ranges = pd.DataFrame({"pid": rng.integers(1, 3, n), "tid": np.where(rng.random(n) < 0.2, ANY_THREAD,
                                                                          rng.integers(10, 13, n)),
                           "start": start, "end": start + rng.integers(0, 200, n)})
    m = 200
    pids, tids, times = rng.integers(1, 3, m), np.where(rng.random(m) < 0.1, ANY_THREAD, rng.integers(10, 13, m)), \
        rng.integers(-10, 1_300, m)
    expected = [any(r.pid == p and r.start <= t <= r.end and (r.tid in (ANY_THREAD, k) or k == ANY_THREAD)
                    for r in ranges.itertuples()) for p, k, t in zip(pids, tids, times, strict=True)]
    assert covered(pids, tids, times, ranges).tolist() == expected


def test_steady_window_leaves_the_unannotated_warm_up_out(tmp_path):
    # Initialisation outside any range, then 12 identical annotated steps: the whole capture is
    # mostly unannotated, the steady state (the repeating step range) is fully annotated.
    b = TraceBuilder()
    b.kernel("init_weights", start=1 * MS, duration=20 * MS)
    for i in range(12):
        t = 30 * MS + i * 10 * MS
        b.nvtx("step", t, t + 8 * MS)
        b.kernel("step_kernel", start=t + MS, duration=MS)
    path = b.write(tmp_path / "t.sqlite")
    assert metric_values(only_finding(run_rule("nvtx-coverage", path)))["uncovered_gpu_time"] == 20 * MS
    assert run_rule("nvtx-coverage", path, options={"window": "steady"}) == []


def test_launches_judged_in_chunks_give_the_same_finding(tmp_path, monkeypatch):
    # Big frames are judged a chunk of rows at a time: chunk edges must not change a number or the top kernels.
    import nsys_rules_nvtx_coverage.coverage as module

    b = _steps(TraceBuilder(), steps=13, annotated=4, kernel_ns=MS + 17)
    for i in range(5):
        b.kernel(f"worker_{i % 2}", start=200 * MS + i * MS, duration=MS // 3 + i, tid=WORKER)
    b.memcpy(300 * MS, 2 * MS, 1 << 20)
    path = b.write(tmp_path / "t.sqlite")
    whole = only_finding(run_rule("nvtx-coverage", path))
    monkeypatch.setattr(module, "CHUNK_ROWS", 3)
    chunked = only_finding(run_rule("nvtx-coverage", path))
    assert metric_values(chunked) == metric_values(whole) and chunked.message == whole.message
    assert metric_values(whole)["uncovered_ops"] == 9 + 5 + 1
    assert (chunked.location.start_ns, chunked.location.end_ns) == (whole.location.start_ns, whole.location.end_ns)


@pytest.mark.parametrize(("command", "environment", "word", "absent"), [
    (["python3", "train.py"], {"TORCH_CUDA_ARCH_LIST": "9.0"}, "torch.cuda.nvtx.range", "nvtxRangePushA"),
    (["python3", "train.py"], {"XLA_FLAGS": ""}, "nvtx.annotate", "torch"),
    (["./build/app"], {}, "nvtxRangePushA", "torch")])
def test_the_range_is_opened_in_the_programs_framework(tmp_path, command, environment, word, absent):
    b = TraceBuilder(command=command, environment=environment)
    finding = only_finding(run_rule("nvtx-coverage", _steps(b, steps=10, annotated=2).write(tmp_path / "t.sqlite")))
    assert word in finding.recommendation and absent not in finding.recommendation
