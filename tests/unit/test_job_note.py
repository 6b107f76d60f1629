"""`check -v` says why several traces were not judged as one job (before: no job section and no word)."""

from __future__ import annotations

import json

import pytest

from nsys_rules.testing import TraceBuilder
from nsys_rules.testing.jobs import JobPlan, write_job
from tests.conftest import run_cli
from tests.rules.scenarios import eager_steps


@pytest.fixture
def rank_named_runs(tmp_path):
    """A folder of per-rank-named traces that are two separate one-GPU runs (no communication kernels)."""
    folder = tmp_path / "runs"
    folder.mkdir()
    for rank in range(2):
        b = TraceBuilder()
        eager_steps(b)
        b.write(folder / f"job_rank{rank}.sqlite")
    return folder


@pytest.mark.parametrize("fmt", ["compact", "markdown"])
def test_verbose_says_why_the_folder_is_no_job(rank_named_runs, fmt):
    proc = run_cli("check", "-v", "--format", fmt, "--fail-on", "never", str(rank_named_runs), env={"COLUMNS": "400"})
    assert proc.returncode == 0, proc.stderr
    [line] = [x.replace("\\_", "_") for x in proc.stdout.splitlines() if x.startswith("job:")]  # markdown escapes _
    assert "not judged as one job" in line and "none of the 2 ranks" in line
    assert "job_rank0.sqlite (rank 0 by its file name)" in line and "job_rank1.sqlite (rank 1" in line


def test_the_same_in_worker_processes(rank_named_runs):
    proc = run_cli("check", "-v", "--format", "compact", "--jobs", "2", "--fail-on", "never", str(rank_named_runs),
                   env={"COLUMNS": "400"})
    assert proc.returncode == 0, proc.stderr
    assert sum(x.startswith("job: not judged as one job: none of the 2 ranks") for x in proc.stdout.splitlines()) == 1


def test_quiet_without_verbose_and_no_job_in_json(rank_named_runs):
    proc = run_cli("check", "--format", "compact", "--fail-on", "never", str(rank_named_runs), env={"COLUMNS": "400"})
    assert "not judged as one job" not in proc.stdout
    data = json.loads(run_cli("check", "--format", "json", "--fail-on", "never", str(rank_named_runs)).stdout)
    assert "job" not in data


def test_without_job_rules_it_says_so(rank_named_runs):
    proc = run_cli("check", "-v", "--format", "compact", "--fail-on", "never", "--select", "launch-bound",
                   str(rank_named_runs), env={"COLUMNS": "400"})
    assert "job: not judged as one job: no job rule is selected" in proc.stdout


def test_a_real_job_has_its_section_and_no_note(tmp_path):
    (tmp_path / "job").mkdir()
    write_job(tmp_path / "job", JobPlan(ranks=2, steps=8))
    proc = run_cli("check", "-v", "--format", "compact", "--fail-on", "never", str(tmp_path / "job"),
                   env={"COLUMNS": "400"})
    assert proc.returncode == 0, proc.stderr
    assert "job: 2 ranks" in proc.stdout and "not judged as one job" not in proc.stdout


def test_one_trace_is_not_told_it_is_no_job(rank_named_runs):
    proc = run_cli("check", "-v", "--format", "compact", "--fail-on", "never", str(rank_named_runs / "job_rank0.sqlite"),
                   env={"COLUMNS": "400"})
    assert "not judged as one job" not in proc.stdout


def test_ranks_of_two_jobs_that_never_meet_are_no_job(tmp_path):
    """Rank 0 of an all-reduce job beside rank 1 of an all-gather job: each ran collectives, never the same one."""
    import shutil

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "mix").mkdir()
    a = write_job(tmp_path / "a", JobPlan(ranks=2, steps=12))
    b = write_job(tmp_path / "b", JobPlan(ranks=2, steps=12, comm_name="ncclDevKernel_AllGather_RING_LL", seed=3))
    shutil.copy(a.paths[0], tmp_path / "mix" / "node0_rank0_1.sqlite")
    shutil.copy(b.paths[1], tmp_path / "mix" / "node0_rank1_1.sqlite")
    proc = run_cli("check", "-v", "--format", "json", "--fail-on", "never", str(tmp_path / "mix"))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report.get("job") is None  # it was a job of 2 ranks with "40 collectives where all ranks meet"
    assert not [f for f in report["findings"] if f["rule"] in ("exposed-comm", "rank-straggler", "rank-imbalance")]
    compact = run_cli("check", "-v", "--format", "compact", "--fail-on", "never", str(tmp_path / "mix"),
                      env={"COLUMNS": "400"})
    assert "no collective matched across ranks" in compact.stdout
