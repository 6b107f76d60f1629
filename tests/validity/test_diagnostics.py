"""nsys's own diagnostics: every warning and error row under ../shared maps to a known reason."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from nsys_rules.inputs import open_trace
from nsys_rules.loaders.diagnostics import ERROR, INFO, WARNING, Diagnostic, read_diagnostics
from nsys_rules.model.diagnostics import explain
from tests.conftest import SHARED

EXPORTS = sorted(SHARED.glob("traces/h200/*.sqlite")) + sorted(SHARED.glob("corpus/public/**/*.sqlite"))


@pytest.mark.skipif(not EXPORTS, reason="../shared is not here")
def test_every_warning_and_error_of_the_shared_exports_maps_to_a_reason() -> None:
    with_table, rows_seen, unknown = 0, Counter[int](), []
    for path in EXPORTS:
        trace = open_trace(path)
        try:
            rows = read_diagnostics(trace.export)
        finally:
            trace.close()
        if rows is None:
            continue
        with_table += 1
        rows_seen.update(r.severity for r in rows)
        reasons = explain(rows, True, True, False)
        unknown += [f"{path.name}: {r.message}" for r in reasons if r.code.startswith("nsys-")]
        serious = [r for r in rows if r.severity in (WARNING, ERROR)]
        assert sum(r.size["rows"] for r in reasons) == len(serious)
    assert with_table == 60
    assert (rows_seen[WARNING], rows_seen[ERROR]) == (310, 28)  # the SQL survey of issue 38 counted the same
    assert unknown == []


def _rows(*texts: str, severity: int = WARNING) -> list[Diagnostic]:
    return [Diagnostic(severity, 3, t) for t in texts]


def test_levels_follow_what_the_trace_holds() -> None:
    lost = _rows("Not all CUDA events might have been collected.", "Not all NVTX events might have been collected.")
    assert [(r.code, r.level) for r in explain(lost, True, True, False)] == [
        ("cuda-events-lost", "caveat"), ("nvtx-events-lost", "caveat")]
    # A -c cudaProfilerApi capture drops what ran outside its range by design; the self-checks judge inside.
    assert {r.level for r in explain(lost, True, True, True)} == {"note"}
    # No NVTX rows: nothing read from NVTX can be off.
    assert [r.level for r in explain(lost, True, False, False)] == ["caveat", "note"]


def test_known_messages_are_notes_with_a_fix_and_info_rows_are_left_out() -> None:
    rows = _rows("Scheduling information is absent. The thread activity is deduced ...",
                 "No CUDA events collected. Does the process use CUDA?",
                 "Installed CUDA driver version (12.0) is not supported by this build of Nsight Systems.")
    rows += _rows("Unable to configure the collection of CPU IP/backtrace samples, context switch data, or event "
                  "sampling data. Try the 'nsys status --environment' command to learn more.", severity=ERROR)
    rows += _rows("Profiling has started.", severity=INFO)
    reasons = explain(rows, True, True, False)
    assert [(r.code, r.level) for r in reasons] == [
        ("cpu-sampling-off", "note"), ("driver-unsupported", "note"), ("no-cuda-events", "note"),
        ("scheduling-absent", "note")]
    assert all(r.fix for r in reasons)
    assert "perf_event_paranoid" in reasons[0].fix


def test_an_unknown_message_is_kept_as_nsys_wrote_it_and_old_exports_say_they_have_none() -> None:
    (reason,) = explain(_rows("Something new went wrong.", severity=ERROR), True, True, False)
    assert (reason.code, reason.level, reason.message) == ("nsys-error", "note", "nsys: Something new went wrong.")
    (old,) = explain(None, True, True, False)
    assert old.code == "no-diagnostics" and "self-checks" not in old.message and "own checks" in old.message


def test_diagnostics_are_read_in_a_stable_order(tmp_path: Path) -> None:
    source = SHARED / "traces" / "h200" / "decode_graph_profilerapi.sqlite"
    if not source.exists():
        pytest.skip("../shared is not here")
    from tests.trace_edit import shuffled_copy

    first, second = open_trace(source), open_trace(shuffled_copy(source, tmp_path / source.name, seed=3))
    try:
        rows = read_diagnostics(first.export)
        assert rows is not None and rows == read_diagnostics(second.export)
        assert Diagnostic(WARNING, 3, "Not all CUDA events might have been collected.") in rows
    finally:
        first.close()
        second.close()
