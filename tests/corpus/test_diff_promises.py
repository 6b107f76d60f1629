"""``diff BEFORE --new AFTER`` tests BEFORE's promise: "promised X, measured Y [interval]" for each cause AFTER lost."""

from __future__ import annotations

import json

import jsonschema
import pytest

from nsys_rules.diff import diff_schema
from tests.conftest import H200, run_cli

pytestmark = pytest.mark.skipif(not H200.exists(), reason=f"{H200} is absent (no shared traces)")


def _diff(before: str, after: str) -> dict:
    done = run_cli("diff", str(H200 / f"{before}.sqlite"), str(H200 / f"{after}.sqlite"), "--format", "json")
    assert done.returncode in (0, 1), done.stderr
    data = json.loads(done.stdout)
    jsonschema.validate(data, diff_schema())
    return data


@pytest.mark.parametrize(("before", "rule", "promised_ms"), [("decode_eager", "launch-bound", 3.107),
                                                             ("decode_graph_hostsync", "sync-stall", 0.345)])
def test_a_fixed_cause_says_promised_and_measured(before: str, rule: str, promised_ms: float) -> None:
    data = _diff(before, "decode_graph_node")
    (promise,) = data["promises"]
    assert promise["rules"] == [rule]
    assert promise["promised_ns"] == pytest.approx(promised_ms * 1e6, rel=0.01)
    assert promise["verdict"] == "kept" and 0.8 <= promise["ratio"] <= 1.25
    low, high = promise["measured_interval_ns"]
    assert low <= promise["measured_ns"] <= high
    assert promise["line"].startswith(f"{rule}: promised {promised_ms:.3f} ms per step [")
    assert f"promise {promise['line']}" in data["verdict"]["reasons"]


def test_no_promise_where_no_cause_went_away() -> None:
    assert _diff("decode_graph_node", "decode_graph_profilerapi")["promises"] == []
