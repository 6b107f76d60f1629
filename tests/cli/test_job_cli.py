"""`nsys-rules check` on a multi-rank job: one answer for all ranks, in every output, serial or in workers."""

from __future__ import annotations

import json

import pytest

from nsys_rules.settings import Settings
from nsys_rules.engine import run_check
from nsys_rules.formatters.json_out import envelope
from nsys_rules.inputs import open_trace
from nsys_rules.testing.jobs import JobPlan, write_job
from nsys_rules.parallel import run_many
from nsys_rules.plugin_manager import build_registry
from nsys_rules.report import SCHEMA_VERSION
from tests.conftest import EXAMPLE, run_cli, validate_report

JOB_RULES = "rank-straggler,exposed-comm,rank-imbalance"


@pytest.fixture
def job(tmp_path):
    folder = tmp_path / "traces"
    folder.mkdir()
    write_job(folder, JobPlan(ranks=4, steps=12, stall={3: 2_000_000}, jitter=20_000, clock_skew={2: 1_000_000_000}))
    return folder


def test_folder_of_ranks_in_json(job):
    proc = run_cli("check", str(job), "--format", "json", "--no-plugins")
    assert proc.returncode == 0, proc.stderr  # warnings only: under the default --fail-on error
    data = validate_report(proc.stdout)
    assert data["schema_version"] == SCHEMA_VERSION
    straggler = [f for f in data["findings"] if f["rule"] == "rank-straggler"]
    assert len(straggler) == 1 and straggler[0]["location"]["rank"] == 3
    assert straggler[0]["location"]["trace"].endswith("node0_rank3_1.sqlite")
    assert [r["rank"] for r in data["job"]["ranks"]] == [0, 1, 2, 3]
    assert {r["rank_source"] for r in data["job"]["ranks"]} == {"file name"}
    assert data["job"]["ranks"][2]["clock_correction_ns"] == pytest.approx(-1_000_000_000, abs=1_000)
    assert {r["name"] for r in data["rules"]} >= set(JOB_RULES.split(","))
    assert len(data["traces"]) == 4 and "cross_trace" in data


def test_worker_processes_give_the_serial_answer(job):
    paths = sorted(job.iterdir())
    registry = build_registry(autoload=False)
    settings = Settings()
    serial = run_check(paths, registry, settings, lambda p: open_trace(p, registry.loaders))
    pooled = run_many(paths, registry, settings, jobs=2, autoload_plugins=False)  # forked workers: results pickled
    a, b = envelope(serial), envelope(pooled)
    assert a["job"] == b["job"] and a["findings"] == b["findings"]
    assert any(f["rule"] == "rank-straggler" for f in a["findings"])
    dask_distributed = pytest.importorskip("dask.distributed", reason="dask[distributed] is not installed")
    with dask_distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                       dashboard_address=None) as cluster, dask_distributed.Client(cluster) as client:
        on_dask = envelope(run_many(paths, registry, settings, jobs=2, autoload_plugins=False, dask_client=client))
    assert on_dask["job"] == a["job"] and on_dask["findings"] == a["findings"]


def test_table_markdown_sarif_and_html_show_the_job(job, tmp_path):
    table = run_cli("check", str(job), "--select", JOB_RULES, "--no-plugins")
    assert "job: 4 ranks; clocks: session clocks corrected from collectives" in table.stdout
    assert "rank-straggler" in table.stdout
    markdown = run_cli("check", str(job), "--select", JOB_RULES, "--format", "markdown", "--no-plugins")
    assert "rank-straggler" in markdown.stdout
    sarif = json.loads(run_cli("check", str(job), "--select", JOB_RULES, "--format", "sarif", "--no-plugins").stdout)
    assert "rank-straggler" in {r["ruleId"] for r in sarif["runs"][0]["results"]}
    html = run_cli("check", str(job), "--select", JOB_RULES, "--format", "html", "--no-plugins").stdout
    assert "Job: all ranks together" in html and "rank 3" in html


def test_options_severity_and_selection_apply_to_job_rules(job):
    # An option quiets it (a share above 100 % is refused since issue 42: more collectives than the job has).
    quiet = run_cli("check", str(job), "--select", "rank-straggler", "--set", "rank-straggler.min_collectives=100000",
                    "--format", "json", "--no-plugins")
    assert validate_report(quiet.stdout)["findings"] == []
    error = run_cli("check", str(job), "--select", "rank-straggler", "--no-plugins", "--format", "json",
                    "--config", str(_config(job, 'severity = { rank-straggler = "error" }')))
    assert error.returncode == 1 and validate_report(error.stdout)["findings"][0]["severity"] == "error"
    ignored = validate_report(run_cli("check", str(job), "--ignore", JOB_RULES, "--format", "json", "--no-plugins").stdout)
    assert "job" not in ignored and not any(f["rule"] in JOB_RULES for f in ignored["findings"])


def test_a_one_gpu_trace_is_no_job(tmp_path):
    data = validate_report(run_cli("check", str(EXAMPLE), "--format", "json", "--no-plugins").stdout)
    assert "job" not in data
    assert not any(s["rule"] in JOB_RULES for s in data["skipped"])


def _config(folder, body: str):
    path = folder.parent / "nsys-rules.toml"
    path.write_text(body + "\n", encoding="utf-8")
    return path
