"""SARIF 2.1.0 output, for GitHub code scanning and other SARIF consumers.

One run per invocation: ``tool.driver.rules`` describes every rule that ran (id, short and
full description, help from its docstring, default level), each finding becomes a result
whose physical location is the trace file and whose logical locations are the kernel, API
call and NVTX range it points at. The finding's stable fingerprint goes into
``partialFingerprints`` so that code scanning tracks the same problem across runs.

Text from the trace is escaped for where it is shown: ``message.text`` with
:func:`~nsys_rules.textsafe.sarif_text` (SARIF reads ``[text](target)`` as a link) and
``message.markdown`` with :func:`~nsys_rules.textsafe.markdown_safe`. Numbers that are not
finite are left out (JSON has no NaN or Infinity).
"""

from __future__ import annotations

import math
import os
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import quote

from nsys_rules.docs import doc_sections, rule_markdown
from nsys_rules.report import Report, tool_info
from nsys_rules.findings import Finding, Severity
from nsys_rules.registry import BUILTIN
from nsys_rules.formatters.json_out import json_text
from nsys_rules.textsafe import markdown_safe, sarif_text

SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
SARIF_VERSION = "2.1.0"
#: Key under ``partialFingerprints``; versioned so that a change of the hash never collides.
FINGERPRINT_KEY = "nsysRules/v1"
INFORMATION_URI = "https://pypi.org/project/nsys-rules/"

# SARIF has no "info": its lowest level that still shows is "note".
_LEVEL = {Severity.INFO: "note", Severity.WARNING: "warning", Severity.ERROR: "error"}


def sarif_level(severity: Severity) -> str:
    """SARIF ``level`` of a severity: ``note``, ``warning`` or ``error``."""
    return _LEVEL[severity]


def artifact_uri(path: str) -> str:
    """A URI reference for a trace path: ``file://`` for absolute paths, percent-encoded relative otherwise."""
    p = Path(path)
    if p.is_absolute():
        return p.as_uri()
    # Percent-encoded from the path's bytes: a non-UTF-8 byte (held as a lone surrogate) is %FF, as a URI carries it.
    return quote(os.fsencode(PurePosixPath(*p.parts).as_posix() if p.parts else path), safe="/")


def _artifact_location(path: str) -> dict[str, Any]:
    """``{uri}``; relative paths are relative to the checkout (``%SRCROOT%``), as code scanning expects."""
    uri = artifact_uri(path)
    return {"uri": uri} if uri.startswith("file:") else {"uri": uri, "uriBaseId": "%SRCROOT%"}


def sarif_log(report: Report) -> dict[str, Any]:
    """The SARIF log object of ``report``."""
    registry = report.registry
    descriptors = [_descriptor(entry, registry) for entry in report.rules]
    index = {d["id"]: i for i, d in enumerate(descriptors)}
    traces = [r.info.path for r in report.results]
    artifacts = [{"location": _artifact_location(t), "roles": ["analysisTarget"]} for t in traces]
    art_index = {t: i for i, t in enumerate(traces)}
    results = [_result(rank, f, index, art_index) for rank, f in enumerate(report.findings, 1)]
    info = tool_info(report)
    driver: dict[str, Any] = {"name": "nsys-rules", "version": info["version"], "semanticVersion": info["version"],
                              "informationUri": INFORMATION_URI, "rules": descriptors}
    extensions = [{"name": p.get("name", "?"), "version": str(p.get("version", ""))} for p in info["plugins"]
                  if p.get("name") and p.get("name") != BUILTIN]
    tool: dict[str, Any] = {"driver": driver}
    if extensions:
        tool["extensions"] = extensions
    invocation: dict[str, Any] = {"executionSuccessful": not report.all_errors}
    skipped = report.all_skipped
    if skipped:
        invocation["toolConfigurationNotifications"] = [
            {"level": "note", "descriptor": {"id": s.rule},
             "message": {"text": sarif_text(f"{s.rule} skipped on {s.trace}: {s.reason}"
                                            + (f"; fix: {s.fix}" if s.fix else ""))}} for s in skipped]
    notifications = [
        {"level": "error", "message": {"text": sarif_text(f"{e.rule or e.plugin or '?'}: {e.error}")}}
        for e in report.all_errors]
    # A rule's findings cut at --max-findings: the results are not all it found.
    notifications += [{"level": "warning", "descriptor": {"id": c.rule}, "message": {"text": sarif_text(c.line())}}
                      for c in report.all_capped]
    # Damage the loader repaired: the results cover less than the file holds.
    notifications += [{"level": "warning", "message": {"text": sarif_text(f"damaged export {r.info.path}: {note}")}}
                      for r in report.results for note in r.info.damage]
    if notifications:
        invocation["toolExecutionNotifications"] = notifications
    run: dict[str, Any] = {"tool": tool, "artifacts": artifacts, "invocations": [invocation], "results": results,
                           "columnKind": "unicodeCodePoints",
                           "properties": {"windows": {r.info.path: r.info.window for r in report.results}}}
    return {"$schema": SARIF_SCHEMA, "version": SARIF_VERSION, "runs": [run]}


def format_sarif(report: Report) -> str:
    """The report as an indented SARIF 2.1.0 document."""
    return json_text(sarif_log(report))


def _descriptor(entry: dict[str, Any], registry: Any) -> dict[str, Any]:
    name = entry["name"]
    rule = registry.rules.get(name) if registry is not None else None
    level = sarif_level(Severity(entry.get("severity", "warning")))
    out: dict[str, Any] = {"id": name, "defaultConfiguration": {"level": level}}
    if rule is None:
        out["shortDescription"] = {"text": name}
        return out
    sections = doc_sections(rule)
    detects = sections.get("What it detects") or sections.get("summary") or rule.title
    hurts = sections.get("Why it hurts", "")
    out["name"] = "".join(part.capitalize() for part in name.split("-"))
    out["shortDescription"] = {"text": rule.title or name}
    out["fullDescription"] = {"text": " ".join((detects + " " + hurts).split())}
    text = _plain_text(sections)
    out["help"] = {"text": text, "markdown": rule_markdown(rule, entry.get("plugin", ""))}
    out["properties"] = {"tags": ["performance", "nsys"], "requires": list(rule.requires),
                         "options": entry.get("options", {})}
    return out


def _plain_text(sections: dict[str, str]) -> str:
    parts = []
    for key in ("What it detects", "Why it hurts", "Evidence", "Next optimizations", "False positives"):
        if sections.get(key):
            parts.append(f"{key}: {' '.join(sections[key].split())}")
    return "\n".join(parts) or "See `nsys-rules explain`."


def _result(rank: int, f: Finding, index: dict[str, int], art_index: dict[str, int]) -> dict[str, Any]:
    loc = f.location
    # A trace is binary, so the region is nominal: GitHub code scanning rejects results whose
    # location has no region.startLine (its validator rule GH1003).
    physical: dict[str, Any] = {"artifactLocation": _artifact_location(loc.trace or ""), "region": {"startLine": 1}}
    if loc.trace in art_index:
        physical["artifactLocation"]["index"] = art_index[loc.trace]
    location: dict[str, Any] = {"physicalLocation": physical}
    logical = _logical_locations(f)
    if logical:
        location["logicalLocations"] = logical
    text = f.message
    if f.recommendation:
        text = f"{f.message} Next: {f.recommendation}"
    props: dict[str, Any] = {"rank": rank, "severity": f.severity.value, "title": f.title,
                             "recommendation": f.recommendation,
                             "metrics": {k: m.to_json() for k, m in f.metrics.items() if math.isfinite(m.value)},
                             "location": loc.to_json()}
    if f.estimated_savings_ns is not None:
        props["estimatedSavingsNs"] = int(f.estimated_savings_ns)
    out: dict[str, Any] = {"ruleId": f.rule, "level": sarif_level(f.severity),
                           "message": {"text": sarif_text(text),
                                       "markdown": f"{markdown_safe(f.message)}\n\n**Next:** {markdown_safe(f.recommendation)}"},
                           "locations": [location], "partialFingerprints": {FINGERPRINT_KEY: f.fingerprint},
                           "properties": props}
    if loc.source is not None:
        # The program's own line behind the finding: code scanning links it beside the trace.
        related: dict[str, Any] = {"artifactLocation": _artifact_location(loc.source.file)}
        if loc.source.line > 0:
            related["region"] = {"startLine": int(loc.source.line)}
        what = f"`{loc.source.function}`" if loc.source.function else "the program's line"
        out["relatedLocations"] = [{"id": 0, "physicalLocation": related,
                                    "message": {"text": sarif_text(f"{what} behind this finding")}}]
    if f.rule in index:
        out["ruleIndex"] = index[f.rule]
    return out


def _logical_locations(f: Finding) -> list[dict[str, Any]]:
    loc = f.location
    out: list[dict[str, Any]] = []
    if loc.kernel:
        out.append({"name": loc.kernel, "kind": "function", "fullyQualifiedName": f"kernel:{loc.kernel}"})
    if loc.api:
        out.append({"name": loc.api, "kind": "function", "fullyQualifiedName": f"api:{loc.api}"})
    if loc.nvtx:
        path = "/".join(loc.nvtx)
        out.append({"name": loc.nvtx[-1], "kind": "namespace", "fullyQualifiedName": f"nvtx:{path}"})
    if loc.device is not None:
        out.append({"name": f"GPU {loc.device}", "kind": "resource", "fullyQualifiedName": f"device:{loc.device}"})
    return out
