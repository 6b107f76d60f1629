"""Labels from the facts (issue 42, item 4), each on a real trace where one shows it.

Phases named by where a region lies relative to the steady state, a suggestion that changes once
taken, outlier causes chosen by size, no savings share above 100 %, the steady state's description
once, sizes in their natural unit, singular and plural, code shown as code in HTML.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from nsys_rules.cli import main
from nsys_rules.findings import Finding, Location, Severity
from nsys_rules.formatters.layout import Entry, savings_share
from nsys_rules.rules.gaps.gpu_low_utilization import phase_words
from nsys_rules.units import counted, human_bytes
from tests.capture_verdicts import check_json

NCCL = "nsys2026.2.1-wan-train-2gpu-nccl-before.sqlite"
TRANSPOSE = "nsys2022.1.3-transpose-a100.sqlite"


def _findings(report: dict[str, Any], rule: str) -> list[dict[str, Any]]:
    return [f for f in report["findings"] if f["rule"] == rule]


def _json(capsys: pytest.CaptureFixture[str], *args: object) -> dict[str, Any]:
    assert main(["check", "--format", "json", "--fail-on", "never", *map(str, args)]) == 0
    return json.loads(capsys.readouterr().out)


# -- gpu-low-utilization: phases by where they are -------------------------------------------------
def test_low_utilization_names_the_phase_where_the_region_lies(corpus, capsys):
    # Steady state 60.121-60.401 s (NVTX steps). GPU 1's region at 60.221 s lies inside it, GPU 0's at 60.401 s
    # after it; both were called "before the steady state (start-up)".
    report = check_json(corpus / NCCL)
    steady = report["traces"][0]["window"]["steady"]
    by_device = {f["location"]["device"]: f for f in _findings(report, "gpu-low-utilization")}
    inside, after = by_device[1], by_device[0]
    assert steady["start_ns"] < inside["location"]["start_ns"] < steady["end_ns"]
    assert "inside the steady state" in inside["message"] and "start-up" not in inside["message"]
    assert "launch-bound, sync-stall and gpu-idle-gaps" in inside["recommendation"]  # the steady state's advice
    assert after["location"]["start_ns"] >= steady["end_ns"]
    assert "after the steady state (shutdown)" in after["message"]
    # Its suggestion, taken, changes what it suggests: judged on the steady window it no longer says window=steady.
    taken = _json(capsys, "--select", "gpu-low-utilization", "--set", "gpu-low-utilization.window=steady",
                  corpus / NCCL)
    assert _findings(taken, "gpu-low-utilization")
    assert not any("window=steady" in f["recommendation"] for f in _findings(taken, "gpu-low-utilization"))
    transpose = _json(capsys, "--select", "gpu-low-utilization", "--set", "gpu-low-utilization.window=steady",
                      corpus / TRANSPOSE)
    assert not any("window=steady" in f["recommendation"] for f in _findings(transpose, "gpu-low-utilization"))


def test_phase_words_say_how_much_lies_where():
    assert phase_words(0, 5_000_000, 0) == "inside the steady state"
    assert phase_words(7_000_000, 0, 0) == "before the steady state (start-up)"
    assert phase_words(453_300_000, 1_900_000, 0) == "453.3 ms before the steady state (start-up), 1.9 ms inside it"


# -- step-outliers: the cause is the part that grew most -------------------------------------------
@pytest.mark.parametrize("name,cause,top", [
    # 5132 ms of kernel time grew; a kernel first seen in the slow steps was named as "module loading".
    ("nsys2022.4.1-openacc-iter-v100.sqlite", "kernels", "other kernels"),
    # 15.1 ms of host work between steps grew; a first-seen kernel was named as "module loading".
    ("nsys2020.3-openmp-offload-aarch64.sqlite", "host", "idle: host work between steps"),
    # 757 ms of host work between steps grew; "their kernels ran longer" was said.
    ("nsys2024.5.4-jetson-orin-video.sqlite", "host", "idle: host work between steps"),
])
def test_step_outliers_names_the_cause_that_grew_most(corpus, name, cause, top):
    [f] = [f for f in _findings(check_json(corpus / name), "step-outliers") if "slow_steps" in f["metrics"]]
    grew = re.search(r"what grew: ([^.]+?) \+([\d.]+) ms", f["message"])
    assert grew and grew.group(1) == top  # the largest growth comes first
    assert f["budget_part"].split("+")[0] == {"other kernels": "other", "idle: host work between steps": "host_prep"}[top]
    key_words = {"kernels": "Their kernels ran longer in those steps", "host": "The GPU waited for the host"}
    assert key_words[cause] in f["message"] and "Module loading" not in f["message"]


# -- savings never above 100 % of the steady state --------------------------------------------------
def test_a_savings_share_is_never_above_the_steady_state():
    outside = Finding("recompile", Severity.INFO, "t", "m", "r", location=Location(trace="t.sqlite"),
                      estimated_savings_ns=1_930_000_000, budget_part="outside")
    assert savings_share(Entry(1, outside, (), 550_000_000)) == "outside the steady state"  # was "351 %"
    inside = Finding("sync-stall", Severity.WARNING, "t", "m", "r", estimated_savings_ns=55_000_000)
    assert savings_share(Entry(1, inside, (), 550_000_000)) == "10 % of steady time"
    too_big = Finding("other", Severity.INFO, "t", "m", "r", estimated_savings_ns=600_000_000)
    assert savings_share(Entry(1, too_big, (), 550_000_000)) == ""


# -- the steady state described once ------------------------------------------------------------------
def test_the_steady_state_is_described_once(corpus, capsys, monkeypatch):
    # No step model: the window's 405-character reason was in the header twice and inside capture-scope's and
    # launch-bound's messages.
    report = check_json(corpus / TRANSPOSE)
    reason = report["traces"][0]["window"]["steady"]["source"]
    assert len(reason) > 300
    assert not any("no step model fits" in f["message"] for f in report["findings"])
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["check", "--fail-on", "never", str(corpus / TRANSPOSE)]) in (0, 1)
    text = " ".join(capsys.readouterr().out.split())
    assert text.count("no step model fits") == 1


# -- sizes in their unit, singular and plural -------------------------------------------------------
def test_sizes_in_their_natural_unit(corpus):
    copies = _findings(check_json(corpus / "nsys2022.4.2-vecadd-streams-t4.sqlite"), "step-outliers")
    assert any("16 host-to-device copies of 391 KiB each" in f["message"] for f in copies)  # was "0.00 GiB"
    stall = _findings(check_json(corpus / TRANSPOSE), "sync-stall")
    assert any("readback of 4.00 MiB" in f["message"] for f in stall)  # was "4194304 B"
    assert [human_bytes(n) for n in (12, 4096, 2**30, 150 * 2**30)] == ["12 B", "4.00 KiB", "1.00 GiB", "150 GiB"]


def test_one_is_singular(h200):
    gaps = _findings(check_json(h200 / "decode_eager.sqlite"), "gpu-idle-gaps")
    assert any("idled 1 time for" in f["message"] for f in gaps)  # was "idled 1 times"
    assert not any(re.search(r"\b1 times\b", f["message"]) for f in gaps)
    assert (counted(1, "time"), counted(29, "time"), counted(2, "copy", "copies")) == ("1 time", "29 times",
                                                                                      "2 copies")


# -- HTML shows code as code ------------------------------------------------------------------------------
def test_html_renders_code_spans_as_code(h200, tmp_path: Path, capsys):
    page = tmp_path / "r.html"
    assert main(["check", "--fail-on", "never", "--html", str(page), str(h200 / "decode_eager.sqlite")]) in (0, 1)
    capsys.readouterr()
    html = page.read_text()
    nexts = re.findall(r"<div class='next'>(.*?)</div>", html)
    assert nexts and not any("`" in n for n in nexts)  # no literal backticks in the "Next:" boxes
    assert "<code>nsys profile -c cudaProfilerApi" in html and "<code>torch.cuda.graph(g)</code>" in html
