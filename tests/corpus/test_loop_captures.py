"""The step model on our own captures of real programs (tests/data/loops, issue 26).

Training loops with numbered ranges, torch.compile recompiles, JAX, CUDA-graph re-captures,
regimes, a loop-less upload and an engine without NVTX, captured on an H200. The expectations
(``expected.json``) were written from SQL over the traces before any tool output was read: the
step count is the script's iterations (the window's steps, warm-up steps and steps of an earlier
regime together), the step time the SQL median within 5 %, the source the user's range family
where there is one.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.capture_verdicts import check_packed, verdict_problems

HERE = Path(__file__).resolve().parents[1] / "data" / "loops"
SPEC = json.loads((HERE / "expected.json").read_text())["traces"]
#: The expectation file's words for the window kinds, and the step model's.
KINDS = {"calls": "call"}


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, dict]:
    return check_packed(HERE, sorted(SPEC), tmp_path_factory.mktemp("loops"))


def _steady(report: dict) -> dict:
    return report["traces"][0]["window"]["steady"]


@pytest.mark.parametrize("name", sorted(SPEC))
def test_the_step_is_anchored_where_the_program_marks_it(reports, name):
    steady, spec = _steady(reports[name]), SPEC[name]
    kinds = {KINDS.get(k, k) for k in spec["source_kind"]}
    assert (steady.get("kind") or "none") in kinds, steady["source"]
    if spec.get("step_range"):
        assert steady["step_range"] == spec["step_range"], steady["source"]


@pytest.mark.parametrize("name", sorted(n for n in SPEC if SPEC[n]["steps_total_range"][1]))
def test_the_step_count_is_the_scripts_iterations(reports, name):
    steady = _steady(reports[name])
    earlier = sum(r["steps"] for r in steady.get("regimes", []) if not r["steady"])
    lo, hi = SPEC[name]["steps_total_range"]
    assert lo <= steady["steps"] + steady["warmup_steps"] + earlier <= hi, steady["source"]


@pytest.mark.parametrize("name", sorted(n for n in SPEC if SPEC[n].get("step_ms")))
def test_the_step_time_is_the_sql_median(reports, name):
    spec = SPEC[name]["step_ms"]
    budget = reports[name]["traces"][0]["budget"]
    median = budget["step_ns"]["p50"] / 1e6
    lo, hi = spec[f"{spec['primary']}_range"]
    # The budget's steps are on the GPU clock: within 5 % of the SQL median on either clock is the step time.
    other = spec.get("gpu_range" if spec["primary"] == "host" else "host_range") or (lo, hi)
    assert lo <= median <= hi or other[0] <= median <= other[1], (median, spec)


def test_a_loop_less_capture_gets_no_steps(reports):
    from nsys_rules.plugin_manager import build_registry

    steady = _steady(reports["tiny_upload.sqlite"])
    assert steady["steps"] == 0 and (steady.get("kind") or "none") == "none"
    # No judgement of steady behaviour (the rules that judge the steady window) above info.
    steady_rules = {name for name, rule in build_registry(autoload=False).rules.items() if rule.window == "steady"}
    assert steady_rules and not [f["rule"] for f in reports["tiny_upload.sqlite"]["findings"]
                                 if f["rule"] in steady_rules and f["severity"] != "info"]


def test_regimes_keep_the_last_stable_run(reports):
    steady = _steady(reports["eager_regimes.sqlite"])
    slow, steady_run = [r for r in steady["regimes"] if not r["steady"]], [r for r in steady["regimes"] if r["steady"]]
    assert len(slow) == 1 and len(steady_run) == 1
    assert slow[0]["median_step_ns"] > 30 * steady_run[0]["median_step_ns"]  # 123 ms against 3.1 ms
    assert "module load" in slow[0]["cause"]
    assert steady["steps"] == SPEC["eager_regimes.sqlite"]["steps"] // 2  # the last 40 of 80


@pytest.mark.parametrize("name,step", [("compile_recompile.sqlite", 11), ("graph_recapture.sqlite", 35)])
def test_recompiles_and_recaptures_are_named(reports, name, step):
    found = [f for f in reports[name]["findings"] if f["rule"] == "recompile"]
    assert found and f"step {step} " in found[0]["message"]


@pytest.mark.parametrize("name", sorted(SPEC))
def test_loop_verdicts(reports, name):
    # must / must_not / must_any / message_re / any_finding_not_re, written from SQL before any tool output.
    assert verdict_problems(reports[name]["findings"], SPEC[name]) == []


def test_a_jax_replay_loop_is_told_about_its_command_buffers(reports):
    # 17 command buffers per token (the scan's 16 layers and the head): the kernels are replayed, not
    # launched one by one, and the host steps through the scan between them.
    [found] = [f for f in reports["jax_scan_decode_nonvtx.sqlite"]["findings"] if f["rule"] == "launch-bound"]
    assert "replayed from graphs" in found["message"] and "launched one by one)" in found["message"]
    assert "unroll=True" in found["recommendation"] and "torch" not in found["recommendation"].lower()
