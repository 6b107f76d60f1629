"""Verdicts and step models on our own framework captures (committed in tests/data/framework).

transformers eager and static-cache (CUDA graph) decode loops and a JAX token loop without
graphs or NVTX, captured on an H200 with expectations written before the capture. The judgement
is ../shared/tools/verdicts.py's (must / must_not / message_re / message_not_re), plus the step
count: the iterations each script ran, warm-up steps included.
"""

from __future__ import annotations

import json
import lzma
import re
import shutil
from pathlib import Path

import pytest

from tests.conftest import run_cli, validate_report

HERE = Path(__file__).resolve().parents[1] / "data" / "framework"
LEVEL = {"info": 0, "warning": 1, "error": 2}
_EXPECTED = json.loads((HERE / "expected.json").read_text())
SPEC = _EXPECTED["traces"]
#: Verdicts revised after measuring, each with its reason ("why"), applied over the as-written ones.
REVISED = _EXPECTED.get("revised", {})


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, dict]:
    """Each capture unpacked and checked once."""
    folder = tmp_path_factory.mktemp("framework")
    out: dict[str, dict] = {}
    for name in SPEC:
        trace = folder / name
        with lzma.open(HERE / f"{name}.xz") as packed, trace.open("wb") as unpacked:
            shutil.copyfileobj(packed, unpacked)
        proc = run_cli("check", "--format", "json", "--fail-on", "never", str(trace))
        assert proc.returncode == 0, proc.stderr
        out[name] = validate_report(proc.stdout)
    return out


@pytest.mark.parametrize("name", sorted(SPEC))
def test_framework_verdicts(reports, name):
    expected = {**SPEC[name], **{k: v for k, v in REVISED.get(name, {}).items() if k != "why"}}
    findings = reports[name]["findings"]
    worst: dict[str, int] = {}
    for f in findings:
        worst[f["rule"]] = max(worst.get(f["rule"], -1), LEVEL[f["severity"]])
    missing = [r for r, floor in expected.get("must", {}).items() if worst.get(r, -1) < LEVEL[floor]]
    false = [r for r in expected.get("must_not", []) if worst.get(r, -1) > LEVEL["info"]]
    assert not missing and not false, f"missing {missing}, false {false}"
    for rule, pattern in expected.get("message_re", {}).items():
        assert any(re.search(pattern, f["message"]) for f in findings if f["rule"] == rule), (rule, pattern)
    for rule, pattern in expected.get("message_not_re", {}).items():
        assert not any(re.search(pattern, f["message"]) for f in findings if f["rule"] == rule), (rule, pattern)


@pytest.mark.parametrize("name", sorted(SPEC))
def test_framework_steps_are_the_scripts_iterations(reports, name):
    steady = reports[name]["traces"][0]["window"]["steady"]
    # These scripts emit no NVTX of their own: a range in the trace is a library's and never the step.
    assert steady["kind"] in {"graph", "marker", "kernels"}, steady["source"]
    assert steady["steps"] + steady["warmup_steps"] == SPEC[name]["steps"], steady["source"]
