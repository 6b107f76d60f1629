"""Our nsys-analyze-parity rules cover every row NVIDIA's rules flag on the H200 traces.

For each trace and rule, ``ref/<trace>_<nsys rule>.json`` holds what `nsys analyze` reported:
rows with ``Start (ns)`` and ``Duration (ns)``, ``[]`` when it found nothing, or an empty file
when it skipped the rule for lack of data. Run with NVIDIA's thresholds, our rule must have a
finding whose location range overlaps every flagged row, and must be skipped where nsys skipped.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nsys_rules.testing import run_rules

from ..conftest import H200, need_shared

#: our rule -> (nsys rule, options that set NVIDIA's thresholds)
PARITY = {
    "pageable-memcpy": ("cuda_memcpy_async", {"include_driver_api": False, "min_bytes": 0}),
    "sync-memcpy": ("cuda_memcpy_sync", {"include_driver_api": False, "max_small_htod_bytes": 64_000}),
    "sync-memset": ("cuda_memset_sync", {"include_driver_api": False, "memory_kinds": (1, 4)}),
    "gpu-idle-gaps": ("gpu_gaps", {"min_gap_ns": 500_000_000}),
    "gpu-low-utilization": ("gpu_time_util", {"chunks": 30, "max_in_use_pct": 50.0}),
}


def _traces() -> list[str]:
    return sorted(p.stem for p in H200.glob("*.sqlite")) if H200.exists() else ["(shared traces absent)"]


def _reference(trace: str, nsys_rule: str) -> list[dict] | None:
    """NVIDIA's rows, or None when nsys skipped the rule (empty file)."""
    text = (H200 / "ref" / f"{trace}_{nsys_rule}.json").read_text()
    return json.loads(text) if text.strip() else None


def _uncovered(rows: list[dict], findings: list) -> list[tuple[int, int]]:
    ranges = [(f.location.start_ns, f.location.end_ns) for f in findings
              if f.location.start_ns is not None and f.location.end_ns is not None]
    missing = []
    for row in rows:
        start = int(row["Start (ns)"])
        end = start + int(row["Duration (ns)"])
        if not any(a <= end and start <= b for a, b in ranges):
            missing.append((start, end))
    return missing


@pytest.mark.parametrize("trace", _traces())
def test_parity_rules_cover_nvidia_rows(trace: str) -> None:
    need_shared(H200)
    result = run_rules(list(PARITY), H200 / f"{trace}.sqlite",
                       options={rule: opts for rule, (_, opts) in PARITY.items()})
    assert not result.errors, result.errors
    skipped = {s.rule for s in result.skipped}
    for rule, (nsys_rule, _) in PARITY.items():
        ref = _reference(trace, nsys_rule)
        if ref is None:
            assert rule in skipped, f"{rule}: nsys skipped {nsys_rule} on {trace}, ours ran"
            continue
        assert rule not in skipped, f"{rule}: skipped on {trace} where nsys ran {nsys_rule}"
        mine = [f for f in result.findings if f.rule == rule]
        assert not _uncovered(ref, mine), f"{rule} misses nsys {nsys_rule} rows on {trace}: {_uncovered(ref, mine)}"


def test_gpu_gaps_at_nvidia_threshold_match_exactly(h200: Path) -> None:
    """Beyond coverage: with 500 ms, one finding per gap, at nsys's start and duration."""
    for trace in ("decode_eager", "prefill_2048", "decode_graph_hostsync"):
        ref = _reference(trace, "gpu_gaps")
        result = run_rules(["gpu-idle-gaps"], h200 / f"{trace}.sqlite",
                           options={"gpu-idle-gaps": {"min_gap_ns": 500_000_000, "report": "all"}})
        got = sorted((f.location.start_ns, f.metrics["idle_time"].value) for f in result.findings)
        assert got == sorted((r["Start (ns)"], r["Duration (ns)"]) for r in ref)


def test_gpu_time_util_regions_match_nvidia(h200: Path) -> None:
    """Beyond coverage: merged low regions start where nsys's do, with its in-use percent (1 decimal)."""
    for trace in ("decode_eager", "engine_driver_churn_sync", "request_eager"):
        ref = _reference(trace, "gpu_time_util")
        result = run_rules(["gpu-low-utilization"], h200 / f"{trace}.sqlite",
                           options={"gpu-low-utilization": {"report": "all"}})
        got = sorted((f.location.start_ns, f.location.end_ns - f.location.start_ns,
                      round(f.metrics["in_use"].value, 1)) for f in result.findings)
        assert got == sorted((r["Start (ns)"], r["Duration (ns)"], r["In-Use (%)"]) for r in ref)
