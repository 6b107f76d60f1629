"""Baselines: accept today's findings, report only new ones tomorrow.

A baseline is the set of finding fingerprints (rule + kernel/API/NVTX/device + key, never
timestamps, see :attr:`nsys_rules.findings.Finding.fingerprint`) of an accepted run.
``check --write-baseline FILE`` writes one; ``check --baseline FILE`` drops every finding
whose fingerprint is in it, so CI fails only on regressions. A ``check --format json``
output works as a baseline too (its findings carry their fingerprints).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nsys_rules import __version__
from nsys_rules.report import Report
from nsys_rules.errors import UsageError
from nsys_rules.outpaths import write_atomic
from nsys_rules.userfiles import read_user_file

BASELINE_FORMAT = "nsys-rules-baseline"
BASELINE_VERSION = 1


def baseline_document(report: Report) -> dict[str, Any]:
    """The baseline of ``report``: its fingerprints with enough context to read the file by eye."""
    entries = []
    seen: set[str] = set()
    for f in report.findings:
        if f.fingerprint in seen:
            continue
        seen.add(f.fingerprint)
        loc = f.location
        where = loc.kernel or loc.api or ("/".join(loc.nvtx) if loc.nvtx else "") or ""
        entries.append({"fingerprint": f.fingerprint, "rule": f.rule, "severity": f.severity.value, "where": where})
    entries.sort(key=lambda e: (e["rule"], e["fingerprint"]))
    return {"format": BASELINE_FORMAT, "version": BASELINE_VERSION, "tool_version": __version__,
            "traces": [r.info.path for r in report.results], "findings": entries}


def write_baseline(report: Report, path: Path) -> None:
    """Write the baseline of ``report`` to ``path`` (whole file or nothing)."""
    write_atomic(path, json.dumps(baseline_document(report), indent=2) + "\n", "baseline")


def read_baseline(path: Path) -> set[str]:
    """Fingerprints in a baseline file or a ``check --format json`` output; one clear line when unusable."""
    data = read_user_file(path, "baseline", json.loads, "JSON", f" (create it with --write-baseline {path})")
    findings = data.get("findings") if isinstance(data, dict) else None
    if not isinstance(findings, list):
        raise UsageError(f"baseline {path} has no 'findings' list: write one with --write-baseline "
                         "or pass a `check --format json` output")
    out = set()
    for item in findings:
        fp = item.get("fingerprint") if isinstance(item, dict) else None
        if not isinstance(fp, str) or not fp:
            raise UsageError(f"baseline {path}: a finding without a fingerprint (old or hand-made file?)")
        out.add(fp)
    return out


def apply_baseline(report: Report, fingerprints: set[str], path: str) -> int:
    """Drop findings whose fingerprint is in the baseline; returns how many were dropped.

    Each trace records ``baseline: {path, suppressed}`` in its info so that outputs say
    that known findings were hidden, and the exit code is judged on the new findings only.
    """
    dropped = 0
    for result in report.results:
        keep = [f for f in result.findings if f.fingerprint not in fingerprints]
        suppressed = len(result.findings) - len(keep)
        dropped += suppressed
        result.findings = keep
        result.info.baseline = {"path": path, "suppressed": suppressed}
    return dropped
