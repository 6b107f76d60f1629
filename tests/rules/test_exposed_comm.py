"""exposed-comm: exposed communication per step, against hand computations on simulated jobs."""

from __future__ import annotations

import pytest

from nsys_rules.findings import Severity
from nsys_rules.testing.jobs import JobPlan, run_job_rules, write_job
from nsys_rules.testing import TraceBuilder, metric_values, only_finding

RULE = "exposed-comm"


def exposed(tmp_path, plan: JobPlan, **options):
    sim = write_job(tmp_path, plan)
    return run_job_rules([RULE], sim.paths, options={RULE: options} if options else None)


def test_exposed_time_matches_the_hand_computation(tmp_path):
    compute, transfer, overlap, stall, gap = 2_000_000, 400_000, 150_000, 1_000_000, 20_000
    outcome = exposed(tmp_path, JobPlan(ranks=4, steps=10, compute=compute, transfer=transfer, overlap=overlap,
                                        stall={2: stall}, launch_gap=gap))
    f = only_finding(outcome.findings, RULE)
    m = metric_values(f)
    # By hand, per step. Ranks 0, 1, 3 arrive `stall` before rank 2; their all-reduce runs stall + transfer,
    # of which `overlap` beside the elementwise kernel; rank 2's runs `transfer`, `overlap` of it beside compute.
    step = gap + compute + stall + transfer
    assert m["steps"] == 9  # ten all-reduces bound nine steps
    assert m["step_time"] == step
    assert m["comm_per_step"] == stall + transfer  # median of 1.4, 1.4, 0.4, 1.4 ms
    assert m["exposed_per_step"] == stall + transfer - overlap
    assert m["exposed_waiting_per_step"] == stall  # waiting for rank 2
    assert m["exposed_moving_per_step"] == transfer - overlap  # the same on every rank
    assert m["exposed_moving_share"] == pytest.approx(100 * (transfer - overlap) / step)
    # Overlap could hide the moving part under the step's compute (gemm + elementwise, 2.15 ms): 9 x 0.25 ms.
    assert m["hideable_total"] == 9 * (transfer - overlap)
    assert f.estimated_savings_ns == 9 * (transfer - overlap)
    assert f.severity is Severity.INFO  # 7.3 % of the step: under warn_share_pct 10
    assert "waits for later ranks" in f.message and "rank-straggler" in f.message


def test_no_overlap_at_all_is_a_warning_and_savings_are_bounded_by_compute(tmp_path):
    # 1.5 ms of all-reduce after only 1 ms of compute: overlap can hide at most the 1 ms of compute per step.
    outcome = exposed(tmp_path, JobPlan(ranks=2, steps=8, compute=1_000_000, transfer=1_500_000, jitter=0))
    f = only_finding(outcome.findings, RULE)
    m = metric_values(f)
    assert m["exposed_per_step"] == m["comm_per_step"] == 1_500_000
    assert m["overlapped_share"] == 0
    assert f.severity is Severity.WARNING
    assert m["hideable_total"] == 7 * 1_000_000
    # A program without a framework gets NCCL's own terms; a PyTorch job DDP's (below).
    assert "all-reduce" in f.recommendation and "ncclAllReduce" in f.recommendation
    assert "bucket_cap_mb" not in f.recommendation and "torch" not in f.recommendation


@pytest.mark.parametrize("command,words,absent", [
    (("python", "-m", "torch.distributed.run", "train.py"), ("bucket_cap_mb",), ("ncclAllReduce", "XLA_FLAGS")),
    (("python", "train_jax.py", "--xla"), ("xla_gpu_enable_latency_hiding_scheduler",), ("torch", "bucket_cap_mb")),
    (("./build/trainer",), ("ncclAllReduce",), ("torch", "XLA_FLAGS", "DDP"))])
def test_the_overlap_is_advised_in_the_programs_framework(tmp_path, command, words, absent):
    plan = JobPlan(ranks=2, steps=8, compute=1_000_000, transfer=1_500_000, jitter=0, command=command)
    f = only_finding(exposed(tmp_path, plan).findings, RULE)
    assert all(w in f.recommendation for w in words) and not any(a in f.recommendation for a in absent)


def test_fully_overlapped_communication_is_quiet(tmp_path):
    outcome = exposed(tmp_path, JobPlan(ranks=4, steps=8, transfer=300_000, overlap=300_000))
    assert outcome.findings == []


def test_min_share_boundary(tmp_path):
    # 100 us of exposed transfer in a ~2.12 ms step: 4.7 %.
    plan = JobPlan(ranks=2, steps=8, transfer=100_000)
    sim = write_job(tmp_path, plan)
    assert only_finding(run_job_rules([RULE], sim.paths, options={RULE: {"min_share_pct": 4.0}}).findings, RULE)
    assert run_job_rules([RULE], sim.paths, options={RULE: {"min_share_pct": 5.0}}).findings == []


def test_one_rank_alone_still_gets_its_exposed_communication(tmp_path):
    outcome = exposed(tmp_path, JobPlan(ranks=1, steps=6, transfer=500_000, overlap=200_000))
    f = only_finding(outcome.findings, RULE)
    m = metric_values(f)
    assert m["ranks"] == 1 and f.location.trace.endswith("node0_rank0_1.sqlite")
    assert m["exposed_moving_per_step"] == 300_000 and m["exposed_waiting_per_step"] == 0


def test_custom_all_reduce_found_by_name_and_unknown_one_by_behaviour(tmp_path):
    # vLLM's custom all-reduce is on the name list; a renamed one is found because it ends together everywhere.
    for name in ("cross_device_reduce_1stage", "my_fused_allreduce_v2"):
        folder = tmp_path / name
        folder.mkdir()
        outcome = exposed(folder, JobPlan(ranks=2, steps=8, transfer=500_000, comm_name=name, stall={1: 300_000}))
        kernels = {k["name"]: k["family"] for k in outcome.info["communication"]["kernels"]}
        expected = "vLLM/SGLang custom all-reduce" if name.startswith("cross") else "behaviour"
        assert kernels == {name: expected}
        assert only_finding(outcome.findings, RULE)


def test_no_communication_is_no_job(tmp_path):
    b = TraceBuilder()
    for step in range(5):
        b.kernel("gemm", step * 1_000_000, 500_000)
    assert run_job_rules([RULE], [b.write(tmp_path / "single.sqlite")]) is None
