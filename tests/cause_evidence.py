"""A cause is named only with its evidence (issue 37): the check every report of a real trace must pass.

- input-prep says "input prepared" only with input-shaped evidence in its metrics (``input_evidence``
  >= 1: the batch's copy after the blocks, a loader thread, loader code in the Python samples, file
  reads on other threads); otherwise it says the host worked between steps and either names the
  Python function the samples saw or says the cause is not in the capture;
- module-loading (lazy loading) carries the load calls it saw (``load_calls`` >= 1);
- recompile carries the module loads or graph captures of its steps (``module_loads`` or
  ``graph_captures`` >= 1).
"""

from __future__ import annotations

from typing import Any


def _value(finding: dict[str, Any], key: str) -> float:
    entry = finding.get("metrics", {}).get(key)
    return float(entry["value"]) if entry else 0.0


def cause_evidence_problems(report: dict[str, Any]) -> list[str]:
    """One line per finding that names a cause without its evidence (empty: none)."""
    out = []
    for f in report["findings"]:
        rule, message = f["rule"], f["message"]
        if rule == "input-prep":
            claims_input = "input prepared" in message
            if claims_input and _value(f, "input_evidence") < 1:
                out.append(f"input-prep names input preparation with no input evidence: {message[:120]}")
            if not claims_input and not ("not in this capture" in message or "running `" in message):
                out.append(f"input-prep neither names its evidence nor says the cause is unknown: {message[:120]}")
        elif rule == "module-loading" and _value(f, "load_calls") < 1:
            out.append(f"module-loading with no load call: {message[:120]}")
        elif rule == "recompile" and _value(f, "module_loads") < 1 and _value(f, "graph_captures") < 1:
            out.append(f"recompile with no module load or graph capture: {message[:120]}")
    return out
