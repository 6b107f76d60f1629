"""Baselines: accept today's findings, report only new ones tomorrow.

A baseline is the set of finding fingerprints (rule + kernel/API/NVTX/device + key, never
timestamps, see :attr:`nsys_rules.findings.Finding.fingerprint`) of an accepted run.
``check --write-baseline FILE`` writes one; ``check --baseline FILE`` drops every finding
whose fingerprint is in it, so CI fails only on regressions. A ``check --format json``
output works as a baseline too (its findings carry their fingerprints).

A known finding that got worse is a regression too: the baseline records each finding's saving
(``savings_ns``, the largest among the findings of that fingerprint), and a finding whose saving
grew by more than the gate (``--baseline-gate``, :data:`DEFAULT_GATE_PCT` percent of the recorded
saving, and at least :data:`MIN_GROWTH_NS`) is kept, its message opening with "known, grew from X
to Y", and counts for ``--fail-on`` as a new one does. A finding recorded without a saving (withheld,
or an older baseline file) cannot be compared and stays hidden.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from nsys_rules import __version__
from nsys_rules.findings import Finding
from nsys_rules.report import Report
from nsys_rules.units import human_ns
from nsys_rules.errors import UsageError
from nsys_rules.outpaths import write_atomic
from nsys_rules.textsafe import json_safe
from nsys_rules.userfiles import read_user_file

BASELINE_FORMAT = "nsys-rules-baseline"
BASELINE_VERSION = 1

#: A known finding whose saving grew by more than this percent of the recorded one is shown as worse.
DEFAULT_GATE_PCT = 20.0
#: ...and only when it grew by at least this much: a few microseconds on a tiny saving are noise.
MIN_GROWTH_NS = 1_000_000


def baseline_document(report: Report) -> dict[str, Any]:
    """The baseline of ``report``: its fingerprints with enough context to read the file by eye."""
    entries = []
    by_print: dict[str, dict[str, Any]] = {}
    for f in report.findings:
        entry = by_print.get(f.fingerprint)
        if entry is None:
            loc = f.location
            where = loc.kernel or loc.api or ("/".join(loc.nvtx) if loc.nvtx else "") or ""
            entry = {"fingerprint": f.fingerprint, "rule": f.rule, "severity": f.severity.value, "where": where}
            by_print[f.fingerprint] = entry
            entries.append(entry)
        if f.estimated_savings_ns is not None:  # the largest of that fingerprint: growth is judged against it
            entry["savings_ns"] = max(int(f.estimated_savings_ns), entry.get("savings_ns", 0))
    entries.sort(key=lambda e: (e["rule"], e["fingerprint"]))
    return {"format": BASELINE_FORMAT, "version": BASELINE_VERSION, "tool_version": __version__,
            "traces": [r.info.path for r in report.results], "findings": entries}


def write_baseline(report: Report, path: Path) -> None:
    """Write the baseline of ``report`` to ``path`` (whole file or nothing)."""
    write_atomic(path, json.dumps(json_safe(baseline_document(report)), indent=2, allow_nan=False) + "\n", "baseline")


def read_baseline(path: Path) -> dict[str, int | None]:
    """Fingerprints in a baseline file or a ``check --format json`` output, each with the largest saving recorded
    for it (None when none was); one clear line when unusable."""
    data = read_user_file(path, "baseline", json.loads, "JSON", f" (create it with --write-baseline {path})")
    findings = data.get("findings") if isinstance(data, dict) else None
    if not isinstance(findings, list):
        raise UsageError(f"baseline {path} has no 'findings' list: write one with --write-baseline "
                         "or pass a `check --format json` output")
    out: dict[str, int | None] = {}
    for item in findings:
        fp = item.get("fingerprint") if isinstance(item, dict) else None
        if not isinstance(fp, str) or not fp:
            raise UsageError(f"baseline {path}: a finding without a fingerprint (old or hand-made file?)")
        # A baseline file says savings_ns, a json report estimated_savings_ns; anything else is not a saving.
        value = item.get("savings_ns", item.get("estimated_savings_ns"))
        saving = int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0 else None
        known = out.get(fp)
        out[fp] = saving if known is None else max(known, saving if saving is not None else known)
    return out


def grew(known: int | None, now: int | None, gate_pct: float = DEFAULT_GATE_PCT) -> bool:
    """Whether a saving grew past the gate: by more than ``gate_pct`` percent of ``known`` and by at least
    :data:`MIN_GROWTH_NS`. Unknown on either side is not growth."""
    if known is None or now is None:
        return False
    return now - known > max(gate_pct / 100.0 * known, MIN_GROWTH_NS - 1)


def apply_baseline(report: Report, baseline: dict[str, int | None], path: str,
                   gate_pct: float = DEFAULT_GATE_PCT) -> tuple[int, int]:
    """Drop findings whose fingerprint is in the baseline, except those that got worse (see the module docstring);
    returns (dropped, worse).

    Each trace records ``baseline: {path, suppressed, worse}`` in its info so that outputs say
    that known findings were hidden, and the exit code is judged on the new and the worse findings.
    """
    dropped = worse = 0
    for result in report.results:
        keep: list[Finding] = []
        grown = 0
        for f in result.findings:
            if f.fingerprint not in baseline:
                keep.append(f)
            elif grew(baseline[f.fingerprint], f.estimated_savings_ns, gate_pct):
                keep.append(_worse(f, int(baseline[f.fingerprint] or 0)))
                grown += 1
        suppressed = len(result.findings) - len(keep)
        dropped += suppressed
        worse += grown
        result.findings = keep
        result.info.baseline = {"path": path, "suppressed": suppressed, "worse": grown}
    return dropped, worse


def _worse(f: Finding, known: int) -> Finding:
    """A known finding whose saving grew: said first in its message, the recorded saving in ``baseline_savings_ns``."""
    now = int(f.estimated_savings_ns or 0)
    return dataclasses.replace(f, baseline_savings_ns=known,
                               message=f"Known, grew from {human_ns(known)} to {human_ns(now)} of savings "
                                       f"(baseline): {f.message}")
