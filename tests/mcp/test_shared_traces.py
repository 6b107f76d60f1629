"""The issue's acceptance on real H200 captures (``../shared``), through the SDK client over stdio.

``check`` returns the findings and savings of ``check --format json``; ``diff`` on two runs of one
program is "no change" or "inconclusive", never "slower"; ``verify`` on the host-sync decode loop
against the same loop without the sync says the sync-stall cause is gone and sets the step's change
against the saving the finding promised. Skips, with the reason, without ``../shared``.
"""

from __future__ import annotations

import pytest

from tests.capture_verdicts import check_json
from tests.conftest import H200, need_shared
from tests.corpus.test_diff_captures import ARCHIVE, diff_traces  # noqa: F401 - the session fixture, shared
from tests.mcp.conftest import mcp_server

#: sync-stall on decode_graph_hostsync: one blocking readback per step.
SYNC_STALL = "791763573e16ea72"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    need_shared(H200)
    with mcp_server(cwd=tmp_path_factory.mktemp("mcp-cwd")) as s:  # no --root: the traces sit in two places
        yield s


def _all_findings(server, trace: str) -> list[dict]:
    findings, offset = [], 0
    while offset is not None:
        got = server.call("check", {"trace": trace, "offset": offset, "limit": 50})
        findings += got["report"]["findings"]
        offset = got["page"]["next_offset"]
    return findings


def test_check_returns_the_findings_and_savings_of_check_json(server):
    trace = (H200 / "decode_eager.sqlite").resolve()
    expected = check_json(trace)
    got = _all_findings(server, str(trace))
    assert got == expected["findings"]
    assert [(f["rule"], f.get("estimated_savings_ns")) for f in got] == \
        [(f["rule"], f.get("estimated_savings_ns")) for f in expected["findings"]]
    assert any(f.get("estimated_savings_ns") for f in got)  # savings to compare, not only their absence
    first = server.call("check", {"trace": str(trace), "limit": 1})
    assert first["report"]["traces"][0]["budget"] == expected["traces"][0]["budget"]
    top = next(f for f in expected["findings"] if not f.get("folded_into") and not f.get("minor"))
    assert f"fix first: {top['rule']} ({top['severity']}, {top['fingerprint']})" in first["summary"]


@pytest.mark.parametrize(("before", "after"), [("diff_graph_l16_run1", "diff_graph_l16_run2"),
                                               ("diff_eager_l16_run1", "diff_eager_l16_run2")])
def test_diff_of_two_runs_of_one_program_is_never_slower(server, diff_traces, before, after):  # noqa: F811
    got = server.call("diff", {"before": [str(diff_traces / f"{before}.sqlite")],
                               "after": [str(diff_traces / f"{after}.sqlite")]})
    verdict = got["diff"]["decision"]["verdict"]
    assert verdict in ("no change", "inconclusive"), got["summary"]
    assert got["diff"]["regressed"] is False
    assert got["summary"].startswith(got["diff"]["decision"]["line"])
    assert ("capture more runs" in got["summary"]) if verdict == "inconclusive" else ("3+ runs" in got["summary"])


def test_diff_of_different_programs_is_refused_unless_forced(server):
    pair = {"before": [str(H200 / "decode_eager.sqlite")], "after": [str(H200 / "rust_release_build.sqlite")]}
    error = server.error("diff", pair)
    assert error.data["exit_code"] == 2 and "different programs" in error.message
    assert "force=true" in error.message and "--force" not in error.message
    forced = server.call("diff", {**pair, "force": True})
    assert forced["diff"]["forced"] and "different programs" in forced["summary"]


def test_verify_says_the_sync_stall_cause_is_gone_and_the_step_kept_the_promise(server):
    need_shared(H200)
    got = server.call("verify", {"before": str(H200 / "decode_graph_hostsync.sqlite"),
                                 "after": str(H200 / "decode_graph_node.sqlite"), "fingerprint": SYNC_STALL})
    assert got["finding"]["rule"] == "sync-stall"
    assert got["cause"]["status"] == "gone" and got["cause"]["after"] is None
    assert got["promise"]["savings_ns"] == got["finding"]["estimated_savings_ns"] == 16390102
    assert got["promise"]["steps"] == 48
    assert got["promise"]["per_step_ns"] == pytest.approx(16390102 / 48, abs=0.1)
    step = got["step"]
    assert step["verdict"] == "faster" and step["low_ns"] < step["estimate_ns"] < step["high_ns"] < 0
    # The promise (341 us per step) lies within the interval of the saving (139 to 559 us): met.
    assert -step["high_ns"] < got["promise"]["per_step_ns"] < -step["low_ns"]
    assert got["promise_verdict"] == "met"
    assert got["realized_pct"] == pytest.approx(100 * -step["estimate_ns"] / got["promise"]["per_step_ns"], abs=0.1)
    assert 80 < got["realized_pct"] < 125
    assert "gone" in got["summary"] and "met" in got["summary"]


def test_verify_of_a_finding_still_there_says_so(server):
    need_shared(H200)
    scope = next(f for f in check_json((H200 / "decode_graph_node.sqlite").resolve())["findings"]
                 if f["rule"] == "capture-scope")
    got = server.call("verify", {"before": str(H200 / "decode_graph_node.sqlite"),
                                 "after": str(H200 / "decode_graph_hostsync.sqlite"),
                                 "fingerprint": scope["fingerprint"]})
    assert got["cause"]["status"] == "unchanged" and got["cause"]["after"]["fingerprint"] == scope["fingerprint"]
    assert got["promise_verdict"] == "no promise" and got["realized_pct"] is None
    assert got["step"]["verdict"] == "slower"  # the sync came back


def test_the_archive_is_where_the_diff_tests_look():
    assert ARCHIVE.name == "diff_runs.tar.xz"
