"""Verdicts and step models on the second round of held-out captures (tests/data/heldout2).

A training loop, a decode loop under emit_nvtx (library ranges for every op), a loop that frees
the allocator's cache every 8 steps, and a Triton kernel loop; expectations written before the
capture. The judgement is ../shared/tools/verdicts.py's (must / must_not / message_re), plus the
step count (a range of the script's iterations) and the kind of evidence the step model used.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.capture_verdicts import check_packed, verdict_problems

HERE = Path(__file__).resolve().parents[1] / "data" / "heldout2"
SPEC = json.loads((HERE / "expected.json").read_text())["traces"]


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, dict]:
    """Each capture unpacked and checked once."""
    return check_packed(HERE, SPEC, tmp_path_factory.mktemp("heldout2"))


@pytest.mark.parametrize("name", sorted(SPEC))
def test_heldout_verdicts(reports, name):
    assert verdict_problems(reports[name]["findings"], SPEC[name]) == []


@pytest.mark.parametrize("name", sorted(SPEC))
def test_heldout_steps_and_their_evidence(reports, name):
    steady = reports[name]["traces"][0]["window"]["steady"]
    low, high = SPEC[name]["steps"]
    assert low <= steady["steps"] + steady["warmup_steps"] <= high, steady["source"]
    assert steady["kind"] in SPEC[name]["source_kind"], steady["source"]
    if steady["kind"] == "nvtx":
        assert steady["step_range"] == "decode_step"  # the user's range, never an aten:: one


def test_emit_nvtx_sync_saves_only_the_host_wait(reports):
    # Host-bound decode: removing .item()'s sync gives back the host's waits, not its launch pace.
    [f] = [f for f in reports["ho_emit_nvtx.sqlite"]["findings"] if f["rule"] == "sync-stall"]
    m = {k: v["value"] for k, v in f["metrics"].items()}
    assert f["estimated_savings_ns"] <= m["blocked_time"] < m["bubble_time"] / 5


def test_training_loop_gets_no_decode_advice(reports):
    # Backward and optimizer kernels mark a training loop: its .item() logs a loss, no token is sampled.
    text = " ".join(f["message"] + " " + f["recommendation"] for f in reports["ho_train.sqlite"]["findings"])
    assert reports["ho_train.sqlite"]["findings"] and not re.search(r"token|decode|\.item\(\)` pattern", text)


def test_fp32_gemms_lead_the_training_report(reports):
    # Written after the capture, with the fp32-gemm rule: the fp32 encoder's GEMMs run on FFMA kernels
    # (69 % of the step); TF32 is the first thing to fix there, and no bf16 decode loop gets the advice.
    top = reports["ho_train.sqlite"]["findings"][0]
    assert top["rule"] == "fp32-gemm" and top["severity"] == "warning"
    others = [n for n, r in reports.items() if n != "ho_train.sqlite" and any(f["rule"] == "fp32-gemm" for f in r["findings"])]
    assert others == []
