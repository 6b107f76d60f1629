"""Verdicts and step models on our own framework captures (committed in tests/data/framework).

transformers eager and static-cache (CUDA graph) decode loops and a JAX token loop without
graphs or NVTX, captured on an H200 with expectations written before the capture. The judgement
is ../shared/tools/verdicts.py's (must / must_not / message_re / message_not_re), plus the step
count: the iterations each script ran, warm-up steps and steps of an earlier regime included.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.capture_verdicts import check_packed, verdict_problems

HERE = Path(__file__).resolve().parents[1] / "data" / "framework"
_EXPECTED = json.loads((HERE / "expected.json").read_text())
SPEC = _EXPECTED["traces"]
#: Verdicts revised after measuring, each with its reason ("why"), applied over the as-written ones.
REVISED = _EXPECTED.get("revised", {})


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, dict]:
    """Each capture unpacked and checked once."""
    return check_packed(HERE, SPEC, tmp_path_factory.mktemp("framework"))


@pytest.mark.parametrize("name", sorted(SPEC))
def test_framework_verdicts(reports, name):
    expected = {**SPEC[name], **{k: v for k, v in REVISED.get(name, {}).items() if k != "why"}}
    assert verdict_problems(reports[name]["findings"], expected) == []


@pytest.mark.parametrize("name", sorted(SPEC))
def test_framework_steps_are_the_scripts_iterations(reports, name):
    steady = reports[name]["traces"][0]["window"]["steady"]
    # These scripts emit no NVTX of their own: a range in the trace is a library's and never the step.
    assert steady["kind"] in {"graph", "marker", "kernels"}, steady["source"]
    # Steps of an earlier regime (a slower pace the loop left) are the script's iterations too, kept out of the steady ones.
    other = sum(r["steps"] for r in steady.get("regimes", []) if not r["steady"])
    assert steady["steps"] + steady["warmup_steps"] + other == SPEC[name]["steps"], steady["source"]
