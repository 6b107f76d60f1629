"""The job rules on public multi-GPU exports: 2 processes on 2 GPUs inside one trace.

The expectations are computed here, straight from the SQLite file, independently of the job
package: NCCL kernels paired by order on the two GPUs, the later start of each pair is the
straggler's arrival, the gap to the earlier one is how long it held the other rank up.
"""

from __future__ import annotations

import sqlite3

import pytest

from nsys_rules.testing.jobs import run_job_rules
from nsys_rules.testing import metric_values, only_finding
from tests.conftest import CORPUS, need_shared

PAIR = "nsys2026.2.1-wan-train-2gpu-nccl-{}.sqlite"
JOB_RULES = ["rank-straggler", "exposed-comm", "rank-imbalance"]


def nccl_by_device(path) -> dict[int, list[tuple[int, int]]]:
    db = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        rows = db.execute("SELECT k.deviceId, k.start, k.end FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                          "JOIN StringIds s ON s.id = k.shortName WHERE s.value LIKE 'nccl%' ORDER BY k.start").fetchall()
    finally:
        db.close()
    out: dict[int, list[tuple[int, int]]] = {}
    for device, start, end in rows:
        out.setdefault(device, []).append((start, end))
    return out


@pytest.fixture
def pair():
    need_shared(CORPUS)
    return {which: CORPUS / PAIR.format(which) for which in ("before", "after")}


def test_before_rank_1_is_the_straggler_by_the_hand_computed_lateness(pair):
    path = pair["before"]
    nccl = nccl_by_device(path)
    assert len(nccl[0]) == len(nccl[1]) == 33
    # The trace's own steps (one cudaStreamSynchronize each, 16 of them: the budget's) hold two SendRecv
    # each; the job keeps them (one step model per report) instead of a step per collective.
    held = sum(s1 - s0 for (s0, _), (s1, _) in list(zip(nccl[0], nccl[1], strict=True))[1:] if s1 > s0)
    outcome = run_job_rules(JOB_RULES, [path])
    assert outcome.info["steps"]["count"] == 16 and "2 collectives per step" in outcome.info["steps"]["source"]
    f = only_finding(outcome.findings, "rank-straggler")
    m = metric_values(f)
    assert (f.location.rank, f.location.device, f.location.pid) == (1, 1, 145)
    assert m["collectives_last"] == 22 and m["collectives_judged"] == 33
    assert m["held_up_per_step"] == pytest.approx(2 * held / 32, rel=0.02)  # 0.68 ms per step of two collectives
    assert outcome.info["clock"]["source"] == "one trace (one clock)"
    assert [(r["rank"], r["pid"], r["device"]) for r in outcome.info["ranks"]] == [(0, 144, 0), (1, 145, 1)]


@pytest.mark.parametrize("which", ["before", "after"])
def test_exposed_communication_is_every_nccl_nanosecond(pair, which):
    # No compute kernel overlaps any SendRecv on either GPU (checked below), so all of it is exposed.
    path = pair[which]
    nccl = nccl_by_device(path)
    per_rank = [sum(e - s for s, e in spans[1:]) / (len(spans) - 1) for spans in (nccl[0], nccl[1])]
    db = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    overlapping = db.execute(
        "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL c JOIN StringIds cs ON cs.id = c.shortName "
        "JOIN CUPTI_ACTIVITY_KIND_KERNEL k ON k.deviceId = c.deviceId AND k.start < c.end AND k.end > c.start "
        "JOIN StringIds ks ON ks.id = k.shortName WHERE cs.value LIKE 'nccl%' AND ks.value NOT LIKE 'nccl%'").fetchone()[0]
    db.close()
    assert overlapping == 0
    outcome = run_job_rules(["exposed-comm"], [path], options={"exposed-comm": {"min_share_pct": 0.0}})
    m = metric_values(only_finding(outcome.findings, "exposed-comm"))
    # The median of the two ranks, two SendRecv per step (the trace's steps).
    assert m["comm_per_step"] == pytest.approx(2 * sum(per_rank) / 2, rel=0.02)
    assert m["exposed_per_step"] == pytest.approx(m["comm_per_step"], rel=1e-9)
    assert m["overlapped_share"] == 0


def test_after_has_no_straggler_by_arrival_count(pair):
    # After the fix neither rank is last at most collectives nor causes most of the waiting beyond noise.
    outcome = run_job_rules(["rank-straggler", "rank-imbalance"], [pair["after"]])
    assert outcome.findings == []


def test_two_gpus_without_communication_are_no_job(corpus):
    # FastVideo's 2-GPU window holds no NCCL kernel, and no compute kernel behaves like a collective.
    assert run_job_rules(JOB_RULES, [corpus / "nsys2026.2.1-fastvideo-sp2-h100x2-window.sqlite"]) is None
