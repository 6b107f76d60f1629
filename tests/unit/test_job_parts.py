"""The job package's parts: rank numbers, the name list, interval totals, steps, matching, clocks."""

from __future__ import annotations

import numpy as np
import pytest

from nsys_rules.model.job import clock as clocks
from nsys_rules.model.job.collectives import MAX_SHIFT, match
from nsys_rules.model.job.extract import RankData
from nsys_rules.analysis.intervals import coverage
from nsys_rules.model.job.names import comm_names, parse_comm_names
from nsys_rules.model.job.ranks import RankHint, Unit, assign_ranks, rank_from_environment, rank_from_name, trace_hint
from nsys_rules.model.job.steps import collective_period, job_steps
from nsys_rules.rules.ranks.compare import signed_rank_z


@pytest.mark.parametrize("path,rank", [
    ("traces/gpu-node7_rank3_12345.sqlite", 3), ("traces/rank12.sqlite", 12), ("run/rank-2.nsys-rep", 2),
    ("prof_r5.sqlite", 5), ("job.R1.sqlite", 1), ("rank0/report.sqlite", 0), ("traces/report3.sqlite", None),
    ("myrank4.sqlite", None), ("frank9.sqlite", None), ("warmup_run.sqlite", None),
])
def test_rank_from_file_name(path, rank):
    assert rank_from_name(path) == rank


def test_rank_from_environment_prefers_the_global_rank():
    assert rank_from_environment({"LOCAL_RANK": "1", "RANK": "9"}) == (9, "RANK")
    assert rank_from_environment({"OMPI_COMM_WORLD_RANK": "4"}) == (4, "OMPI_COMM_WORLD_RANK")
    assert rank_from_environment({"LOCAL_RANK": "3"}) == (3, "LOCAL_RANK")
    assert rank_from_environment({"RANK": "", "PATH": "/bin"}) is None
    # The file name wins over the environment (torchrun's RANK is the launcher's when nsys wraps torchrun).
    assert trace_hint("n_rank2.sqlite", {"RANK": "0"}) == RankHint(2, "file name")


def test_repeated_hints_fall_back_to_trace_order():
    units = [Unit(i, 4242, 0, RankHint(0, "environment LOCAL_RANK"), 1) for i in range(3)]  # LOCAL_RANK 0 on 3 nodes
    ranks, sources = assign_ranks(units)
    assert ranks == [0, 1, 2]
    assert all("repeats" in s for s in sources)


def test_name_list_families():
    names = comm_names()
    assert names.family("ncclDevKernel_AllReduce_Sum_bf16_RING_LL") == "NCCL"
    assert names.family("ncclKernel_AllGather_RING_LL_Sum_int8_t") == "NCCL"
    assert names.family("", "void ncclAllReduceRingLLKernel_sum_f32(CollectiveArgs)") == "NCCL"
    assert names.family("cross_device_reduce_2stage") == "vLLM/SGLang custom all-reduce"
    assert names.family("allreduce_fusion_kernel_oneshot_lamport") == "TensorRT-LLM/FlashInfer all-reduce"
    assert names.family("userbuffers_fp16_sum_inplace_gpu_rw") == "Transformer Engine userbuffers"
    for compute in ("gemm_kernel", "block_reduce_kernel", "all_reduce_softmax", "vectorized_elementwise_kernel"):
        assert names.family(compute) is None, compute
    assert names.is_comm_range("ncclAllReduce") and not names.is_comm_range("nccl_custom_step")


def test_name_list_is_data():
    custom = parse_comm_names('[[family]]\nname = "Mine"\npatterns = ["^myar_"]\n')
    assert custom.family("myar_kernel") == "Mine" and custom.family("ncclDevKernel_SendRecv") is None


def test_busy_union_depth_and_running_total():
    # Three kernels: [0, 10), [5, 20), [30, 40).
    union = coverage(np.array([0, 5, 30]), np.array([10, 20, 40]))
    assert union.total == 30
    assert union.before(np.array([0, 7, 25, 35, 100])).tolist() == [0, 7, 20, 25, 30]
    assert union.within(np.array([8]), np.array([32])).tolist() == [14]
    both = coverage(np.array([0, 5, 30]), np.array([10, 20, 40]), depth=2)
    assert (both.starts.tolist(), both.ends.tolist()) == ([5], [10])
    touching = coverage(np.array([0, 10]), np.array([10, 20]), depth=2)  # end meets start: no overlap
    assert touching.total == 0


def test_signed_rank_z_against_a_hand_computation():
    # |values| ranks: 1 -> 1.5, -1 -> 1.5 (tie), 2 -> 3, 3 -> 4, 5 -> 5; W+ = 1.5 + 3 + 4 + 5 = 13.5 of n = 5.
    z = signed_rank_z(np.array([1.0, -1.0, 2.0, 3.0, 5.0, 0.0]))
    assert z == pytest.approx((13.5 - 7.5) / np.sqrt(5 * 6 * 11 / 24))


def test_steps_from_the_repeating_pattern():
    assert collective_period(np.array(list("abcabcabcabc"))) == 3
    assert collective_period(np.array(list("aaaaaa"))) == 1
    assert collective_period(np.array(list("abcdefg"))) == 1  # nothing repeats: every collective is a sync point
    steps = job_steps(np.array(list("abcabcabcab")))
    assert steps.period == 3 and steps.bounds.tolist() == [2, 5, 8] and steps.count == 2
    assert steps.step_of(np.arange(11)).tolist() == [-1, -1, -1, 0, 0, 0, 1, 1, 1, -1, -1]


def _rank(starts, ends, name="ncclDevKernel_AllReduce"):
    n = len(starts)
    return RankData("t", 1, 0, 1, RankHint(None, ""), None, [name], ["NCCL"], np.zeros(n, np.int32),
                    np.full(n, 7), np.asarray(starts, np.int64), np.asarray(ends, np.int64), np.zeros(n, np.int64),
                    np.zeros((n, 5), np.int64), np.zeros((n, 5), np.int64))


def test_matching_finds_the_shift_when_a_window_cut_one_rank_later():
    period = 1_000_000
    a = _rank([k * period for k in range(10)], [k * period + 500 for k in range(10)])
    # Rank b's capture started two collectives later: its first instance is rank a's third.
    b = _rank([k * period + 100 for k in range(2, 10)], [k * period + 510 for k in range(2, 10)])
    keys = [np.array(["x"] * 10, dtype=object), np.array(["x"] * 8, dtype=object)]
    rows = match([a, b], keys, np.zeros(2, np.int64))
    assert rows.index[:, 1].tolist() == [-1, -1, 0, 1, 2, 3, 4, 5, 6, 7]
    assert MAX_SHIFT >= 2


def test_clock_alignment_corrects_beyond_the_tolerance_only():
    end = np.array([[1000.0, 1000.0 + 2e9, 1000.0 + 20_000], [5000.0, 5000.0 + 2e9, 5000.0 + 20_000],
                    [9000.0, 9000.0 + 2e9, 9000.0 + 20_000]])
    clock = clocks.align([0, 1, 2], np.zeros(3, np.int64), end)
    assert clock.correction.tolist() == [0, -2_000_000_000, 0]  # 20 us off is within the tolerance
    assert clock.residual_ns.tolist() == [0.0, 0.0, 20_000.0]
    assert clock.residual_skew_ns == 20_000 and clock.source == "session clocks corrected from collectives"


def test_kernels_launched_inside_nccl_nvtx_ranges_are_communication(tmp_path):
    from nsys_rules.testing.jobs import run_job_rules
    from nsys_rules.testing import TraceBuilder

    b = TraceBuilder()
    for step in range(6):
        t0 = step * 3_000_000
        b.kernel("gemm_kernel", t0 + 10_000, 2_000_000)
        # NCCL's own NVTX range around the call: the kernel launched inside it is communication, whatever its name.
        b.nvtx("ncclAllReduce", t0 + 2_000_000, t0 + 2_050_000, domain=1)
        b.kernel("renamed_collective_kernel", t0 + 2_100_000, 400_000, launch_at=t0 + 2_010_000, stream=13)
    outcome = run_job_rules(["exposed-comm"], [b.write(tmp_path / "one_rank.sqlite")])
    assert outcome.info["communication"]["kernels"] == [
        {"name": "renamed_collective_kernel", "family": "NCCL NVTX range", "instances": 6}]
    assert len(outcome.findings) == 1  # 400 us exposed of a 3 ms step, one rank


def test_filter_time_cuts_the_collectives(tmp_path):
    from nsys_rules.job_run import Collected, collect, run_job
    from nsys_rules.testing.jobs import JobPlan, write_job
    from nsys_rules.settings import Settings
    from nsys_rules.inputs import open_trace
    from nsys_rules.plugin_manager import build_registry

    sim = write_job(tmp_path, JobPlan(ranks=2, steps=10, one_trace=True, compute=2_000_000, transfer=300_000))
    rule = build_registry(autoload=False).rules["exposed-comm"]
    counts = []
    for window in (None, "50ms/62ms"):
        settings = Settings(filter_time=window)
        trace = open_trace(sim.paths[0])
        collected = Collected()
        collected.extend(collect(trace, [rule], settings, several=False))
        trace.close()
        counts.append(run_job(collected, [rule], settings).info["communication"]["collectives"])
    # Steps of 2.32 ms from 50 ms: the all-reduces launched before 62 ms are the first five.
    assert counts == [10, 5]
