"""Damaged variants of real traces get the right validity verdict, and the findings on doubtful data say so.

Each variant is an h200 trace rewritten by :func:`tests.trace_edit.edited_copy` (records dropped from
one stream, nodes removed from a quarter of the graph replays, the last step cut by the capture's
end, NVTX ends removed); the intact trace is the control.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import H200, run_cli, validate_report
from tests.trace_edit import edited_copy
from tests.validity.test_shuffled import check

K = "CUPTI_ACTIVITY_KIND_KERNEL"
GRAPH_LAUNCHES = ("SELECT c FROM (SELECT r.correlationId AS c, row_number() OVER (ORDER BY r.start) AS n FROM "
                  "CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId WHERE s.value LIKE "
                  "'cudaGraphLaunch%') WHERE n % 4 = 0")
VARIANTS: dict[str, tuple[str, list[str]]] = {
    # One kernel in five of the busiest stream lost (its launch calls kept).
    "stream_loss": ("decode_eager", [f"DELETE FROM {K} WHERE streamId = (SELECT streamId FROM {K} GROUP BY streamId "
                                     "ORDER BY count(*) DESC LIMIT 1) AND correlationId % 5 = 0"]),
    # Every fourth graph replay loses half of its nodes (its first kernel kept).
    "graph_partial": ("decode_graph_node", [f"DELETE FROM {K} WHERE correlationId IN ({GRAPH_LAUNCHES}) AND start > "
                                            f"(SELECT min(k2.start) FROM {K} k2 WHERE k2.correlationId = "
                                            f"{K}.correlationId) AND rowid % 2 = 0"]),
    # The capture ends 3 ms before the last kernel: its GPU work unrecorded, the ranges still open.
    "last_step_cut": ("decode_eager", [f"DELETE FROM {K} WHERE start > (SELECT max(start) - 3000000 FROM {K})",
                                       f"UPDATE NVTX_EVENTS SET end = NULL WHERE end > (SELECT max(start) FROM {K})"]),
    # One NVTX range in ten lost its end.
    "nvtx_ends": ("decode_eager", ["UPDATE NVTX_EVENTS SET end = NULL WHERE rowid % 10 = 0"]),
}


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    if not H200.is_dir():
        pytest.skip("../shared/traces/h200 is not here")
    folder = tmp_path_factory.mktemp("damaged")
    out = {}
    for name, (source, statements) in VARIANTS.items():
        code, text = check(edited_copy(H200 / f"{source}.sqlite", folder / f"{name}.sqlite", statements))
        assert code == 0
        out[name] = validate_report(text)
    for source in ("decode_eager", "decode_graph_node"):
        out[source] = validate_report(check(H200 / f"{source}.sqlite")[1])
    return out


def validity(report: dict[str, Any]) -> dict[str, Any]:
    return report["traces"][0]["validity"]


def reason(report: dict[str, Any], code: str) -> dict[str, Any]:
    return next(r for r in validity(report)["reasons"] if r["code"] == code)


def test_intact_traces_are_trusted(reports: dict[str, dict[str, Any]]) -> None:
    for name in ("decode_eager", "decode_graph_node"):
        v = validity(reports[name])
        assert (v["verdict"], v["reasons"], v["abstained"], v["doubtful"]) == ("trusted", [], [], [])
        assert v["checks"]["launches-without-gpu"]["count"] == 0
        assert [n["code"] for n in v["notes"]] == ["scheduling-absent"]


def test_records_lost_on_a_stream_make_the_trace_untrustworthy(reports: dict[str, dict[str, Any]]) -> None:
    v = validity(reports["stream_loss"])
    lost = reason(reports["stream_loss"], "launches-without-gpu")
    assert v["verdict"] == "untrustworthy"
    assert lost["level"] == "untrustworthy" and lost["devices"] == [0]
    assert lost["size"]["of"] == 6686 and 19 < lost["size"]["pct"] < 23
    # The idle time around lost kernels is no idle time: the gap findings abstain instead of reporting it.
    abstained = {a["rule"] for a in v["abstained"]}
    assert {"gpu-idle-gaps", "gpu-low-utilization", "launch-bound"} <= abstained
    assert not {f["rule"] for f in reports["stream_loss"]["findings"]} & abstained
    assert {f["rule"] for f in reports["decode_eager"]["findings"]} >= abstained  # they fire on the intact trace


def test_graph_replays_missing_nodes(reports: dict[str, dict[str, Any]]) -> None:
    v = validity(reports["graph_partial"])
    partial = reason(reports["graph_partial"], "graph-replays-partial")
    assert v["verdict"] == "untrustworthy"
    assert partial["size"]["count"] == 16 and partial["size"]["of"] == 67
    assert "gpu-idle-gaps" in {a["rule"] for a in v["abstained"]}
    assert validity(reports["decode_graph_node"])["checks"]["graph-replays-partial"] == {
        "count": 0, "of": 67, "pct": 0.0, "steady_pct": 0.0}


def test_last_step_cut_is_a_caveat(reports: dict[str, dict[str, Any]]) -> None:
    v = validity(reports["last_step_cut"])
    assert v["verdict"] == "caveats"
    assert {r["code"] for r in v["reasons"]} == {"capture-end-cut", "nvtx-unclosed"}
    cut = reason(reports["last_step_cut"], "capture-end-cut")
    assert cut["size"]["count"] == 170 and cut["size"]["steady_pct"] == 0.0
    assert v["abstained"] == [] and {d["rule"] for d in v["doubtful"]} >= {"gpu-idle-gaps"}


def test_nvtx_ends_removed_is_a_caveat(reports: dict[str, dict[str, Any]]) -> None:
    v = validity(reports["nvtx_ends"])
    unclosed = reason(reports["nvtx_ends"], "nvtx-unclosed")
    assert v["verdict"] == "caveats"
    assert (unclosed["size"]["count"], unclosed["size"]["of"]) == (46, 461)
    # Steps are cut by NVTX ranges here: every steady-state finding rests on them and says so.
    doubtful = {d["rule"] for d in v["doubtful"]}
    assert {f["rule"] for f in reports["nvtx_ends"]["findings"]} == doubtful


def test_require_trusted_exits_3_on_an_untrustworthy_trace(tmp_path: Path) -> None:
    if not H200.is_dir():
        pytest.skip("../shared/traces/h200 is not here")
    source, statements = VARIANTS["stream_loss"]
    damaged = edited_copy(H200 / f"{source}.sqlite", tmp_path / "lost.sqlite", statements)
    bad = run_cli("check", "--require-trusted", "--format", "json", str(damaged))
    assert bad.returncode == 3
    assert json.loads(bad.stdout)["traces"][0]["validity"]["verdict"] == "untrustworthy"  # the report still comes
    assert "untrustworthy (--require-trusted)" in bad.stderr and "kernel launches" in bad.stderr
    table = run_cli("check", str(damaged))
    assert table.returncode == 0
    head = table.stdout.split("\n\n")[0]  # the header (wrapped to the width), above the budget and findings
    assert "trace untrustworthy: " in head
    good = run_cli("check", "--require-trusted", str(H200 / "rust_release_build.sqlite"))
    assert good.returncode in (0, 1) and "trace untrustworthy" not in good.stdout and "trace caveats" not in good.stdout


def test_doctor_checks_a_capture(tmp_path: Path) -> None:
    if not H200.is_dir():
        pytest.skip("../shared/traces/h200 is not here")
    from nsys_rules.commands.doctor import capture_items

    source, statements = VARIANTS["graph_partial"]
    damaged = edited_copy(H200 / f"{source}.sqlite", tmp_path / "partial.sqlite", statements)
    items = capture_items(damaged)
    assert [(i.level, i.topic) for i in items[:2]] == [("FAIL", "capture"), ("FAIL", "capture")]
    assert "16 of 67 CUDA graph replays" in items[1].text and "--cuda-graph-trace=graph" in items[1].fix
    intact = capture_items(H200 / f"{source}.sqlite")
    assert intact[0].level == "ok" and intact[0].text.endswith(": trusted")
    assert [i.level for i in intact[1:]] == ["info"]  # scheduling information absent: nothing read from it
